// nibble: round-to-nearest quantizers with the grids of GPTQ (quant.py Quantizer) and AWQ
// (pseudo_quantize_tensor), used by the calibration algorithms and as their baselines.
// Specification: reference/ALGORITHMS.md 2.1 and 3.1. Rounding is half-to-even (torch.round).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <Eigen/Dense>

#include "nibble/core/error.hpp"

namespace nibble {
namespace rtn {

/// Throws nibble::Error unless bits is one of 2, 3, 4, 8 (the widths GPTQ/AWQ checkpoints use).
inline void check_bits(int bits, const char* what = "bits") {
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
    detail::fail(what, " = ", bits, " is not one of 2, 3, 4, 8");
}

/// Largest integer code of a `bits`-wide grid: 2^bits - 1 (as float, like the reference maxq).
inline float max_q(int bits) {
  return static_cast<float>((1 << bits) - 1);
}

/// Throws nibble::Error if any value of `m` is NaN or infinite (argument named `what`).
template <class Derived>
inline void check_finite(const Eigen::MatrixBase<Derived>& m, const char* what) {
  for (Eigen::Index c = 0; c < m.cols(); ++c)
    for (Eigen::Index r = 0; r < m.rows(); ++r)
      if (!std::isfinite(m(r, c)))
        detail::fail(what, "(", r, ", ", c, ") = ", m(r, c), " is not finite");
}

/// Checks a GPTQ/AWQ group size against `cols`: -1 or 0 (one group per row) or a positive
/// divisor of cols. Returns the effective group width (cols for -1/0).
inline std::int64_t effective_group(int group_size, std::int64_t cols, const char* what) {
  if (group_size == -1 || group_size == 0) return cols;
  if (group_size < 0 || cols % group_size != 0)
    detail::fail(what, " = ", group_size, " does not divide cols = ", cols,
                 " (expected -1, 0 or a positive divisor)");
  return group_size;
}

/// GPTQ fake quantization of one value: clamp(round(x / scale) + zero, 0, maxq), dequantized
/// as scale * (q - zero). Division (not a reciprocal) and half-to-even rounding, as the reference.
inline float gptq_quantize(float x, float scale, float zero, float maxq) {
  float q = std::nearbyint(x / scale) + zero;
  q = std::min(std::max(q, 0.0f), maxq);
  return scale * (q - zero);
}

/// Integer code clamp(round(x / scale) + zero, 0, maxq) of the GPTQ grid.
inline float gptq_code(float x, float scale, float zero, float maxq) {
  float q = std::nearbyint(x / scale) + zero;
  return std::min(std::max(q, 0.0f), maxq);
}

/// GPTQ Quantizer.find_params(x, weight=True) for every row of `x` (a rows x n slice: a whole
/// weight matrix or one column group). The range is extended to include 0; sym uses
/// zero = (maxq+1)/2 and a row without negatives keeps xmin = 0; all-zero rows get [-1, 1].
/// With `mse` the shrink search of the reference is run (norm 2.4, grid 100, maxshrink 0.8).
/// Writes x.rows() values to `scale` and `zero`. Unchecked: bits must be valid.
template <class Derived>
inline void gptq_find_params(const Eigen::MatrixBase<Derived>& x, int bits, bool sym, bool mse,
                             float* scale, float* zero) {
  const float maxq = max_q(bits);
  const Eigen::Index rows = x.rows(), n = x.cols();
  for (Eigen::Index r = 0; r < rows; ++r) {
    float xmin = 0.0f, xmax = 0.0f;
    for (Eigen::Index c = 0; c < n; ++c) {
      const float v = x(r, c);
      xmin = std::min(xmin, v);
      xmax = std::max(xmax, v);
    }
    if (sym) {
      xmax = std::max(std::fabs(xmin), xmax);
      if (xmin < 0.0f) xmin = -xmax;
    }
    if (xmin == 0.0f && xmax == 0.0f) {
      xmin = -1.0f;
      xmax = 1.0f;
    }
    float s = (xmax - xmin) / maxq;
    float z = sym ? (maxq + 1.0f) / 2.0f : std::nearbyint(-xmin / s);
    if (mse) {
      const int grid = 100;
      const float maxshrink = 0.8f, norm = 2.4f;
      float best = std::numeric_limits<float>::infinity();
      const float zsym = z;
      for (int i = 0; i < static_cast<int>(maxshrink * grid); ++i) {
        const float p = static_cast<float>(1.0 - static_cast<double>(i) / grid);
        const float xmin1 = p * xmin, xmax1 = p * xmax;
        const float s1 = (xmax1 - xmin1) / maxq;
        const float z1 = sym ? zsym : std::nearbyint(-xmin1 / s1);
        float err = 0.0f;
        for (Eigen::Index c = 0; c < n; ++c) {
          const float v = x(r, c);
          err += std::pow(std::fabs(gptq_quantize(v, s1, z1, maxq) - v), norm);
        }
        if (err < best) {
          best = err;
          s = s1;
          z = z1;
        }
      }
    }
    scale[r] = s;
    zero[r] = z;
  }
}

/// RTN baseline on the GPTQ grid: per row and per group of `group_size` consecutive columns
/// (-1/0: whole rows), find_params on W then quantize. Returns the dequantized matrix.
/// Throws on bad bits, group size or non-finite W.
inline Eigen::MatrixXf gptq_rtn(const Eigen::MatrixXf& W, int bits, int group_size, bool sym,
                                bool mse = false) {
  check_bits(bits);
  check_finite(W, "W");
  const std::int64_t gs = effective_group(group_size, W.cols(), "group_size");
  const float maxq = max_q(bits);
  Eigen::MatrixXf Q(W.rows(), W.cols());
  Eigen::VectorXf s(W.rows()), z(W.rows());
  for (Eigen::Index g = 0; g < W.cols(); g += gs) {
    gptq_find_params(W.middleCols(g, gs), bits, sym, mse, s.data(), z.data());
    for (Eigen::Index c = g; c < g + gs; ++c)
      for (Eigen::Index r = 0; r < W.rows(); ++r)
        Q(r, c) = gptq_quantize(W(r, c), s[r], z[r], maxq);
  }
  return Q;
}

/// Parameters of one AWQ group (pseudo_quantize_tensor): zero_point -> raw min/max (not extended
/// to 0), scale = max(max - min, 1e-5) / maxq, zero = clamp(-round(min / scale), 0, maxq);
/// otherwise (AutoAWQ symmetric) scale = max(max|g|, 1e-5) / (2^(bits-1) - 1), zero = 0.
inline void awq_group_params(const float* g, std::int64_t n, std::int64_t stride, int bits,
                             bool zero_point, float* scale, float* zero) {
  const float maxq = max_q(bits);
  if (zero_point) {
    float mx = -std::numeric_limits<float>::infinity(), mn = std::numeric_limits<float>::infinity();
    for (std::int64_t k = 0; k < n; ++k) {
      mx = std::max(mx, g[k * stride]);
      mn = std::min(mn, g[k * stride]);
    }
    const float s = std::max(mx - mn, 1e-5f) / maxq;
    float z = -std::nearbyint(mn / s);
    z = std::min(std::max(z, 0.0f), maxq);
    *scale = s;
    *zero = z;
  } else {
    float mx = 0.0f;
    for (std::int64_t k = 0; k < n; ++k) mx = std::max(mx, std::fabs(g[k * stride]));
    *scale = std::max(mx, 1e-5f) / static_cast<float>((1 << (bits - 1)) - 1);
    *zero = 0.0f;
  }
}

/// AWQ fake quantization of one value with group parameters (scale, zero):
/// zero_point -> (clamp(round(w/scale) + zero, 0, maxq) - zero) * scale;
/// symmetric -> clamp(round(w/scale), -2^(bits-1), 2^(bits-1)-1) * scale.
inline float awq_quantize(float w, float scale, float zero, int bits, bool zero_point) {
  if (zero_point) {
    float q = std::nearbyint(w / scale) + zero;
    q = std::min(std::max(q, 0.0f), max_q(bits));
    return (q - zero) * scale;
  }
  const float lo = -static_cast<float>(1 << (bits - 1)),
              hi = static_cast<float>((1 << (bits - 1)) - 1);
  float q = std::min(std::max(std::nearbyint(w / scale), lo), hi);
  return q * scale;
}

/// AWQ pseudo_quantize_tensor of a whole out x in matrix with groups of `group_size` consecutive
/// input channels (-1/0: whole rows). Optional outputs: per-(row, group) scale and zero
/// (rows x n_groups). Throws on bad bits, group size or non-finite W.
inline Eigen::MatrixXf awq_rtn(const Eigen::MatrixXf& W, int bits, int group_size,
                               bool zero_point = true, Eigen::MatrixXf* scales = nullptr,
                               Eigen::MatrixXf* zeros = nullptr) {
  check_bits(bits);
  check_finite(W, "W");
  const std::int64_t gs = effective_group(group_size, W.cols(), "group_size");
  const Eigen::Index G = W.cols() / gs;
  Eigen::MatrixXf Q(W.rows(), W.cols());
  if (scales) scales->resize(W.rows(), G);
  if (zeros) zeros->resize(W.rows(), G);
  for (Eigen::Index g = 0; g < G; ++g)
    for (Eigen::Index r = 0; r < W.rows(); ++r) {
      float s, z;
      awq_group_params(&W(r, g * gs), gs, W.rows(), bits, zero_point, &s, &z);
      for (Eigen::Index c = g * gs; c < (g + 1) * gs; ++c)
        Q(r, c) = awq_quantize(W(r, c), s, z, bits, zero_point);
      if (scales) (*scales)(r, g) = s;
      if (zeros) (*zeros)(r, g) = z;
    }
  return Q;
}

/// Relative output error ||(W - Q) X^T||_F^2 / ||W X^T||_F^2 (X: tokens x in), in double.
inline double relative_output_error(const Eigen::MatrixXf& W, const Eigen::MatrixXf& Q,
                                    const Eigen::MatrixXf& X) {
  if (W.rows() != Q.rows() || W.cols() != Q.cols() || X.cols() != W.cols())
    detail::fail("relative_output_error: shapes W ", W.rows(), "x", W.cols(), ", Q ", Q.rows(), "x",
                 Q.cols(), ", X ", X.rows(), "x", X.cols(), " do not match");
  const Eigen::MatrixXd Xd = X.cast<double>();
  const Eigen::MatrixXd Wd = W.cast<double>();
  const Eigen::MatrixXd D = Wd - Q.cast<double>();
  return (Xd * D.transpose()).squaredNorm() / (Xd * Wd.transpose()).squaredNorm();
}

}  // namespace rtn
}  // namespace nibble
