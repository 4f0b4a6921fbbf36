// nibble: llama-imatrix's collection protocol (see nibble/llm/imatrix.hpp).
#include "nibble/llm/imatrix.hpp"

#include <algorithm>

#include "nibble/core/error.hpp"

namespace nibble::llm {

using detail::fail;

ImatrixStats collect_imatrix(const Context& ctx, const Model& model,
                             const std::vector<std::int32_t>& tokens, const ImatrixOptions& o) {
  if (o.n_ctx < 16) fail("imatrix: n_ctx = ", o.n_ctx, " is too small (need >= 16)");
  const std::int64_t n_tok = static_cast<std::int64_t>(tokens.size());
  if (n_tok < 2 * o.n_ctx) {
    fail("imatrix: you need at least ", 2 * o.n_ctx, " tokens for a context of ", o.n_ctx,
         "; the input has only ", n_tok);
  }
  std::int64_t n_chunk = n_tok / o.n_ctx;
  if (o.max_chunks >= 0) n_chunk = std::min(n_chunk, o.max_chunks);
  if (n_chunk < 1) fail("imatrix: no chunk to evaluate");
  const std::int64_t n_vocab = model.hparams().n_vocab;
  if (o.bos >= n_vocab) fail("imatrix: BOS id ", o.bos, " is outside the vocabulary");

  ImatrixStats stats;
  stats.chunk_size = static_cast<int>(o.n_ctx);
  const MatmulObserver obs = [&](const std::string& name, const float* x, std::int64_t n,
                                 std::int64_t cols) {
    // llama-imatrix skips batches of fewer than 16 rows.
    if (n < 16) return;
    if (name.compare(0, 4, "blk.") == 0 || (o.process_output && name == "output.weight")) {
      stats.add(name, x, n, cols);
    }
  };
  const std::int64_t first = o.n_ctx / 2;
  for (std::int64_t c = 0; c < n_chunk; ++c) {
    std::vector<std::int32_t> t(tokens.begin() + c * o.n_ctx, tokens.begin() + (c + 1) * o.n_ctx);
    if (o.bos >= 0) t[0] = o.bos;
    const std::vector<float> logits = model.forward(ctx, t.data(), o.n_ctx, 0, obs);
    stats.chunks = static_cast<int>(c + 1);
    if (o.ppl) {
      const std::int32_t* tk = tokens.data() + c * o.n_ctx;
      for (std::int64_t i = first; i < o.n_ctx - 1; ++i) {
        o.ppl->add(token_nll(logits.data() + i * n_vocab, n_vocab, tk[i + 1]));
      }
    }
    if (o.progress) o.progress(c + 1, n_chunk);
  }
  return stats;
}

}  // namespace nibble::llm
