// nibble: GPTQ (Frantar et al.) with the exact conventions of IST-DASLab/gptq and AutoGPTQ:
// lazy-batch Cholesky updates, group parameters from the outer W at each group start,
// dead columns, relative damping, act-order permutation with g_idx, static groups.
// Specification: reference/ALGORITHMS.md 2.1-2.4 and 2.7. Implemented in src/calib_gptq.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include <Eigen/Dense>

#include "nibble/core/types.hpp"
#include "nibble/quant/hessian.hpp"

namespace nibble {
namespace gptq {

/// GPTQ settings (names follow the reference drivers).
struct Config {
  int bits = 4;                ///< 2, 3, 4 or 8
  int group_size = 128;        ///< -1 or 0: one group per row; else a positive divisor of cols
  bool sym = false;            ///< symmetric grid (zero = 2^(bits-1), the lopsided reference grid)
  bool act_order = false;      ///< process columns by descending diag(H) (desc_act)
  bool static_groups = false;  ///< group params fixed up front from the unpermuted W
  int block_size = 128;        ///< lazy-batch width
  float percdamp = 0.01f;      ///< damping fraction of mean(diag(H))
  bool mse = false;            ///< shrink search in find_params (norm 2.4, grid 100, maxshrink 0.8)
};

/// What GPTQ returns.
struct Result {
  Eigen::MatrixXf Q;                ///< dequantized weights, out x in, original column order
  Eigen::MatrixXf scale, zero;      ///< out x n_groups (encounter order; see ALGORITHMS 2.4)
  std::vector<std::int32_t> g_idx;  ///< group of each original input column
  double loss;                      ///< sum of the reference Losses (sum (w-q)^2 / d^2 / 2)
};

/// Quantizes W (out x in) given the layer Hessian H (in x in). Throws nibble::Error on
/// mismatched shapes, non-finite W/H, bits not in {2,3,4,8}, a group size that does not divide
/// cols, block_size < 1, a negative/non-finite percdamp, or an H that is not positive definite
/// after damping (Cholesky failure).
Result quantize(const Eigen::MatrixXf& W, const Eigen::MatrixXf& H, const Config& cfg);

/// GPTQ with GGUF block output: the K-quants Format::q2_K, q3_K, q4_K, q5_K or q6_K, or the
/// legacy formats q8_0, q5_0, q4_0. At the start of each 256-column super-block the block scales
/// are chosen on the current (error-updated) weights by the format's importance-weighted
/// reference search (importance = the damped diag(H)); every column is then rounded on that grid
/// and its error propagated with the GPTQ update. Returns rows * (cols/256) blocks (row-major),
/// dequantizable with nibble::dequantize. cfg.bits, group_size, sym, static_groups and mse are
/// ignored; act_order is not supported (throws). The legacy symmetric formats Format::q8_0, q5_0
/// and q4_0 (32-value blocks, one scale d, value = d * level) work the same way on 32-column
/// blocks: d is chosen by the format's reference quantizer on the current weights (q5_0/q4_0:
/// importance-weighted with the damped diag(H); q8_0 has no search), each column rounded to the
/// nearest level; cols must then be a multiple of 32 (rows * (cols/32) blocks). Throws as
/// quantize(), plus for other formats or cols not a multiple of the block width.
std::vector<std::uint8_t> quantize_blocks(Format f, const Eigen::MatrixXf& W,
                                          const Eigen::MatrixXf& H, const Config& cfg);

/// The upper Cholesky factor U of H^{-1} (H^{-1} = U^T U) for an already damped H, as the
/// reference computes it (cholesky, cholesky_inverse, cholesky upper). Throws nibble::Error if
/// H is not positive definite.
Eigen::MatrixXf inverse_cholesky_upper(const Eigen::MatrixXf& H);

}  // namespace gptq
}  // namespace nibble
