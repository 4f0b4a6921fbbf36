// nibble: llama-quantize-compatible model quantization (GGUF in, GGUF out).
//
// Behaviour follows llama.cpp's llama-quantize as of upstream master 0253fb2 (2026-05-16; read in
// the kmbandy/llama.cpp fork at bf87261, which merged it; src/llama-quant.cpp): the same tensors
// are quantized (2-D+ "*weight" tensors except norms and a few special ones), each tensor gets the
// type llama_tensor_get_type would give it (the Q2_K, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M mixes,
// output.weight -> Q6_K, the row-length fallbacks, ...), tensors are written in llama's order
// (by layer number, then by name), the input metadata is carried in order with
// general.quantization_version and general.file_type re-appended at the end, tensor data is
// padded to 32 bytes, and an importance matrix is used per tensor as llama-quantize uses it.
// For the same f32/f16/bf16 input (and imatrix) the output file is meant to be byte-identical.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nibble/io/gguf.hpp"
#include "nibble/io/imatrix.hpp"
#include "nibble/nibble.hpp"

namespace nibble {

/// llama.cpp file types (LLAMA_FTYPE_MOSTLY_*) that nibble can produce; values as in llama.h
/// (they are what general.file_type records).
enum class LlamaFtype : int {
  q4_0 = 2,
  q4_1 = 3,
  q8_0 = 7,
  q5_0 = 8,
  q5_1 = 9,
  q2_K = 10,
  q3_K_S = 11,
  q3_K_M = 12,
  q3_K_L = 13,
  q4_K_S = 14,
  q4_K_M = 15,
  q5_K_S = 16,
  q5_K_M = 17,
  q6_K = 18,
  iq4_nl = 25,
  iq4_xs = 30,
  bf16 = 32,
};

/// Every LlamaFtype, in llama.h order.
inline constexpr LlamaFtype kAllLlamaFtypes[] = {
    LlamaFtype::q4_0,   LlamaFtype::q4_1,   LlamaFtype::q8_0,   LlamaFtype::q5_0,
    LlamaFtype::q5_1,   LlamaFtype::q2_K,   LlamaFtype::q3_K_S, LlamaFtype::q3_K_M,
    LlamaFtype::q3_K_L, LlamaFtype::q4_K_S, LlamaFtype::q4_K_M, LlamaFtype::q5_K_S,
    LlamaFtype::q5_K_M, LlamaFtype::q6_K,   LlamaFtype::iq4_nl, LlamaFtype::iq4_xs,
    LlamaFtype::bf16};

/// Parses a llama-quantize type name, case-insensitive: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K,
/// Q3_K_S, Q3_K_M, Q3_K (= Q3_K_M), Q3_K_L, Q4_K_S, Q4_K_M, Q4_K (= Q4_K_M), Q5_K_S, Q5_K_M,
/// Q5_K (= Q5_K_M), Q6_K, IQ4_NL, IQ4_XS, BF16. Throws nibble::Error for anything else.
LlamaFtype parse_llama_ftype(const std::string& name);

/// Canonical name of a file type ("Q4_K_M", ...).
const char* llama_ftype_name(LlamaFtype f);

/// ggml type id of the default (base) type of a file type (Q4_K for Q4_K_S/M, Q3_K for
/// Q3_K_S/M/L, bf16 for BF16, ...).
std::uint32_t llama_ftype_base_type(LlamaFtype f);

/// Model facts the type rules depend on, read from the metadata.
struct LlamaModelInfo {
  std::string arch;         ///< general.architecture
  int n_layer = 0;          ///< ARCH.block_count
  int n_expert = 0;         ///< ARCH.expert_count (0 when absent)
  int n_head = 0;           ///< ARCH.attention.head_count (of layer 0 if an array; 0 if absent)
  int n_head_kv = 0;        ///< ARCH.attention.head_count_kv (layer 0; n_head when absent)
  bool is_70b = false;      ///< llama's LLM_TYPE_70B (llama: 80 layers with GQA; qwen2, ...)
  bool has_output = false;  ///< an output.weight tensor exists (else embeddings are tied)
  int n_attention_wv = 0;   ///< number of attn_v / attn_qkv / attn_kv_b weights
  /// llama's hparams.n_gqa(): n_head / n_head_kv (integer division; 0 when n_head_kv is 0).
  int n_gqa() const { return n_head_kv > 0 ? n_head / n_head_kv : 0; }
};

/// Reads the LlamaModelInfo of a parsed GGUF (Error if general.architecture or block_count is
/// missing).
LlamaModelInfo llama_model_info(const gguf::File& in);

/// What happens to one tensor.
struct TensorPlan {
  std::size_t input_index = 0;  ///< index into File::tensors
  std::string name;             ///< tensor name
  std::uint32_t in_type = 0;    ///< ggml type id in the input
  std::uint32_t out_type = 0;   ///< ggml type id in the output
  bool quantize = false;        ///< converted (else copied unchanged)
  bool fallback = false;        ///< shape forced a fallback type
};

/// The tensors of `in` in llama-quantize's output order with their output types for `ftype`.
/// `has_imatrix` is part of llama's rules: with an imatrix the first eighth of the ffn_down
/// weights of Q4_0/Q5_0 become Q4_1/Q5_1, and IQ4_NL/IQ4_XS keep them at the base type instead
/// of Q5_K. Rows whose length is not a multiple of the chosen type's block fall back as in
/// llama-quantize (Q2_K/Q3_K -> Q4_0, IQ4_XS -> IQ4_NL, Q4_K -> Q5_0, Q5_K -> Q5_1,
/// Q6_K -> Q8_0; F16 when the fallback's 32-value block does not fit either). Throws
/// nibble::Error when llama-quantize would fail (a 32-value type such as Q8_0, Q4_0 or IQ4_NL on
/// rows that are not a multiple of 32: llama-quantize defines no fallback for them).
std::vector<TensorPlan> plan_llama_quant(const gguf::File& in, LlamaFtype ftype,
                                         bool has_imatrix = false);

/// Quantization algorithm.
/// - rtn: llama's round-to-nearest quantizers (ggml_quantize_chunk; with the imatrix when given).
/// - gptq: tensors whose output type is q2_K, q3_K, q4_K, q5_K or q6_K and that have calibration
///   data are quantized with nibble::gptq::quantize_blocks (default gptq::Config, imatrix not
///   used for them); all other tensors as rtn.
/// - awq (Q4_K_S/M and Q5_K_S/M file types, dense llama-architecture models): AWQ's scale search
///   per scaling group of every block (ALGORITHMS.md 3.3-3.4): attn_norm -> attn_q,k,v;
///   ffn_norm -> ffn_gate,up; attn_v -> attn_output (only without grouped-query attention, as the
///   reference); ffn_up -> ffn_down. The loss is the output error of the group's linears (their
///   outputs concatenated; the reference inspects the whole attention / MLP block, which a
///   weight-file driver cannot run), with the file type's K-quant reference quantizer as the
///   fake quantizer, all scales searched on the unscaled weights. The scales are folded: norm
///   weights divided by s, attn_v / ffn_up output rows divided by s, the group's weight columns
///   multiplied by s. Then the clip search (skipped for attn_q/attn_k, as the reference) runs on
///   every scaled linear whose output type is the file type's base type, and each tensor is
///   quantized with its llama-quantize type (an imatrix, when given, is divided by s^2 to match
///   the scaled inputs). Groups without calibration inputs are left unscaled.
///
/// Calibration file (QuantizeOptions::calib_path): a GGUF file holding, for a weight tensor NAME
/// with `cols` input columns,
///   NAME.hessian  f32, shape [cols, cols]: H = 2/n * sum_t x_t x_t^T (see quant/hessian.hpp;
///                 gptq only), or
///   NAME.inputs   f32, shape [cols, tokens]: the layer's input activations, one row per token
///                 (gptq accumulates H from them; awq needs them: one of attn_q/k/v, one of
///                 ffn_gate/up, attn_output and ffn_down per block).
/// Metadata of the calibration file is ignored. Weights without an entry are quantized by rtn.
enum class QuantMethod { rtn, gptq, awq };

/// Output bytes of one tensor computed outside quantize_model (see QuantizeOptions::source).
struct SourcedTensor {
  std::vector<std::uint8_t>
      bytes;                ///< exactly the output tensor's bytes (type and shape of the plan)
  bool calibrated = false;  ///< counted in QuantizeSummary::calibrated
};

/// Called for every tensor of the plan, in the output order, just before it is written: returns
/// false to let quantize_model convert or copy the tensor itself, or true after filling `out`.
/// Exceptions propagate (and no output file is left behind).
using TensorSource = std::function<bool(const TensorPlan& plan, SourcedTensor& out)>;

/// Options of quantize_model.
struct QuantizeOptions {
  int threads = 0;                        ///< 0 = all hardware threads
  const Imatrix* imatrix = nullptr;       ///< importance matrix (optional)
  std::string imatrix_path;               ///< recorded as quantize.imatrix.file when imatrix is set
  QuantMethod method = QuantMethod::rtn;  ///< gptq/awq need calib_path
  std::string calib_path;                 ///< calibration file (gptq/awq)
  /// Optional supplier of tensors computed elsewhere (used by the sequential calibration of
  /// nibble/llm/calibrate.hpp); needs method == rtn. Tensors it declines are converted as usual.
  TensorSource source;
};

/// Progress report, sent after each tensor.
struct QuantizeProgress {
  std::size_t index = 0;             ///< tensors done (1-based after the first)
  std::size_t count = 0;             ///< tensors in total
  std::string name;                  ///< tensor just done
  std::uint32_t out_type = 0;        ///< its output type
  std::uint64_t in_bytes_done = 0;   ///< input bytes processed so far
  std::uint64_t in_bytes_total = 0;  ///< input bytes in total
  double seconds = 0;                ///< elapsed time
};

/// Called after every tensor.
using ProgressCallback = std::function<void(const QuantizeProgress&)>;

/// Result of quantize_model.
struct QuantizeSummary {
  std::uint64_t in_tensor_bytes = 0;   ///< bytes of tensor data in the input
  std::uint64_t out_tensor_bytes = 0;  ///< bytes of tensor data in the output
  std::uint64_t in_file_bytes = 0;     ///< input file size
  std::uint64_t out_file_bytes = 0;    ///< output file size
  std::int64_t elements = 0;           ///< values in all tensors
  int quantized = 0;                   ///< tensors converted
  int copied = 0;                      ///< tensors copied unchanged
  int fallbacks = 0;                   ///< tensors that needed a fallback type
  int calibrated = 0;                  ///< tensors quantized with GPTQ or rescaled by AWQ
  double seconds = 0;                  ///< wall time
  /// Bits per weight of the output tensor data.
  double bits_per_weight() const {
    return elements ? 8.0 * static_cast<double>(out_tensor_bytes) / static_cast<double>(elements)
                    : 0.0;
  }
};

/// The bytes quantize_model writes for a tensor converted by rounding: `values` (mats x rows x
/// cols f32, row-major) as ggml type `out_type` (f32, f16 or any type a plan can give: bf16,
/// q4_0, q4_1, q5_0, q5_1, q8_0, q2_K ... q6_K, iq4_nl, iq4_xs; llama's reference quantizers,
/// byte-identical to llama-quantize), with optional importance weights
/// (mats x cols, as from an imatrix). Throws nibble::Error for other types, a shape that the
/// type cannot hold (cols not a multiple of its block), or non-finite values.
std::vector<std::uint8_t> quantize_tensor(const Context& ctx, std::uint32_t out_type,
                                          const float* values, std::int64_t mats, std::int64_t rows,
                                          std::int64_t cols, const float* importance = nullptr);

/// Quantizes the GGUF model at `in_path` into `out_path` like `llama-quantize in out FTYPE`
/// (see the file comment). Streams tensor by tensor from a memory-mapped input (working set:
/// one tensor), writes `out_path`.tmp and renames it at the end (no output on failure).
/// Throws nibble::Error on malformed input, unsupported tensor types or methods.
QuantizeSummary quantize_model(const std::string& in_path, const std::string& out_path,
                               LlamaFtype ftype, const QuantizeOptions& options = {},
                               const ProgressCallback& progress = {});

}  // namespace nibble
