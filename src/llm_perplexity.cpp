// nibble: perplexity / KL-divergence statistics and the base-logits file (see
// nibble/llm/perplexity.hpp).
#include "nibble/llm/perplexity.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "nibble/core/error.hpp"

namespace nibble::llm {

using detail::fail;

namespace {

// Round to nearest (ties to even) through the float mantissa, as ggml's nearest_int.
int nearest_int(float fval) {
  const float val = fval + 12582912.0f;
  std::int32_t i;
  std::memcpy(&i, &val, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

float percentile(const std::vector<float>& sorted, float fraction) {
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  float p = fraction * static_cast<float>(sorted.size() - 1);
  const std::size_t ip = static_cast<std::size_t>(p);
  p -= static_cast<float>(ip);
  return (1 - p) * sorted[ip] + p * sorted[std::min(ip + 1, sorted.size() - 1)];
}

float median(const std::vector<float>& s) {
  return s.size() % 2 == 0 ? 0.5f * (s[s.size() / 2] + s[s.size() / 2 - 1]) : s[s.size() / 2];
}

}  // namespace

double token_nll(const float* logits, std::int64_t n_vocab, std::int32_t tok) {
  float mx = logits[0];
  for (std::int64_t i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (std::int64_t i = 0; i < n_vocab; ++i) sum += std::exp(logits[i] - mx);
  return -(static_cast<double>(logits[tok] - mx) - std::log(sum));
}

double PplAccumulator::ppl() const {
  return count > 0 ? std::exp(nll / static_cast<double>(count)) : 0.0;
}

double PplAccumulator::ppl_uncertainty() const {
  if (count < 2) return -1.0;
  const double c = static_cast<double>(count);
  const double mean = nll / c;
  const double var = nll2 / c - mean * mean;
  if (!(var > 0)) return -1.0;
  return std::sqrt(var / (c - 1)) * std::exp(mean);
}

std::int64_t kld_record_u16(std::int64_t n_vocab) {
  return 2 * ((n_vocab + 1) / 2) + 4;
}

double encode_log_probs(const float* logits, std::int64_t n_vocab, std::int32_t tok,
                        std::uint16_t* record) {
  float max_logit = logits[0], min_logit = logits[0];
  for (std::int64_t i = 1; i < n_vocab; ++i) {
    max_logit = std::max(max_logit, logits[i]);
    min_logit = std::min(min_logit, logits[i]);
  }
  min_logit = std::max(min_logit, max_logit - 16);
  double sum_exp = 0.0;
  for (std::int64_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  const float scale = (max_logit - min_logit) / 65535.f;
  std::memcpy(record, &scale, 4);
  std::memcpy(record + 2, &min_log_prob, 4);
  std::uint16_t* q = record + 4;
  // The padding value (odd n_vocab) is zero.
  std::memset(q, 0, static_cast<std::size_t>(kld_record_u16(n_vocab) - 4) * 2);
  if (scale != 0.0f) {
    const float inv_scale = 1 / scale;
    for (std::int64_t i = 0; i < n_vocab; ++i) {
      q[i] = logits[i] > min_logit
                 ? static_cast<std::uint16_t>(nearest_int(inv_scale * (logits[i] - min_logit)))
                 : 0;
    }
  }
  return static_cast<double>(max_logit + log_sum_exp - logits[tok]);
}

std::pair<double, double> mean_and_uncertainty(double sum, double sum2, std::int64_t count) {
  if (count < 1) return {0.0, 0.0};
  const double c = static_cast<double>(count);
  const double f = sum / c;
  double df = sum2 / c - f * f;
  df = df > 0 && count > 10 ? std::sqrt(df / (c - 1)) : 0.0;
  return {f, df};
}

void KldAccumulator::add(const float* logits, std::int64_t n_vocab,
                         const std::uint16_t* base_record, std::int32_t tok) {
  float max_logit = logits[0];
  std::int64_t imax = 0;
  for (std::int64_t i = 1; i < n_vocab; ++i) {
    if (logits[i] > max_logit) {
      max_logit = logits[i];
      imax = i;
    }
  }
  double sum_exp = 0.0;
  for (std::int64_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  float scale, min_log_prob;
  std::memcpy(&scale, base_record, 4);
  std::memcpy(&min_log_prob, base_record + 2, 4);
  const std::uint16_t* base = base_record + 4;

  const float nll = max_logit + log_sum_exp - logits[tok];
  sum_nll += nll;
  sum_nll2 += nll * nll;
  const float nll_base = -(scale * base[tok] + min_log_prob);
  sum_nll_base += nll_base;
  sum_nll_base2 += nll_base * nll_base;
  sum_nll_nll_base += nll * nll_base;

  max_logit += log_sum_exp;
  double sum = 0;
  std::int64_t imax_base = -1;
  float p_log_base_max = 0;
  for (std::int64_t i = 0; i < n_vocab; ++i) {
    const float p_log_base = scale * base[i] + min_log_prob;
    if (i == 0 || p_log_base > p_log_base_max) {
      p_log_base_max = p_log_base;
      imax_base = i;
    }
    if (p_log_base > -16.f) {
      const float p_base = std::exp(p_log_base);
      sum += p_base * (p_log_base - logits[i] + max_logit);
    }
  }
  sum_kld += sum;
  sum_kld2 += sum * sum;
  ++count;
  if (imax == imax_base) ++n_same_top;

  const float p_base = std::exp(-nll_base);
  const float p = std::exp(-nll);
  const float pd = p - p_base;
  sum_p_diff += pd;
  const double pd2 = static_cast<double>(pd) * pd;
  sum_p_diff2 += pd2;
  sum_p_diff4 += pd2 * pd2;
  max_p_diff = std::max(max_p_diff, std::fabs(pd));
  kld.push_back(static_cast<float>(sum));
  p_diff.push_back(pd);
}

KldSummary summarize(const KldAccumulator& a) {
  if (a.count < 1 || a.kld.empty()) fail("kld: no tokens were scored");
  KldSummary s;
  auto covariance = [](double suma, double sumb, double sumab, std::int64_t count) {
    if (count < 10) return 0.0;
    const double c = static_cast<double>(count);
    return (sumab / c - (suma / c) * (sumb / c)) / (c - 1);
  };
  const auto lp = mean_and_uncertainty(a.sum_nll, a.sum_nll2, a.count);
  s.ppl = std::exp(lp.first);
  s.ppl_unc = s.ppl * lp.second;
  const auto lb = mean_and_uncertainty(a.sum_nll_base, a.sum_nll_base2, a.count);
  s.ppl_base = std::exp(lb.first);
  s.ppl_base_unc = s.ppl_base * lb.second;
  const double cov = covariance(a.sum_nll, a.sum_nll_base, a.sum_nll_nll_base, a.count);
  s.cor = cov / (lp.second * lb.second);
  s.log_ratio = lp.first - lb.first;
  s.log_ratio_unc = std::sqrt(lp.second * lp.second + lb.second * lb.second - 2.0 * cov);
  s.ratio = std::exp(s.log_ratio);
  s.ratio_unc = s.ratio * s.log_ratio_unc;
  const double ppl_cov = s.ppl * s.ppl_base * cov;
  s.diff = s.ppl - s.ppl_base;
  s.diff_unc = std::sqrt(s.ppl_unc * s.ppl_unc + s.ppl_base_unc * s.ppl_base_unc - 2.0 * ppl_cov);

  const auto kl = mean_and_uncertainty(a.sum_kld, a.sum_kld2, a.count);
  s.kld_mean = kl.first;
  s.kld_unc = kl.second;
  std::vector<float> k = a.kld;
  std::sort(k.begin(), k.end());
  s.kld_max = k.back();
  s.kld_999 = percentile(k, 0.999f);
  s.kld_99 = percentile(k, 0.990f);
  s.kld_95 = percentile(k, 0.950f);
  s.kld_90 = percentile(k, 0.900f);
  s.kld_median = median(k);
  s.kld_10 = percentile(k, 0.100f);
  s.kld_5 = percentile(k, 0.050f);
  s.kld_1 = percentile(k, 0.010f);
  s.kld_01 = percentile(k, 0.001f);
  s.kld_min = k.front();

  const auto pd = mean_and_uncertainty(a.sum_p_diff, a.sum_p_diff2, a.count);
  s.p_diff_mean = pd.first;
  s.p_diff_unc = pd.second;
  std::vector<float> p = a.p_diff;
  std::sort(p.begin(), p.end());
  s.p_diff_max = p.back();
  s.p_diff_999 = percentile(p, 0.999f);
  s.p_diff_99 = percentile(p, 0.990f);
  s.p_diff_95 = percentile(p, 0.950f);
  s.p_diff_90 = percentile(p, 0.900f);
  s.p_diff_75 = percentile(p, 0.750f);
  s.p_diff_median = median(p);
  s.p_diff_25 = percentile(p, 0.250f);
  s.p_diff_10 = percentile(p, 0.100f);
  s.p_diff_5 = percentile(p, 0.050f);
  s.p_diff_1 = percentile(p, 0.010f);
  s.p_diff_01 = percentile(p, 0.001f);
  s.p_diff_min = p.front();
  const auto mse = mean_and_uncertainty(a.sum_p_diff2, a.sum_p_diff4, a.count);
  s.rms_p_diff = std::sqrt(mse.first);
  s.rms_p_diff_unc = s.rms_p_diff > 0 ? 0.5 / s.rms_p_diff * mse.second : 0.0;
  s.same_top = static_cast<double>(a.n_same_top) / static_cast<double>(a.count);
  s.same_top_unc = a.count > 1
                       ? std::sqrt(s.same_top * (1 - s.same_top) / static_cast<double>(a.count - 1))
                       : 0.0;
  return s;
}

void write_base_header(std::FILE* f, const BaseLogitsHeader& h) {
  if (h.tokens.size() != static_cast<std::size_t>(h.n_ctx) * static_cast<std::size_t>(h.n_chunk)) {
    fail("kld: base header has ", h.tokens.size(), " tokens, expected n_ctx * n_chunk = ",
         static_cast<std::uint64_t>(h.n_ctx) * static_cast<std::uint64_t>(h.n_chunk));
  }
  bool ok = std::fwrite("_logits_", 1, 8, f) == 8;
  ok = ok && std::fwrite(&h.n_ctx, 4, 1, f) == 1;
  ok = ok && std::fwrite(&h.n_vocab, 4, 1, f) == 1;
  ok = ok && std::fwrite(&h.n_chunk, 4, 1, f) == 1;
  ok = ok && std::fwrite(h.tokens.data(), 4, h.tokens.size(), f) == h.tokens.size();
  if (!ok) fail("kld: writing the base-logits header failed");
}

BaseLogitsHeader read_base_header(std::FILE* f, const std::string& path, std::uint64_t file_size,
                                  std::int32_t expected_vocab) {
  char magic[8];
  if (std::fread(magic, 1, 8, f) != 8 || std::memcmp(magic, "_logits_", 8) != 0) {
    fail("kld: \"", path, "\" is not a llama-perplexity base-logits file (no _logits_ magic)");
  }
  BaseLogitsHeader h;
  if (std::fread(&h.n_ctx, 4, 1, f) != 1 || std::fread(&h.n_vocab, 4, 1, f) != 1 ||
      std::fread(&h.n_chunk, 4, 1, f) != 1) {
    fail("kld: \"", path, "\": truncated header");
  }
  if (h.n_ctx < 4 || h.n_ctx > (1u << 24) || h.n_vocab < 1 || h.n_chunk < 1) {
    fail("kld: \"", path, "\": invalid header (n_ctx ", h.n_ctx, ", n_vocab ", h.n_vocab,
         ", n_chunk ", h.n_chunk, ")");
  }
  if (expected_vocab > 0 && h.n_vocab != expected_vocab) {
    fail("kld: \"", path, "\" was computed with a vocabulary of ", h.n_vocab,
         " tokens, the model has ", expected_vocab);
  }
  const std::uint64_t ntok = static_cast<std::uint64_t>(h.n_ctx) * h.n_chunk;
  const std::uint64_t scored = h.n_ctx - 1 - h.n_ctx / 2;
  const std::uint64_t need = 20 + 4 * ntok +
                             2 * static_cast<std::uint64_t>(h.n_chunk) * scored *
                                 static_cast<std::uint64_t>(kld_record_u16(h.n_vocab));
  if (file_size > 0 && file_size < need) {
    fail("kld: \"", path, "\" is truncated: ", file_size, " bytes, the header (n_ctx ", h.n_ctx,
         ", n_vocab ", h.n_vocab, ", n_chunk ", h.n_chunk, ") needs ", need);
  }
  h.tokens.resize(static_cast<std::size_t>(ntok));
  if (std::fread(h.tokens.data(), 4, h.tokens.size(), f) != h.tokens.size()) {
    fail("kld: \"", path, "\": truncated token list");
  }
  return h;
}

}  // namespace nibble::llm
