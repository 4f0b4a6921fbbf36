// nibble: perplexity and KL-divergence statistics as llama.cpp's llama-perplexity computes them,
// and its base-logits file format.
//
// Base-logits file (little-endian, written by `llama-perplexity --kl-divergence-base FILE`):
//   8 bytes "_logits_", u32 n_ctx, i32 n_vocab, i32 n_chunk, n_chunk * n_ctx i32 tokens (the
//   evaluated tokens, without the BOS substitution), then per chunk, for each of the
//   n_ctx - 1 - n_ctx/2 scored tokens, one record of kld_record_u16(n_vocab) uint16 values:
//   two floats (scale, min_log_prob) in the first four uint16, then n_vocab codes q with
//   log p_i = scale * q_i + min_log_prob (log-probabilities below max - 16 are clamped).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace nibble::llm {

/// -log softmax(logits)[tok] over n_vocab logits, as llama-perplexity computes it (float max,
/// double sum of expf).
double token_nll(const float* logits, std::int64_t n_vocab, std::int32_t tok);

/// Running perplexity estimate (sums of the negative log-likelihoods and their squares).
struct PplAccumulator {
  double nll = 0.0;        ///< sum of -log p
  double nll2 = 0.0;       ///< sum of (-log p)^2
  std::int64_t count = 0;  ///< tokens scored
  /// Adds one token's negative log-likelihood.
  void add(double v) {
    nll += v;
    nll2 += v * v;
    ++count;
  }
  /// exp(mean nll) (0 when empty).
  double ppl() const;
  /// llama-perplexity's uncertainty of the perplexity: ppl * sqrt(var(nll) / (count - 1)),
  /// var(nll) = mean(nll^2) - mean(nll)^2; negative (-1) when that variance is not positive.
  double ppl_uncertainty() const;
};

/// uint16 values of one token's record in a base-logits file: 2 * ((n_vocab + 1) / 2) + 4.
std::int64_t kld_record_u16(std::int64_t n_vocab);

/// Fills one base-logits record (kld_record_u16(n_vocab) values) from the logits exactly as
/// llama-perplexity does and returns -log softmax(logits)[tok].
double encode_log_probs(const float* logits, std::int64_t n_vocab, std::int32_t tok,
                        std::uint16_t* record);

/// Mean and uncertainty as llama-perplexity reports them (uncertainty 0 for <= 10 samples).
std::pair<double, double> mean_and_uncertainty(double sum, double sum2, std::int64_t count);

/// Running KL-divergence statistics of a model against base log-probabilities.
struct KldAccumulator {
  double sum_nll = 0, sum_nll2 = 0, sum_nll_base = 0, sum_nll_base2 = 0, sum_nll_nll_base = 0;
  double sum_kld = 0, sum_kld2 = 0, sum_p_diff = 0, sum_p_diff2 = 0, sum_p_diff4 = 0;
  float max_p_diff = 0.0f;
  std::int64_t n_same_top = 0;  ///< tokens whose argmax agrees with the base's
  std::int64_t count = 0;       ///< tokens seen
  std::vector<float> kld;       ///< per-token KL divergence
  std::vector<float> p_diff;    ///< per-token p(tok) - p_base(tok)

  /// Adds one token: the model's logits, the base's record (see encode_log_probs), the token.
  void add(const float* logits, std::int64_t n_vocab, const std::uint16_t* base_record,
           std::int32_t tok);
};

/// Final statistics printed by llama-perplexity --kl-divergence.
struct KldSummary {
  double ppl = 0, ppl_unc = 0, ppl_base = 0, ppl_base_unc = 0, cor = 0;
  double log_ratio = 0, log_ratio_unc = 0, ratio = 0, ratio_unc = 0, diff = 0, diff_unc = 0;
  double kld_mean = 0, kld_unc = 0;
  float kld_max = 0, kld_999 = 0, kld_99 = 0, kld_95 = 0, kld_90 = 0, kld_median = 0;
  float kld_10 = 0, kld_5 = 0, kld_1 = 0, kld_01 = 0, kld_min = 0;
  double p_diff_mean = 0, p_diff_unc = 0, rms_p_diff = 0, rms_p_diff_unc = 0;
  float p_diff_max = 0, p_diff_999 = 0, p_diff_99 = 0, p_diff_95 = 0, p_diff_90 = 0;
  float p_diff_75 = 0, p_diff_median = 0, p_diff_25 = 0, p_diff_10 = 0, p_diff_5 = 0;
  float p_diff_1 = 0, p_diff_01 = 0, p_diff_min = 0;
  double same_top = 0, same_top_unc = 0;
};

/// Computes the summary (percentiles interpolated like llama-perplexity). Throws if empty.
KldSummary summarize(const KldAccumulator& a);

/// Header of a base-logits file.
struct BaseLogitsHeader {
  std::uint32_t n_ctx = 0;           ///< chunk length
  std::int32_t n_vocab = 0;          ///< vocabulary size
  std::int32_t n_chunk = 0;          ///< chunks
  std::vector<std::int32_t> tokens;  ///< n_chunk * n_ctx tokens
};

/// Writes the header to `f`. Throws on a write error or inconsistent sizes.
void write_base_header(std::FILE* f, const BaseLogitsHeader& h);

/// Reads and checks the header of the base-logits file `f` (named `path` in messages):
/// magic, n_ctx >= 4, n_vocab >= 1 (and == expected_vocab when that is > 0), n_chunk >= 1, the
/// tokens, and (when `file_size` is > 0) that the file holds all the records. Throws
/// nibble::Error otherwise.
BaseLogitsHeader read_base_header(std::FILE* f, const std::string& path,
                                  std::uint64_t file_size = 0, std::int32_t expected_vocab = 0);

}  // namespace nibble::llm
