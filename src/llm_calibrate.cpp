// nibble: sequential GPTQ / AWQ calibration from text (see nibble/llm/calibrate.hpp).
#include "nibble/llm/calibrate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>

#include <Eigen/Dense>

#include "nibble/core/error.hpp"
#include "nibble/llm/model.hpp"
#include "nibble/nibble.hpp"

namespace nibble::llm {

using detail::fail;

namespace {

// ggml type ids used here.
constexpr std::uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ5_0 = 6, kQ8_0 = 8, kQ2_K = 10, kQ3_K = 11,
                        kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30;

using RowMajorXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Whether gptq::quantize_blocks can produce type t for rows of `cols` values. Other types (q4_1,
// q5_1, iq4_nl, iq4_xs, bf16, f16) are rounded as llama-quantize writes them.
bool gptq_type(std::uint32_t t, std::int64_t cols) {
  if (t == kQ2_K || t == kQ3_K || t == kQ4_K || t == kQ5_K || t == kQ6_K) return cols % 256 == 0;
  if (t == kQ8_0 || t == kQ5_0 || t == kQ4_0) return cols % 32 == 0;
  return false;
}

// The seven matrices of a block, their input groups (one Hessian per distinct input: q/k/v share
// the attention norm's output, gate/up the ffn norm's) and the first weight reading each input.
constexpr int kNumLinears = 7;
constexpr const char* kLinearNames[kNumLinears] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                                   "ffn_gate", "ffn_up", "ffn_down"};
constexpr int kGroupOf[kNumLinears] = {0, 0, 0, 1, 2, 2, 3};
constexpr int kNumGroups = 4;
constexpr int kGroupLead[kNumGroups] = {0, 3, 4, 6};
enum : int { kQ = 0, kK = 1, kV = 2, kO = 3, kGate = 4, kUp = 5, kDown = 6 };

LinearWeights& linear_at(BlockWeights& b, int i) {
  LinearWeights* all[kNumLinears] = {&b.attn_q,   &b.attn_k, &b.attn_v,  &b.attn_output,
                                     &b.ffn_gate, &b.ffn_up, &b.ffn_down};
  return *all[i];
}

std::string tensor_name(std::int64_t layer, const char* what, const char* suffix = ".weight") {
  return "blk." + std::to_string(layer) + "." + what + suffix;
}

// Statistics of one input of a block, accumulated chunk by chunk.
struct InputStats {
  Hessian h;                    // 2/n sum x x^T
  std::vector<double> abs_sum;  // sum |x| per channel (awq)
  RowMajorXf sample;            // every step-th token (awq clip search)
  explicit InputStats(std::int64_t cols) : h(cols) {}
};

// Little-endian f32 bytes of a vector (the GGUF data of a 1-D f32 tensor).
std::vector<std::uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

class Calibrator {
 public:
  Calibrator(const std::string& in_path, LlamaFtype ftype, const std::vector<std::int32_t>& tokens,
             const SequentialOptions& o);
  // QuantizeOptions::source: the tensors of block l, computing blocks up to l first.
  bool source(const TensorPlan& p, SourcedTensor& out);

 private:
  void run_layer(std::int64_t l);
  void statistics(std::int64_t l, const BlockWeights& w, std::vector<InputStats>& st);
  void awq_fold(std::int64_t l, std::vector<RowMajorXf>& W, BlockWeights& q,
                std::vector<InputStats>& st, bool* calibrated, bool* norm_changed,
                bool* vbias_changed);
  void report(std::int64_t l, int stage, const char* name) const;

  SequentialOptions opt_;
  Context ctx_;
  Model model_;
  std::int64_t n_layer_ = 0, n_ctx_ = 0, n_chunk_ = 0, d_ = 0;
  std::map<std::string, TensorPlan> plan_;
  Format awq_fmt_ = Format::q4_K;
  std::int64_t sample_step_ = 1, n_sample_ = 0;
  std::vector<float> x_;  // hidden states: n_chunk x n_ctx x n_embd
  std::int64_t next_layer_ = 0;
  std::map<std::string, SourcedTensor> ready_;
  std::chrono::steady_clock::time_point t0_;
};

Calibrator::Calibrator(const std::string& in_path, LlamaFtype ftype,
                       const std::vector<std::int32_t>& tokens, const SequentialOptions& o)
    : opt_(o) {
  t0_ = std::chrono::steady_clock::now();
  if (o.method != QuantMethod::gptq && o.method != QuantMethod::awq) {
    fail("quantize: sequential calibration needs method gptq or awq");
  }
  if (o.threads < 0) fail("quantize: threads = ", o.threads, " (expected >= 0)");
  if (o.n_ctx < 16)
    fail("quantize: calibration chunk size ", o.n_ctx, " is too small (need >= 16)");
  if (o.max_chunks == 0) fail("quantize: --chunks 0 leaves no calibration chunk");
  if (o.gptq.act_order) fail("quantize: GPTQ act_order is not supported on K-quant grids");
  ctx_.threads = o.threads;
  model_ = Model::load(in_path);
  const Hparams& hp = model_.hparams();
  n_layer_ = hp.n_layer;
  d_ = hp.n_embd;
  n_ctx_ = o.n_ctx;

  const std::int64_t n_tok = static_cast<std::int64_t>(tokens.size());
  if (n_tok < n_ctx_) {
    fail("quantize: the calibration text has ", n_tok, " tokens, fewer than one chunk of ", n_ctx_,
         " (use a longer text or a smaller -c)");
  }
  n_chunk_ = n_tok / n_ctx_;
  if (o.max_chunks > 0) n_chunk_ = std::min(n_chunk_, o.max_chunks);
  for (std::int64_t i = 0; i < n_chunk_ * n_ctx_; ++i) {
    const std::int32_t t = tokens[static_cast<std::size_t>(i)];
    if (t < 0 || t >= hp.n_vocab) {
      fail("quantize: calibration token ", i, " = ", t, " is outside the vocabulary [0, ",
           hp.n_vocab, ")");
    }
  }
  if (o.bos >= hp.n_vocab) fail("quantize: BOS id ", o.bos, " is outside the vocabulary");

  // The output types, as llama-quantize chooses them.
  for (TensorPlan& p : plan_llama_quant(model_.file(), ftype)) plan_[p.name] = std::move(p);
  bool any_gptq = false;
  for (std::int64_t l = 0; l < n_layer_; ++l) {
    for (int i = 0; i < kNumLinears; ++i) {
      const std::string name = tensor_name(l, kLinearNames[i]);
      const TensorPlan& p = plan_.at(name);
      if (p.quantize && p.in_type != kF32 && p.in_type != kF16 && p.in_type != kBF16) {
        fail("quantize: tensor ", name, " is stored as ", gguf::type_info(p.in_type).name,
             "; sequential calibration needs f32, f16 or bf16 weights");
      }
      (void)weight_format(p.out_type, name);  // the forward pass must run the output type
      const gguf::TensorInfo* t = model_.file().find_tensor(name);
      if (gptq_type(p.out_type, t->shape[0])) any_gptq = true;
    }
  }
  const std::uint32_t base = llama_ftype_base_type(ftype);
  if (o.method == QuantMethod::gptq && !any_gptq) {
    fail(
        "quantize: --method gptq calibrates Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / Q8_0 / Q5_0 / Q4_0 "
        "weights; ",
        llama_ftype_name(ftype), " gives this model none");
  }
  if (o.method == QuantMethod::awq) {
    if (base != kQ4_K && base != kQ5_K) {
      fail("quantize: --method awq needs a Q4_K or Q5_K file type (got ", llama_ftype_name(ftype),
           ")");
    }
    if (d_ % 256 != 0 && hp.n_ff % 256 != 0) {
      fail(
          "quantize: --method awq searches its scales on 256-value super-blocks, but this model's "
          "rows (n_embd ",
          d_, ", n_ff ", hp.n_ff, ") are not multiples of 256: nothing to calibrate");
    }
    awq_fmt_ = base == kQ4_K ? Format::q4_K : Format::q5_K;
    if (o.awq.n_sample_token < 1) fail("quantize: awq n_sample_token must be >= 1");
    sample_step_ = std::max<std::int64_t>(1, n_chunk_ * n_ctx_ / o.awq.n_sample_token);
    n_sample_ = (n_chunk_ * n_ctx_ + sample_step_ - 1) / sample_step_;
  }

  // Block 0's inputs: the chunks through the output model's token embedding.
  const std::string embd = "token_embd.weight";
  const TensorPlan& pe = plan_.at(embd);
  x_.resize(static_cast<std::size_t>(n_chunk_ * n_ctx_ * d_));
  std::vector<std::int32_t> chunk(static_cast<std::size_t>(n_ctx_));
  for (std::int64_t c = 0; c < n_chunk_; ++c) {
    std::copy(tokens.begin() + c * n_ctx_, tokens.begin() + (c + 1) * n_ctx_, chunk.begin());
    if (o.bos >= 0) chunk[0] = o.bos;
    const std::vector<float> e = model_.embed(ctx_, chunk.data(), n_ctx_);
    float* xc = x_.data() + c * n_ctx_ * d_;
    if (pe.quantize) {
      // Row by row, as the quantized file stores it (rows are quantized independently).
      const Format f = weight_format(pe.out_type, embd);
      for (std::int64_t t = 0; t < n_ctx_; ++t) {
        const std::vector<std::uint8_t> b =
            quantize_tensor(ctx_, pe.out_type, e.data() + t * d_, 1, 1, d_);
        dequantize(f, b.data(), 1, d_, xc + t * d_);
      }
    } else {
      std::copy(e.begin(), e.end(), xc);
    }
  }
}

void Calibrator::report(std::int64_t l, int stage, const char* name) const {
  if (!opt_.progress) return;
  SequentialProgress p;
  p.layer = l;
  p.n_layer = n_layer_;
  p.stage = name;
  p.fraction = (static_cast<double>(l) + (stage + 1) / 3.0) / static_cast<double>(n_layer_);
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  p.eta = p.fraction > 0 ? p.seconds * (1.0 - p.fraction) / p.fraction : 0.0;
  opt_.progress(p);
}

void Calibrator::statistics(std::int64_t l, const BlockWeights& w, std::vector<InputStats>& st) {
  const bool awq = opt_.method == QuantMethod::awq;
  std::string lead[kNumGroups];
  for (int g = 0; g < kNumGroups; ++g) lead[g] = tensor_name(l, kLinearNames[kGroupLead[g]]);
  const std::int64_t cols[kNumGroups] = {w.attn_q.cols, w.attn_output.cols, w.ffn_gate.cols,
                                         w.ffn_down.cols};
  st.clear();
  for (int g = 0; g < kNumGroups; ++g) {
    st.emplace_back(cols[g]);
    if (awq) {
      st[g].abs_sum.assign(static_cast<std::size_t>(cols[g]), 0.0);
      st[g].sample.resize(n_sample_, cols[g]);
    }
  }
  std::int64_t token0 = 0;  // global index of the chunk's first token
  const MatmulObserver obs = [&](const std::string& name, const float* x, std::int64_t n,
                                 std::int64_t nc) {
    for (int g = 0; g < kNumGroups; ++g) {
      if (name != lead[g]) continue;
      InputStats& s = st[static_cast<std::size_t>(g)];
      s.h.add_batch(x, n);
      if (awq) {
        for (std::int64_t t = 0; t < n; ++t) {
          const float* r = x + t * nc;
          for (std::int64_t c = 0; c < nc; ++c)
            s.abs_sum[static_cast<std::size_t>(c)] += std::fabs(r[c]);
          const std::int64_t gt = token0 + t;
          if (gt % sample_step_ == 0) {
            s.sample.row(gt / sample_step_) = Eigen::Map<const Eigen::RowVectorXf>(r, nc);
          }
        }
      }
    }
  };
  std::vector<float> h(static_cast<std::size_t>(n_ctx_ * d_));
  for (std::int64_t c = 0; c < n_chunk_; ++c) {
    const float* xc = x_.data() + c * n_ctx_ * d_;
    std::copy(xc, xc + n_ctx_ * d_, h.begin());
    token0 = c * n_ctx_;
    model_.forward_block(ctx_, w, h.data(), n_ctx_, obs);
  }
  if (opt_.on_hessian) {
    for (int g = 0; g < kNumGroups; ++g)
      opt_.on_hessian(l, lead[g], st[static_cast<std::size_t>(g)].h);
  }
}

// AWQ: searches the scales of the block's scaling groups on the unscaled weights, folds them
// (W columns times s, norms and previous rows divided by s) and runs the clip search.
void Calibrator::awq_fold(std::int64_t l, std::vector<RowMajorXf>& W, BlockWeights& q,
                          std::vector<InputStats>& st, bool* calibrated, bool* norm_changed,
                          bool* vbias_changed) {
  const double n_tok = static_cast<double>(n_chunk_ * n_ctx_);
  auto x_mean = [&](int g) {
    const std::vector<double>& a = st[static_cast<std::size_t>(g)].abs_sum;
    Eigen::VectorXf m(static_cast<Eigen::Index>(a.size()));
    for (std::size_t c = 0; c < a.size(); ++c)
      m[static_cast<Eigen::Index>(c)] = static_cast<float>(a[c] / n_tok);
    return m;
  };
  auto out_type = [&](int i) { return plan_.at(tensor_name(l, kLinearNames[i])).out_type; };
  auto f32_norm = [&](const char* n) {
    const gguf::TensorInfo* t = model_.file().find_tensor(tensor_name(l, n));
    return t && t->type == kF32;
  };
  // Scale search of linears `lin` (stacked) reading input group g.
  auto search = [&](std::initializer_list<int> lin, int g) {
    Eigen::Index rows = 0;
    for (int i : lin) rows += W[static_cast<std::size_t>(i)].rows();
    Eigen::MatrixXf Wc(rows, W[static_cast<std::size_t>(*lin.begin())].cols());
    Eigen::Index r0 = 0;
    for (int i : lin) {
      const RowMajorXf& Wi = W[static_cast<std::size_t>(i)];
      Wc.middleRows(r0, Wi.rows()) = Wi;
      r0 += Wi.rows();
    }
    awq::Config cfg = opt_.awq;
    cfg.clip = false;
    return awq::search_scales_blocks(awq_fmt_, Wc, x_mean(g),
                                     st[static_cast<std::size_t>(g)].h.matrix(), cfg)
        .scales;
  };
  const std::int64_t d = d_;
  Eigen::VectorXf s[kNumGroups];
  // 1. Search every group on the unscaled block.
  if (d % 256 == 0 && f32_norm("attn_norm")) s[0] = search({kQ, kK, kV}, 0);
  const bool v_ok = W[kV].rows() == W[kO].rows() && W[kV].cols() == W[kO].cols() &&
                    W[kO].cols() % 256 == 0 && (q.attn_v.bias.empty() || [&] {
                      const gguf::TensorInfo* b =
                          model_.file().find_tensor(tensor_name(l, "attn_v", ".bias"));
                      return b && b->type == kF32;
                    }());
  if (v_ok) s[1] = search({kO}, 1);
  if (d % 256 == 0 && f32_norm("ffn_norm")) s[2] = search({kGate, kUp}, 2);
  if (W[kDown].cols() % 256 == 0) s[3] = search({kDown}, 3);
  // 2. Fold.
  auto scale_cols = [&](int i, const Eigen::VectorXf& sc) {
    W[static_cast<std::size_t>(i)] = W[static_cast<std::size_t>(i)] * sc.asDiagonal();
    calibrated[i] = true;
  };
  auto divide_rows = [&](int i, const Eigen::VectorXf& sc) {
    W[static_cast<std::size_t>(i)] =
        sc.cwiseInverse().asDiagonal() * W[static_cast<std::size_t>(i)];
    calibrated[i] = true;
  };
  if (s[0].size()) {
    for (std::int64_t c = 0; c < d; ++c) q.attn_norm[static_cast<std::size_t>(c)] /= s[0][c];
    norm_changed[0] = true;
    for (int i : {kQ, kK, kV}) scale_cols(i, s[0]);
  }
  if (s[1].size()) {
    divide_rows(kV, s[1]);
    for (std::size_t r = 0; r < q.attn_v.bias.size(); ++r) {
      q.attn_v.bias[r] /= s[1][static_cast<Eigen::Index>(r)];
      *vbias_changed = true;
    }
    scale_cols(kO, s[1]);
  }
  if (s[2].size()) {
    for (std::int64_t c = 0; c < d; ++c) q.ffn_norm[static_cast<std::size_t>(c)] /= s[2][c];
    norm_changed[1] = true;
    for (int i : {kGate, kUp}) scale_cols(i, s[2]);
  }
  if (s[3].size()) {
    divide_rows(kUp, s[3]);
    scale_cols(kDown, s[3]);
  }
  // 3. Clip search on the scaled weights (not q/k, as the reference) with the scaled inputs.
  const Format base = awq_fmt_;
  for (int i : {kV, kO, kGate, kUp, kDown}) {
    const int g = kGroupOf[i];
    if (!s[g].size() || weight_format(out_type(i), "") != base) continue;
    const RowMajorXf& sample = st[static_cast<std::size_t>(g)].sample;
    const Eigen::MatrixXf Xs = sample * s[g].cwiseInverse().asDiagonal();
    RowMajorXf& Wi = W[static_cast<std::size_t>(i)];
    const Eigen::MatrixXf cm = awq::clip_search_blocks(base, Eigen::MatrixXf(Wi), Xs, opt_.awq);
    for (Eigen::Index r = 0; r < Wi.rows(); ++r)
      for (Eigen::Index c = 0; c < Wi.cols(); ++c) {
        const float m = cm(r, c / 256);
        Wi(r, c) = std::min(std::max(Wi(r, c), -m), m);
      }
  }
}

void Calibrator::run_layer(std::int64_t l) {
  const BlockWeights orig = model_.block_weights(l);
  std::vector<InputStats> st;
  statistics(l, orig, st);
  report(l, 0, "statistics");

  // The block's weights in f32.
  BlockWeights q = orig;
  std::vector<RowMajorXf> W(kNumLinears);
  for (int i = 0; i < kNumLinears; ++i) {
    const LinearWeights& lw = linear_at(q, i);
    W[static_cast<std::size_t>(i)].resize(lw.rows, lw.cols);
    dequantize(lw.format, lw.data, lw.rows, lw.cols, W[static_cast<std::size_t>(i)].data());
  }
  bool calibrated[kNumLinears] = {};
  bool norm_changed[2] = {};
  bool vbias_changed = false;
  if (opt_.method == QuantMethod::awq) {
    awq_fold(l, W, q, st, calibrated, norm_changed, &vbias_changed);
  }
  std::vector<std::uint8_t> bytes[kNumLinears];
  for (int i = 0; i < kNumLinears; ++i) {
    const std::string name = tensor_name(l, kLinearNames[i]);
    const TensorPlan& p = plan_.at(name);
    LinearWeights& lw = linear_at(q, i);
    if (opt_.method == QuantMethod::gptq && gptq_type(p.out_type, lw.cols)) {
      bytes[i] = gptq::quantize_blocks(
          weight_format(p.out_type, name), Eigen::MatrixXf(W[static_cast<std::size_t>(i)]),
          st[static_cast<std::size_t>(kGroupOf[i])].h.matrix(), opt_.gptq);
      calibrated[i] = true;
    } else if (p.quantize || calibrated[i]) {
      bytes[i] = quantize_tensor(ctx_, p.out_type, W[static_cast<std::size_t>(i)].data(), 1,
                                 lw.rows, lw.cols);
    } else {
      const gguf::TensorInfo* t = model_.file().find_tensor(name);
      bytes[i].assign(t->data, t->data + t->nbytes);
    }
    // The forward pass below runs the dequantized weights in f32 (GPTQ's "fake quantization"):
    // exact products, no activation rounding as in the quantized GEMM kernels.
    RowMajorXf& Wd = W[static_cast<std::size_t>(i)];
    dequantize(weight_format(p.out_type, name), bytes[i].data(), lw.rows, lw.cols, Wd.data());
    lw.format = Format::f32;
    lw.data = Wd.data();
  }
  report(l, 1, "quantize");

  // The next block's inputs: this block with its quantized weights.
  for (std::int64_t c = 0; c < n_chunk_; ++c) {
    model_.forward_block(ctx_, q, x_.data() + c * n_ctx_ * d_, n_ctx_);
  }
  for (int i = 0; i < kNumLinears; ++i) {
    SourcedTensor& t = ready_[tensor_name(l, kLinearNames[i])];
    t.bytes = std::move(bytes[i]);
    t.calibrated = calibrated[i];
  }
  if (norm_changed[0]) ready_[tensor_name(l, "attn_norm")].bytes = f32_bytes(q.attn_norm);
  if (norm_changed[1]) ready_[tensor_name(l, "ffn_norm")].bytes = f32_bytes(q.ffn_norm);
  if (vbias_changed) ready_[tensor_name(l, "attn_v", ".bias")].bytes = f32_bytes(q.attn_v.bias);
  report(l, 2, "forward");
}

bool Calibrator::source(const TensorPlan& p, SourcedTensor& out) {
  int layer = -1;
  if (std::sscanf(p.name.c_str(), "blk.%d.", &layer) != 1 || layer < 0 || layer >= n_layer_) {
    return false;
  }
  while (next_layer_ <= layer) run_layer(next_layer_++);
  const auto it = ready_.find(p.name);
  if (it == ready_.end()) return false;
  out = std::move(it->second);
  ready_.erase(it);
  return true;
}

}  // namespace

QuantizeSummary quantize_sequential(const std::string& in_path, const std::string& out_path,
                                    LlamaFtype ftype, const std::vector<std::int32_t>& tokens,
                                    const SequentialOptions& options,
                                    const ProgressCallback& tensor_progress) {
  Calibrator cal(in_path, ftype, tokens, options);
  QuantizeOptions qo;
  qo.threads = options.threads;
  qo.source = [&cal](const TensorPlan& p, SourcedTensor& out) { return cal.source(p, out); };
  return quantize_model(in_path, out_path, ftype, qo, tensor_progress);
}

}  // namespace nibble::llm
