// Tests of the Hessian, the GPTQ quantizer grid (find_params) and GPTQ itself.
// Exactness: hand-computed grids, half-to-even ties, all-zero rows, dead columns, act-order
// permutation / g_idx, static groups, and the lazy-batch Cholesky GPTQ against a direct
// optimal-brain-surgeon implementation in double (inverse Hessian of the remaining columns
// recomputed at every step). Quality: output error vs RTN on synthetic LLM-like layers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "llm_layer.hpp"
#include "nibble/quant/gptq.hpp"
#include "nibble/quant/hessian.hpp"
#include "nibble/quant/rtn.hpp"
#include "nibble/formats/q2_k.hpp"
#include "nibble/formats/q3_k.hpp"
#include "nibble/formats/q4_0.hpp"
#include "nibble/formats/q4_k.hpp"
#include "nibble/formats/q5_0.hpp"
#include "nibble/formats/q5_k.hpp"
#include "nibble/formats/q6_k.hpp"
#include "nibble/formats/q8_0.hpp"

using nibble::Hessian;
namespace gptq = nibble::gptq;
namespace rtn = nibble::rtn;

namespace {

using RowMajorXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

Eigen::MatrixXf hessian_of(const Eigen::MatrixXf& X) {
  Hessian h(X.cols());
  const RowMajorXf Xr = X;
  h.add_batch(Xr.data(), Xr.rows());
  return h.matrix();
}

// Small random layer with a correlated Hessian (tokens x cols inputs).
nibble_test::Layer tiny_layer(int rows, int cols, int tokens, std::uint64_t seed) {
  nibble_test::LayerSpec s;
  s.out = rows;
  s.in = cols;
  s.tokens = tokens;
  s.rank = 3;
  s.outlier_frac = 0.0f;
  s.seed = seed;
  return nibble_test::make_layer(s);
}

// Direct GPTQ/OBS in double: columns in processing order, at each step the inverse of the damped
// Hessian restricted to the remaining columns is recomputed from scratch, the column is rounded
// and the remaining columns get w_F -= (w_i - q_i) / Hinv[i,i] * Hinv[i, F]. Group parameters
// are taken at each group start from the weights updated by all columns of previous lazy blocks
// of cfg.block_size columns but not by the earlier columns of the current block (the reference's
// "outer W"); static groups from the initial dead-zeroed weights. Returns Q in the original
// column order.
// `ties` (optional) flags the values that sat within 1e-5 of a rounding tie (x/scale = k + 0.5).
Eigen::MatrixXf naive_gptq(const Eigen::MatrixXf& W0, const Eigen::MatrixXf& H0,
                           const gptq::Config& cfg, Eigen::Matrix<bool, -1, -1>* ties = nullptr) {
  const int rows = static_cast<int>(W0.rows()), cols = static_cast<int>(W0.cols());
  const bool grouped = cfg.group_size > 0;
  const int gs = grouped ? cfg.group_size : cols;
  const float maxq = static_cast<float>((1 << cfg.bits) - 1);
  Eigen::MatrixXd W = W0.cast<double>(), H = H0.cast<double>();
  std::vector<float> s(rows), z(rows);
  Eigen::MatrixXf row_s(rows, 1), row_z(rows, 1);
  if (!grouped) {
    const Eigen::MatrixXf Wf = W0;
    rtn::gptq_find_params(Wf, cfg.bits, cfg.sym, false, row_s.data(), row_z.data());
  }
  for (int k = 0; k < cols; ++k)
    if (H(k, k) == 0.0) {
      H(k, k) = 1.0;
      W.col(k).setZero();
    }
  std::vector<Eigen::VectorXf> st_s, st_z;
  if (grouped && cfg.static_groups)
    for (int g = 0; g < cols / gs; ++g) {
      Eigen::VectorXf a(rows), b(rows);
      const Eigen::MatrixXf blk = W.middleCols(g * gs, gs).cast<float>();
      rtn::gptq_find_params(blk, cfg.bits, cfg.sym, false, a.data(), b.data());
      st_s.push_back(a);
      st_z.push_back(b);
    }
  std::vector<int> perm(cols);
  std::iota(perm.begin(), perm.end(), 0);
  if (cfg.act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](int a, int b) { return H(a, a) > H(b, b); });
  // The reference computes damp in fp32 on the fp32 H; do the same.
  const float damp = cfg.percdamp * H.diagonal().cast<float>().mean();
  for (int k = 0; k < cols; ++k) H(k, k) += damp;
  Eigen::MatrixXf Q(rows, cols);
  if (ties) ties->setConstant(rows, cols, false);
  // Updates made by the columns of the current lazy block: the reference takes group parameters
  // from the OUTER W, which does not contain them yet (W_outer = W - pending).
  Eigen::MatrixXd pending = Eigen::MatrixXd::Zero(rows, cols);
  for (int p = 0; p < cols; ++p) {
    if (p % cfg.block_size == 0) pending.setZero();
    const int col = perm[p];
    if (grouped && !cfg.static_groups && p % gs == 0) {
      Eigen::MatrixXf blk(rows, gs);
      for (int k = 0; k < gs; ++k)
        blk.col(k) = (W.col(perm[p + k]) + pending.col(perm[p + k])).cast<float>();
      rtn::gptq_find_params(blk, cfg.bits, cfg.sym, false, s.data(), z.data());
    }
    const int m = cols - p;
    Eigen::MatrixXd HF(m, m);
    for (int a = 0; a < m; ++a)
      for (int b = 0; b < m; ++b) HF(a, b) = H(perm[p + a], perm[p + b]);
    const Eigen::MatrixXd Hinv = HF.inverse();
    for (int r = 0; r < rows; ++r) {
      float sc, zp;
      if (!grouped) {
        sc = row_s(r, 0);
        zp = row_z(r, 0);
      } else if (cfg.static_groups) {
        sc = st_s[col / gs][r];
        zp = st_z[col / gs][r];
      } else {
        sc = s[r];
        zp = z[r];
      }
      const float q = rtn::gptq_quantize(static_cast<float>(W(r, col)), sc, zp, maxq);
      if (ties) {
        const double t = static_cast<double>(static_cast<float>(W(r, col))) / sc;
        (*ties)(r, col) = std::fabs(std::fabs(t - std::floor(t)) - 0.5) < 1e-5;
      }
      Q(r, col) = q;
      const double e = (W(r, col) - q) / Hinv(0, 0);
      for (int a = 0; a < m; ++a) {
        W(r, perm[p + a]) -= e * Hinv(0, a);
        pending(r, perm[p + a]) += e * Hinv(0, a);
      }
    }
  }
  return Q;
}

// Processing order of GPTQ: descending diag(H) (stable) under act-order, else natural.
std::vector<int> processing_order(const Eigen::MatrixXf& H, bool act_order) {
  std::vector<int> perm(H.cols());
  std::iota(perm.begin(), perm.end(), 0);
  if (act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](int a, int b) { return H(a, a) > H(b, b); });
  return perm;
}

// Max |a - b| relative to max |b|.
double max_rel_diff(const Eigen::MatrixXf& a, const Eigen::MatrixXf& b) {
  return (a - b).cwiseAbs().maxCoeff() / std::max(1e-30f, b.cwiseAbs().maxCoeff());
}

}  // namespace

// ------------------------------------------------------------------ Hessian

TEST(Hessian, MatchesDoubleReferenceAcrossBatches) {
  const auto L = tiny_layer(4, 48, 300, 11);
  Hessian h(48);
  const RowMajorXf Xr = L.X;
  h.add_batch(Xr.data(), 100);
  h.add_batch(Xr.data() + 100 * 48, 0);
  h.add_batch(Xr.data() + 100 * 48, 200);
  EXPECT_EQ(h.tokens(), 300);
  const Eigen::MatrixXd Xd = L.X.cast<double>();
  const Eigen::MatrixXd ref = 2.0 / 300.0 * Xd.transpose() * Xd;
  const Eigen::MatrixXd got = h.matrix().cast<double>();
  EXPECT_LT((got - ref).cwiseAbs().maxCoeff() / ref.cwiseAbs().maxCoeff(), 1e-5);
  EXPECT_EQ((got - got.transpose()).cwiseAbs().maxCoeff(), 0.0);  // exactly symmetric
}

TEST(Hessian, RejectsBadInput) {
  EXPECT_THROW(Hessian(0), nibble::Error);
  Hessian h(4);
  std::vector<float> x = {1, 2, 3, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_THROW(h.add_batch(x.data(), 1), nibble::Error);
  EXPECT_THROW(h.add_batch(nullptr, 1), nibble::Error);
  EXPECT_THROW(h.add_batch(x.data(), -1), nibble::Error);
  EXPECT_EQ(h.tokens(), 0);
  EXPECT_EQ(h.matrix().cwiseAbs().maxCoeff(), 0.0f);
}

// ------------------------------------------------------------------ quantizer grid

TEST(GptqGrid, FindParamsHandComputed) {
  Eigen::MatrixXf x(5, 3);
  x << -1.0f, 0.5f, 2.0f,   // asym: [-1, 2]
      0.3f, 0.6f, 0.45f,    // no negatives: range extended to [0, 0.6]
      -0.2f, -0.4f, -0.1f,  // no positives: [-0.4, 0]
      0.0f, 0.0f, 0.0f,     // all zero: [-1, 1]
      -3.0f, 1.0f, 0.0f;
  float s[5], z[5];
  rtn::gptq_find_params(x, 4, false, false, s, z);
  EXPECT_FLOAT_EQ(s[0], 3.0f / 15.0f);
  EXPECT_EQ(z[0], 5.0f);
  EXPECT_FLOAT_EQ(s[1], 0.6f / 15.0f);
  EXPECT_EQ(z[1], 0.0f);
  EXPECT_FLOAT_EQ(s[2], 0.4f / 15.0f);
  EXPECT_EQ(z[2], 15.0f);
  EXPECT_FLOAT_EQ(s[3], 2.0f / 15.0f);
  EXPECT_EQ(z[3], 7.0f);  // 1 / fp32(2/15) = 7.4999995 in fp32, rounds to 7 (as torch does)
  EXPECT_FLOAT_EQ(s[4], 4.0f / 15.0f);
  EXPECT_EQ(z[4], std::nearbyint(3.0f / (4.0f / 15.0f)));

  // Symmetric: zero = (maxq+1)/2 always; a row without negatives keeps xmin = 0.
  rtn::gptq_find_params(x, 4, true, false, s, z);
  for (int r = 0; r < 5; ++r) EXPECT_EQ(z[r], 8.0f);
  EXPECT_FLOAT_EQ(s[0], 4.0f / 15.0f);  // xmax = max(|-1|, 2) = 2, xmin = -2
  EXPECT_FLOAT_EQ(s[1], 0.6f / 15.0f);  // xmin stays 0
  EXPECT_FLOAT_EQ(s[2], 0.8f / 15.0f);  // xmax = 0.4, xmin = -0.4
  EXPECT_FLOAT_EQ(s[3], 2.0f / 15.0f);
  EXPECT_FLOAT_EQ(s[4], 6.0f / 15.0f);
  // The lopsided sym grid: +xmax is clipped to 7 s; -xmax is representable.
  EXPECT_FLOAT_EQ(rtn::gptq_quantize(2.0f, 4.0f / 15.0f, 8.0f, 15.0f), 7.0f * 4.0f / 15.0f);
  EXPECT_FLOAT_EQ(rtn::gptq_quantize(2.1f, 4.0f / 15.0f, 8.0f, 15.0f), 7.0f * 4.0f / 15.0f);
  EXPECT_FLOAT_EQ(rtn::gptq_quantize(-2.1f, 4.0f / 15.0f, 8.0f, 15.0f), -8.0f * 4.0f / 15.0f);
  // Row without negatives in sym: everything above 7 xmax / 15 saturates.
  EXPECT_FLOAT_EQ(rtn::gptq_quantize(0.6f, 0.04f, 8.0f, 15.0f), 7.0f * 0.04f);

  // Sym zero point per width, and the other widths' maxq.
  for (int bits : {2, 3, 8}) {
    rtn::gptq_find_params(x, bits, true, false, s, z);
    EXPECT_EQ(z[0], static_cast<float>(1 << (bits - 1)));
    EXPECT_FLOAT_EQ(s[0], 4.0f / static_cast<float>((1 << bits) - 1));
  }
}

TEST(GptqGrid, AllZeroRowZeroPointUsesHalfToEven) {
  // -xmin/scale = 1 / (2/maxq) = maxq/2 (exactly .5 when the fp32 division is exact).
  Eigen::MatrixXf x = Eigen::MatrixXf::Zero(1, 4);
  for (int bits : {2, 3, 4, 8}) {
    float s, z;
    rtn::gptq_find_params(x, bits, false, false, &s, &z);
    const float maxq = static_cast<float>((1 << bits) - 1);
    const float ratio = 1.0f / (2.0f / maxq);
    EXPECT_FLOAT_EQ(s, 2.0f / maxq);
    if (ratio == std::floor(ratio) + 0.5f) {
      const float even =
          std::fmod(std::floor(ratio), 2.0f) == 0.0f ? std::floor(ratio) : std::floor(ratio) + 1.0f;
      EXPECT_EQ(z, even) << "bits " << bits;
    } else {
      EXPECT_EQ(z, std::floor(ratio + 0.5f)) << "bits " << bits;
    }
  }
}

TEST(GptqGrid, QuantizeRoundsHalfToEven) {
  // x / scale exactly on .5 ties: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> -0, -1.5 -> -2.
  const float s = 0.5f, z = 4.0f, maxq = 15.0f;
  EXPECT_EQ(rtn::gptq_quantize(0.25f, s, z, maxq), 0.0f);
  EXPECT_EQ(rtn::gptq_quantize(0.75f, s, z, maxq), 1.0f);
  EXPECT_EQ(rtn::gptq_quantize(1.25f, s, z, maxq), 1.0f);
  EXPECT_EQ(rtn::gptq_quantize(-0.25f, s, z, maxq), 0.0f);
  EXPECT_EQ(rtn::gptq_quantize(-0.75f, s, z, maxq), -1.0f);
  // Clamping to [0, maxq] in code space.
  EXPECT_EQ(rtn::gptq_quantize(100.0f, s, z, maxq), (15.0f - 4.0f) * s);
  EXPECT_EQ(rtn::gptq_quantize(-100.0f, s, z, maxq), -4.0f * s);
}

TEST(GptqGrid, MseShrinkNeverWorseAndShrinksOutlierRows) {
  Eigen::MatrixXf x(2, 64);
  for (int c = 0; c < 64; ++c) {
    x(0, c) = std::sin(0.37f * c) * 0.1f;
    x(1, c) = std::cos(0.21f * c) * 0.1f;
  }
  x(0, 5) = 1.0f;  // one outlier
  float s0[2], z0[2], s1[2], z1[2];
  rtn::gptq_find_params(x, 3, false, false, s0, z0);
  rtn::gptq_find_params(x, 3, false, true, s1, z1);
  for (int r = 0; r < 2; ++r) {
    double e0 = 0, e1 = 0;
    for (int c = 0; c < 64; ++c) {
      e0 += std::pow(std::fabs(rtn::gptq_quantize(x(r, c), s0[r], z0[r], 7.0f) - x(r, c)), 2.4);
      e1 += std::pow(std::fabs(rtn::gptq_quantize(x(r, c), s1[r], z1[r], 7.0f) - x(r, c)), 2.4);
    }
    EXPECT_LE(e1, e0 * (1 + 1e-5)) << r;
    EXPECT_LE(s1[r], s0[r]);
  }
}

// ------------------------------------------------------------------ GPTQ exactness

struct NaiveCase {
  int bits, group_size, block_size;
  bool sym, act_order, static_groups;
};

TEST(Gptq, MatchesDirectDoubleImplementationOnTinyLayers) {
  const NaiveCase cases[] = {
      {4, -1, 16, false, false, false},
      {4, -1, 4, false, false, false},
      {4, 8, 8, false, false, false},
      {4, 4, 4, true, false, false},
      {3, 8, 8, false, true, false},
      {2, -1, 5, false, true, false},
      {8, 8, 8, true, false, false},
      {4, 8, 4, false, true, true},
      {3, 4, 8, false, false, true},
      // groups narrower than the lazy block: parameters from the outer W
      {4, 4, 8, false, false, false},
      {3, 2, 8, false, true, false},
      {4, 4, 16, false, false, false},
  };
  int idx = 0;
  for (const auto& c : cases) {
    const auto L = tiny_layer(8, 16, 64, 100 + idx++);
    const Eigen::MatrixXf H = hessian_of(L.X);
    gptq::Config cfg;
    cfg.bits = c.bits;
    cfg.group_size = c.group_size;
    cfg.block_size = c.block_size;
    cfg.sym = c.sym;
    cfg.act_order = c.act_order;
    cfg.static_groups = c.static_groups;
    const auto res = gptq::quantize(L.W, H, cfg);
    Eigen::Matrix<bool, -1, -1> ties;
    const Eigen::MatrixXf ref = naive_gptq(L.W, H, cfg, &ties);
    // Same grid points chosen everywhere (values equal up to fp32 rounding of the scales) --
    // except after a structural rounding tie: with the symmetric grid the extreme element of a
    // group lies at exactly x/scale = -(maxq+1)/2 + 0.5 when it is the group's first column, and
    // fp32 (ours) and double (naive) land on opposite sides of it. Then only the columns up to
    // the first differing one (in processing order) are compared, and that one must be a tie.
    const std::vector<int> order = processing_order(H, cfg.act_order);
    int first_bad = -1;
    for (int p = 0; p < 16 && first_bad < 0; ++p)
      for (int o = 0; o < 8; ++o)
        if (std::fabs(res.Q(o, order[p]) - ref(o, order[p])) > 1e-5f * ref.cwiseAbs().maxCoeff())
          first_bad = p;
    if (first_bad >= 0) {
      bool tie = false;
      for (int o = 0; o < 8; ++o) tie = tie || ties(o, order[first_bad]);
      std::printf(
          "  case %d: first difference at processing position %d (must be a rounding tie)\n",
          idx - 1, first_bad);
      EXPECT_TRUE(tie) << "bits " << c.bits << " gs " << c.group_size << " bs " << c.block_size
                       << " sym " << c.sym << " act " << c.act_order << " static "
                       << c.static_groups << " first differing position " << first_bad;
    }
    EXPECT_GT(res.loss, 0.0);
  }
}

TEST(Gptq, DeadColumnsAreZeroedAndIgnoredByGroupParams) {
  auto L = tiny_layer(8, 32, 128, 7);
  Eigen::MatrixXf H = hessian_of(L.X);
  for (int k : {3, 20}) {
    H.row(k).setZero();
    H.col(k).setZero();
    L.W.col(k).setConstant(100.0f);  // would dominate the group range if not zeroed first
  }
  gptq::Config cfg;
  cfg.group_size = 16;
  cfg.block_size = 16;
  const auto res = gptq::quantize(L.W, H, cfg);
  EXPECT_EQ(res.Q.col(3).cwiseAbs().maxCoeff(), 0.0f);
  EXPECT_EQ(res.Q.col(20).cwiseAbs().maxCoeff(), 0.0f);
  Eigen::MatrixXf Wz = L.W;
  Wz.col(3).setZero();
  Wz.col(20).setZero();
  Eigen::VectorXf s(8), z(8);
  rtn::gptq_find_params(Wz.leftCols(16), 4, false, false, s.data(), z.data());
  EXPECT_EQ((res.scale.col(0) - s).cwiseAbs().maxCoeff(), 0.0f);  // first group: no updates yet
  EXPECT_EQ((res.zero.col(0) - z).cwiseAbs().maxCoeff(), 0.0f);
  EXPECT_TRUE(res.Q.allFinite());
  EXPECT_LT(max_rel_diff(res.Q, naive_gptq(L.W, H, cfg)), 1e-5);
}

TEST(Gptq, ActOrderPermutationAndGidx) {
  const int cols = 32, gs = 8;
  auto L = tiny_layer(8, cols, 256, 21);
  Eigen::MatrixXf H = hessian_of(L.X);
  for (int k = 0; k < cols; ++k) H(k, k) += 0.01f * ((k * 7) % cols);  // distinct diagonal
  std::vector<int> perm(cols);
  std::iota(perm.begin(), perm.end(), 0);
  std::sort(perm.begin(), perm.end(), [&](int a, int b) { return H(a, a) > H(b, b); });
  gptq::Config cfg;
  cfg.group_size = gs;
  cfg.block_size = 8;
  cfg.act_order = true;
  const auto res = gptq::quantize(L.W, H, cfg);
  ASSERT_EQ(res.g_idx.size(), static_cast<std::size_t>(cols));
  for (int p = 0; p < cols; ++p) EXPECT_EQ(res.g_idx[perm[p]], p / gs) << "position " << p;
  // The first processed group's parameters come from the permuted, un-updated W.
  Eigen::MatrixXf first(8, gs);
  for (int k = 0; k < gs; ++k) first.col(k) = L.W.col(perm[k]);
  Eigen::VectorXf s(8), z(8);
  rtn::gptq_find_params(first, 4, false, false, s.data(), z.data());
  EXPECT_EQ((res.scale.col(0) - s).cwiseAbs().maxCoeff(), 0.0f);
  // Dequantization identity of ALGORITHMS 2.4 through g_idx.
  for (int j = 0; j < cols; ++j)
    for (int o = 0; o < 8; ++o) {
      const int g = res.g_idx[j];
      EXPECT_EQ(res.Q(o, j),
                rtn::gptq_quantize(res.Q(o, j), res.scale(o, g), res.zero(o, g), 15.f));
    }

  // Static groups: g_idx = j / gs and parameters from the unpermuted, un-updated W.
  cfg.static_groups = true;
  const auto st = gptq::quantize(L.W, H, cfg);
  for (int j = 0; j < cols; ++j) EXPECT_EQ(st.g_idx[j], j / gs);
  for (int g = 0; g < cols / gs; ++g) {
    rtn::gptq_find_params(L.W.middleCols(g * gs, gs), 4, false, false, s.data(), z.data());
    EXPECT_EQ((st.scale.col(g) - s).cwiseAbs().maxCoeff(), 0.0f) << g;
    EXPECT_EQ((st.zero.col(g) - z).cwiseAbs().maxCoeff(), 0.0f) << g;
  }
  for (int j = 0; j < cols; ++j)
    for (int o = 0; o < 8; ++o)
      EXPECT_EQ(st.Q(o, j),
                rtn::gptq_quantize(st.Q(o, j), st.scale(o, j / gs), st.zero(o, j / gs), 15.f));
}

TEST(Gptq, GroupsSpanningBlocksAndAllZeroRows) {
  // gs = 12 with block 8: groups start inside blocks and continue into the next block.
  auto L = tiny_layer(6, 24, 128, 5);
  L.W.row(2).setZero();
  const Eigen::MatrixXf H = hessian_of(L.X);
  gptq::Config cfg;
  cfg.group_size = 12;
  cfg.block_size = 8;
  const auto res = gptq::quantize(L.W, H, cfg);
  ASSERT_EQ(res.scale.cols(), 2);
  for (int j = 0; j < 24; ++j)
    for (int o = 0; o < 6; ++o)
      EXPECT_EQ(res.Q(o, j),
                rtn::gptq_quantize(res.Q(o, j), res.scale(o, j / 12), res.zero(o, j / 12), 15.f));
  EXPECT_EQ(res.Q.row(2).cwiseAbs().maxCoeff(), 0.0f);
  EXPECT_FLOAT_EQ(res.scale(2, 0), 2.0f / 15.0f);  // all-zero group -> range [-1, 1]
}

TEST(Gptq, RejectsBadInput) {
  const auto L = tiny_layer(8, 32, 64, 3);
  const Eigen::MatrixXf H = hessian_of(L.X);
  gptq::Config cfg;
  cfg.group_size = 16;
  EXPECT_THROW(gptq::quantize(L.W, H.topLeftCorner(16, 16), cfg), nibble::Error);
  EXPECT_THROW(gptq::quantize(Eigen::MatrixXf(), H, cfg), nibble::Error);
  for (int bits : {0, 1, 5, 6, 7, 16}) {
    gptq::Config c = cfg;
    c.bits = bits;
    EXPECT_THROW(gptq::quantize(L.W, H, c), nibble::Error) << bits;
  }
  {
    gptq::Config c = cfg;
    c.group_size = 12;  // does not divide 32
    EXPECT_THROW(gptq::quantize(L.W, H, c), nibble::Error);
    c.group_size = -3;
    EXPECT_THROW(gptq::quantize(L.W, H, c), nibble::Error);
    c = cfg;
    c.block_size = 0;
    EXPECT_THROW(gptq::quantize(L.W, H, c), nibble::Error);
    c = cfg;
    c.percdamp = -1.0f;
    EXPECT_THROW(gptq::quantize(L.W, H, c), nibble::Error);
  }
  Eigen::MatrixXf Wn = L.W;
  Wn(1, 2) = std::numeric_limits<float>::infinity();
  EXPECT_THROW(gptq::quantize(Wn, H, cfg), nibble::Error);
  Eigen::MatrixXf Hn = H;
  Hn(3, 4) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(gptq::quantize(L.W, Hn, cfg), nibble::Error);
  // Indefinite beyond what 1% damping can fix.
  Eigen::MatrixXf Hbad = H;
  Hbad(5, 5) = -10.0f * H.diagonal().maxCoeff();
  EXPECT_THROW(gptq::quantize(L.W, Hbad, cfg), nibble::Error);
  EXPECT_THROW(gptq::quantize(L.W, -Eigen::MatrixXf::Identity(32, 32), cfg), nibble::Error);
}

// ------------------------------------------------------------------ GPTQ quality

namespace {
struct QualityCase {
  const char* name;
  int bits, group_size;
  bool act_order, sym;
  double lo, hi;  // band for err(GPTQ) / err(RTN)
};
}  // namespace

TEST(GptqQuality, BeatsRtnOnLlmLikeLayers) {
  // 256 x 512 layers, 2048 tokens (see llm_layer.hpp), seeds 1-6: one layer has only ~5 outlier
  // channels, so single-seed ratios spread widely; the mean over the seeds is what is asserted.
  // Reference implementations on such layers: 4-bit g128 ~0.18-0.22 of RTN, act-order ~0.16,
  // 3-bit / 8-bit per-channel 0.18-0.25 (the NumPy port in python/tests/ref_algos.py gives
  // 0.198 / 0.154 / 0.200 / 0.194 on these six layers; python/tools/reference_ratios.py).
  const QualityCase cases[] = {
      {"4-bit g128", 4, 128, false, false, 0.16, 0.24},
      {"4-bit g128 act-order", 4, 128, true, false, 0.12, 0.19},
      {"4-bit g128 sym", 4, 128, false, true, 0.12, 0.30},
      {"3-bit per-channel", 3, -1, false, false, 0.16, 0.27},
      {"8-bit per-channel", 8, -1, false, false, 0.16, 0.27},
  };
  constexpr int kSeeds = 6;
  double mean[5] = {};
  for (int seed = 1; seed <= kSeeds; ++seed) {
    nibble_test::LayerSpec spec;
    spec.seed = static_cast<std::uint64_t>(seed);
    const auto L = nibble_test::make_layer(spec);
    const Eigen::MatrixXf H = hessian_of(L.X);
    for (int i = 0; i < 5; ++i) {
      const QualityCase& c = cases[i];
      gptq::Config cfg;
      cfg.bits = c.bits;
      cfg.group_size = c.group_size;
      cfg.act_order = c.act_order;
      cfg.sym = c.sym;
      const auto res = gptq::quantize(L.W, H, cfg);
      const Eigen::MatrixXf R = rtn::gptq_rtn(L.W, c.bits, c.group_size, c.sym);
      const double ratio =
          rtn::relative_output_error(L.W, res.Q, L.X) / rtn::relative_output_error(L.W, R, L.X);
      EXPECT_LT(ratio, 0.7) << c.name << " seed " << seed;  // GPTQ always beats RTN clearly
      mean[i] += ratio / kSeeds;
    }
  }
  for (int i = 0; i < 5; ++i) {
    const QualityCase& c = cases[i];
    std::printf("  GPTQ %-22s err / RTN err, mean of seeds 1-6: %.3f\n", c.name, mean[i]);
    EXPECT_GE(mean[i], c.lo) << c.name;
    EXPECT_LE(mean[i], c.hi) << c.name;
  }
  EXPECT_LT(mean[1], mean[0]) << "act-order should help on these layers";
}

// ------------------------------------------------------------------ GPTQ -> K-quant blocks

namespace {
template <class Block>
Eigen::MatrixXf dequant_rows(const std::vector<std::uint8_t>& bytes, int rows, int cols,
                             void (*deq)(const Block*, float*, std::int64_t)) {
  EXPECT_EQ(bytes.size(), static_cast<std::size_t>(rows) * (cols / 256) * sizeof(Block));
  RowMajorXf D(rows, cols);
  const Block* b = reinterpret_cast<const Block*>(bytes.data());
  for (int r = 0; r < rows; ++r) deq(b + r * (cols / 256), D.data() + std::int64_t(r) * cols, cols);
  return D;
}

template <class Block>
Eigen::MatrixXf ref_rows(const Eigen::MatrixXf& W, const float* imp,
                         void (*plain)(const float*, Block*, std::int64_t),
                         void (*weighted)(const float*, Block*, std::int64_t, const float*),
                         void (*deq)(const Block*, float*, std::int64_t)) {
  const RowMajorXf Wr = W;
  const int rows = static_cast<int>(W.rows()), cols = static_cast<int>(W.cols());
  std::vector<Block> blocks(static_cast<std::size_t>(rows) * (cols / 256));
  for (int r = 0; r < rows; ++r) {
    if (imp)
      weighted(Wr.data() + std::int64_t(r) * cols, blocks.data() + r * (cols / 256), cols, imp);
    else
      plain(Wr.data() + std::int64_t(r) * cols, blocks.data() + r * (cols / 256), cols);
  }
  std::vector<std::uint8_t> bytes(blocks.size() * sizeof(Block));
  std::memcpy(bytes.data(), blocks.data(), bytes.size());
  return dequant_rows<Block>(bytes, rows, cols, deq);
}

template <class Block>
void check_kquant_gptq(nibble::Format f, const char* name,
                       void (*plain)(const float*, Block*, std::int64_t),
                       void (*weighted)(const float*, Block*, std::int64_t, const float*),
                       void (*deq)(const Block*, float*, std::int64_t), double max_ratio) {
  nibble_test::LayerSpec spec;  // 256 x 512
  const auto L = nibble_test::make_layer(spec);
  const Eigen::MatrixXf H = hessian_of(L.X);
  const Eigen::VectorXf imp = H.diagonal();
  const Eigen::MatrixXf R = ref_rows<Block>(L.W, nullptr, plain, weighted, deq);
  const Eigen::MatrixXf I = ref_rows<Block>(L.W, imp.data(), plain, weighted, deq);
  gptq::Config cfg;
  const auto bytes = gptq::quantize_blocks(f, L.W, H, cfg);
  const Eigen::MatrixXf G = dequant_rows<Block>(bytes, 256, 512, deq);
  const double e_r = rtn::relative_output_error(L.W, R, L.X);
  const double e_i = rtn::relative_output_error(L.W, I, L.X);
  const double e_g = rtn::relative_output_error(L.W, G, L.X);
  std::printf("  %s: RTN %.4e, imatrix(diag H) %.4e, GPTQ %.4e (ratio to RTN %.3f)\n", name, e_r,
              e_i, e_g, e_g / e_r);
  EXPECT_LT(e_g, e_i);
  EXPECT_LT(e_g, e_r);
  EXPECT_LT(e_g / e_r, max_ratio);
}
}  // namespace

TEST(GptqKQuant, BeatsRtnAndImatrixQ4K) {
  check_kquant_gptq<nibble::BlockQ4_K>(nibble::Format::q4_K, "Q4_K", nibble::ref::quantize_q4_K,
                                       nibble::ref::quantize_q4_K_imatrix,
                                       nibble::ref::dequantize_q4_K, 0.6);
}

TEST(GptqKQuant, BeatsRtnAndImatrixQ5K) {
  check_kquant_gptq<nibble::BlockQ5_K>(nibble::Format::q5_K, "Q5_K", nibble::ref::quantize_q5_K,
                                       nibble::ref::quantize_q5_K_imatrix,
                                       nibble::ref::dequantize_q5_K, 0.6);
}

TEST(GptqKQuant, BeatsRtnAndImatrixQ6K) {
  check_kquant_gptq<nibble::BlockQ6_K>(nibble::Format::q6_K, "Q6_K", nibble::ref::quantize_q6_K,
                                       nibble::ref::quantize_q6_K_imatrix,
                                       nibble::ref::dequantize_q6_K, 0.6);
}

TEST(GptqKQuant, BeatsRtnAndImatrixQ2K) {
  check_kquant_gptq<nibble::BlockQ2_K>(nibble::Format::q2_K, "Q2_K", nibble::ref::quantize_q2_K,
                                       nibble::ref::quantize_q2_K_imatrix,
                                       nibble::ref::dequantize_q2_K, 0.6);
}

TEST(GptqKQuant, BeatsRtnAndImatrixQ3K) {
  check_kquant_gptq<nibble::BlockQ3_K>(nibble::Format::q3_K, "Q3_K", nibble::ref::quantize_q3_K,
                                       nibble::ref::quantize_q3_K_imatrix,
                                       nibble::ref::dequantize_q3_K, 0.6);
}

namespace {
// With a diagonal Hessian the inverse Cholesky factor is diagonal, so GPTQ propagates no error:
// every value is rounded on the grid that the importance-weighted reference quantizer chooses
// with importance = the damped diagonal. The decoded weights must then equal the reference
// quantizer's exactly (bytes may differ only in sub-blocks whose scale is 0, where any level
// decodes to the same value).
template <class Block>
void check_diagonal_hessian(nibble::Format f,
                            void (*weighted)(const float*, Block*, std::int64_t, const float*),
                            void (*deq)(const Block*, float*, std::int64_t)) {
  const int rows = 24, cols = 512;
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Eigen::MatrixXf W(rows, cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) W(r, c) = 0.05f * nd(rng) * (c % 7 == 0 ? 4.0f : 1.0f);
  // Powers of two keep sum, mean and damping exact, so the test can restate them.
  const float levels[] = {0.5f, 1.0f, 2.0f, 4.0f};
  Eigen::MatrixXf H = Eigen::MatrixXf::Zero(cols, cols);
  float sum = 0.0f;
  for (int c = 0; c < cols; ++c) {
    H(c, c) = levels[(c * 5 + c / 3) % 4];
    sum += H(c, c);
  }
  const float damp = 0.01f * (sum / static_cast<float>(cols));
  std::vector<float> imp(cols);
  for (int c = 0; c < cols; ++c) imp[c] = H(c, c) + damp;
  const auto bytes = gptq::quantize_blocks(f, W, H, gptq::Config{});
  const Eigen::MatrixXf G = dequant_rows<Block>(bytes, rows, cols, deq);
  const Eigen::MatrixXf R = ref_rows<Block>(W, imp.data(), nullptr, weighted, deq);
  int diff = 0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) diff += G(r, c) != R(r, c);
  EXPECT_EQ(diff, 0) << nibble::traits(f).name;
}
}  // namespace

TEST(GptqKQuant, DiagonalHessianReducesToTheWeightedReferenceQ2KQ3K) {
  check_diagonal_hessian<nibble::BlockQ2_K>(
      nibble::Format::q2_K, nibble::ref::quantize_q2_K_imatrix, nibble::ref::dequantize_q2_K);
  check_diagonal_hessian<nibble::BlockQ3_K>(
      nibble::Format::q3_K, nibble::ref::quantize_q3_K_imatrix, nibble::ref::dequantize_q3_K);
  check_diagonal_hessian<nibble::BlockQ4_K>(
      nibble::Format::q4_K, nibble::ref::quantize_q4_K_imatrix, nibble::ref::dequantize_q4_K);
}

namespace {
// Legacy 32-value formats: GPTQ against the reference quantizer on the same layer.
template <class Block>
void check_legacy_gptq(nibble::Format f, const char* name,
                       void (*plain)(const float*, Block*, std::int64_t),
                       void (*weighted)(const float*, Block*, std::int64_t, const float*),
                       void (*deq)(const Block*, float*, std::int64_t), double max_ratio) {
  nibble_test::LayerSpec spec;  // 256 x 512
  const auto L = nibble_test::make_layer(spec);
  const Eigen::MatrixXf H = hessian_of(L.X);
  const int rows = static_cast<int>(L.W.rows()), cols = static_cast<int>(L.W.cols()),
            nb = cols / 32;
  const RowMajorXf Wr = L.W;
  std::vector<Block> rb(static_cast<std::size_t>(rows) * nb);
  RowMajorXf R(rows, cols), G(rows, cols);
  for (int r = 0; r < rows; ++r) {
    plain(Wr.data() + std::int64_t(r) * cols, rb.data() + r * nb, cols);
    deq(rb.data() + r * nb, R.data() + std::int64_t(r) * cols, cols);
  }
  const auto bytes = gptq::quantize_blocks(f, L.W, H, gptq::Config{});
  ASSERT_EQ(bytes.size(), rb.size() * sizeof(Block));
  const Block* gb = reinterpret_cast<const Block*>(bytes.data());
  for (int r = 0; r < rows; ++r) deq(gb + r * nb, G.data() + std::int64_t(r) * cols, cols);
  const double e_r = rtn::relative_output_error(L.W, R, L.X);
  const double e_g = rtn::relative_output_error(L.W, G, L.X);
  std::printf("  %s: RTN %.4e, GPTQ %.4e (ratio %.3f)\n", name, e_r, e_g, e_g / e_r);
  EXPECT_LT(e_g / e_r, max_ratio);
  if (weighted) {
    // Also better than the importance-weighted rounding with diag(H) (llama-quantize + imatrix).
    const Eigen::VectorXf dh = H.diagonal();
    RowMajorXf I(rows, cols);
    for (int r = 0; r < rows; ++r) {
      weighted(Wr.data() + std::int64_t(r) * cols, rb.data() + r * nb, cols, dh.data());
      deq(rb.data() + r * nb, I.data() + std::int64_t(r) * cols, cols);
    }
    const double e_i = rtn::relative_output_error(L.W, I, L.X);
    std::printf("  %s: imatrix(diag H) %.4e\n", name, e_i);
    EXPECT_LT(e_g, e_i);
  }
  // The first block of every row keeps the scale the reference picks on the unchanged weights
  // (no error has been propagated into it yet): Q8_0's plain choice, Q5_0/Q4_0's importance-
  // weighted one with the damped diagonal of H (percdamp 0.01) as importance.
  std::vector<float> imp(32);
  const float damp = 0.01f * H.diagonal().mean();
  for (int k = 0; k < 32; ++k) imp[static_cast<std::size_t>(k)] = H(k, k) + damp;
  for (int r = 0; r < rows; ++r) {
    Block b;
    if (weighted)
      weighted(Wr.data() + std::int64_t(r) * cols, &b, 32, imp.data());
    else
      plain(Wr.data() + std::int64_t(r) * cols, &b, 32);
    EXPECT_EQ(gb[r * nb].d, b.d) << name << " row " << r;
  }
}
}  // namespace

TEST(GptqLegacy, BeatsRtnQ8_0) {
  check_legacy_gptq<nibble::BlockQ8_0>(nibble::Format::q8_0, "Q8_0", nibble::ref::quantize_q8_0,
                                       nullptr, nibble::ref::dequantize_q8_0, 0.6);
}

TEST(GptqLegacy, BeatsRtnQ5_0) {
  check_legacy_gptq<nibble::BlockQ5_0>(nibble::Format::q5_0, "Q5_0", nibble::ref::quantize_q5_0,
                                       nibble::ref::quantize_q5_0_imatrix,
                                       nibble::ref::dequantize_q5_0, 0.6);
}

TEST(GptqLegacy, BeatsRtnQ4_0) {
  check_legacy_gptq<nibble::BlockQ4_0>(nibble::Format::q4_0, "Q4_0", nibble::ref::quantize_q4_0,
                                       nibble::ref::quantize_q4_0_imatrix,
                                       nibble::ref::dequantize_q4_0, 0.6);
}

TEST(GptqKQuant, RejectsBadInput) {
  const auto L = tiny_layer(4, 256, 64, 9);
  const Eigen::MatrixXf H = hessian_of(L.X);
  gptq::Config cfg;
  EXPECT_THROW(gptq::quantize_blocks(nibble::Format::q4_1, L.W, H, cfg), nibble::Error);
  EXPECT_THROW(gptq::quantize_blocks(nibble::Format::iq4_xs, L.W, H, cfg), nibble::Error);
  const auto T = tiny_layer(4, 48, 64, 9);  // not a multiple of 32
  EXPECT_THROW(gptq::quantize_blocks(nibble::Format::q8_0, T.W, hessian_of(T.X), cfg),
               nibble::Error);
  const auto S = tiny_layer(4, 128, 64, 9);
  EXPECT_THROW(gptq::quantize_blocks(nibble::Format::q4_K, S.W, hessian_of(S.X), cfg),
               nibble::Error);
  cfg.act_order = true;
  EXPECT_THROW(gptq::quantize_blocks(nibble::Format::q4_K, L.W, H, cfg), nibble::Error);
}
