// nibble: sequential calibration from text: GPTQ or AWQ quantization of a llama-family GGUF
// model driven by the reference forward pass (nibble/llm/model.hpp), block by block.
//
// The calibration tokens are cut into chunks of n_ctx tokens as llama-imatrix does (each chunk's
// first token replaced by BOS when the vocabulary adds it) and embedded with the output model's
// token embedding (the quantized token_embd.weight, so block 0 sees what the quantized model
// will compute). Then, for every block l in order:
//   1. statistics: the block, still unquantized, runs on the hidden states of every chunk, which
//      were computed with blocks < l already quantized (GPTQ's sequential mode); the inputs of
//      its linears are accumulated into one Hessian per input (H = 2/n sum x x^T:
//      attn_q/k/v share one, attn_output, ffn_gate/up share one, ffn_down) and, for AWQ, the mean
//      |x| per channel and an evenly spaced sample of tokens for the clip search;
//   2. quantization of the block's weights to the types llama-quantize chooses for the file type:
//      gptq: every Q2_K / Q3_K / Q4_K / Q5_K / Q6_K weight (and Q8_0 / Q5_0 / Q4_0 ones: file
//      types Q8_0 / Q5_0 / Q4_0, fallbacks) by GPTQ error feedback on its grid
//      (gptq::quantize_blocks) with its Hessian; weights of types without a GPTQ grid (q4_1,
//      q5_1, iq4_nl, iq4_xs, bf16) are rounded as llama-quantize writes them; awq
//      (Q4_K_* / Q5_K_* file types): the scale search of every scaling group on the unscaled
//      weights (attn_norm -> q,k,v; attn_v -> attn_output without grouped-query attention; ffn_norm
//      -> gate,up; ffn_up -> ffn_down; awq::search_scales_blocks with the file type's base
//      quantizer), the scales folded into the norms and the previous weights' rows (and attn_v's
//      bias), the clip search on the scaled weights of every non-q/k linear of the base type, then
//      rounding; every other tensor (f16 fallbacks, norms, token_embd, output; with awq the q6_K /
//      q8_0 ones too) as llama-quantize writes it (its reference quantizers, or copied);
//   3. the block's outputs are recomputed with the quantized (and folded) weights, dequantized to
//      f32 (GPTQ's fake quantization: exact products, without the activation rounding of the
//      quantized GEMM kernels): they are the next block's inputs.
// Memory: the hidden states of all chunks (chunks x n_ctx x n_embd floats), one chunk's
// intermediates, the four Hessians of one block, one block's weights in f32 and quantized, and
// for AWQ a sample of at most 2 x n_sample_token tokens of each block input; the model stays
// memory-mapped. The output file is written like quantize_model's (same tensor order,
// types, sizes and metadata as llama-quantize; PATH.tmp renamed at the end, nothing left behind
// on failure) and loads in llama.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nibble/io/llama_quant.hpp"
#include "nibble/quant/awq.hpp"
#include "nibble/quant/gptq.hpp"
#include "nibble/quant/hessian.hpp"

namespace nibble::llm {

/// Where quantize_sequential is, reported after every stage of every block.
struct SequentialProgress {
  std::int64_t layer = 0;    ///< block being processed (0-based)
  std::int64_t n_layer = 0;  ///< blocks in all
  const char* stage = "";    ///< "statistics", "quantize" or "forward" (just finished)
  double fraction = 0;       ///< work done so far, 0..1 (blocks weighted equally)
  double seconds = 0;        ///< elapsed since the calibration started
  double eta = 0;            ///< estimated seconds left
};

/// Options of quantize_sequential.
struct SequentialOptions {
  QuantMethod method = QuantMethod::gptq;  ///< gptq or awq
  std::int64_t n_ctx = 512;                ///< tokens per chunk (>= 16)
  std::int64_t max_chunks = -1;            ///< at most this many chunks (< 0: all whole chunks)
  std::int32_t bos = -1;                   ///< BOS id put at the start of every chunk (< 0: none)
  int threads = 0;                         ///< 0: all hardware threads
  gptq::Config gptq;                       ///< GPTQ settings (act_order is not supported)
  awq::Config awq;                         ///< AWQ settings (clip search on by default)
  /// Called after every stage of every block (may be empty).
  std::function<void(const SequentialProgress&)> progress;
  /// Sees every block's Hessians once they are complete: (layer, name of the first weight that
  /// reads that input: blk.L.attn_q.weight, .attn_output.weight, .ffn_gate.weight or
  /// .ffn_down.weight, the Hessian). For tests and diagnostics; may be empty.
  std::function<void(std::int64_t layer, const std::string& weight, const Hessian& h)> on_hessian;
};

/// Quantizes the llama / qwen2 GGUF model at `in_path` (f32, f16 or bf16 weights) into `out_path`
/// as file type `ftype` with sequential GPTQ or AWQ calibration on `tokens` (see the file comment),
/// `tensor_progress` being called after every tensor written. Everything is checked before
/// anything is computed or written: throws nibble::Error, leaving no output, for an
/// unsupported architecture or weight type, fewer tokens than one chunk of n_ctx, n_ctx < 16, a
/// token outside the vocabulary, a method other than gptq / awq, awq with a file type whose
/// base type is not Q4_K or Q5_K or a model whose n_embd and n_ff are not multiples of 256, or
/// gptq with a file type that gives the blocks no weight it can calibrate (Q2_K / Q3_K / Q4_K /
/// Q5_K / Q6_K / Q8_0 / Q5_0 / Q4_0; e.g. Q4_1, Q5_1, IQ4_NL or BF16 on most models).
QuantizeSummary quantize_sequential(const std::string& in_path, const std::string& out_path,
                                    LlamaFtype ftype, const std::vector<std::int32_t>& tokens,
                                    const SequentialOptions& options,
                                    const ProgressCallback& tensor_progress = {});

}  // namespace nibble::llm
