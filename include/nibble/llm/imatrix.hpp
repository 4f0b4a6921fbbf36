// nibble: importance-matrix collection with llama-imatrix's protocol on the reference forward
// pass (nibble/llm/model.hpp); the files are written by nibble/io/imatrix.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "nibble/io/imatrix.hpp"
#include "nibble/llm/model.hpp"
#include "nibble/llm/perplexity.hpp"

namespace nibble::llm {

/// Options of collect_imatrix.
struct ImatrixOptions {
  std::int64_t n_ctx = 512;       ///< chunk length (>= 16: llama-imatrix ignores smaller batches)
  std::int64_t max_chunks = -1;   ///< at most this many chunks (< 0: all whole chunks)
  std::int32_t bos = -1;          ///< BOS id put at the start of every chunk (< 0: none)
  bool process_output = false;    ///< also collect output.weight
  PplAccumulator* ppl = nullptr;  ///< when set, receives the perplexity of each chunk's 2nd half
  /// Called after every chunk with (chunks done, chunks in all).
  std::function<void(std::int64_t, std::int64_t)> progress;
};

/// Runs the model over non-overlapping chunks of `tokens` (each chunk's first token replaced by
/// options.bos when >= 0) and sums the squared inputs of every matrix product of the blocks
/// (blk.*; output.weight too with process_output) and their token counts, like llama-imatrix.
/// stats.chunks and stats.chunk_size are set; datasets are left to the caller. Throws if there
/// are fewer than 2 * n_ctx tokens (llama-imatrix's rule), n_ctx < 16, or a token is out of range.
ImatrixStats collect_imatrix(const Context& ctx, const Model& model,
                             const std::vector<std::int32_t>& tokens,
                             const ImatrixOptions& options);

}  // namespace nibble::llm
