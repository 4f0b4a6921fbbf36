// nibble: AWQ scale and clip search (compiled part of include/nibble/quant/awq.hpp).
// Algorithm: reference/ALGORITHMS.md 3.1-3.5 (llm-awq; AutoAWQ's duo_scaling as an option).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "nibble/core/error.hpp"
#include "nibble/formats/q4_k.hpp"
#include "nibble/formats/q5_k.hpp"
#include "nibble/nibble.hpp"
#include "nibble/quant/awq.hpp"
#include "nibble/quant/rtn.hpp"

namespace nibble {
namespace awq {

namespace {

void check_config(const Config& cfg, std::int64_t cols) {
  rtn::check_bits(cfg.bits, "awq: bits");
  rtn::effective_group(cfg.group_size, cols, "awq: group_size");
  if (cfg.n_grid < 1) detail::fail("awq: n_grid = ", cfg.n_grid, " must be >= 1");
  if (cfg.clip_grid < 1) detail::fail("awq: clip_grid = ", cfg.clip_grid, " must be >= 1");
  if (!(cfg.max_shrink >= 0.0f && cfg.max_shrink < 1.0f))
    detail::fail("awq: max_shrink = ", cfg.max_shrink, " must be in [0, 1)");
  if (cfg.n_sample_token < 1)
    detail::fail("awq: n_sample_token = ", cfg.n_sample_token, " must be >= 1");
}

void check_shapes(const Eigen::MatrixXf& W, const Eigen::MatrixXf& X) {
  if (W.rows() <= 0 || W.cols() <= 0)
    detail::fail("awq: W is ", W.rows(), "x", W.cols(), ", expected a non-empty matrix");
  if (X.cols() != W.cols())
    detail::fail("awq: X has ", X.cols(), " columns, expected ", W.cols(), " (in of W)");
  if (X.rows() < 1) detail::fail("awq: X has no tokens");
  rtn::check_finite(W, "W");
  rtn::check_finite(X, "X");
}

// Absolute maximum of every (row, group) of W: out x n_groups.
Eigen::MatrixXf group_absmax(const Eigen::MatrixXf& W, std::int64_t gs) {
  const Eigen::Index G = W.cols() / gs;
  Eigen::MatrixXf m(W.rows(), G);
  for (Eigen::Index g = 0; g < G; ++g)
    m.col(g) = W.middleCols(g * gs, gs).cwiseAbs().rowwise().maxCoeff();
  return m;
}

// AutoAWQ's w_mean: |W| normalised by (group absmax + 1e-6) per (row, group of gs columns),
// averaged over the rows (float accumulation in double, then rounded once).
Eigen::VectorXf weight_mean(const Eigen::MatrixXf& W, std::int64_t gs) {
  const Eigen::Index G = W.cols() / gs;
  Eigen::VectorXd acc = Eigen::VectorXd::Zero(W.cols());
  for (Eigen::Index o = 0; o < W.rows(); ++o)
    for (Eigen::Index g = 0; g < G; ++g) {
      const float m = W.row(o).segment(g * gs, gs).cwiseAbs().maxCoeff() + 1e-6f;
      for (Eigen::Index k = 0; k < gs; ++k)
        acc[g * gs + k] += static_cast<double>(std::fabs(W(o, g * gs + k)) / m);
    }
  return (acc / static_cast<double>(W.rows())).cast<float>();
}

// M[:, c] / s[c] (division, as the reference).
Eigen::MatrixXf divide_cols(const Eigen::MatrixXf& M, const Eigen::VectorXf& s) {
  return (M.array().rowwise() / s.transpose().array()).matrix();
}

}  // namespace

Eigen::VectorXf activation_mean(const Eigen::MatrixXf& X) {
  if (X.rows() < 1) detail::fail("awq: X has no tokens");
  return (X.cast<double>().cwiseAbs().colwise().sum() / static_cast<double>(X.rows()))
      .transpose()
      .cast<float>();
}

namespace {

using RowMajorXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Clip search over groups of gs columns; qgroup(in, out) fake-quantizes one row's group of gs
// contiguous values.
template <class QGroup>
Eigen::MatrixXf clip_search_impl(const Eigen::MatrixXf& Ws, const Eigen::MatrixXf& Xs,
                                 const Config& cfg, std::int64_t gs, const QGroup& qgroup) {
  const std::int64_t G = Ws.cols() / gs, rows = Ws.rows();
  const std::int64_t tokens = Xs.rows();
  const std::int64_t step = std::max<std::int64_t>(1, tokens / cfg.n_sample_token);
  const std::int64_t T = (tokens + step - 1) / step;
  Eigen::MatrixXf Xsub(T, Xs.cols());
  for (std::int64_t t = 0; t < T; ++t) Xsub.row(t) = Xs.row(t * step);
  const int n_cand = static_cast<int>(cfg.max_shrink * static_cast<float>(cfg.clip_grid));

  Eigen::MatrixXf best = group_absmax(Ws, gs);
#if defined(_OPENMP)
#pragma omp parallel for schedule(dynamic)
#endif
  for (std::int64_t g = 0; g < G; ++g) {
    const Eigen::MatrixXf Xg = Xsub.middleCols(g * gs, gs);
    const RowMajorXf Wg = Ws.middleCols(g * gs, gs);
    const Eigen::VectorXf org_max = best.col(g);
    Eigen::VectorXf min_err = Eigen::VectorXf::Constant(rows, 1e9f);
    RowMajorXf cw(rows, gs), qw(rows, gs);
    for (int i = 0; i < n_cand; ++i) {
      const float shrink =
          static_cast<float>(1.0 - static_cast<double>(i) / static_cast<double>(cfg.clip_grid));
      Eigen::VectorXf m(rows);
      for (std::int64_t o = 0; o < rows; ++o) {
        m[o] = org_max[o] * shrink;
        for (std::int64_t k = 0; k < gs; ++k) cw(o, k) = std::min(std::max(Wg(o, k), -m[o]), m[o]);
        qgroup(&cw(o, 0), &qw(o, 0));
      }
      const Eigen::MatrixXf D = qw - Wg;
      const Eigen::MatrixXf P = Xg * D.transpose();  // T x rows
      for (std::int64_t o = 0; o < rows; ++o) {
        const float err =
            static_cast<float>(P.col(o).cast<double>().squaredNorm() / static_cast<double>(T));
        if (err < min_err[o]) {
          min_err[o] = err;
          best(o, g) = m[o];
        }
      }
    }
  }
  return best;
}

// The AWQ group quantizer on one contiguous group.
struct AwqGroup {
  int bits;
  bool zero_point;
  std::int64_t gs;
  void operator()(const float* in, float* out) const {
    float s, z;
    rtn::awq_group_params(in, gs, 1, bits, zero_point, &s, &z);
    for (std::int64_t k = 0; k < gs; ++k) out[k] = rtn::awq_quantize(in[k], s, z, bits, zero_point);
  }
};

}  // namespace

Eigen::MatrixXf clip_search(const Eigen::MatrixXf& Ws, const Eigen::MatrixXf& Xs,
                            const Config& cfg) {
  check_shapes(Ws, Xs);
  check_config(cfg, Ws.cols());
  const std::int64_t gs = rtn::effective_group(cfg.group_size, Ws.cols(), "awq: group_size");
  return clip_search_impl(Ws, Xs, cfg, gs, AwqGroup{cfg.bits, cfg.zero_point, gs});
}

Eigen::MatrixXf scaled_clipped(const Eigen::MatrixXf& W, const Result& r, int group_size) {
  const std::int64_t gs = rtn::effective_group(group_size, W.cols(), "awq: group_size");
  if (r.scales.size() != W.cols() || r.clip_max.rows() != W.rows() ||
      r.clip_max.cols() != W.cols() / gs)
    detail::fail("awq::scaled_clipped: result shapes (scales ", r.scales.size(), ", clip_max ",
                 r.clip_max.rows(), "x", r.clip_max.cols(), ") do not match W ", W.rows(), "x",
                 W.cols(), " with group_size ", group_size);
  Eigen::MatrixXf Ws = W * r.scales.asDiagonal();
  for (Eigen::Index c = 0; c < W.cols(); ++c)
    for (Eigen::Index o = 0; o < W.rows(); ++o) {
      const float m = r.clip_max(o, c / gs);
      Ws(o, c) = std::min(std::max(Ws(o, c), -m), m);
    }
  return Ws;
}

namespace {

// The scale search (3.3) with a matrix fake quantizer fq (out x in -> out x in): returns the
// scales and ratio with the lowest loss(D), D = W - Q(W s)/s, the layer-output error of the
// candidate (any positive multiple of the mean square output difference).
template <class QMatrix, class Loss>
Result scale_search(const Eigen::MatrixXf& W, const Eigen::VectorXf& x_mean, const Config& cfg,
                    std::int64_t gs, const QMatrix& fq, const Loss& loss_of) {
  Eigen::VectorXf w_mean;
  if (cfg.duo_scaling) w_mean = weight_mean(W, gs);

  Result res;
  double best = std::numeric_limits<double>::infinity();
  int best_r = -1;
  Eigen::VectorXf s(W.cols());
  for (int r = 0; r < cfg.n_grid; ++r) {
    const float ratio = static_cast<float>(static_cast<double>(r) / cfg.n_grid);
    // 1 - ratio as the reference computes it (in double, then rounded to float once).
    const float one_minus = static_cast<float>(1.0 - static_cast<double>(r) / cfg.n_grid);
    if (cfg.duo_scaling) {
      for (Eigen::Index c = 0; c < s.size(); ++c)
        s[c] =
            std::max(std::pow(x_mean[c], ratio) / (std::pow(w_mean[c], one_minus) + 1e-4f), 1e-4f);
    } else {
      for (Eigen::Index c = 0; c < s.size(); ++c)
        s[c] = std::max(std::pow(x_mean[c], ratio), 1e-4f);
    }
    s /= std::sqrt(s.maxCoeff() * s.minCoeff());
    // AutoAWQ replaces non-finite entries by 1 (only reachable through overflow).
    for (Eigen::Index c = 0; c < s.size(); ++c)
      if (!std::isfinite(s[c])) s[c] = 1.0f;
    const Eigen::MatrixXf Wq = divide_cols(fq(W * s.asDiagonal()), s);
    const double loss = loss_of(Eigen::MatrixXf(W - Wq));
    if (loss < best) {
      best = loss;
      best_r = r;
      res.scales = s;
    }
  }
  if (best_r < 0) detail::fail("awq: no finite scale-search loss (inputs too large?)");
  res.best_ratio = static_cast<float>(static_cast<double>(best_r) / cfg.n_grid);
  return res;
}

// Scale search + clip search with a matrix fake quantizer fq (out x in -> out x in) and the
// matching group quantizer for clip groups of gs columns.
template <class QMatrix, class QGroup>
Result search_impl(const Eigen::MatrixXf& W, const Eigen::MatrixXf& X, const Config& cfg,
                   std::int64_t gs, const QMatrix& fq, const QGroup& qgroup) {
  const Eigen::VectorXf x_mean = activation_mean(X);
  const double denom = static_cast<double>(X.rows()) * static_cast<double>(W.rows());
  const bool use_gram = X.rows() > 2 * X.cols();
  Eigen::MatrixXf G;
  if (use_gram) G.noalias() = X.transpose() * X;
  // Mean square of the layer-output difference X (W - Wq)^T over all outputs; with many
  // tokens through the Gram matrix: ||X D^T||^2 = sum((D G) .* D), G = X^T X.
  const auto loss_of = [&](const Eigen::MatrixXf& D) {
    if (use_gram) {
      const Eigen::MatrixXf DG = D * G;
      return (DG.array() * D.array()).cast<double>().sum() / denom;
    }
    return (X * D.transpose()).cast<double>().squaredNorm() / denom;
  };
  Result res = scale_search(W, x_mean, cfg, gs, fq, loss_of);

  const Eigen::MatrixXf Ws = W * res.scales.asDiagonal();
  if (cfg.clip) {
    const Eigen::MatrixXf Xs = divide_cols(X, res.scales);
    res.clip_max = clip_search_impl(Ws, Xs, cfg, gs, qgroup);
  } else {
    res.clip_max = group_absmax(Ws, gs);
  }
  return res;
}

}  // namespace

Result search(const Eigen::MatrixXf& W, const Eigen::MatrixXf& X, const Config& cfg) {
  check_shapes(W, X);
  check_config(cfg, W.cols());
  const std::int64_t gs = rtn::effective_group(cfg.group_size, W.cols(), "awq: group_size");
  const auto fq = [&](const Eigen::MatrixXf& M) {
    return rtn::awq_rtn(M, cfg.bits, cfg.group_size, cfg.zero_point);
  };
  Result res = search_impl(W, X, cfg, gs, fq, AwqGroup{cfg.bits, cfg.zero_point, gs});
  res.W_eff = divide_cols(fq(scaled_clipped(W, res, cfg.group_size)), res.scales);
  return res;
}

namespace {

// The K-quant fake quantizer. Rows are quantized through nibble::quantize: the dispatched SIMD
// quantizers, byte-identical to ggml's reference quantize_row_q{4,5}_K_ref but several times
// faster (the scale and clip searches quantize every candidate).
template <class Block>
struct KQuantFake {
  Format fmt;
  void (*deq)(const Block*, float*, std::int64_t);
  void quant(const float* x, Block* b, std::int64_t n) const {
    Context one;
    one.threads = 1;  // called from the parallel loops below
    nibble::quantize(one, fmt, x, 1, n, b);
  }
  // One super-block of 256 contiguous values.
  void operator()(const float* in, float* out) const {
    Block b;
    quant(in, &b, 256);
    deq(&b, out, 256);
  }
  // Whole matrix, row by row; optionally keeps the blocks.
  Eigen::MatrixXf operator()(const Eigen::MatrixXf& M,
                             std::vector<std::uint8_t>* bytes = nullptr) const {
    const RowMajorXf R = M;
    RowMajorXf out(M.rows(), M.cols());
    const std::int64_t nb = M.cols() / 256;
    std::vector<Block> blocks(static_cast<std::size_t>(M.rows() * nb));
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
    for (Eigen::Index r = 0; r < M.rows(); ++r) {
      quant(R.data() + r * M.cols(), blocks.data() + r * nb, M.cols());
      deq(blocks.data() + r * nb, out.data() + r * M.cols(), M.cols());
    }
    if (bytes) {
      bytes->resize(blocks.size() * sizeof(Block));
      std::memcpy(bytes->data(), blocks.data(), bytes->size());
    }
    return out;
  }
};

// Checks shared by the K-quant entry points; returns cfg with the super-block as the group.
Config kquant_config(const Eigen::MatrixXf& W, const Eigen::MatrixXf& X, const Config& cfg,
                     const char* who) {
  check_shapes(W, X);
  if (W.cols() % 256 != 0) detail::fail(who, ": cols = ", W.cols(), " is not a multiple of 256");
  Config c = cfg;
  c.group_size = 256;
  c.bits = 4;
  check_config(c, W.cols());
  return c;
}

// Calls fn(KQuantFake<Block>) for Format::q4_K / q5_K; throws naming `who` for others.
template <class Fn>
auto with_kquant(Format f, const char* who, const Fn& fn) {
  switch (f) {
    case Format::q4_K:
      return fn(KQuantFake<BlockQ4_K>{Format::q4_K, ref::dequantize_q4_K});
    case Format::q5_K:
      return fn(KQuantFake<BlockQ5_K>{Format::q5_K, ref::dequantize_q5_K});
    default:
      break;
  }
  detail::fail(who, ": format ", traits(f).name, " is not supported (expected q4_K or q5_K)");
}

template <class Block>
std::vector<std::uint8_t> kquant_awq(const Eigen::MatrixXf& W, const Eigen::MatrixXf& X,
                                     const Config& cfg, Result* result,
                                     const KQuantFake<Block>& kq) {
  const auto fq = [&](const Eigen::MatrixXf& M) { return kq(M); };
  Result res = search_impl(W, X, cfg, 256, fq, kq);
  std::vector<std::uint8_t> bytes;
  const Eigen::MatrixXf Q = kq(scaled_clipped(W, res, 256), &bytes);
  if (result) {
    res.W_eff = divide_cols(Q, res.scales);
    *result = std::move(res);
  }
  return bytes;
}

}  // namespace

std::vector<std::uint8_t> search_blocks(Format f, const Eigen::MatrixXf& W,
                                        const Eigen::MatrixXf& X, const Config& cfg,
                                        Result* result) {
  const Config c = kquant_config(W, X, cfg, "awq::search_blocks");
  return with_kquant(f, "awq::search_blocks",
                     [&](const auto& kq) { return kquant_awq(W, X, c, result, kq); });
}

Result search_scales_blocks(Format f, const Eigen::MatrixXf& W, const Eigen::VectorXf& x_mean,
                            const Eigen::MatrixXf& gram, const Config& cfg) {
  const char* who = "awq::search_scales_blocks";
  if (W.rows() <= 0 || W.cols() <= 0)
    detail::fail(who, ": W is ", W.rows(), "x", W.cols(), ", expected a non-empty matrix");
  if (W.cols() % 256 != 0) detail::fail(who, ": cols = ", W.cols(), " is not a multiple of 256");
  if (x_mean.size() != W.cols())
    detail::fail(who, ": x_mean has ", x_mean.size(), " values, expected ", W.cols());
  if (gram.rows() != W.cols() || gram.cols() != W.cols())
    detail::fail(who, ": gram is ", gram.rows(), "x", gram.cols(), ", expected ", W.cols(), "x",
                 W.cols());
  rtn::check_finite(W, "W");
  rtn::check_finite(gram, "gram");
  for (Eigen::Index c = 0; c < x_mean.size(); ++c)
    if (!(x_mean[c] >= 0.0f) || !std::isfinite(x_mean[c]))
      detail::fail(who, ": x_mean[", c, "] = ", x_mean[c], " is not finite and >= 0");
  Config c = cfg;
  c.group_size = 256;
  c.bits = 4;
  check_config(c, W.cols());
  return with_kquant(f, who, [&](const auto& kq) {
    const auto fq = [&](const Eigen::MatrixXf& M) { return kq(M); };
    const auto loss_of = [&](const Eigen::MatrixXf& D) {
      const Eigen::MatrixXf DG = D * gram;
      return (DG.array() * D.array()).cast<double>().sum();
    };
    Result res = scale_search(W, x_mean, c, 256, fq, loss_of);
    res.clip_max = group_absmax(W * res.scales.asDiagonal(), 256);
    return res;
  });
}

Eigen::MatrixXf clip_search_blocks(Format f, const Eigen::MatrixXf& Ws, const Eigen::MatrixXf& Xs,
                                   const Config& cfg) {
  const Config c = kquant_config(Ws, Xs, cfg, "awq::clip_search_blocks");
  return with_kquant(f, "awq::clip_search_blocks",
                     [&](const auto& kq) { return clip_search_impl(Ws, Xs, c, 256, kq); });
}

}  // namespace awq
}  // namespace nibble
