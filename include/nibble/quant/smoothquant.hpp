// nibble: SmoothQuant smoothing factors and the W8A8 fake quantizers used to measure them.
// Specification: reference/ALGORITHMS.md 4.1-4.3 (mit-han-lab/smoothquant). Header-only.
#pragma once

#include <algorithm>
#include <cmath>

#include <Eigen/Dense>

#include "nibble/core/error.hpp"
#include "nibble/quant/rtn.hpp"

namespace nibble {
namespace smoothquant {

/// Calibration statistic: max over tokens of |x[t, c]| per input channel (X: tokens x in).
inline Eigen::VectorXf act_absmax(const Eigen::MatrixXf& X) {
  if (X.rows() < 1 || X.cols() < 1)
    detail::fail("smoothquant: X is ", X.rows(), "x", X.cols(), ", expected a non-empty matrix");
  rtn::check_finite(X, "X");
  return X.cwiseAbs().colwise().maxCoeff().transpose();
}

/// Smoothing factors s[c] = clamp(act_max[c]^alpha / w_max[c]^(1-alpha), min=1e-5) with
/// w_max[c] = clamp(max_o |W[o, c]|, min=1e-5). W is out x in; for several linears sharing the
/// input, stack them vertically. Fold: x' = x / s, W' = W * s (columns). Throws nibble::Error on
/// size mismatch, negative or non-finite act_absmax, non-finite W, alpha outside [0, 1].
inline Eigen::VectorXf scales(const Eigen::VectorXf& act_absmax, const Eigen::MatrixXf& W,
                              float alpha = 0.5f) {
  if (W.rows() < 1 || W.cols() < 1)
    detail::fail("smoothquant: W is ", W.rows(), "x", W.cols(), ", expected a non-empty matrix");
  if (act_absmax.size() != W.cols())
    detail::fail("smoothquant: act_absmax has ", act_absmax.size(), " entries, expected ", W.cols(),
                 " (in of W)");
  if (!(alpha >= 0.0f && alpha <= 1.0f))
    detail::fail("smoothquant: alpha = ", alpha, " must be in [0, 1]");
  for (Eigen::Index c = 0; c < act_absmax.size(); ++c)
    if (!std::isfinite(act_absmax[c]) || act_absmax[c] < 0.0f)
      detail::fail("smoothquant: act_absmax[", c, "] = ", act_absmax[c],
                   " must be finite and >= 0");
  rtn::check_finite(W, "W");
  Eigen::VectorXf s(W.cols());
  for (Eigen::Index c = 0; c < W.cols(); ++c) {
    const float wmax = std::max(W.col(c).cwiseAbs().maxCoeff(), 1e-5f);
    s[c] = std::max(std::pow(act_absmax[c], alpha) / std::pow(wmax, 1.0f - alpha), 1e-5f);
  }
  return s;
}

/// W8A8 weight fake quantization per output channel: d[o] = max(max_c |W[o,c]|, 1e-5) / 127,
/// W_q = round(W / d) * d (half-to-even; range [-127, 127]).
inline Eigen::MatrixXf fake_quant_weight_per_channel(const Eigen::MatrixXf& W) {
  Eigen::MatrixXf Q(W.rows(), W.cols());
  for (Eigen::Index o = 0; o < W.rows(); ++o) {
    const float d = std::max(W.row(o).cwiseAbs().maxCoeff(), 1e-5f) / 127.0f;
    for (Eigen::Index c = 0; c < W.cols(); ++c) Q(o, c) = std::nearbyint(W(o, c) / d) * d;
  }
  return Q;
}

/// W8A8 fake quantization with one scale for the whole matrix: d = max(max |M|, 1e-5) / 127.
inline Eigen::MatrixXf fake_quant_per_tensor(const Eigen::MatrixXf& M) {
  const float d = std::max(M.cwiseAbs().maxCoeff(), 1e-5f) / 127.0f;
  return M.unaryExpr([d](float v) { return std::nearbyint(v / d) * d; });
}

/// Activation fake quantization per token (X: tokens x in, one scale per row), range [-127, 127].
inline Eigen::MatrixXf fake_quant_act_per_token(const Eigen::MatrixXf& X) {
  return fake_quant_weight_per_channel(X);
}

/// Activation fake quantization with one scale for the whole tensor.
inline Eigen::MatrixXf fake_quant_act_per_tensor(const Eigen::MatrixXf& X) {
  return fake_quant_per_tensor(X);
}

/// W8A8 output of a linear: Y = fq_act(X) fq_w(W)^T, per-channel weights and per-token
/// (per_token = true) or per-tensor activations. X: tokens x in, W: out x in.
inline Eigen::MatrixXf w8a8_forward(const Eigen::MatrixXf& X, const Eigen::MatrixXf& W,
                                    bool per_token = true) {
  if (X.cols() != W.cols())
    detail::fail("smoothquant: X has ", X.cols(), " columns, expected ", W.cols(), " (in of W)");
  const Eigen::MatrixXf Xq = per_token ? fake_quant_act_per_token(X) : fake_quant_act_per_tensor(X);
  return Xq * fake_quant_weight_per_channel(W).transpose();
}

/// Folds smoothing factors: returns W * diag(s) (columns scaled).
inline Eigen::MatrixXf smooth_weight(const Eigen::MatrixXf& W, const Eigen::VectorXf& s) {
  return W * s.asDiagonal();
}

/// Folds smoothing factors into activations: returns X[:, c] / s[c].
inline Eigen::MatrixXf smooth_act(const Eigen::MatrixXf& X, const Eigen::VectorXf& s) {
  return (X.array().rowwise() / s.transpose().array()).matrix();
}

}  // namespace smoothquant
}  // namespace nibble
