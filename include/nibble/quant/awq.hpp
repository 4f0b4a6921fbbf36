// nibble: AWQ (activation-aware weight quantization) for one linear layer, following llm-awq
// (duo_scaling off by default; AutoAWQ's duo_scaling on request): per-input-channel scale search
// over s = x_mean^ratio, normalised by sqrt(max(s) min(s)), then the per-(row, group) clip search
// on the scaled weights. Specification: reference/ALGORITHMS.md 3.1-3.5. Implemented in
// src/calib_awq.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include <Eigen/Dense>

#include "nibble/core/types.hpp"

namespace nibble {
namespace awq {

/// AWQ settings (llm-awq / AutoAWQ defaults).
struct Config {
  int bits = 4;              ///< 2, 3, 4 or 8
  int group_size = 128;      ///< -1 or 0: whole rows; else a positive divisor of cols
  bool zero_point = true;    ///< asymmetric groups (false: AutoAWQ symmetric branch)
  int n_grid = 20;           ///< scale-search ratios r / n_grid, r = 0 .. n_grid-1
  bool clip = true;          ///< run the clip search
  float max_shrink = 0.5f;   ///< clip candidates 1 - i/clip_grid for i < int(max_shrink*clip_grid)
  int clip_grid = 20;        ///< clip grid
  int n_sample_token = 512;  ///< clip search uses every (tokens / n_sample_token)-th token
  /// AutoAWQ's duo_scaling (its default; llm-awq has no such option): candidate scales
  /// s = x_mean^r / (w_mean^(1-r) + 1e-4), where w_mean[c] is the mean over rows of
  /// |W[o, c]| / (max |W| of c's group in row o + 1e-6). Off: llm-awq's s = x_mean^r.
  bool duo_scaling = false;
};

/// Result of the search for one linear layer.
struct Result {
  Eigen::VectorXf scales;    ///< per input channel s (weights are multiplied by s, inputs / s)
  float best_ratio;          ///< the winning ratio r / n_grid
  Eigen::MatrixXf clip_max;  ///< out x n_groups clip thresholds on W*s (group absmax if no clip)
  Eigen::MatrixXf W_eff;     ///< Q(clip(W*s)) / s: the effective weight seen by unscaled x
};

/// Mean |x| per input channel over the tokens of X (tokens x in): AWQ's activation statistic.
Eigen::VectorXf activation_mean(const Eigen::MatrixXf& X);

/// Runs the scale search then (if cfg.clip) the clip search for W (out x in) with calibration
/// inputs X (tokens x in); the output compared is the layer itself, y = x W^T. Throws
/// nibble::Error on mismatched shapes, non-finite values, bad bits/group size, n_grid < 1,
/// clip_grid < 1, max_shrink outside [0, 1), n_sample_token < 1 or no tokens.
Result search(const Eigen::MatrixXf& W, const Eigen::MatrixXf& X, const Config& cfg);

/// The clip search alone (3.5) on already scaled weights Ws and scaled inputs Xs: per
/// (row, group) best max in {org_max * (1 - i/clip_grid)}; returns out x n_groups.
Eigen::MatrixXf clip_search(const Eigen::MatrixXf& Ws, const Eigen::MatrixXf& Xs,
                            const Config& cfg);

/// The scaled and clipped weights clip(W * s) that the final quantizer (and a checkpoint
/// packer) sees, W: out x in.
Eigen::MatrixXf scaled_clipped(const Eigen::MatrixXf& W, const Result& r, int group_size);

/// AWQ ending in K-quant blocks (Format::q4_K or q5_K): the scale search and the clip search
/// use the K-quant reference quantizer (ggml quantize_row_q{4,5}_K_ref) as the fake quantizer,
/// clip groups are the 256-value super-blocks (cfg.group_size and cfg.bits are ignored), and
/// clip(W * s) is quantized with the same reference quantizer. The layer input must be divided by
/// `scales` at inference (fold 1/s into the previous op). Returns rows * (cols/256) blocks;
/// `result` (optional) receives scales, best_ratio, clip_max (out x cols/256) and W_eff.
/// Throws as search(), for other formats and for cols % 256 != 0.
std::vector<std::uint8_t> search_blocks(Format f, const Eigen::MatrixXf& W,
                                        const Eigen::MatrixXf& X, const Config& cfg,
                                        Result* result = nullptr);

/// The scale search of search_blocks (with the K-quant reference quantizer as fake quantizer)
/// from input statistics instead of the inputs themselves, for drivers that cannot keep every
/// token: `x_mean` (mean |x| per input channel, as activation_mean) and `gram`, X^T X or any
/// positive multiple of it (a nibble::Hessian's matrix will do); the loss is the output error
/// sum((D G) .* D), D = W - Q(W s)/s, which ranks the candidates as search_blocks does. Returns
/// scales and best_ratio, clip_max = the super-block absmax of W * s (no clip search; run
/// clip_search_blocks on a sample of the scaled inputs), W_eff empty. Throws nibble::Error on
/// mismatched shapes, non-finite or negative statistics, cols % 256 != 0, a bad cfg, or a format
/// other than q4_K / q5_K.
Result search_scales_blocks(Format f, const Eigen::MatrixXf& W, const Eigen::VectorXf& x_mean,
                            const Eigen::MatrixXf& gram, const Config& cfg);

/// The clip search (3.5) with the K-quant reference quantizer (Format::q4_K or q5_K) as the fake
/// quantizer and the 256-value super-blocks as clip groups, on already scaled weights Ws
/// (out x in, in % 256 == 0) and scaled inputs Xs (tokens x in). Returns out x in/256 thresholds.
/// cfg.group_size and cfg.bits are ignored. Throws as search_blocks().
Eigen::MatrixXf clip_search_blocks(Format f, const Eigen::MatrixXf& Ws, const Eigen::MatrixXf& Xs,
                                   const Config& cfg);

}  // namespace awq
}  // namespace nibble
