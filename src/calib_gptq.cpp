// nibble: Hessian accumulation and GPTQ (compiled part of include/nibble/quant/{hessian,gptq}.hpp).
// Algorithm: reference/ALGORITHMS.md 2.2-2.4. Heavy linear algebra goes through OpenBLAS
// (sgemm/ssyrk, and spotrf/strtri when the BLAS library provides LAPACK) and falls back to Eigen.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "nibble/core/error.hpp"
#include "nibble/formats/q2_k.hpp"
#include "nibble/formats/q3_k.hpp"
#include "nibble/formats/q4_0.hpp"
#include "nibble/formats/q4_k.hpp"
#include "nibble/formats/q5_0.hpp"
#include "nibble/formats/q5_k.hpp"
#include "nibble/formats/q6_k.hpp"
#include "nibble/formats/q8_0.hpp"
#include "nibble/quant/gptq.hpp"
#include "nibble/quant/hessian.hpp"
#include "nibble/quant/rtn.hpp"

#if defined(NIBBLE_HAVE_BLAS)
#include <cblas.h>
// LAPACK entry points are optional (weak): OpenBLAS exports them, a plain reference BLAS may not.
extern "C" {
void spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info, std::size_t)
    __attribute__((weak));
void strtri_(const char* uplo, const char* diag, const int* n, float* a, const int* lda, int* info,
             std::size_t, std::size_t) __attribute__((weak));
}
#endif

namespace nibble {

// ---------------------------------------------------------------- Hessian

Hessian::Hessian(std::int64_t cols) {
  if (cols <= 0) detail::fail("Hessian: cols = ", cols, " must be positive");
  H_ = Eigen::MatrixXf::Zero(cols, cols);
}

void Hessian::add_batch(const float* X, std::int64_t tokens) {
  if (tokens < 0) detail::fail("Hessian::add_batch: tokens = ", tokens, " must be >= 0");
  if (tokens == 0) return;
  if (X == nullptr) detail::fail("Hessian::add_batch: X is null with tokens = ", tokens);
  const std::int64_t cols = H_.rows();
  for (std::int64_t i = 0; i < tokens * cols; ++i)
    if (!std::isfinite(X[i]))
      detail::fail("Hessian::add_batch: X[", i / cols, ", ", i % cols, "] = ", X[i],
                   " is not finite");
  const std::int64_t n_new = n_ + tokens;
  H_ *= static_cast<float>(static_cast<double>(n_) / static_cast<double>(n_new));
  const float alpha = static_cast<float>(2.0 / static_cast<double>(n_new));
  // X is row-major tokens x cols == column-major cols x tokens (call it A); H += alpha A A^T.
#if defined(NIBBLE_HAVE_BLAS)
  cblas_ssyrk(CblasColMajor, CblasLower, CblasNoTrans, static_cast<int>(cols),
              static_cast<int>(tokens), alpha, X, static_cast<int>(cols), 1.0f, H_.data(),
              static_cast<int>(cols));
#else
  Eigen::Map<const Eigen::MatrixXf> A(X, cols, tokens);
  H_.selfadjointView<Eigen::Lower>().rankUpdate(A, alpha);
#endif
  H_.triangularView<Eigen::StrictlyUpper>() = H_.transpose();
  n_ = n_new;
}

namespace gptq {

// ---------------------------------------------------------------- inverse Cholesky

Eigen::MatrixXf inverse_cholesky_upper(const Eigen::MatrixXf& H) {
  const Eigen::Index n = H.rows();
  if (H.cols() != n) detail::fail("H is ", H.rows(), "x", H.cols(), ", expected square");
  // With J the reversal permutation, J H J = M M^T (M lower) gives H = R R^T, R = J M J upper,
  // so H^{-1} = R^{-T} R^{-1} and the upper Cholesky factor of H^{-1} is U = R^{-1} = J M^{-1} J.
  Eigen::MatrixXf P = H.reverse();
  bool done = false;
#if defined(NIBBLE_HAVE_BLAS)
  if (spotrf_ != nullptr && strtri_ != nullptr) {
    const int ni = static_cast<int>(n);
    int info = 0;
    spotrf_("L", &ni, P.data(), &ni, &info, 1);
    if (info != 0)
      detail::fail("H is not positive definite after damping (Cholesky pivot ", info, " failed)");
    strtri_("L", "N", &ni, P.data(), &ni, &info, 1, 1);
    if (info != 0) detail::fail("H: triangular inverse failed (info ", info, ")");
    done = true;
  }
#endif
  if (!done) {
    Eigen::LLT<Eigen::MatrixXf> llt(P);
    if (llt.info() != Eigen::Success)
      detail::fail("H is not positive definite after damping (Cholesky failed)");
    Eigen::MatrixXf Minv = Eigen::MatrixXf::Identity(n, n);
    llt.matrixL().solveInPlace(Minv);
    P = Minv;
  }
  Eigen::MatrixXf U = Eigen::MatrixXf::Zero(n, n);
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index i = 0; i <= j; ++i) U(i, j) = P(n - 1 - i, n - 1 - j);
  for (Eigen::Index i = 0; i < n; ++i)
    if (!(U(i, i) > 0.0f) || !std::isfinite(U(i, i)))
      detail::fail("H is not positive definite after damping (inverse factor diagonal ", U(i, i),
                   " at ", i, ")");
  return U;
}

namespace {

void check_common(const Eigen::MatrixXf& W, const Eigen::MatrixXf& H, const Config& cfg) {
  if (W.rows() <= 0 || W.cols() <= 0)
    detail::fail("gptq: W is ", W.rows(), "x", W.cols(), ", expected a non-empty matrix");
  if (H.rows() != W.cols() || H.cols() != W.cols())
    detail::fail("gptq: H is ", H.rows(), "x", H.cols(), ", expected ", W.cols(), "x", W.cols(),
                 " (in x in for W ", W.rows(), "x", W.cols(), ")");
  if (cfg.block_size < 1) detail::fail("gptq: block_size = ", cfg.block_size, " must be >= 1");
  if (!(cfg.percdamp >= 0.0f) || !std::isfinite(cfg.percdamp))
    detail::fail("gptq: percdamp = ", cfg.percdamp, " must be finite and >= 0");
  rtn::check_finite(W, "W");
  rtn::check_finite(H, "H");
}

// Dead columns, optional permutation, damping: returns the prepared H (permuted) and U.
struct Prepared {
  Eigen::MatrixXf U;
  std::vector<std::int64_t> perm;  // processing position -> original column
};

Prepared prepare(Eigen::MatrixXf& Wm, Eigen::MatrixXf& Hm, bool act_order, float percdamp) {
  const Eigen::Index cols = Wm.cols();
  for (Eigen::Index k = 0; k < cols; ++k)
    if (Hm(k, k) == 0.0f) {
      Hm(k, k) = 1.0f;
      Wm.col(k).setZero();
    }
  Prepared p;
  p.perm.resize(cols);
  std::iota(p.perm.begin(), p.perm.end(), std::int64_t{0});
  if (act_order) {
    // Descending diag(H); ties keep the original order (torch's argsort leaves them undefined).
    std::stable_sort(p.perm.begin(), p.perm.end(),
                     [&](std::int64_t a, std::int64_t b) { return Hm(a, a) > Hm(b, b); });
    Eigen::MatrixXf W2(Wm.rows(), cols), H2(cols, cols);
    for (Eigen::Index j = 0; j < cols; ++j) W2.col(j) = Wm.col(p.perm[j]);
    for (Eigen::Index j = 0; j < cols; ++j)
      for (Eigen::Index i = 0; i < cols; ++i) H2(i, j) = Hm(p.perm[i], p.perm[j]);
    Wm.swap(W2);
    Hm.swap(H2);
  }
  const float damp = percdamp * Hm.diagonal().mean();
  Hm.diagonal().array() += damp;
  p.U = inverse_cholesky_upper(Hm);
  return p;
}

// Wtail -= Err * Ublk (rows x n  -=  rows x k  *  k x n), U block with leading dimension ldu.
void lazy_update(float* Wtail, std::int64_t ldw, const float* Err, std::int64_t rows,
                 std::int64_t k, const float* Ublk, std::int64_t ldu, std::int64_t n) {
  if (n <= 0) return;
#if defined(NIBBLE_HAVE_BLAS)
  cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(n), static_cast<int>(k), -1.0f, Err, static_cast<int>(rows), Ublk,
              static_cast<int>(ldu), 1.0f, Wtail, static_cast<int>(ldw));
#else
  using Strided = Eigen::Map<Eigen::MatrixXf, 0, Eigen::OuterStride<>>;
  using CStrided = Eigen::Map<const Eigen::MatrixXf, 0, Eigen::OuterStride<>>;
  Strided Wt(Wtail, rows, n, Eigen::OuterStride<>(ldw));
  CStrided E(Err, rows, k, Eigen::OuterStride<>(rows));
  CStrided Ub(Ublk, k, n, Eigen::OuterStride<>(ldu));
  Wt.noalias() -= E * Ub;
#endif
}

}  // namespace

// ---------------------------------------------------------------- GPTQ

Result quantize(const Eigen::MatrixXf& W, const Eigen::MatrixXf& H, const Config& cfg) {
  check_common(W, H, cfg);
  rtn::check_bits(cfg.bits, "gptq: bits");
  const std::int64_t rows = W.rows(), cols = W.cols();
  const bool grouped = !(cfg.group_size == -1 || cfg.group_size == 0);
  const std::int64_t gs = rtn::effective_group(cfg.group_size, cols, "gptq: group_size");
  const std::int64_t n_groups = cols / gs;
  const bool stat = grouped && cfg.static_groups;
  const float maxq = rtn::max_q(cfg.bits);

  Result res;
  res.scale.resize(rows, n_groups);
  res.zero.resize(rows, n_groups);
  if (!grouped)  // per-row parameters from the whole, not yet dead-zeroed W
    rtn::gptq_find_params(W, cfg.bits, cfg.sym, cfg.mse, res.scale.data(), res.zero.data());

  Eigen::MatrixXf Wm = W, Hm = H;
  // Static groups need the dead-zeroed, unpermuted W: zero dead columns first (prepare() repeats
  // it harmlessly).
  if (stat) {
    for (Eigen::Index k = 0; k < cols; ++k)
      if (Hm(k, k) == 0.0f) Wm.col(k).setZero();
    for (std::int64_t g = 0; g < n_groups; ++g)
      rtn::gptq_find_params(Wm.middleCols(g * gs, gs), cfg.bits, cfg.sym, cfg.mse,
                            res.scale.col(g).data(), res.zero.col(g).data());
  }
  Prepared prep = prepare(Wm, Hm, cfg.act_order, cfg.percdamp);
  const Eigen::MatrixXf& U = prep.U;

  Eigen::MatrixXf Q(rows, cols);
  const std::int64_t bs = cfg.block_size;
  Eigen::MatrixXf W1, Err1;
  double loss = 0.0;
  const std::int64_t chunk = 32, kSub = 16;
  const std::int64_t n_chunks = (rows + chunk - 1) / chunk;
  for (std::int64_t i1 = 0; i1 < cols; i1 += bs) {
    const std::int64_t i2 = std::min(i1 + bs, cols), count = i2 - i1;
    W1 = Wm.middleCols(i1, count);
    Err1.resize(rows, count);
    double block_loss = 0.0;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) reduction(+ : block_loss)
#endif
    for (std::int64_t c = 0; c < n_chunks; ++c) {
      const std::int64_t r0 = c * chunk, nr = std::min(chunk, rows - r0);
      float sc[chunk], zp[chunk];
      const float* cur_s = nullptr;
      const float* cur_z = nullptr;
      std::int64_t cur_g = -1;
      if (!grouped) {
        for (std::int64_t r = 0; r < nr; ++r) {
          sc[r] = res.scale(r0 + r, 0);
          zp[r] = res.zero(r0 + r, 0);
        }
        cur_s = sc;
        cur_z = zp;
      }
      for (std::int64_t i = 0; i < count; ++i) {
        const std::int64_t col = i1 + i;
        if (grouped && !stat && col % gs == 0) {
          // Parameters from the OUTER W (lazy updates of previous blocks only).
          const std::int64_t g = col / gs;
          rtn::gptq_find_params(Wm.block(r0, col, nr, std::min(gs, cols - col)), cfg.bits, cfg.sym,
                                cfg.mse, sc, zp);
          for (std::int64_t r = 0; r < nr; ++r) {
            res.scale(r0 + r, g) = sc[r];
            res.zero(r0 + r, g) = zp[r];
          }
          cur_s = sc;
          cur_z = zp;
        } else if (grouped && !stat && i == 0) {
          // A group that started in an earlier block (gs not a multiple of block_size).
          const std::int64_t g = col / gs;
          for (std::int64_t r = 0; r < nr; ++r) {
            sc[r] = res.scale(r0 + r, g);
            zp[r] = res.zero(r0 + r, g);
          }
          cur_s = sc;
          cur_z = zp;
        } else if (stat) {
          const std::int64_t g = prep.perm[col] / gs;
          if (g != cur_g) {
            for (std::int64_t r = 0; r < nr; ++r) {
              sc[r] = res.scale(r0 + r, g);
              zp[r] = res.zero(r0 + r, g);
            }
            cur_g = g;
            cur_s = sc;
            cur_z = zp;
          }
        }
        const float d = U(col, col);
        float* w = &W1(r0, i);
        float* e = &Err1(r0, i);
        float* q = &Q(r0, col);
        for (std::int64_t r = 0; r < nr; ++r) {
          const float qv = rtn::gptq_quantize(w[r], cur_s[r], cur_z[r], maxq);
          q[r] = qv;
          const float diff = w[r] - qv;
          block_loss += static_cast<double>(diff * diff / (d * d));
          e[r] = diff / d;
        }
        // In-block update W1[:, j] -= e * U[col, i1+j] for j > i: rank-1 updates inside the
        // current sub-block of kSub columns, one small GEMM for the rest of the block when the
        // sub-block is complete (same sums, grouped differently).
        const std::int64_t sub0 = (i / kSub) * kSub, sub1 = std::min(count, sub0 + kSub);
        for (std::int64_t j = i + 1; j < sub1; ++j) {
          const float u = U(col, i1 + j);
          float* wj = &W1(r0, j);
          for (std::int64_t r = 0; r < nr; ++r) wj[r] -= e[r] * u;
        }
        if (i + 1 == sub1 && sub1 < count) {
          using Strided = Eigen::Map<Eigen::MatrixXf, 0, Eigen::OuterStride<>>;
          using CStrided = Eigen::Map<const Eigen::MatrixXf, 0, Eigen::OuterStride<>>;
          Strided Wb(&W1(r0, sub1), nr, count - sub1, Eigen::OuterStride<>(rows));
          CStrided Eb(&Err1(r0, sub0), nr, sub1 - sub0, Eigen::OuterStride<>(rows));
          CStrided Ub(&U(i1 + sub0, i1 + sub1), sub1 - sub0, count - sub1,
                      Eigen::OuterStride<>(cols));
          Wb.noalias() -= Eb * Ub;
        }
      }
    }
    loss += block_loss / 2.0;
    lazy_update(Wm.data() + i2 * rows, rows, Err1.data(), rows, count, U.data() + i2 * cols + i1,
                cols, cols - i2);
  }

  res.g_idx.resize(cols);
  if (cfg.act_order) {
    res.Q.resize(rows, cols);
    for (std::int64_t p = 0; p < cols; ++p) res.Q.col(prep.perm[p]) = Q.col(p);
    for (std::int64_t p = 0; p < cols; ++p)
      res.g_idx[prep.perm[p]] = static_cast<std::int32_t>(stat ? prep.perm[p] / gs : p / gs);
  } else {
    res.Q.swap(Q);
    for (std::int64_t j = 0; j < cols; ++j) res.g_idx[j] = static_cast<std::int32_t>(j / gs);
  }
  res.loss = loss;
  return res;
}

namespace {

// Adapters over the K-quant reference helpers of nibble/formats: choose a super-block grid,
// read the float grid of a sub-block, round one value on it, and store its level.
// Q2_K: 16 sub-blocks of 16, value = (d * sc) * q - dmin * m, q in 0..3. The grid is chosen by
// the importance-weighted reference search (quantize_q2_K_imatrix on one super-block).
struct KQ2 {
  using Block = BlockQ2_K;
  static constexpr int kSub = 16;
  static void choose(const float* x, const float* w, Block* b) {
    ref::quantize_q2_K_imatrix(x, b, 256, w);
  }
  static void grid(const Block& b, int sub, float* s, float* m) {
    *s = fp16_to_fp32(b.d) * static_cast<float>(b.scales[sub] & 0xF);
    *m = fp16_to_fp32(b.dmin) * static_cast<float>(b.scales[sub] >> 4);
  }
  static int level(float x, float s, float m) { return ref::kquant_round(x, s, m, 3); }
  static float value(float s, float m, int q) { return s * static_cast<float>(q) - m; }
  // Value i's 2 bits sit in qs[32 * (i / 128) + i % 32] at bit 2 * ((i % 128) / 32).
  static void set_low2(std::uint8_t* qs, int i, int q) {
    const int sh = 2 * ((i % 128) / 32);
    std::uint8_t& byte = qs[32 * (i / 128) + i % 32];
    byte = static_cast<std::uint8_t>((byte & ~(3 << sh)) | ((q & 3) << sh));
  }
  static void set(Block& b, int i, int q) { set_low2(b.qs, i, q); }
};
// Q3_K: 16 sub-blocks of 16, value = (d * (s - 32)) * (q - 4), q in 0..7 (the low 2 bits as in
// Q2_K, bit 2 in hmask). Grid from quantize_q3_K_imatrix on one super-block.
struct KQ3 {
  using Block = BlockQ3_K;
  static constexpr int kSub = 16;
  static void choose(const float* x, const float* w, Block* b) {
    ref::quantize_q3_K_imatrix(x, b, 256, w);
  }
  static void grid(const Block& b, int sub, float* s, float* m) {
    *s = fp16_to_fp32(b.d) * static_cast<float>(ref::q3k::scale6(b.scales, sub) - 32);
    *m = 0.0f;
  }
  // As the reference's final re-rounding: clamp(round(x / s), -4, 3) + 4; s == 0 gives 0.
  static int level(float x, float s, float) {
    if (!s) return 4;
    const int l = ref::nearest_int(x / s);
    return (l < -4 ? -4 : (l > 3 ? 3 : l)) + 4;
  }
  static float value(float s, float, int q) { return s * static_cast<float>(q - 4); }
  static void set(Block& b, int i, int q) {
    KQ2::set_low2(b.qs, i, q & 3);
    std::uint8_t& h = b.hmask[i % 32];
    h = static_cast<std::uint8_t>((h & ~(1 << (i / 32))) | (((q >> 2) & 1) << (i / 32)));
  }
};
struct KQ4 {
  using Block = BlockQ4_K;
  static constexpr int kSub = 32;
  static void choose(const float* x, const float* w, Block* b) { ref::q4_K_choose_scales(x, w, b); }
  static void grid(const Block& b, int sub, float* s, float* m) { ref::q4_K_grid(b, sub, s, m); }
  static int level(float x, float s, float m) { return ref::kquant_round(x, s, m, 15); }
  static float value(float s, float m, int q) { return s * static_cast<float>(q) - m; }
  static void set(Block& b, int i, int q) { ref::q4_K_set_q(b, i, q); }
};
struct KQ5 {
  using Block = BlockQ5_K;
  static constexpr int kSub = 32;
  static void choose(const float* x, const float* w, Block* b) { ref::q5_K_choose_scales(x, w, b); }
  static void grid(const Block& b, int sub, float* s, float* m) { ref::q5_K_grid(b, sub, s, m); }
  static int level(float x, float s, float m) { return ref::kquant_round(x, s, m, 31); }
  static float value(float s, float m, int q) { return s * static_cast<float>(q) - m; }
  static void set(Block& b, int i, int q) { ref::q5_K_set_q(b, i, q); }
};
struct KQ6 {
  using Block = BlockQ6_K;
  static constexpr int kSub = 16;
  static void choose(const float* x, const float* w, Block* b) {
    ref::q6k_detail::quantize_block(x, *b, w);
  }
  // Q6_K: value = (float(d) * scale[sub]) * (q - 32); expressed as s * q - m with m = 32 s is
  // not bit-exact, so level()/value() below work on the signed level directly.
  static void grid(const Block& b, int sub, float* s, float* m) {
    *s = fp16_to_fp32(b.d) * static_cast<float>(b.scales[sub]);
    *m = 0.0f;
  }
  static int level(float x, float s, float) {
    if (s == 0.0f) return 32;
    return ref::q6k_detail::clamp_q6(ref::q6k_detail::round_magic(x / s)) + 32;
  }
  static float value(float s, float, int q) { return s * static_cast<float>(q - 32); }
  // Layout (see BlockQ6_K): for value i, h = i/128, r = i%128, quarter = r/32, l = r%32: the low
  // nibble sits in ql[64h + l + 32*(quarter&1)] (low half for quarter < 2, high half otherwise),
  // the top two bits in qh[32h + l] at bit 2*quarter.
  static void set(Block& b, int i, int q) {
    const int h = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
    std::uint8_t& lo = b.ql[64 * h + l + (quarter & 1) * 32];
    if (quarter < 2)
      lo = static_cast<std::uint8_t>((lo & 0xF0) | (q & 0x0F));
    else
      lo = static_cast<std::uint8_t>((lo & 0x0F) | ((q & 0x0F) << 4));
    std::uint8_t& hi = b.qh[32 * h + l];
    hi =
        static_cast<std::uint8_t>((hi & ~(3 << (2 * quarter))) | (((q >> 4) & 3) << (2 * quarter)));
  }
};

template <class KQ>
std::vector<std::uint8_t> kquant_gptq(const Eigen::MatrixXf& W, const Eigen::MatrixXf& H,
                                      const Config& cfg) {
  using Block = typename KQ::Block;
  const std::int64_t rows = W.rows(), cols = W.cols(), nb = cols / 256;
  Eigen::MatrixXf Wm = W, Hm = H;
  Prepared prep = prepare(Wm, Hm, false, cfg.percdamp);
  const Eigen::MatrixXf& U = prep.U;
  // Importance of each column for the super-block scale choice: the damped diag(H).
  const Eigen::VectorXf imp = Hm.diagonal();
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(rows * nb) * sizeof(Block));
  Block* blocks = reinterpret_cast<Block*>(bytes.data());
  Eigen::MatrixXf W1, Err1;
  const std::int64_t chunk = 32, n_chunks = (rows + chunk - 1) / chunk;
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int64_t i1 = 256 * b;
    W1 = Wm.middleCols(i1, 256);
    Err1.resize(rows, 256);
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
    for (std::int64_t c = 0; c < n_chunks; ++c) {
      const std::int64_t r0 = c * chunk, nr = std::min(chunk, rows - r0);
      float x256[256], sc[chunk], mn[chunk];
      // Grids chosen on the current (error-updated) weights of this super-block.
      for (std::int64_t r = 0; r < nr; ++r) {
        for (int k = 0; k < 256; ++k) x256[k] = W1(r0 + r, k);
        KQ::choose(x256, imp.data() + i1, &blocks[(r0 + r) * nb + b]);
      }
      for (int i = 0; i < 256; ++i) {
        if (i % KQ::kSub == 0)
          for (std::int64_t r = 0; r < nr; ++r)
            KQ::grid(blocks[(r0 + r) * nb + b], i / KQ::kSub, &sc[r], &mn[r]);
        const float d = U(i1 + i, i1 + i);
        float* w = &W1(r0, i);
        float* e = &Err1(r0, i);
        for (std::int64_t r = 0; r < nr; ++r) {
          const int q = KQ::level(w[r], sc[r], mn[r]);
          KQ::set(blocks[(r0 + r) * nb + b], i, q);
          e[r] = (w[r] - KQ::value(sc[r], mn[r], q)) / d;
        }
        for (int j = i + 1; j < 256; ++j) {
          const float u = U(i1 + i, i1 + j);
          float* wj = &W1(r0, j);
          for (std::int64_t r = 0; r < nr; ++r) wj[r] -= e[r] * u;
        }
      }
    }
    lazy_update(Wm.data() + (i1 + 256) * rows, rows, Err1.data(), rows, 256,
                U.data() + (i1 + 256) * cols + i1, cols, cols - i1 - 256);
  }
  return bytes;
}

// Adapters over the legacy symmetric formats (32 values, one fp16 scale d, value = d * q with a
// signed level q in [kLo, kHi]): the reference quantizer chooses d (Q5_0/Q4_0: its
// importance-weighted scale search, with the damped diag(H) as importance, as for the K-quants;
// Q8_0 has none), set() stores a level.
struct LQ8 {
  using Block = BlockQ8_0;
  static constexpr int kLo = -127, kHi = 127;
  static void choose(const float* x, const float*, Block* b) { ref::quantize_q8_0(x, b, 32); }
  static void set(Block& b, int j, int q) { b.qs[j] = static_cast<std::int8_t>(q); }
};
struct LQ5 {
  using Block = BlockQ5_0;
  static constexpr int kLo = -16, kHi = 15;
  static void choose(const float* x, const float* w, Block* b) {
    ref::quantize_q5_0_imatrix(x, b, 32, w);
  }
  static void set(Block& b, int j, int q) {
    const int L = q + 16;
    std::uint8_t& lo = b.qs[j % 16];
    lo = j < 16 ? static_cast<std::uint8_t>((lo & 0xF0) | (L & 0x0F))
                : static_cast<std::uint8_t>((lo & 0x0F) | ((L & 0x0F) << 4));
    std::uint8_t& hi = b.qh[j / 8];
    const int bit = j % 8;
    hi = static_cast<std::uint8_t>((hi & ~(1 << bit)) | (((L >> 4) & 1) << bit));
  }
};
struct LQ4 {
  using Block = BlockQ4_0;
  static constexpr int kLo = -8, kHi = 7;
  static void choose(const float* x, const float* w, Block* b) {
    ref::quantize_q4_0_imatrix(x, b, 32, w);
  }
  static void set(Block& b, int j, int q) {
    const int L = q + 8;
    std::uint8_t& v = b.qs[j % 16];
    v = j < 16 ? static_cast<std::uint8_t>((v & 0xF0) | (L & 0x0F))
               : static_cast<std::uint8_t>((v & 0x0F) | ((L & 0x0F) << 4));
  }
};

// GPTQ on a legacy 32-value grid: at each block start the reference quantizer picks d on the
// current (error-updated) weights; every column is then rounded to the nearest level (ties to
// even) and its error propagated. Columns are processed in windows of 128 (lazy batches).
template <class LQ>
std::vector<std::uint8_t> legacy_gptq(const Eigen::MatrixXf& W, const Eigen::MatrixXf& H,
                                      const Config& cfg) {
  using Block = typename LQ::Block;
  const std::int64_t rows = W.rows(), cols = W.cols(), nb = cols / 32;
  Eigen::MatrixXf Wm = W, Hm = H;
  Prepared prep = prepare(Wm, Hm, false, cfg.percdamp);
  const Eigen::MatrixXf& U = prep.U;
  const Eigen::VectorXf imp = Hm.diagonal();  // importance for the scale choice (damped diag H)
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(rows * nb) * sizeof(Block));
  Block* blocks = reinterpret_cast<Block*>(bytes.data());
  Eigen::MatrixXf W1, Err1;
  const std::int64_t win = 128, chunk = 32, n_chunks = (rows + chunk - 1) / chunk;
  for (std::int64_t i1 = 0; i1 < cols; i1 += win) {
    const std::int64_t count = std::min(win, cols - i1);
    W1 = Wm.middleCols(i1, count);
    Err1.resize(rows, count);
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
    for (std::int64_t c = 0; c < n_chunks; ++c) {
      const std::int64_t r0 = c * chunk, nr = std::min(chunk, rows - r0);
      float x32[32], d[chunk];
      for (std::int64_t i = 0; i < count; ++i) {
        const std::int64_t col = i1 + i;
        if (col % 32 == 0) {
          for (std::int64_t r = 0; r < nr; ++r) {
            for (int k = 0; k < 32; ++k) x32[k] = W1(r0 + r, i + k);
            Block& b = blocks[(r0 + r) * nb + col / 32];
            LQ::choose(x32, imp.data() + col, &b);
            d[r] = fp16_to_fp32(b.d);
          }
        }
        const float u = U(col, col);
        float* w = &W1(r0, i);
        float* e = &Err1(r0, i);
        for (std::int64_t r = 0; r < nr; ++r) {
          int q = 0;
          if (d[r] != 0.0f) {
            const float l = std::nearbyint(w[r] / d[r]);
            q = static_cast<int>(
                std::min(std::max(l, static_cast<float>(LQ::kLo)), static_cast<float>(LQ::kHi)));
          }
          LQ::set(blocks[(r0 + r) * nb + col / 32], static_cast<int>(col % 32), q);
          e[r] = (w[r] - d[r] * static_cast<float>(q)) / u;
        }
        for (std::int64_t j = i + 1; j < count; ++j) {
          const float uj = U(col, i1 + j);
          float* wj = &W1(r0, j);
          for (std::int64_t r = 0; r < nr; ++r) wj[r] -= e[r] * uj;
        }
      }
    }
    lazy_update(Wm.data() + (i1 + count) * rows, rows, Err1.data(), rows, count,
                U.data() + (i1 + count) * cols + i1, cols, cols - i1 - count);
  }
  return bytes;
}

}  // namespace

std::vector<std::uint8_t> quantize_blocks(Format f, const Eigen::MatrixXf& W,
                                          const Eigen::MatrixXf& H, const Config& cfg) {
  check_common(W, H, cfg);
  if (cfg.act_order) detail::fail("gptq::quantize_blocks: act_order is not supported");
  const bool legacy = f == Format::q8_0 || f == Format::q5_0 || f == Format::q4_0;
  if (legacy) {
    if (W.cols() % 32 != 0)
      detail::fail("gptq::quantize_blocks: cols = ", W.cols(), " is not a multiple of 32");
    switch (f) {
      case Format::q8_0:
        return legacy_gptq<LQ8>(W, H, cfg);
      case Format::q5_0:
        return legacy_gptq<LQ5>(W, H, cfg);
      default:
        return legacy_gptq<LQ4>(W, H, cfg);
    }
  }
  if (W.cols() % 256 != 0)
    detail::fail("gptq::quantize_blocks: cols = ", W.cols(), " is not a multiple of 256");
  switch (f) {
    case Format::q2_K:
      return kquant_gptq<KQ2>(W, H, cfg);
    case Format::q3_K:
      return kquant_gptq<KQ3>(W, H, cfg);
    case Format::q4_K:
      return kquant_gptq<KQ4>(W, H, cfg);
    case Format::q5_K:
      return kquant_gptq<KQ5>(W, H, cfg);
    case Format::q6_K:
      return kquant_gptq<KQ6>(W, H, cfg);
    default:
      break;
  }
  detail::fail("gptq::quantize_blocks: format ", traits(f).name,
               " is not supported (expected q2_K, q3_K, q4_K, q5_K, q6_K, q8_0, q5_0 or q4_0)");
}

}  // namespace gptq
}  // namespace nibble
