// Tests of AWQ: the group quantizer (hand-computed), the scale search (normalisation, candidate
// set, minimality against an independent double loss), the clip search (candidate thresholds,
// minimality per (row, group)), the effective weight, and the quality vs RTN on a synthetic
// LLM-like layer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "llm_layer.hpp"
#include "nibble/quant/awq.hpp"
#include "nibble/quant/rtn.hpp"
#include "nibble/formats/q4_k.hpp"
#include "nibble/formats/q5_k.hpp"

namespace awq = nibble::awq;
namespace rtn = nibble::rtn;

namespace {
// Column scaling / unscaling helpers in double for the independent loss.
double layer_loss(const Eigen::MatrixXf& W, const Eigen::MatrixXf& Wq, const Eigen::MatrixXf& X) {
  const Eigen::MatrixXd D = (W.cast<double>() - Wq.cast<double>());
  return (X.cast<double>() * D.transpose()).squaredNorm() / (double(X.rows()) * W.rows());
}
}  // namespace

TEST(AwqGrid, GroupQuantizerHandComputed) {
  Eigen::MatrixXf w(3, 4);
  w << -1.0f, 0.0f, 0.5f, 2.0f,  // min -1, max 2: scale 0.2, zero 5
      1.0f, 2.0f, 3.0f, 4.0f,    // all positive: zero clamps to 0, 4 saturates at 15*scale
      0.7f, 0.7f, 0.7f, 0.7f;    // constant: range clamps to 1e-5
  Eigen::MatrixXf s, z;
  const Eigen::MatrixXf q = rtn::awq_rtn(w, 4, 4, true, &s, &z);
  EXPECT_FLOAT_EQ(s(0, 0), 3.0f / 15.0f);
  EXPECT_EQ(z(0, 0), 5.0f);
  EXPECT_FLOAT_EQ(q(0, 2), (std::nearbyint(0.5f / s(0, 0)) + 5.0f - 5.0f) * s(0, 0));
  EXPECT_FLOAT_EQ(s(1, 0), 3.0f / 15.0f);
  EXPECT_EQ(z(1, 0), 0.0f);
  EXPECT_FLOAT_EQ(q(1, 3), 15.0f * s(1, 0));  // 4 / 0.2 = 20 -> clamped to 15
  EXPECT_FLOAT_EQ(s(2, 0), 1e-5f / 15.0f);
  EXPECT_EQ(z(2, 0), 0.0f);  // -round(0.7 / tiny) clamps to 0
  EXPECT_FLOAT_EQ(q(2, 0), 15.0f * s(2, 0));
  // Half-to-even on ties: values exactly at k + 0.5 steps.
  Eigen::MatrixXf t(1, 4);
  t << 0.0f, 0.25f, 0.75f, 3.75f;  // scale = 3.75/15 = 0.25: 1.0, 3.0, 15 exact; no ties here
  const Eigen::MatrixXf qt = rtn::awq_rtn(t, 4, 4, true);
  EXPECT_FLOAT_EQ(qt(0, 1), 0.25f);
  EXPECT_EQ(rtn::awq_quantize(0.625f, 0.25f, 0.0f, 4, true), 0.5f);  // 2.5 -> 2
  EXPECT_EQ(rtn::awq_quantize(0.875f, 0.25f, 0.0f, 4, true), 1.0f);  // 3.5 -> 4
  // AutoAWQ symmetric branch: scale = max|g| / 7, codes in [-8, 7].
  Eigen::MatrixXf s2, z2;
  const Eigen::MatrixXf q2 = rtn::awq_rtn(w.topRows(1), 4, 4, false, &s2, &z2);
  EXPECT_FLOAT_EQ(s2(0, 0), 2.0f / 7.0f);
  EXPECT_FLOAT_EQ(q2(0, 3), 7.0f * s2(0, 0));
  EXPECT_FLOAT_EQ(q2(0, 0), std::nearbyint(-1.0f / s2(0, 0)) * s2(0, 0));
}

TEST(Awq, SearchInvariantsAndMinimality) {
  nibble_test::LayerSpec spec;
  spec.out = 64;
  spec.in = 256;
  spec.tokens = 512;
  const auto L = nibble_test::make_layer(spec);
  awq::Config cfg;
  cfg.group_size = 64;
  const auto res = awq::search(L.W, L.X, cfg);
  // Normalisation: max(s) * min(s) == 1.
  EXPECT_NEAR(res.scales.maxCoeff() * res.scales.minCoeff(), 1.0f, 1e-5f);
  // best_ratio is one of r/20 and the scales are x_mean^ratio normalised.
  const float r20 = res.best_ratio * 20.0f;
  EXPECT_NEAR(r20, std::round(r20), 1e-5f);
  EXPECT_GE(res.best_ratio, 0.0f);
  EXPECT_LT(res.best_ratio, 1.0f);
  const Eigen::VectorXd xm =
      L.X.cast<double>().cwiseAbs().colwise().mean().transpose();  // independent statistic
  Eigen::VectorXd s(xm.size());
  for (int c = 0; c < xm.size(); ++c)
    s[c] = std::max(std::pow(xm[c], double(res.best_ratio)), 1e-4);
  s /= std::sqrt(s.maxCoeff() * s.minCoeff());
  EXPECT_LT((s - res.scales.cast<double>()).cwiseAbs().maxCoeff() / s.maxCoeff(), 1e-4);
  // The chosen ratio minimises the layer-output loss over the 20 candidates (independent double
  // loss; 0.1% slack for fp32 rounding of the search itself).
  double best = std::numeric_limits<double>::infinity(), chosen = 0.0;
  for (int r = 0; r < 20; ++r) {
    Eigen::VectorXf sr(xm.size());
    for (int c = 0; c < xm.size(); ++c)
      sr[c] = std::max(std::pow(static_cast<float>(xm[c]), r / 20.0f), 1e-4f);
    sr /= std::sqrt(sr.maxCoeff() * sr.minCoeff());
    const Eigen::MatrixXf Wq =
        (rtn::awq_rtn(L.W * sr.asDiagonal(), 4, 64).array().rowwise() / sr.transpose().array())
            .matrix();
    const double loss = layer_loss(L.W, Wq, L.X);
    best = std::min(best, loss);
    if (r == static_cast<int>(std::lround(r20))) chosen = loss;
  }
  EXPECT_LE(chosen, best * 1.001);
  // Clip thresholds are candidates org_max * (1 - i/20), i < 10, of the scaled weights.
  const Eigen::MatrixXf Ws = L.W * res.scales.asDiagonal();
  ASSERT_EQ(res.clip_max.rows(), 64);
  ASSERT_EQ(res.clip_max.cols(), 4);
  for (int o = 0; o < 64; ++o)
    for (int g = 0; g < 4; ++g) {
      const float m0 = Ws.block(o, g * 64, 1, 64).cwiseAbs().maxCoeff();
      const double k = (1.0 - res.clip_max(o, g) / m0) * 20.0;
      EXPECT_NEAR(k, std::round(k), 1e-3) << o << "," << g;
      EXPECT_GE(std::round(k), 0.0);
      EXPECT_LE(std::round(k), 9.0);
    }
  // W_eff = Q(clip(W*s)) / s.
  const Eigen::MatrixXf Wc = awq::scaled_clipped(L.W, res, 64);
  const Eigen::MatrixXf We =
      (rtn::awq_rtn(Wc, 4, 64).array().rowwise() / res.scales.transpose().array()).matrix();
  EXPECT_EQ((We - res.W_eff).cwiseAbs().maxCoeff(), 0.0f);
}

TEST(Awq, ClipSearchPicksPerGroupMinimum) {
  nibble_test::LayerSpec spec;
  spec.out = 16;
  spec.in = 128;
  spec.tokens = 1024;  // step 2 with n_sample_token 512
  const auto L = nibble_test::make_layer(spec);
  awq::Config cfg;
  cfg.group_size = 32;
  const Eigen::MatrixXf cm = awq::clip_search(L.W, L.X, cfg);
  Eigen::MatrixXd Xs(512, 128);
  for (int t = 0; t < 512; ++t) Xs.row(t) = L.X.row(2 * t).cast<double>();
  for (int o = 0; o < 16; ++o)
    for (int g = 0; g < 4; ++g) {
      const Eigen::RowVectorXf w = L.W.block(o, g * 32, 1, 32);
      const float m0 = w.cwiseAbs().maxCoeff();
      double best = 1e300;
      double got = -1;
      for (int i = 0; i < 10; ++i) {
        const float m = m0 * static_cast<float>(1.0 - i / 20.0);
        Eigen::MatrixXf cw = w.cwiseMax(-m).cwiseMin(m);
        const Eigen::MatrixXf q = rtn::awq_rtn(cw, 4, 32);
        const Eigen::VectorXd diff = Xs.middleCols(g * 32, 32) * (q - w).cast<double>().transpose();
        const double err = diff.squaredNorm() / 512.0;
        best = std::min(best, err);
        if (m == cm(o, g)) got = err;
      }
      ASSERT_GE(got, 0.0) << "clip_max is not a candidate at " << o << "," << g;
      EXPECT_LE(got, best * 1.001 + 1e-12) << o << "," << g;
    }
}

TEST(Awq, RejectsBadInput) {
  Eigen::MatrixXf W = Eigen::MatrixXf::Random(8, 64), X = Eigen::MatrixXf::Random(32, 64);
  awq::Config cfg;
  cfg.group_size = 32;
  EXPECT_THROW(awq::search(W, Eigen::MatrixXf::Random(32, 48), cfg), nibble::Error);
  EXPECT_THROW(awq::search(W, Eigen::MatrixXf(0, 64), cfg), nibble::Error);
  awq::Config c = cfg;
  c.group_size = 48;
  EXPECT_THROW(awq::search(W, X, c), nibble::Error);
  c = cfg;
  c.bits = 5;
  EXPECT_THROW(awq::search(W, X, c), nibble::Error);
  c = cfg;
  c.n_grid = 0;
  EXPECT_THROW(awq::search(W, X, c), nibble::Error);
  c = cfg;
  c.max_shrink = 1.5f;
  EXPECT_THROW(awq::search(W, X, c), nibble::Error);
  Eigen::MatrixXf Xn = X;
  Xn(3, 3) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(awq::search(W, Xn, cfg), nibble::Error);
  Eigen::MatrixXf Wn = W;
  Wn(0, 0) = std::numeric_limits<float>::infinity();
  EXPECT_THROW(awq::search(Wn, X, cfg), nibble::Error);
}

// AutoAWQ's duo_scaling: s = x_mean^r / (w_mean^(1-r) + 1e-4), w_mean from |W| normalised per
// (row, group). Checked against an independent double computation of w_mean and the scales, and
// minimality of the chosen ratio over the 20 candidates.
TEST(Awq, DuoScalingMatchesFormulaAndIsMinimal) {
  nibble_test::LayerSpec spec;
  spec.out = 64;
  spec.in = 256;
  spec.tokens = 512;
  spec.seed = 7;
  const auto L = nibble_test::make_layer(spec);
  awq::Config cfg;
  cfg.group_size = 64;
  cfg.duo_scaling = true;
  cfg.clip = false;
  const auto res = awq::search(L.W, L.X, cfg);
  const Eigen::VectorXd xm = L.X.cast<double>().cwiseAbs().colwise().mean().transpose();
  Eigen::VectorXd wm = Eigen::VectorXd::Zero(256);
  for (int o = 0; o < 64; ++o)
    for (int g = 0; g < 4; ++g) {
      const double m = L.W.block(o, g * 64, 1, 64).cast<double>().cwiseAbs().maxCoeff() + 1e-6;
      for (int k = 0; k < 64; ++k) wm[g * 64 + k] += std::fabs(double(L.W(o, g * 64 + k))) / m;
    }
  wm /= 64.0;
  auto duo = [&](double r) {
    Eigen::VectorXd s(256);
    for (int c = 0; c < 256; ++c)
      s[c] = std::max(std::pow(xm[c], r) / (std::pow(wm[c], 1.0 - r) + 1e-4), 1e-4);
    return Eigen::VectorXd(s / std::sqrt(s.maxCoeff() * s.minCoeff()));
  };
  const Eigen::VectorXd s = duo(res.best_ratio);
  EXPECT_LT((s - res.scales.cast<double>()).cwiseAbs().maxCoeff() / s.maxCoeff(), 1e-4);
  double best = std::numeric_limits<double>::infinity(), chosen = 0.0;
  for (int r = 0; r < 20; ++r) {
    const Eigen::VectorXf sr = duo(r / 20.0).cast<float>();
    const Eigen::MatrixXf Wq =
        (rtn::awq_rtn(L.W * sr.asDiagonal(), 4, 64).array().rowwise() / sr.transpose().array())
            .matrix();
    const double loss = layer_loss(L.W, Wq, L.X);
    best = std::min(best, loss);
    if (r == static_cast<int>(std::lround(res.best_ratio * 20.0f))) chosen = loss;
  }
  EXPECT_LE(chosen, best * 1.001);
  // The duo candidates differ from llm-awq's (w_mean is not constant on this layer).
  cfg.duo_scaling = false;
  const auto plain = awq::search(L.W, L.X, cfg);
  if (plain.best_ratio == res.best_ratio && res.best_ratio > 0.0f) {
    EXPECT_GT((plain.scales - res.scales).cwiseAbs().maxCoeff(), 1e-3f);
  }
}

TEST(AwqQuality, BeatsRtnOnLlmLikeLayer) {
  // 256 x 512 layers, 2048 tokens, seeds 1-6 (mean asserted, see test_gptq.cpp). Reference
  // implementations on such layers: ~0.19-0.23 of RTN with clip (best ratio ~0.35), ~0.23 with
  // the scale search alone (the NumPy port in python/tests/ref_algos.py gives 0.220 / 0.253 and
  // best ratio 0.375 on these six layers).
  double m_full = 0, m_s = 0, m_best = 0;
  for (int seed = 1; seed <= 6; ++seed) {
    nibble_test::LayerSpec spec;
    spec.seed = static_cast<std::uint64_t>(seed);
    const auto L = nibble_test::make_layer(spec);
    const double e_rtn = rtn::relative_output_error(L.W, rtn::awq_rtn(L.W, 4, 128), L.X);
    awq::Config cfg;
    const auto full = awq::search(L.W, L.X, cfg);
    const double e_full = rtn::relative_output_error(L.W, full.W_eff, L.X);
    cfg.clip = false;
    const auto sonly = awq::search(L.W, L.X, cfg);
    const double e_s = rtn::relative_output_error(L.W, sonly.W_eff, L.X);
    EXPECT_LT(e_full, e_s) << "seed " << seed;
    EXPECT_EQ(full.best_ratio, sonly.best_ratio);
    m_full += e_full / e_rtn / 6;
    m_s += e_s / e_rtn / 6;
    m_best += full.best_ratio / 6;
    if (seed == 1) {
      // AutoAWQ's default duo_scaling on the same layer (reported; same band asserted).
      cfg.duo_scaling = true;
      const auto duo_s = awq::search(L.W, L.X, cfg);
      cfg.clip = true;
      const auto duo_full = awq::search(L.W, L.X, cfg);
      const double e_ds = rtn::relative_output_error(L.W, duo_s.W_eff, L.X);
      const double e_df = rtn::relative_output_error(L.W, duo_full.W_eff, L.X);
      std::printf("  AWQ duo_scaling, seed 1: scale-only %.3f, scale+clip %.3f, best ratio %.2f\n",
                  e_ds / e_rtn, e_df / e_rtn, duo_full.best_ratio);
      EXPECT_GE(e_df / e_rtn, 0.12);
      EXPECT_LE(e_df / e_rtn, 0.30);
      EXPECT_LT(e_df, e_ds);
    }
  }
  std::printf(
      "  AWQ 4-bit g128, mean of seeds 1-6: scale-only %.3f, scale+clip %.3f of RTN, "
      "best ratio %.3f\n",
      m_s, m_full, m_best);
  EXPECT_GE(m_full, 0.17);
  EXPECT_LE(m_full, 0.25);
  EXPECT_GE(m_s, 0.20);
  EXPECT_LE(m_s, 0.28);
  EXPECT_GE(m_best, 0.25);
  EXPECT_LE(m_best, 0.45);
}

// ------------------------------------------------------------------ AWQ -> K-quant blocks

namespace {
using RowMajorXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class Block>
Eigen::MatrixXf kquant_rows(const Eigen::MatrixXf& W, void (*q)(const float*, Block*, std::int64_t),
                            void (*d)(const Block*, float*, std::int64_t)) {
  const RowMajorXf R = W;
  RowMajorXf out(W.rows(), W.cols());
  std::vector<Block> b(static_cast<std::size_t>(W.cols() / 256));
  for (Eigen::Index r = 0; r < W.rows(); ++r) {
    q(R.data() + r * W.cols(), b.data(), W.cols());
    d(b.data(), out.data() + r * W.cols(), W.cols());
  }
  return out;
}

template <class Block>
void check_awq_kquant(nibble::Format f, const char* name,
                      void (*q)(const float*, Block*, std::int64_t),
                      void (*d)(const Block*, float*, std::int64_t)) {
  nibble_test::LayerSpec spec;  // 256 x 512
  const auto L = nibble_test::make_layer(spec);
  awq::Result res;
  const auto bytes = awq::search_blocks(f, L.W, L.X, awq::Config{}, &res);
  ASSERT_EQ(bytes.size(), static_cast<std::size_t>(256 * 2) * sizeof(Block));
  // Dequantize the returned blocks with the reference dequantizer, undo the input scaling.
  RowMajorXf D(256, 512);
  const Block* b = reinterpret_cast<const Block*>(bytes.data());
  for (int r = 0; r < 256; ++r) d(b + 2 * r, D.data() + r * 512, 512);
  const Eigen::MatrixXf Weff =
      (Eigen::MatrixXf(D).array().rowwise() / res.scales.transpose().array()).matrix();
  EXPECT_EQ((Weff - res.W_eff).cwiseAbs().maxCoeff(), 0.0f);
  const double e_awq = rtn::relative_output_error(L.W, Weff, L.X);
  const double e_rtn = rtn::relative_output_error(L.W, kquant_rows<Block>(L.W, q, d), L.X);
  std::printf("  AWQ -> %s: RTN %.4e, AWQ %.4e (ratio %.3f, best ratio %.2f)\n", name, e_rtn, e_awq,
              e_awq / e_rtn, res.best_ratio);
  EXPECT_LT(e_awq / e_rtn, 0.6);
  EXPECT_NEAR(res.scales.maxCoeff() * res.scales.minCoeff(), 1.0f, 1e-5f);
}
}  // namespace

TEST(AwqKQuant, BeatsRtnQ4K) {
  check_awq_kquant<nibble::BlockQ4_K>(nibble::Format::q4_K, "Q4_K", nibble::ref::quantize_q4_K,
                                      nibble::ref::dequantize_q4_K);
}

TEST(AwqKQuant, BeatsRtnQ5K) {
  check_awq_kquant<nibble::BlockQ5_K>(nibble::Format::q5_K, "Q5_K", nibble::ref::quantize_q5_K,
                                      nibble::ref::dequantize_q5_K);
}

TEST(AwqKQuant, RejectsBadInput) {
  const Eigen::MatrixXf W = Eigen::MatrixXf::Random(8, 128), X = Eigen::MatrixXf::Random(64, 128);
  EXPECT_THROW(awq::search_blocks(nibble::Format::q4_K, W, X, awq::Config{}), nibble::Error);
  const Eigen::MatrixXf W2 = Eigen::MatrixXf::Random(8, 256), X2 = Eigen::MatrixXf::Random(64, 256);
  EXPECT_THROW(awq::search_blocks(nibble::Format::q6_K, W2, X2, awq::Config{}), nibble::Error);
}
