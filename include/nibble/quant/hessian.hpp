// nibble: the GPTQ layer Hessian H = 2/n * sum_t x_t x_t^T (n = calibration tokens).
// Specification: reference/ALGORITHMS.md 2.2 (GPTQModel convention: n counts tokens).
#pragma once

#include <cstdint>

#include <Eigen/Dense>

namespace nibble {

/// Accumulates the Hessian of a linear layer's reconstruction loss over calibration batches.
/// The running mean is kept exactly as the reference: H *= n_old / n_new, then
/// H += (2 / n_new) * X^T X, so after all batches H = 2/n * sum over tokens of x x^T.
/// Implemented in src/calib_gptq.cpp (uses OpenBLAS ssyrk when available, else Eigen).
class Hessian {
 public:
  /// An all-zero cols x cols Hessian. Throws nibble::Error if cols <= 0.
  explicit Hessian(std::int64_t cols);
  /// Adds `tokens` rows of activations, X row-major tokens x cols. Throws (leaving the state
  /// unchanged) on a null X with tokens > 0, tokens < 0, or non-finite values.
  void add_batch(const float* X, std::int64_t tokens);
  /// The current H (symmetric, cols x cols).
  const Eigen::MatrixXf& matrix() const { return H_; }
  /// Number of tokens accumulated so far.
  std::int64_t tokens() const { return n_; }
  /// Number of input channels.
  std::int64_t cols() const { return H_.rows(); }

 private:
  Eigen::MatrixXf H_;
  std::int64_t n_ = 0;
};

}  // namespace nibble
