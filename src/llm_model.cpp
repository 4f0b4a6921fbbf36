// nibble: reference forward pass of llama-family GGUF models (see nibble/llm/model.hpp).
#include "nibble/llm/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <utility>

#include "dispatch.hpp"
#include "nibble/core/error.hpp"
#include "nibble/packed.hpp"

namespace nibble::llm {

using detail::fail;

namespace {

// The weight formats the forward pass runs (those nibble quantize / llama-quantize write for
// llama models with the file types of LlamaFtype, fallbacks included).
constexpr Format kWeightFormats[] = {Format::f32,  Format::f16,    Format::bf16,  Format::q8_0,
                                     Format::q4_0, Format::q4_1,   Format::q5_0,  Format::q5_1,
                                     Format::q2_K, Format::q3_K,   Format::q4_K,  Format::q5_K,
                                     Format::q6_K, Format::iq4_nl, Format::iq4_xs};
constexpr const char* kWeightFormatList =
    "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs";

}  // namespace

Format weight_format(std::uint32_t type, const std::string& tensor) {
  for (Format f : kWeightFormats) {
    if (traits(f).gguf_type == static_cast<int>(type)) return f;
  }
  const gguf::TypeInfo ti = gguf::type_info(type);
  fail("llm: tensor \"", tensor, "\" has type ", ti.name ? ti.name : "?", " (", type,
       "), which nibble has no matrix product for (supported: ", kWeightFormatList, ")");
}

namespace {

using Linear = LinearWeights;
using Layer = BlockWeights;

const gguf::KeyValue* find_kv(const gguf::File& f, const std::string& key) {
  return f.find(key);
}

std::int64_t get_int(const gguf::File& f, const std::string& key, bool required,
                     std::int64_t def = 0) {
  const gguf::KeyValue* kv = find_kv(f, key);
  if (!kv) {
    if (required) fail("llm: metadata key \"", key, "\" is missing");
    return def;
  }
  if (!kv->value.is_integer()) fail("llm: metadata key \"", key, "\" is not an integer");
  return kv->value.as_int();
}

float get_float(const gguf::File& f, const std::string& key, float def) {
  const gguf::KeyValue* kv = find_kv(f, key);
  if (!kv) return def;
  const double v = kv->value.as_double();
  if (!std::isfinite(v)) fail("llm: metadata key \"", key, "\" is not finite");
  return static_cast<float>(v);
}

// Copies a small tensor of `n` values (f32/f16 or any dequantizable type) to fp32.
std::vector<float> small_tensor(const gguf::File& f, const std::string& name, std::int64_t n,
                                bool required = true) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) {
    if (required) fail("llm: tensor \"", name, "\" is missing");
    return {};
  }
  if (t->elements() != n) {
    fail("llm: tensor \"", name, "\" has ", t->elements(), " values, expected ", n);
  }
  const Format fmt = weight_format(t->type, name);
  std::vector<float> v(static_cast<std::size_t>(n));
  dequantize(fmt, t->data, 1, n, v.data());
  for (float x : v) {
    if (!std::isfinite(x)) fail("llm: tensor \"", name, "\" has a non-finite value");
  }
  return v;
}

Linear linear(const gguf::File& f, const std::string& name, std::int64_t rows, std::int64_t cols,
              bool with_bias) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) fail("llm: tensor \"", name, "\" is missing");
  const std::int64_t ne0 = t->shape[0];
  if (ne0 != cols || t->rows() != rows || t->shape.size() > 2) {
    fail("llm: tensor \"", name, "\" has shape [", ne0, ", ", t->rows(), "], expected [", cols,
         ", ", rows, "]");
  }
  Linear l;
  l.name = name;
  l.packed = t->packed();  // the reader accepts the packed types of packable formats only
  l.format = weight_format(gguf::base_type(t->type), name);
  l.data = t->data;
  l.rows = rows;
  l.cols = cols;
  if (with_bias) {
    std::string bname = name.substr(0, name.size() - 6) + "bias";  // "weight" -> "bias"
    l.bias = small_tensor(f, bname, rows, /*required=*/false);
  }
  return l;
}

// llama.cpp's RMSNorm: y = x / sqrt(mean(x^2) + eps) * w (sum of squares in double).
void rms_norm(const float* x, const float* w, std::int64_t n, float eps, float* y) {
  double s = 0.0;
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  const float mean = static_cast<float>(s / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

template <class F>
void parallel(const Context& ctx, std::int64_t count, F&& f) {
  auto body = [](void* arg, std::int64_t i) { (*static_cast<F*>(arg))(i); };
  detail::parallel_run(ctx, count, body, &f);
}

}  // namespace

struct Model::Impl {
  gguf::File file;
  Hparams hp;
  std::vector<Layer> layers;
  std::vector<float> output_norm;
  std::vector<float> rope_factors;  // empty or n_rot/2 values
  Linear output;
  Format embd_format = Format::f32;
  const std::uint8_t* embd = nullptr;
  std::size_t embd_row_bytes = 0;
  bool embd_packed = false;  // token_embd.weight in the packed layout

  struct Scratch;
  // Token embeddings of tokens[0..n) into x (n x n_embd); tokens already checked.
  void embed(const Context& ctx, const std::int32_t* tokens, std::int64_t n, float* x) const;
  // One block in place on x (n x n_embd), shapes already checked; s sized for n tokens.
  void run_block(const Context& ctx, const BlockWeights& L, float* x, std::int64_t n, Scratch& s,
                 const MatmulObserver& obs) const;

  void matmul(const Context& ctx, const Linear& w, const float* x, std::int64_t n, float* y,
              const MatmulObserver& obs) const {
    if (obs) obs(w.name, x, n, w.cols);
    if (w.packed) {
      gemm(ctx, PackedWeights::view(w.format, w.data, w.rows, w.cols), x, n, y);
    } else {
      gemm(ctx, w.format, w.data, w.rows, w.cols, x, n, y);
    }
    if (!w.bias.empty()) {
      for (std::int64_t t = 0; t < n; ++t) {
        float* r = y + t * w.rows;
        for (std::int64_t i = 0; i < w.rows; ++i) r[i] += w.bias[static_cast<std::size_t>(i)];
      }
    }
  }

  // Rotates the first n_rot dimensions of every head of `x` (n tokens x n_heads x head_dim).
  void rope(const Context& ctx, float* x, std::int64_t n, std::int64_t n_heads) const {
    const std::int64_t hd = hp.head_dim, nr = hp.n_rot;
    const float theta_scale = std::pow(hp.rope_base, -2.0f / static_cast<float>(nr));
    parallel(ctx, n, [&](std::int64_t t) {
      // ggml's order: theta = pos * theta_scale^k, built by repeated multiplication in float.
      std::vector<float> cs(static_cast<std::size_t>(nr));
      float theta = static_cast<float>(t);
      for (std::int64_t k = 0; k < nr / 2; ++k) {
        const float ff = rope_factors.empty() ? 1.0f : rope_factors[static_cast<std::size_t>(k)];
        const float th = hp.rope_freq_scale * (theta / ff);
        cs[static_cast<std::size_t>(2 * k)] = std::cos(th);
        cs[static_cast<std::size_t>(2 * k + 1)] = std::sin(th);
        theta *= theta_scale;
      }
      for (std::int64_t h = 0; h < n_heads; ++h) {
        float* v = x + (t * n_heads + h) * hd;
        for (std::int64_t k = 0; k < nr / 2; ++k) {
          const std::int64_t i0 = hp.rope_neox ? k : 2 * k;
          const std::int64_t i1 = hp.rope_neox ? k + nr / 2 : 2 * k + 1;
          const float c = cs[static_cast<std::size_t>(2 * k)];
          const float s = cs[static_cast<std::size_t>(2 * k + 1)];
          const float x0 = v[i0], x1 = v[i1];
          v[i0] = x0 * c - x1 * s;
          v[i1] = x0 * s + x1 * c;
        }
      }
    });
  }

  // Causal attention: out (n x n_head*hd) from q (n x n_head*hd), k, v (n x n_head_kv*hd).
  void attention(const Context& ctx, const float* q, const float* k, const float* v, std::int64_t n,
                 float* out) const {
    const std::int64_t hd = hp.head_dim, nh = hp.n_head, nkv = hp.n_head_kv;
    const std::int64_t group = nh / nkv;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    // One task per (head, block of query rows).
    const std::int64_t rb = 16, nblocks = (n + rb - 1) / rb;
    parallel(ctx, nh * nblocks, [&](std::int64_t task) {
      const std::int64_t h = task / nblocks, b = task % nblocks;
      const std::int64_t hk = h / group;
      std::vector<float> s(static_cast<std::size_t>(n));
      std::vector<float> acc(static_cast<std::size_t>(hd));
      for (std::int64_t i = b * rb; i < std::min(n, (b + 1) * rb); ++i) {
        const float* qi = q + (i * nh + h) * hd;
        float mx = -INFINITY;
        for (std::int64_t j = 0; j <= i; ++j) {
          const float* kj = k + (j * nkv + hk) * hd;
          float d = 0.0f;
          for (std::int64_t c = 0; c < hd; ++c) d += qi[c] * kj[c];
          s[static_cast<std::size_t>(j)] = d * scale;
          mx = std::max(mx, s[static_cast<std::size_t>(j)]);
        }
        double sum = 0.0;
        for (std::int64_t j = 0; j <= i; ++j) {
          const float e = std::exp(s[static_cast<std::size_t>(j)] - mx);
          s[static_cast<std::size_t>(j)] = e;
          sum += e;
        }
        const float inv = static_cast<float>(1.0 / sum);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (std::int64_t j = 0; j <= i; ++j) {
          const float p = s[static_cast<std::size_t>(j)] * inv;
          const float* vj = v + (j * nkv + hk) * hd;
          for (std::int64_t c = 0; c < hd; ++c) acc[static_cast<std::size_t>(c)] += p * vj[c];
        }
        std::copy(acc.begin(), acc.end(), out + (i * nh + h) * hd);
      }
    });
  }
};

Model::Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

const Hparams& Model::hparams() const {
  if (!impl_) fail("llm: model is empty");
  return impl_->hp;
}

const gguf::File& Model::file() const {
  if (!impl_) fail("llm: model is empty");
  return impl_->file;
}

Model Model::load(const std::string& path) {
  try {
    return from_gguf(gguf::File::open(path));
  } catch (const Error& e) {
    fail("\"", path, "\": ", e.what());
  }
}

Model Model::from_gguf(gguf::File file) {
  auto impl = std::make_unique<Impl>();
  impl->file = std::move(file);
  const gguf::File& f = impl->file;
  Hparams& hp = impl->hp;

  const gguf::KeyValue* arch = f.find("general.architecture");
  if (!arch || arch->value.type != gguf::ValueType::string) {
    fail("llm: general.architecture is missing or not a string");
  }
  hp.arch = arch->value.as_string();
  if (hp.arch != "llama" && hp.arch != "qwen2") {
    fail("llm: architecture \"", hp.arch,
         "\" is not supported (the reference forward pass knows llama and qwen2)");
  }
  const std::string a = hp.arch + ".";
  hp.n_embd = get_int(f, a + "embedding_length", true);
  hp.n_layer = get_int(f, a + "block_count", true);
  hp.n_head = get_int(f, a + "attention.head_count", true);
  hp.n_head_kv = get_int(f, a + "attention.head_count_kv", false, hp.n_head);
  hp.n_ff = get_int(f, a + "feed_forward_length", true);
  hp.n_ctx_train = get_int(f, a + "context_length", false, 0);
  if (hp.n_embd < 1 || hp.n_layer < 1 || hp.n_head < 1 || hp.n_head_kv < 1 || hp.n_ff < 1) {
    fail("llm: non-positive dimensions (embedding_length ", hp.n_embd, ", block_count ", hp.n_layer,
         ", head_count ", hp.n_head, ", head_count_kv ", hp.n_head_kv, ", feed_forward_length ",
         hp.n_ff, ")");
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    fail("llm: head_count ", hp.n_head, " is not a multiple of head_count_kv ", hp.n_head_kv);
  }
  hp.head_dim = get_int(f, a + "attention.key_length", false, hp.n_embd / hp.n_head);
  const std::int64_t vlen = get_int(f, a + "attention.value_length", false, hp.head_dim);
  if (hp.head_dim < 1 || vlen != hp.head_dim) {
    fail("llm: key_length ", hp.head_dim, " / value_length ", vlen, " are not supported");
  }
  hp.n_rot = get_int(f, a + "rope.dimension_count", false, hp.head_dim);
  if (hp.n_rot < 2 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
    fail("llm: rope.dimension_count ", hp.n_rot, " is invalid for head size ", hp.head_dim);
  }
  hp.rms_eps = get_float(f, a + "attention.layer_norm_rms_epsilon", 1e-5f);
  hp.rope_base = get_float(f, a + "rope.freq_base", 10000.0f);
  if (!(hp.rms_eps >= 0.0f) || !(hp.rope_base > 0.0f)) {
    fail("llm: invalid layer_norm_rms_epsilon ", hp.rms_eps, " or rope.freq_base ", hp.rope_base);
  }
  std::string scaling = "none";
  if (const gguf::KeyValue* st = f.find(a + "rope.scaling.type")) scaling = st->value.as_string();
  float factor = get_float(f, a + "rope.scaling.factor", 0.0f);
  if (const gguf::KeyValue* sl = f.find(a + "rope.scale_linear")) {  // older files
    factor = static_cast<float>(sl->value.as_double());
    if (!f.find(a + "rope.scaling.type")) scaling = "linear";
  }
  if (scaling == "linear") {
    if (!(factor > 0.0f) || !std::isfinite(factor)) fail("llm: rope scaling factor ", factor);
    hp.rope_freq_scale = 1.0f / factor;
  } else if (scaling != "none") {
    fail("llm: rope scaling type \"", scaling, "\" is not supported (none, linear)");
  }
  hp.rope_neox = hp.arch == "qwen2";

  const gguf::TensorInfo* te = f.find_tensor("token_embd.weight");
  if (!te) fail("llm: tensor \"token_embd.weight\" is missing");
  if (te->shape[0] != hp.n_embd || te->shape.size() > 2) {
    fail("llm: token_embd.weight row length ", te->shape[0], ", expected ", hp.n_embd);
  }
  hp.n_vocab = te->rows();
  if (hp.n_vocab < 1) fail("llm: empty vocabulary");
  impl->embd_format = weight_format(gguf::base_type(te->type), te->name);
  impl->embd_packed = te->packed();
  impl->embd = te->data;
  impl->embd_row_bytes = row_bytes(impl->embd_format, hp.n_embd);

  // Biases: qwen2 has q/k/v biases; llama.cpp also accepts optional ones on llama.
  const bool bias = true;
  const std::int64_t dq = hp.n_head * hp.head_dim, dkv = hp.n_head_kv * hp.head_dim;
  for (std::int64_t l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer L;
    L.attn_norm = small_tensor(f, p + "attn_norm.weight", hp.n_embd);
    L.ffn_norm = small_tensor(f, p + "ffn_norm.weight", hp.n_embd);
    L.attn_q = linear(f, p + "attn_q.weight", dq, hp.n_embd, bias);
    L.attn_k = linear(f, p + "attn_k.weight", dkv, hp.n_embd, bias);
    L.attn_v = linear(f, p + "attn_v.weight", dkv, hp.n_embd, bias);
    L.attn_output = linear(f, p + "attn_output.weight", hp.n_embd, dq, bias);
    L.ffn_gate = linear(f, p + "ffn_gate.weight", hp.n_ff, hp.n_embd, bias);
    L.ffn_up = linear(f, p + "ffn_up.weight", hp.n_ff, hp.n_embd, bias);
    L.ffn_down = linear(f, p + "ffn_down.weight", hp.n_embd, hp.n_ff, bias);
    impl->layers.push_back(std::move(L));
  }
  impl->output_norm = small_tensor(f, "output_norm.weight", hp.n_embd);
  impl->rope_factors = small_tensor(f, "rope_freqs.weight", hp.n_rot / 2, /*required=*/false);
  if (f.find_tensor("output.weight")) {
    impl->output = linear(f, "output.weight", hp.n_vocab, hp.n_embd, false);
  } else {
    hp.tied_output = true;
    impl->output = linear(f, "token_embd.weight", hp.n_vocab, hp.n_embd, false);
  }
  Model m;
  m.impl_ = std::move(impl);
  return m;
}

// Scratch buffers of one block evaluation (n tokens).
struct Model::Impl::Scratch {
  std::vector<float> h, q, k, v, att, g, u, y;
  void resize(const Hparams& hp, std::int64_t n) {
    auto sz = [n](std::int64_t c) { return static_cast<std::size_t>(n * c); };
    const std::int64_t dq = hp.n_head * hp.head_dim, dkv = hp.n_head_kv * hp.head_dim;
    h.resize(sz(hp.n_embd));
    q.resize(sz(dq));
    k.resize(sz(dkv));
    v.resize(sz(dkv));
    att.resize(sz(dq));
    g.resize(sz(hp.n_ff));
    u.resize(sz(hp.n_ff));
    y.resize(sz(hp.n_embd));
  }
};

void Model::Impl::embed(const Context& ctx, const std::int32_t* tokens, std::int64_t n,
                        float* x) const {
  const std::int64_t d = hp.n_embd;
  const std::int64_t full = hp.n_vocab / kPackedGroupRows * kPackedGroupRows;
  parallel(ctx, n, [&](std::int64_t t) {
    const std::int64_t r = tokens[t];
    const std::uint8_t* row = embd + static_cast<std::size_t>(r) * embd_row_bytes;
    std::vector<std::uint8_t> group;
    if (embd_packed && r < full) {  // packed: the row's 16-row group, unpacked
      const std::int64_t g0 = r / kPackedGroupRows * kPackedGroupRows;
      group.resize(static_cast<std::size_t>(kPackedGroupRows) * embd_row_bytes);
      Context one;
      one.threads = 1;
      unpack(one, embd_format, embd + static_cast<std::size_t>(g0) * embd_row_bytes,
             kPackedGroupRows, d, group.data());
      row = group.data() + static_cast<std::size_t>(r - g0) * embd_row_bytes;
    }
    dequantize(embd_format, row, 1, d, x + t * d);
  });
}

void Model::Impl::run_block(const Context& ctx, const BlockWeights& L, float* x, std::int64_t n,
                            Scratch& s, const MatmulObserver& obs) const {
  const std::int64_t d = hp.n_embd;
  const std::size_t nd = static_cast<std::size_t>(n * d);
  parallel(ctx, n, [&](std::int64_t t) {
    rms_norm(x + t * d, L.attn_norm.data(), d, hp.rms_eps, s.h.data() + t * d);
  });
  matmul(ctx, L.attn_q, s.h.data(), n, s.q.data(), obs);
  matmul(ctx, L.attn_k, s.h.data(), n, s.k.data(), obs);
  matmul(ctx, L.attn_v, s.h.data(), n, s.v.data(), obs);
  rope(ctx, s.q.data(), n, hp.n_head);
  rope(ctx, s.k.data(), n, hp.n_head_kv);
  attention(ctx, s.q.data(), s.k.data(), s.v.data(), n, s.att.data());
  matmul(ctx, L.attn_output, s.att.data(), n, s.y.data(), obs);
  for (std::size_t i = 0; i < nd; ++i) x[i] += s.y[i];
  parallel(ctx, n, [&](std::int64_t t) {
    rms_norm(x + t * d, L.ffn_norm.data(), d, hp.rms_eps, s.h.data() + t * d);
  });
  matmul(ctx, L.ffn_gate, s.h.data(), n, s.g.data(), obs);
  matmul(ctx, L.ffn_up, s.h.data(), n, s.u.data(), obs);
  const std::size_t nf = static_cast<std::size_t>(n * hp.n_ff);
  for (std::size_t i = 0; i < nf; ++i) s.g[i] = s.g[i] / (1.0f + std::exp(-s.g[i])) * s.u[i];
  matmul(ctx, L.ffn_down, s.g.data(), n, s.y.data(), obs);
  for (std::size_t i = 0; i < nd; ++i) x[i] += s.y[i];
}

namespace {

void check_tokens(const Hparams& hp, const std::int32_t* tokens, std::int64_t n, const char* who) {
  if (n < 1) fail("llm: ", who, ": n = ", n, " tokens (need >= 1)");
  if (!tokens) fail("llm: ", who, ": tokens is null");
  for (std::int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= hp.n_vocab) {
      fail("llm: ", who, ": token ", i, " = ", tokens[i], " outside [0, ", hp.n_vocab, ")");
    }
  }
}

void check_linear(const LinearWeights& l, std::int64_t rows, std::int64_t cols, const char* what) {
  if (l.rows != rows || l.cols != cols) {
    fail("llm: forward_block: ", what, " (", l.name, ") is ", l.rows, " x ", l.cols, ", expected ",
         rows, " x ", cols);
  }
  if (!l.data) fail("llm: forward_block: ", what, " (", l.name, ") has no data");
  if (l.packed && !packable(l.format)) {
    fail("llm: forward_block: ", what, " (", l.name, ") is packed but its format ",
         traits(l.format).name, " has no packed layout");
  }
  if (std::find(std::begin(kWeightFormats), std::end(kWeightFormats), l.format) ==
      std::end(kWeightFormats)) {
    fail("llm: forward_block: ", what, " (", l.name, ") has format ", traits(l.format).name,
         " (supported: ", kWeightFormatList, ")");
  }
  if (!l.bias.empty() && static_cast<std::int64_t>(l.bias.size()) != rows) {
    fail("llm: forward_block: ", what, " (", l.name, ") has ", l.bias.size(),
         " bias values, expected ", rows);
  }
}

}  // namespace

std::vector<float> Model::embed(const Context& ctx, const std::int32_t* tokens,
                                std::int64_t n) const {
  if (!impl_) fail("llm: embed on an empty model");
  check_tokens(impl_->hp, tokens, n, "embed");
  std::vector<float> x(static_cast<std::size_t>(n * impl_->hp.n_embd));
  impl_->embed(ctx, tokens, n, x.data());
  return x;
}

BlockWeights Model::block_weights(std::int64_t layer) const {
  if (!impl_) fail("llm: block_weights on an empty model");
  if (layer < 0 || layer >= impl_->hp.n_layer) {
    fail("llm: block_weights: layer ", layer, " outside [0, ", impl_->hp.n_layer, ")");
  }
  return impl_->layers[static_cast<std::size_t>(layer)];
}

void Model::forward_block(const Context& ctx, const BlockWeights& w, float* x, std::int64_t n,
                          const MatmulObserver& obs) const {
  if (!impl_) fail("llm: forward_block on an empty model");
  const Hparams& hp = impl_->hp;
  if (n < 1) fail("llm: forward_block: n = ", n, " tokens (need >= 1)");
  if (!x) fail("llm: forward_block: x is null");
  const std::int64_t d = hp.n_embd, dq = hp.n_head * hp.head_dim, dkv = hp.n_head_kv * hp.head_dim;
  if (static_cast<std::int64_t>(w.attn_norm.size()) != d ||
      static_cast<std::int64_t>(w.ffn_norm.size()) != d) {
    fail("llm: forward_block: norm weights have ", w.attn_norm.size(), " and ", w.ffn_norm.size(),
         " values, expected ", d);
  }
  check_linear(w.attn_q, dq, d, "attn_q");
  check_linear(w.attn_k, dkv, d, "attn_k");
  check_linear(w.attn_v, dkv, d, "attn_v");
  check_linear(w.attn_output, d, dq, "attn_output");
  check_linear(w.ffn_gate, hp.n_ff, d, "ffn_gate");
  check_linear(w.ffn_up, hp.n_ff, d, "ffn_up");
  check_linear(w.ffn_down, d, hp.n_ff, "ffn_down");
  Impl::Scratch s;
  s.resize(hp, n);
  impl_->run_block(ctx, w, x, n, s, obs);
}

std::vector<float> Model::forward(const Context& ctx, const std::int32_t* tokens, std::int64_t n,
                                  std::int64_t first_output, const MatmulObserver& obs) const {
  if (!impl_) fail("llm: forward on an empty model");
  const Impl& m = *impl_;
  const Hparams& hp = m.hp;
  check_tokens(hp, tokens, n, "forward");
  if (first_output < 0 || first_output >= n) {
    fail("llm: forward: first_output = ", first_output, " outside [0, ", n, ")");
  }
  const std::int64_t d = hp.n_embd;
  std::vector<float> x(static_cast<std::size_t>(n * d));
  m.embed(ctx, tokens, n, x.data());
  Impl::Scratch s;
  s.resize(hp, n);
  for (const Layer& L : m.layers) m.run_block(ctx, L, x.data(), n, s, obs);
  const std::int64_t no = n - first_output;
  parallel(ctx, no, [&](std::int64_t t) {
    rms_norm(x.data() + (first_output + t) * d, m.output_norm.data(), d, hp.rms_eps,
             s.h.data() + t * d);
  });
  std::vector<float> logits(static_cast<std::size_t>(no * hp.n_vocab));
  m.matmul(ctx, m.output, s.h.data(), no, logits.data(), obs);
  return logits;
}

}  // namespace nibble::llm
