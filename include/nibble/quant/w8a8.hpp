// nibble: W8A8 (SmoothQuant) int8 x int8 matrix products. Weights: symmetric int8 with one fp32
// scale per output channel (row); activations: symmetric int8 quantized on the fly with one scale
// per token (row) or one for the whole tensor; exact int32 accumulation; fp32 output.
// Quantization follows reference/ALGORITHMS.md 4.3 (mit-han-lab/smoothquant fake_quant.py):
//   d = max(max |x|, 1e-5) / 127 (fp32),  q = round_half_even(x / d),  q in [-127, 127].
// Products: Y[j, r] = (float(sum_k Wq[r, k] * Xq[j, k]) * w_scale[r]) * x_scale[j], the same
// operations on every ISA and thread count, so results are bit-identical across them.
// Supported shapes: any rows >= 0, n >= 0 and 0 <= cols <= kMaxCols (int32 sums stay exact).
// For smoothing (folding s into W and X) see nibble/quant/smoothquant.hpp.
#pragma once

#include <cstdint>
#include <vector>

#include "nibble/nibble.hpp"

namespace nibble {
namespace w8a8 {

/// Largest supported row length (input features): 128 * 127 * kMaxCols < 2^31.
constexpr std::int64_t kMaxCols = 131072;

/// Per-output-channel symmetric int8 weights of a rows x cols (out x in) linear layer.
struct Weights {
  std::vector<std::int8_t> q;  ///< rows x cols row-major codes in [-127, 127]
  std::vector<float> scale;    ///< rows scales: W[r, k] ~= q[r * cols + k] * scale[r]
  std::int64_t rows = 0;       ///< output channels
  std::int64_t cols = 0;       ///< input channels (<= kMaxCols)
};

/// How activations are scaled.
enum class ActScale {
  per_token,  ///< one scale per activation row (token)
  per_tensor  ///< one scale for all n rows
};

/// Quantizes a row-major rows x cols fp32 weight matrix per output channel:
/// scale[r] = max(max_k |W[r, k]|, 1e-5) / 127, q = round_half_even(W / scale[r]) (an all-zero
/// row gets scale 1e-5 / 127 and zero codes). Throws nibble::Error on negative sizes,
/// cols > kMaxCols, a null W (when rows * cols > 0) or NaN/Inf in W.
Weights quantize_weights(const float* W, std::int64_t rows, std::int64_t cols);

/// Quantizes n x cols fp32 activations X into n x cols int8 codes `q` and n scales `scales`
/// (per_tensor: all n equal, from the maximum over the whole tensor), with the rule of
/// quantize_weights. Throws nibble::Error (writing nothing) on negative sizes, cols > kMaxCols,
/// null pointers (when n > 0) or NaN/Inf in X.
void quantize_activations(const float* X, std::int64_t n, std::int64_t cols, ActScale mode,
                          std::int8_t* q, float* scales);

/// Y = X W^T with int8 weights and int8 activations: X is n x w.cols fp32 row-major (quantized
/// once with `mode`), Y is n x w.rows fp32 row-major. Runs on ctx's ISA with w.rows split over
/// ctx's threads; the result does not depend on either. Throws nibble::Error (writing nothing)
/// on an inconsistent `w` (sizes, non-finite scales), n < 0, null pointers or NaN/Inf in X.
void gemm(const Context& ctx, const Weights& w, const float* X, std::int64_t n, float* Y,
          ActScale mode = ActScale::per_token);

/// y = W x: gemm with n = 1 (x: w.cols floats, y: w.rows floats).
void gemv(const Context& ctx, const Weights& w, const float* x, float* y);

}  // namespace w8a8
}  // namespace nibble
