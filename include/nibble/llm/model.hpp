// nibble: a reference forward pass for llama-family GGUF models (architectures `llama` and
// `qwen2`), used by `nibble perplexity` and `nibble imatrix`.
//
// The model is read from a memory-mapped GGUF file: the weight matrices are used in place (the
// formats nibble quantize writes: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K,
// q5_K, q6_K, iq4_nl, iq4_xs) through nibble::gemm; only the small 1-D tensors (norms, biases,
// rope frequency factors) are copied to fp32. One call of
// forward() processes a whole chunk of tokens at positions 0..n-1 with causal attention, fp32
// activations, and returns the logits, following llama.cpp's graph for these architectures:
// RMSNorm (eps from the metadata), grouped-query attention with rotary embeddings (llama: the
// "normal" mode pairing dimensions 2i and 2i+1, as llama.cpp's converter permutes Q/K; qwen2:
// the NEOX mode pairing i and i + n_rot/2), rope frequency base and linear rope scaling from the
// metadata, optional rope_freqs.weight frequency factors, SwiGLU feed-forward network, and the
// token embedding reused as output matrix when output.weight is absent. A block matrix's bias
// (NAME.bias, f32; qwen2's q/k/v biases) is added when the file has one. The packed tensors of a
// `nibble pack`ed file (q8_0.x16, q4_K.x16, q5_K.x16, q6_K.x16: nibble/packed.hpp) run in place
// through the packed gemm (no copy, no unpacking), the embedding lookup of a packed token_embd
// unpacks the 16-row group of each token; the logits equal those of the plain file up to float
// rounding.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nibble/core/types.hpp"
#include "nibble/io/gguf.hpp"
#include "nibble/nibble.hpp"

namespace nibble::llm {

/// Hyper-parameters read from the GGUF metadata.
struct Hparams {
  std::string arch;              ///< general.architecture ("llama" or "qwen2")
  std::int64_t n_vocab = 0;      ///< rows of token_embd.weight
  std::int64_t n_embd = 0;       ///< {arch}.embedding_length
  std::int64_t n_layer = 0;      ///< {arch}.block_count
  std::int64_t n_head = 0;       ///< {arch}.attention.head_count
  std::int64_t n_head_kv = 0;    ///< {arch}.attention.head_count_kv (default n_head)
  std::int64_t head_dim = 0;     ///< {arch}.attention.key_length (default n_embd / n_head)
  std::int64_t n_ff = 0;         ///< {arch}.feed_forward_length
  std::int64_t n_rot = 0;        ///< {arch}.rope.dimension_count (default head_dim)
  std::int64_t n_ctx_train = 0;  ///< {arch}.context_length (0 if absent)
  float rms_eps = 1e-5f;         ///< {arch}.attention.layer_norm_rms_epsilon
  float rope_base = 10000.0f;    ///< {arch}.rope.freq_base
  float rope_freq_scale = 1.0f;  ///< 1 / {arch}.rope.scaling.factor for linear scaling
  bool rope_neox = false;        ///< NEOX rotation (qwen2) instead of llama's normal mode
  bool tied_output = false;      ///< output.weight absent: token_embd.weight is the output matrix
};

/// Observer of the inputs of every weight matrix product: called (from the calling thread) with
/// the weight's tensor name (e.g. "blk.0.attn_q.weight") and its input X, n rows of `cols`
/// floats (row-major), just before the product Y = X W^T is computed.
using MatmulObserver = std::function<void(const std::string& weight, const float* x, std::int64_t n,
                                          std::int64_t cols)>;

/// One weight matrix of a block as the forward pass uses it: rows x cols values in `format`
/// (any format nibble::gemm handles), at `data` (not owned; rows * row_bytes(format, cols)
/// bytes), plus an optional bias.
struct LinearWeights {
  std::string name;  ///< tensor name, reported to the MatmulObserver
  Format format = Format::f32;
  const void* data = nullptr;
  std::int64_t rows = 0;    ///< output features
  std::int64_t cols = 0;    ///< input features
  std::vector<float> bias;  ///< empty or `rows` values added to the product
  bool packed = false;      ///< data is in the packed layout (nibble/packed.hpp; format packable)
};

/// The weights of one transformer block: the two RMSNorm weight vectors (n_embd values each)
/// and the seven matrices. Model::block_weights gives views of the model's own; a caller may
/// point any of them elsewhere (e.g. at quantized copies) and run Model::forward_block with them.
struct BlockWeights {
  std::vector<float> attn_norm, ffn_norm;
  LinearWeights attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down;
};

/// A loaded llama-family model. Move-only; keeps its GGUF mapping alive.
class Model {
 public:
  /// Maps and parses `path` and checks the tensors against the metadata. Throws nibble::Error
  /// for an unsupported architecture or rope scaling, a missing or misshapen tensor, or a weight
  /// type without a nibble GEMM.
  static Model load(const std::string& path);
  /// Same, from an already parsed file (taken over by the model).
  static Model from_gguf(gguf::File file);

  Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  /// The hyper-parameters.
  const Hparams& hparams() const;
  /// The underlying GGUF file (metadata, tensors).
  const gguf::File& file() const;

  /// Runs the chunk tokens[0..n) at positions 0..n-1 (causal attention, no cache) and returns
  /// the logits of the tokens first_output..n-1: (n - first_output) x n_vocab floats, row-major.
  /// Throws if n < 1, first_output is outside [0, n), or a token id is outside [0, n_vocab).
  /// `observer` (may be empty) sees the input of every matrix product, the output matrix
  /// included (whose input has n - first_output rows).
  std::vector<float> forward(const Context& ctx, const std::int32_t* tokens, std::int64_t n,
                             std::int64_t first_output = 0,
                             const MatmulObserver& observer = {}) const;

  // Block-level access, for drivers that run the network one block at a time over a batch of
  // sequences (sequential calibration). forward() is exactly embed(), forward_block() with
  // block_weights(l) for l = 0 .. n_layer-1, then the output norm and matrix.

  /// The token embeddings of tokens[0..n): n x n_embd floats, row-major. Throws if n < 1 or a
  /// token id is outside [0, n_vocab).
  std::vector<float> embed(const Context& ctx, const std::int32_t* tokens, std::int64_t n) const;

  /// Views of block `layer`'s weights in the mapped file (norms copied to fp32). Throws if layer
  /// is outside [0, n_layer).
  BlockWeights block_weights(std::int64_t layer) const;

  /// Runs one transformer block with weights `w` in place on the hidden states x of one sequence
  /// of n tokens at positions 0..n-1 (n x n_embd floats, row-major): x += attention(norm(x)),
  /// then x += ffn(norm(x)). `observer` (may be empty) sees the input of each of the seven
  /// products, named after w's LinearWeights::name. Throws if n < 1, x is null, or a norm or
  /// matrix of `w` does not have the model's shape or a GEMM format.
  void forward_block(const Context& ctx, const BlockWeights& w, float* x, std::int64_t n,
                     const MatmulObserver& observer = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// nibble format of ggml type id `type` for a weight matrix (f32, f16, bf16, q8_0, q4_0, q4_1,
/// q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs: every type nibble quantize writes);
/// throws naming `tensor` for any other type.
Format weight_format(std::uint32_t type, const std::string& tensor);

}  // namespace nibble::llm
