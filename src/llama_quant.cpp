// nibble: llama-quantize-compatible tensor type selection and the streaming quantize driver.
//
// The rules below restate llama.cpp's src/llama-quant.cpp as of upstream master 0253fb2
// (2026-05-16; read in the kmbandy/llama.cpp fork at bf87261, whose llama-quant.cpp differs from
// 0253fb2 only by two fork-only file types): llama_model_quantize_impl (which tensors, order,
// metadata), llama_tensor_get_type / llama_tensor_get_type_impl (the per-tensor type mixes) and
// tensor_type_fallback (row lengths that do not fit the chosen block). Only the branches reachable
// for the file types nibble produces (LlamaFtype) are restated; IQ1/IQ2/IQ3/TQ/MXFP4-only
// branches are left out. Output checked byte for byte against llama-quantize by
// tests/cross/llama_compare.
#include "nibble/io/llama_quant.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>

#include <Eigen/Dense>

#include "nibble/nibble.hpp"
#include "nibble/quant/awq.hpp"
#include "nibble/quant/gptq.hpp"
#include "nibble/quant/hessian.hpp"

namespace nibble {

using detail::fail;

namespace {

// ggml type ids used here.
constexpr std::uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8,
                        kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kIQ4_NL = 20,
                        kIQ4_XS = 23, kBF16 = 30;
constexpr std::int64_t kQK_K = 256;

bool contains(const std::string& s, const char* sub) {
  return s.find(sub) != std::string::npos;
}

// Layer number as llama's weight_name_comparer reads it: sscanf(name, "blk.%d.") or -1.
int layer_of(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) layer = -1;
  return layer;
}

// ggml_n_dims: index of the last dimension != 1, plus one (at least 1).
std::size_t n_dims_of(const std::vector<std::int64_t>& shape) {
  for (std::size_t i = shape.size(); i > 1; --i) {
    if (shape[i - 1] != 1) return i;
  }
  return 1;
}

std::int64_t block_elems(std::uint32_t type) {
  return gguf::type_info(type).block_elems;
}

// llama-quant.cpp, tensor_allows_quantization: name ends in "weight" (including llama's size_t
// quirk for names shorter than 6), at least 2 dims, not a norm, not an expert router, not one of
// the small or positional tensors of other architectures (AltUp/Laurel, SSM/short convolutions,
// RWKV, T5 relative bias, vision encoders).
bool allows_quantization(const std::string& name, const std::vector<std::int64_t>& shape) {
  if (n_dims_of(shape) < 2) return false;
  if (name.rfind("weight") != name.size() - 6) return false;  // size_t arithmetic as in llama
  if (name == "position_embd.weight" || name == "token_types.weight") return false;
  static const char* const kept[] = {"_norm.weight",
                                     "ffn_gate_inp.weight",
                                     "altup",
                                     "laurel",
                                     "per_layer_model_proj",
                                     "ssm_conv1d",
                                     "shortconv.conv.weight",
                                     "time_mix_first.weight",
                                     "time_mix_w0.weight",
                                     "time_mix_w1.weight",
                                     "time_mix_w2.weight",
                                     "time_mix_v0.weight",
                                     "time_mix_v1.weight",
                                     "time_mix_v2.weight",
                                     "time_mix_a0.weight",
                                     "time_mix_a1.weight",
                                     "time_mix_a2.weight",
                                     "time_mix_g1.weight",
                                     "time_mix_g2.weight",
                                     "time_mix_decay_w1.weight",
                                     "time_mix_decay_w2.weight",
                                     "time_mix_lerp_fused.weight",
                                     "attn_rel_b.weight",
                                     ".position_embd",
                                     "sam.pos_embd",
                                     "sam.neck.",
                                     "sam.net_",
                                     ".rel_pos",
                                     ".patch_embd",
                                     ".patch_merger"};
  for (const char* k : kept) {
    if (contains(name, k)) return false;
  }
  return true;
}

// llama-quant.cpp's tensor categories (tensor_get_category), tested in this order.
enum class Cat {
  output,
  token_embd,
  attn_qkv,
  attn_kv_b,
  attn_v,
  attn_k,
  attn_q,
  attn_output,
  ffn_up,
  ffn_gate,
  ffn_down,
  other
};

Cat category_of(const std::string& n) {
  if (n == "output.weight") return Cat::output;
  if (n == "token_embd.weight" || n == "per_layer_token_embd.weight") return Cat::token_embd;
  if (contains(n, "attn_qkv.weight")) return Cat::attn_qkv;
  if (contains(n, "attn_kv_b.weight")) return Cat::attn_kv_b;
  if (contains(n, "attn_v.weight")) return Cat::attn_v;
  if (contains(n, "attn_k.weight")) return Cat::attn_k;
  if (contains(n, "attn_q.weight")) return Cat::attn_q;
  if (contains(n, "attn_output.weight")) return Cat::attn_output;
  if (contains(n, "ffn_up")) return Cat::ffn_up;
  if (contains(n, "ffn_gate")) return Cat::ffn_gate;
  if (contains(n, "ffn_down")) return Cat::ffn_down;
  return Cat::other;
}

// The value-projection-like weights share the attn_v rules and counter.
bool attn_v_like(Cat c) {
  return c == Cat::attn_v || c == Cat::attn_qkv || c == Cat::attn_kv_b;
}

struct State {
  const LlamaModelInfo& m;
  LlamaFtype ftype;
  bool has_imatrix;
  int i_attention_wv = 0, i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
};

// llama_tensor_get_type's use_more_bits: first and last eighth of the layers, and every third
// layer in between.
bool use_more_bits(int i, int n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

// llama_tensor_get_type's layer_info: with experts the layer comes from the name.
int layer_index(const State& s, int counter, const std::string& name) {
  if (s.m.n_expert > 1) {
    int layer = 0;
    if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) {
      fail("quantize: cannot determine the layer of tensor ", name);
    }
    if (layer < 0 || layer >= s.m.n_layer) {
      fail("quantize: bad layer ", layer, " for tensor ", name, " (expected [0, ", s.m.n_layer,
           "))");
    }
    return layer;
  }
  return counter;
}

using F = LlamaFtype;

// llama_tensor_get_type_impl, restricted to the file types nibble supports: the mix rules on top
// of the file type's base type `t`.
std::uint32_t mix_type(State& s, std::uint32_t t, const std::string& name,
                       const std::vector<std::int64_t>& shape, Cat cat) {
  const F ft = s.ftype;
  const LlamaModelInfo& m = s.m;
  const bool falcon = m.arch == "falcon";
  const int n_layer = m.n_layer;

  if (cat == Cat::output || (!m.has_output && cat == Cat::token_embd)) {
    // The output projection (or the tied embedding that serves as one): Q8_0 for falcon or rows
    // that do not fit the base type's block, else Q6_K unless the base type is already Q8_0.
    if (falcon || shape[0] % block_elems(t) != 0) return kQ8_0;
    return t == kQ8_0 ? t : kQ6_K;
  }
  if (cat == Cat::token_embd) return t;  // only IQ1/IQ2/IQ3_XXS/TQ file types change it

  if (attn_v_like(cat)) {
    switch (ft) {
      case F::q2_K:
        t = m.n_gqa() >= 4 ? kQ4_K : kQ3_K;
        break;
      case F::q3_K_M:
        t = s.i_attention_wv < 2 ? kQ5_K : kQ4_K;
        break;
      case F::q3_K_L:
        t = kQ5_K;
        break;
      case F::iq4_nl:
      case F::iq4_xs:
        if (m.n_gqa() >= 4) t = kQ5_K;
        break;
      case F::q4_K_M:
      case F::q5_K_M:
        if (use_more_bits(s.i_attention_wv, m.n_attention_wv)) t = kQ6_K;
        break;
      case F::q4_K_S:
        if (s.i_attention_wv < 4) t = kQ5_K;
        break;
      default:
        break;
    }
    // 70B: attn_v is 8x smaller than attn_q (8 query heads per KV head), more bits are cheap.
    if (m.is_70b && (t == kQ3_K || t == kQ4_K)) t = kQ5_K;
    if (m.n_expert == 8) t = kQ8_0;
    ++s.i_attention_wv;
    return t;
  }
  switch (cat) {
    case Cat::attn_k:
      if (m.n_expert == 8) t = kQ8_0;
      break;
    case Cat::ffn_down: {
      const int i = layer_index(s, s.i_ffn_down, name);
      const bool more = use_more_bits(i, n_layer);
      switch (ft) {
        case F::q2_K:
          t = kQ3_K;
          break;
        case F::q3_K_M:
          t = i < n_layer / 16 ? kQ5_K : (!falcon || more) ? kQ4_K : kQ3_K;
          break;
        case F::q3_K_L:
          t = falcon ? kQ4_K : kQ5_K;
          break;
        case F::q4_K_M:
          if (falcon) {
            t = i < n_layer / 16 ? kQ6_K : more ? kQ5_K : kQ4_K;
          } else if (more) {
            t = kQ6_K;
          }
          break;
        case F::iq4_nl:
        case F::iq4_xs:
          if (i < n_layer / 8 && !s.has_imatrix) t = kQ5_K;
          break;
        case F::q5_K_M:
          if (more) t = kQ6_K;
          break;
        case F::q4_K_S:
          if (!falcon && i < n_layer / 8) t = kQ5_K;
          break;
        case F::q4_0:
        case F::q5_0:
          // Only with an imatrix (so that plain Q4_0/Q5_0 stay what they always were).
          if (s.has_imatrix && i < n_layer / 8) t = ft == F::q4_0 ? kQ4_1 : kQ5_1;
          break;
        default:
          break;
      }
      ++s.i_ffn_down;
      break;
    }
    case Cat::attn_output:
      if (falcon) {
        if (ft == F::q3_K_L) t = kQ4_K;
      } else if (m.n_expert == 8) {
        if (ft == F::q2_K || ft == F::q3_K_S || ft == F::q3_K_M || ft == F::iq4_nl ||
            ft == F::q4_K_S || ft == F::q4_K_M || ft == F::iq4_xs) {
          t = kQ5_K;
        }
      } else if (ft == F::q2_K) {
        t = kQ3_K;
      } else if (ft == F::q3_K_M) {
        t = kQ4_K;
      } else if (ft == F::q3_K_L) {
        t = kQ5_K;
      }
      break;
    case Cat::ffn_gate:
      (void)layer_index(s, s.i_ffn_gate, name);  // validates the layer like llama
      ++s.i_ffn_gate;
      break;
    case Cat::ffn_up:
      (void)layer_index(s, s.i_ffn_up, name);
      ++s.i_ffn_up;
      break;
    default:
      // attn_q: only IQ3 file types. (llama-quant.cpp's separate attn_qkv branch is unreachable:
      // attn_qkv takes the attn_v branch above.)
      break;
  }
  return t;
}

// llama-quant.cpp tensor_type_fallback: a row length that is not a multiple of the type's block
// size takes a smaller-block type of similar size, or F16 when even that does not fit.
std::uint32_t fallback_type(std::uint32_t t, const std::string& name, std::int64_t ncols,
                            bool* fallback) {
  *fallback = false;
  if (ncols % block_elems(t) == 0) return t;
  *fallback = true;
  std::uint32_t r;
  switch (t) {
    case kIQ4_XS:
      r = kIQ4_NL;
      break;
    case kQ2_K:
    case kQ3_K:
      r = kQ4_0;
      break;
    case kQ4_K:
      r = kQ5_0;
      break;
    case kQ5_K:
      r = kQ5_1;
      break;
    case kQ6_K:
      r = kQ8_0;
      break;
    default:
      fail("quantize: tensor ", name, " has rows of ", ncols, " values, not a multiple of ",
           block_elems(t), ", and llama-quantize defines no fallback for ",
           gguf::type_info(t).name);
  }
  return ncols % block_elems(r) == 0 ? r : kF16;
}

// llama_tensor_get_type: the mix rules and the fallback apply only to quantized base types (BF16
// turns every quantizable tensor into BF16).
std::uint32_t tensor_type(State& s, const std::string& name, const std::vector<std::int64_t>& shape,
                          bool* fallback) {
  const std::uint32_t base = llama_ftype_base_type(s.ftype);
  *fallback = false;
  if (base == kBF16) return base;
  const std::uint32_t t = mix_type(s, base, name, shape, category_of(name));
  return fallback_type(t, name, shape[0], fallback);
}

// The nibble format of a ggml type id the driver writes.
Format format_of(std::uint32_t type) {
  for (int i = 0; i <= static_cast<int>(kLastFormat); ++i) {
    const Format f = static_cast<Format>(i);
    if (f != Format::q8_K && traits(f).gguf_type == static_cast<int>(type) &&
        format_implemented(f)) {
      return f;
    }
  }
  fail("quantize: nibble cannot produce ggml type ", gguf::type_info(type).name);
}

std::int64_t int_key(const gguf::File& f, const std::string& key, std::int64_t def) {
  const gguf::KeyValue* kv = f.find(key);
  if (!kv || !kv->value.is_integer()) return def;
  return kv->value.as_int();
}

// An integer key, or the first element of an integer array key (llama's get_key_or_arr).
std::int64_t int_key_or_first(const gguf::File& f, const std::string& key, std::int64_t def) {
  const gguf::KeyValue* kv = f.find(key);
  if (!kv) return def;
  if (kv->value.is_integer()) return kv->value.as_int();
  const gguf::Value& v = kv->value;
  const std::size_t es = gguf::value_type_size(v.elem);
  if (v.type != gguf::ValueType::array || v.count == 0 || es == 0 || v.raw.size() < es) return def;
  gguf::Value e;
  e.type = v.elem;
  std::memcpy(&e.bits, v.raw.data(), es);
  return e.is_integer() ? e.as_int() : def;
}

// Converts `n` values of an f32/f16/bf16 tensor to f32.
void to_f32(std::uint32_t type, const std::uint8_t* src, std::int64_t n, float* dst) {
  if (type == kF16) {
    for (std::int64_t i = 0; i < n; ++i) {
      fp16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = fp16_to_fp32(h);
    }
  } else if (type == kBF16) {
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = detail::f32_from_bits(static_cast<std::uint32_t>(h) << 16);
    }
  } else {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * 4);
  }
}

using RowMajorXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A 2-D f32/f16/bf16 tensor as a rows x cols matrix (GGUF shape [cols, rows]).
RowMajorXf load_matrix(const gguf::TensorInfo& t) {
  RowMajorXf M(t.shape[1], t.shape[0]);
  to_f32(t.type, t.data, t.elements(), M.data());
  return M;
}

// Calibration inputs NAME.inputs ([cols, tokens] f32) as tokens x cols, or nullptr when absent.
const gguf::TensorInfo* find_inputs(const gguf::File& calib, const std::string& weight,
                                    std::int64_t cols) {
  const gguf::TensorInfo* a = calib.find_tensor(weight + ".inputs");
  if (!a) return nullptr;
  if (a->type != kF32 || a->shape.size() != 2 || a->shape[0] != cols || a->shape[1] < 1)
    fail("quantize: calibration tensor ", a->name, " must be f32 [", cols, ", tokens]");
  return a;
}

RowMajorXf load_inputs(const gguf::TensorInfo& a) {
  return Eigen::Map<const RowMajorXf>(reinterpret_cast<const float*>(a.data), a.shape[1],
                                      a.shape[0]);
}

// What --method awq does to one tensor: W'[o, c] = W[o, c] / row_div[o] * col_scale[c] for
// linears, w'[c] = w[c] / norm_div[c] for norms; `inputs` are the (unscaled) calibration inputs of
// the linear's scaling group, used for the clip search when `clip`.
struct AwqTransform {
  Eigen::VectorXf col_scale, row_div, norm_div;
  const gguf::TensorInfo* inputs = nullptr;
  bool clip = false;
};

bool awq_linear_ok(const gguf::TensorInfo* t) {
  return t && t->shape.size() == 2 && t->shape[0] % kQK_K == 0 &&
         (t->type == kF32 || t->type == kF16 || t->type == kBF16);
}

// AWQ scale search for every scaling group of a llama-architecture model (ALGORITHMS.md 3.3-3.4:
// attn_norm -> q,k,v; ffn_norm -> gate,up; v -> o when their shapes agree; up -> down). All
// scales are searched on the unscaled weights with the calibration inputs of the group, the loss
// being the output error of the group's linears (their outputs concatenated), with `fmt`'s
// reference quantizer as the fake quantizer. Groups without calibration inputs are left alone.
std::map<std::string, AwqTransform> awq_plan(const gguf::File& in, const gguf::File& calib,
                                             Format fmt, int n_layer) {
  std::map<std::string, AwqTransform> plan;
  awq::Config cfg;
  cfg.clip = false;
  auto search = [&](const std::vector<const gguf::TensorInfo*>& lin,
                    const gguf::TensorInfo* inputs) {
    std::int64_t rows = 0;
    for (const auto* t : lin) rows += t->shape[1];
    Eigen::MatrixXf W(rows, lin[0]->shape[0]);
    std::int64_t r0 = 0;
    for (const auto* t : lin) {
      W.middleRows(r0, t->shape[1]) = load_matrix(*t);
      r0 += t->shape[1];
    }
    const Eigen::MatrixXf X = load_inputs(*inputs);
    awq::Result res;
    awq::search_blocks(fmt, W, X, cfg, &res);
    return res.scales;
  };
  for (int i = 0; i < n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    auto T = [&](const char* n) { return in.find_tensor(b + n + ".weight"); };
    // Norm-fed groups.
    const struct {
      const char* norm;
      std::vector<const char*> linears;
    } norm_groups[] = {{"attn_norm", {"attn_q", "attn_k", "attn_v"}},
                       {"ffn_norm", {"ffn_gate", "ffn_up"}}};
    for (const auto& g : norm_groups) {
      const gguf::TensorInfo* norm = T(g.norm);
      std::vector<const gguf::TensorInfo*> lin;
      for (const char* n : g.linears) lin.push_back(T(n));
      bool ok = norm && norm->type == kF32 && norm->shape.size() == 1;
      for (const auto* t : lin)
        ok = ok && awq_linear_ok(t) && t->shape[0] == lin[0]->shape[0] &&
             norm->shape[0] == t->shape[0];
      if (!ok) continue;
      const gguf::TensorInfo* inputs = nullptr;
      for (const auto* t : lin)
        if (!inputs) inputs = find_inputs(calib, t->name, t->shape[0]);
      if (!inputs) continue;
      const Eigen::VectorXf s = search(lin, inputs);
      plan[norm->name].norm_div = s;
      for (const auto* t : lin) {
        AwqTransform& tr = plan[t->name];
        tr.col_scale = s;
        tr.inputs = inputs;
        tr.clip = !contains(t->name, "attn_q.") && !contains(t->name, "attn_k.");
      }
    }
    // Linear-fed groups: prev's output rows are divided by s, next's columns multiplied.
    const std::pair<const char*, const char*> lin_groups[] = {{"attn_v", "attn_output"},
                                                              {"ffn_up", "ffn_down"}};
    for (const auto& g : lin_groups) {
      const gguf::TensorInfo *prev = T(g.first), *next = T(g.second);
      if (!awq_linear_ok(prev) || !awq_linear_ok(next) || prev->shape[1] != next->shape[0])
        continue;
      if (std::string(g.first) == "attn_v" && prev->shape != next->shape) continue;  // GQA
      const gguf::TensorInfo* inputs = find_inputs(calib, next->name, next->shape[0]);
      if (!inputs) continue;
      const Eigen::VectorXf s = search({next}, inputs);
      plan[prev->name].row_div = s;
      AwqTransform& tr = plan[next->name];
      tr.col_scale = s;
      tr.inputs = inputs;
      tr.clip = true;
    }
  }
  return plan;
}

// Applies a transform to a rows x cols matrix in place.
void apply_awq(const AwqTransform& tr, RowMajorXf& W) {
  if (tr.row_div.size()) W = tr.row_div.cwiseInverse().asDiagonal() * W;
  if (tr.col_scale.size()) W = W * tr.col_scale.asDiagonal();
}

// quantize_tensor into a buffer of the right size.
void quantize_tensor_into(const Context& ctx, std::uint32_t out_type, const float* src,
                          std::int64_t mats, std::int64_t rows, std::int64_t cols,
                          const float* importance, std::uint8_t* out) {
  if (out_type == kF32) {
    std::memcpy(out, src, static_cast<std::size_t>(mats * rows * cols) * sizeof(float));
  } else if (out_type == kF16) {
    const std::int64_t n = mats * rows * cols;
    for (std::int64_t k = 0; k < n; ++k) {
      const fp16_t h = fp32_to_fp16(src[k]);
      std::memcpy(out + 2 * k, &h, 2);
    }
  } else {
    const Format f = format_of(out_type);
    const std::size_t mat_bytes = static_cast<std::size_t>(rows) * row_bytes(f, cols);
    for (std::int64_t e = 0; e < mats; ++e) {
      quantize(ctx, f, src + e * rows * cols, rows, cols, out + e * mat_bytes,
               importance ? importance + e * cols : nullptr);
    }
  }
}

}  // namespace

std::vector<std::uint8_t> quantize_tensor(const Context& ctx, std::uint32_t out_type,
                                          const float* values, std::int64_t mats, std::int64_t rows,
                                          std::int64_t cols, const float* importance) {
  if (!values) fail("quantize_tensor: values is null");
  if (mats < 1 || rows < 1 || cols < 1) {
    fail("quantize_tensor: shape ", mats, " x ", rows, " x ", cols, " (expected positive)");
  }
  if (out_type != kF32) format_of(out_type);  // throws for types nibble cannot produce
  const std::uint64_t nbytes = gguf::tensor_nbytes(out_type, {cols, rows, mats});
  for (std::int64_t i = 0; i < mats * rows * cols; ++i) {
    if (!std::isfinite(values[i])) {
      fail("quantize_tensor: value ", i, " = ", values[i], " is not finite");
    }
  }
  std::vector<std::uint8_t> out(static_cast<std::size_t>(nbytes));
  quantize_tensor_into(ctx, out_type, values, mats, rows, cols, importance, out.data());
  return out;
}

namespace {

struct FtypeRow {
  LlamaFtype ftype;
  const char* name;
  std::uint32_t base;
};

// llama-quantize's type names and llama_ftype_get_default_type.
constexpr FtypeRow kFtypes[] = {
    {LlamaFtype::q4_0, "Q4_0", kQ4_0},       {LlamaFtype::q4_1, "Q4_1", kQ4_1},
    {LlamaFtype::q8_0, "Q8_0", kQ8_0},       {LlamaFtype::q5_0, "Q5_0", kQ5_0},
    {LlamaFtype::q5_1, "Q5_1", kQ5_1},       {LlamaFtype::q2_K, "Q2_K", kQ2_K},
    {LlamaFtype::q3_K_S, "Q3_K_S", kQ3_K},   {LlamaFtype::q3_K_M, "Q3_K_M", kQ3_K},
    {LlamaFtype::q3_K_L, "Q3_K_L", kQ3_K},   {LlamaFtype::q4_K_S, "Q4_K_S", kQ4_K},
    {LlamaFtype::q4_K_M, "Q4_K_M", kQ4_K},   {LlamaFtype::q5_K_S, "Q5_K_S", kQ5_K},
    {LlamaFtype::q5_K_M, "Q5_K_M", kQ5_K},   {LlamaFtype::q6_K, "Q6_K", kQ6_K},
    {LlamaFtype::iq4_nl, "IQ4_NL", kIQ4_NL}, {LlamaFtype::iq4_xs, "IQ4_XS", kIQ4_XS},
    {LlamaFtype::bf16, "BF16", kBF16}};

const FtypeRow& ftype_row(LlamaFtype f) {
  for (const auto& r : kFtypes) {
    if (r.ftype == f) return r;
  }
  fail("quantize: unknown file type ", static_cast<int>(f));
}

}  // namespace

LlamaFtype parse_llama_ftype(const std::string& name) {
  std::string u;
  for (char ch : name) u += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  // llama-quantize's aliases.
  if (u == "Q3_K") return LlamaFtype::q3_K_M;
  if (u == "Q4_K") return LlamaFtype::q4_K_M;
  if (u == "Q5_K") return LlamaFtype::q5_K_M;
  for (const auto& r : kFtypes) {
    if (u == r.name) return r.ftype;
  }
  std::string all;
  for (const auto& r : kFtypes) all += std::string(all.empty() ? "" : ", ") + r.name;
  fail("quantize: type \"", name, "\" is not one of ", all, " (or the aliases Q3_K, Q4_K, Q5_K)");
}

const char* llama_ftype_name(LlamaFtype f) {
  for (const auto& r : kFtypes) {
    if (r.ftype == f) return r.name;
  }
  return "?";
}

std::uint32_t llama_ftype_base_type(LlamaFtype f) {
  return ftype_row(f).base;
}

LlamaModelInfo llama_model_info(const gguf::File& in) {
  LlamaModelInfo m;
  const gguf::KeyValue* a = in.find("general.architecture");
  if (!a || a->value.type != gguf::ValueType::string) {
    fail("quantize: the model has no general.architecture string");
  }
  m.arch = a->value.str;
  const std::int64_t nl = int_key(in, m.arch + ".block_count", -1);
  if (nl < 0 || nl > 1000000) fail("quantize: missing or invalid ", m.arch, ".block_count");
  m.n_layer = static_cast<int>(nl);
  m.n_expert = static_cast<int>(int_key(in, m.arch + ".expert_count", 0));
  // llama_model::load_hparams: head counts may be per-layer arrays (the rules use layer 0's);
  // head_count_kv defaults to head_count.
  m.n_head = static_cast<int>(int_key_or_first(in, m.arch + ".attention.head_count", 0));
  m.n_head_kv =
      static_cast<int>(int_key_or_first(in, m.arch + ".attention.head_count_kv", m.n_head));
  // The architectures' load_arch_hparams: which models are LLM_TYPE_70B (llama: 80 layers
  // without 8 experts and with grouped-query attention, else it is 65B).
  if (m.arch == "llama") {
    m.is_70b = m.n_expert != 8 && m.n_layer == 80 && m.n_head != m.n_head_kv;
  } else if (m.arch == "qwen2" || m.arch == "deci" || m.arch == "olmo") {
    m.is_70b = m.n_layer == 80;
  } else if (m.arch == "jais2") {
    m.is_70b = m.n_layer == 68;
  }
  for (const auto& t : in.tensors) {
    const Cat c = category_of(t.name);
    if (attn_v_like(c)) {
      ++m.n_attention_wv;
    } else if (c == Cat::output) {
      m.has_output = true;
    }
  }
  return m;
}

std::vector<TensorPlan> plan_llama_quant(const gguf::File& in, LlamaFtype ftype, bool has_imatrix) {
  const LlamaModelInfo m = llama_model_info(in);
  // llama_model_loader keeps the weights in a std::map ordered by (layer, name).
  std::vector<std::size_t> order(in.tensors.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const std::string& na = in.tensors[a].name;
    const std::string& nb = in.tensors[b].name;
    const int la = layer_of(na), lb = layer_of(nb);
    if (la != lb) return la < lb;
    return na < nb;
  });

  State s{m, ftype, has_imatrix};
  std::vector<TensorPlan> plan;
  plan.reserve(order.size());
  for (std::size_t idx : order) {
    const gguf::TensorInfo& t = in.tensors[idx];
    TensorPlan p;
    p.input_index = idx;
    p.name = t.name;
    p.in_type = t.type;
    p.out_type = t.type;
    if (allows_quantization(t.name, t.shape)) {
      bool fb = false;
      const std::uint32_t nt = tensor_type(s, t.name, t.shape, &fb);
      if (nt != t.type) {
        p.quantize = true;
        p.out_type = nt;
        p.fallback = fb;
      }
    }
    plan.push_back(std::move(p));
  }
  return plan;
}

QuantizeSummary quantize_model(const std::string& in_path, const std::string& out_path,
                               LlamaFtype ftype, const QuantizeOptions& options,
                               const ProgressCallback& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.threads < 0) fail("quantize: threads = ", options.threads, " (expected >= 0)");
  gguf::File calib;
  if (options.source && options.method != QuantMethod::rtn) {
    fail("quantize: a tensor source replaces --method gptq/awq (method must be rtn)");
  }
  if (options.method != QuantMethod::rtn) {
    if (options.calib_path.empty()) {
      fail("quantize: --method ", options.method == QuantMethod::gptq ? "gptq" : "awq",
           " needs a calibration file (--calib)");
    }
    calib = gguf::File::open(options.calib_path);
  }
  const gguf::File in = gguf::File::open(in_path);
  const Imatrix* im = options.imatrix;
  const std::vector<TensorPlan> plan = plan_llama_quant(in, ftype, im != nullptr);
  std::map<std::string, AwqTransform> awq_tr;
  Format awq_fmt = Format::q4_K;
  if (options.method == QuantMethod::awq) {
    const std::uint32_t base = llama_ftype_base_type(ftype);
    if (base != kQ4_K && base != kQ5_K) {
      fail("quantize: --method awq needs a Q4_K or Q5_K file type (got ", llama_ftype_name(ftype),
           ")");
    }
    const LlamaModelInfo info = llama_model_info(in);
    if (info.arch != "llama" || info.n_expert > 0) {
      fail("quantize: --method awq supports dense llama-architecture models (got \"", info.arch,
           "\"", info.n_expert > 0 ? " with experts" : "", ")");
    }
    awq_fmt = format_of(base);
    awq_tr = awq_plan(in, calib, awq_fmt, info.n_layer);
  }

  // Metadata: input order; general.quantization_version and general.file_type re-set (llama's
  // gguf_set_val_* removes the key and appends it); split keys removed; imatrix keys appended.
  std::vector<gguf::KeyValue> meta;
  auto drop = [](const std::string& k) {
    return k == "general.quantization_version" || k == "general.file_type" || k == "split.no" ||
           k == "split.count" || k == "split.tensors.count";
  };
  std::vector<std::string> appended;
  if (im) {
    appended = {"quantize.imatrix.file", "quantize.imatrix.dataset",
                "quantize.imatrix.entries_count", "quantize.imatrix.chunks_count"};
  }
  for (const auto& kv : in.metadata) {
    if (drop(kv.key)) continue;
    if (std::find(appended.begin(), appended.end(), kv.key) != appended.end()) continue;
    gguf::KeyValue c = kv;
    if (c.value.type == gguf::ValueType::boolean) c.value.bits = c.value.bits != 0;
    if (c.key == "general.alignment") c.value = gguf::Value::u32(gguf::kDefaultAlignment);
    meta.push_back(std::move(c));
  }
  meta.push_back({"general.quantization_version", gguf::Value::u32(2)});
  meta.push_back({"general.file_type", gguf::Value::u32(static_cast<std::uint32_t>(ftype))});
  if (im) {
    meta.push_back(
        {"quantize.imatrix.file", gguf::Value::string(options.imatrix_path.substr(0, 127))});
    if (!im->datasets.empty() && !im->datasets[0].empty()) {
      meta.push_back(
          {"quantize.imatrix.dataset", gguf::Value::string(im->datasets[0].substr(0, 127))});
    }
    // Integer overrides are written as u32 of |value| since llama.cpp PR 14182 (2025-06).
    meta.push_back({"quantize.imatrix.entries_count",
                    gguf::Value::u32(static_cast<std::uint32_t>(im->entries.size()))});
    if (im->chunks > 0) {
      meta.push_back({"quantize.imatrix.chunks_count",
                      gguf::Value::u32(static_cast<std::uint32_t>(im->chunks))});
    }
  }

  // Output tensor infos (ggml_n_dims strips trailing 1s).
  std::vector<gguf::TensorInfo> outs;
  QuantizeSummary sum;
  sum.in_file_bytes = in.file_size;
  std::uint64_t in_total = 0;
  for (const auto& p : plan) {
    const gguf::TensorInfo& t = in.tensors[p.input_index];
    gguf::TensorInfo o;
    o.name = t.name;
    o.shape.assign(t.shape.begin(),
                   t.shape.begin() + static_cast<std::ptrdiff_t>(n_dims_of(t.shape)));
    o.type = p.out_type;
    o.nbytes = gguf::tensor_nbytes(o.type, o.shape);
    outs.push_back(std::move(o));
    in_total += t.nbytes;
    if (p.quantize) {
      if (p.in_type != kF32 && p.in_type != kF16 && p.in_type != kBF16) {
        fail("quantize: tensor ", t.name, " is stored as ", gguf::type_info(p.in_type).name,
             "; only f32/f16/bf16 tensors can be quantized (no requantization)");
      }
      if (t.shape.size() > 3 && t.shape[3] != 1) {
        fail("quantize: tensor ", t.name, " has 4 dimensions");
      }
      if (im) {
        const std::vector<float>* v = im->find(t.name);
        const std::int64_t want = t.shape[0] * (t.shape.size() > 2 ? t.shape[2] : 1);
        if (v && static_cast<std::int64_t>(v->size()) != want &&
            category_of(t.name) != Cat::token_embd) {
          fail("quantize: imatrix size ", v->size(), " is different from tensor size ", want,
               " for ", t.name);
        }
      }
    }
  }
  const std::vector<std::uint8_t> header =
      gguf::serialize_meta(meta, outs, gguf::kDefaultAlignment);

  Context ctx;
  ctx.threads = options.threads;
  const std::string tmp = out_path + ".tmp";
  std::FILE* fp = std::fopen(tmp.c_str(), "wb");
  if (!fp) fail("quantize: cannot create \"", tmp, "\"");
  try {
    auto put = [&](const void* d, std::size_t n) {
      if (n && std::fwrite(d, 1, n, fp) != n) fail("quantize: writing \"", tmp, "\" failed");
    };
    put(header.data(), header.size());
    std::vector<float> f32;
    std::vector<std::uint8_t> qbuf;
    static const std::uint8_t zeros[32] = {};
    std::uint64_t done = 0;
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const TensorPlan& p = plan[i];
      const gguf::TensorInfo& t = in.tensors[p.input_index];
      const gguf::TensorInfo& o = outs[i];
      sum.elements += t.elements();
      sum.in_tensor_bytes += t.nbytes;
      sum.out_tensor_bytes += o.nbytes;
      const auto awq_it = awq_tr.find(t.name);
      const AwqTransform* tr = awq_it == awq_tr.end() ? nullptr : &awq_it->second;
      SourcedTensor sourced;
      if (options.source && options.source(p, sourced)) {
        // Computed by the caller (sequential calibration): written as given.
        if (sourced.bytes.size() != o.nbytes) {
          fail("quantize: the tensor source gave ", sourced.bytes.size(), " bytes for ", t.name,
               " (", gguf::type_info(o.type).name, "), expected ", o.nbytes);
        }
        put(sourced.bytes.data(), sourced.bytes.size());
        ++(p.quantize ? sum.quantized : sum.copied);
        if (p.quantize && p.fallback) ++sum.fallbacks;
        if (sourced.calibrated) ++sum.calibrated;
      } else if (!p.quantize && tr) {
        // A folded norm (or, unusually, an unquantized linear) is rewritten, not copied.
        if (t.type != kF32) fail("quantize: awq: tensor ", t.name, " must be f32 to be rescaled");
        RowMajorXf M =
            Eigen::Map<const RowMajorXf>(reinterpret_cast<const float*>(t.data),
                                         t.shape.size() > 1 ? t.shape[1] : 1, t.shape[0]);
        if (tr->norm_div.size()) M = M * tr->norm_div.cwiseInverse().asDiagonal();
        apply_awq(*tr, M);
        put(M.data(), t.nbytes);
        ++sum.copied;
      } else if (!p.quantize) {
        put(t.data, t.nbytes);
        ++sum.copied;
      } else {
        const std::int64_t cols = t.shape[0];
        const std::int64_t rows = t.shape.size() > 1 ? t.shape[1] : 1;
        const std::int64_t mats = t.shape.size() > 2 ? t.shape[2] : 1;
        const std::int64_t n = t.elements();
        const float* src;
        if (t.type == kF32 && reinterpret_cast<std::uintptr_t>(t.data) % alignof(float) == 0) {
          src = reinterpret_cast<const float*>(t.data);  // zero-copy view of the mapping
        } else {
          f32.resize(static_cast<std::size_t>(n));
          to_f32(t.type, t.data, n, f32.data());
          src = f32.data();
        }
        qbuf.resize(o.nbytes);
        const float* imv = nullptr;
        if (im) {
          const std::vector<float>* v = im->find(t.name);
          if (v && static_cast<std::int64_t>(v->size()) == cols * mats) imv = v->data();
        }
        RowMajorXf scaled;
        std::vector<float> im_scaled;
        if (tr && (tr->col_scale.size() || tr->row_div.size())) {
          // AWQ: scale (and clip) the weights; the inputs are scaled by the folded norm / prev.
          if (mats != 1) fail("quantize: awq: tensor ", t.name, " is 3-D");
          scaled = Eigen::Map<const RowMajorXf>(src, rows, cols);
          apply_awq(*tr, scaled);
          if (tr->clip && tr->inputs && format_of(p.out_type) == awq_fmt) {
            const Eigen::MatrixXf Xs =
                load_inputs(*tr->inputs) * tr->col_scale.cwiseInverse().asDiagonal();
            const Eigen::MatrixXf cm =
                awq::clip_search_blocks(awq_fmt, Eigen::MatrixXf(scaled), Xs, awq::Config{});
            for (std::int64_t r = 0; r < rows; ++r)
              for (std::int64_t c = 0; c < cols; ++c) {
                const float m = cm(r, c / kQK_K);
                scaled(r, c) = std::min(std::max(scaled(r, c), -m), m);
              }
          }
          src = scaled.data();
          if (imv && tr->col_scale.size()) {
            // Importance is E[x^2] per column; the scaled input is x / s.
            im_scaled.assign(imv, imv + cols);
            for (std::int64_t c = 0; c < cols; ++c)
              im_scaled[c] /= tr->col_scale[c] * tr->col_scale[c];
            imv = im_scaled.data();
          }
          ++sum.calibrated;
        }
        const gguf::TensorInfo* hess = nullptr;
        const gguf::TensorInfo* acts = nullptr;
        if (options.method == QuantMethod::gptq && mats == 1 &&
            (p.out_type == kQ2_K || p.out_type == kQ3_K || p.out_type == kQ4_K ||
             p.out_type == kQ5_K || p.out_type == kQ6_K)) {
          hess = calib.find_tensor(t.name + ".hessian");
          acts = hess ? nullptr : find_inputs(calib, t.name, cols);
        }
        if (hess || acts) {
          // GPTQ with K-quant output on the calibration Hessian of this layer.
          Eigen::MatrixXf H;
          if (hess) {
            if (hess->type != kF32 || hess->shape.size() != 2 || hess->shape[0] != cols ||
                hess->shape[1] != cols) {
              fail("quantize: calibration tensor ", hess->name, " must be f32 [", cols, ", ", cols,
                   "]");
            }
            H = Eigen::Map<
                const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
                reinterpret_cast<const float*>(hess->data), cols, cols);
          } else {
            Hessian h(cols);
            h.add_batch(reinterpret_cast<const float*>(acts->data), acts->shape[1]);
            H = h.matrix();
          }
          const Eigen::MatrixXf W = Eigen::Map<
              const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
              src, rows, cols);
          const std::vector<std::uint8_t> blocks =
              gptq::quantize_blocks(format_of(p.out_type), W, H, gptq::Config{});
          if (blocks.size() != qbuf.size())
            fail("quantize: GPTQ returned ", blocks.size(), " bytes");
          std::memcpy(qbuf.data(), blocks.data(), blocks.size());
          ++sum.calibrated;
        } else {
          quantize_tensor_into(ctx, p.out_type, src, mats, rows, cols, imv, qbuf.data());
        }
        put(qbuf.data(), qbuf.size());
        ++sum.quantized;
        if (p.fallback) ++sum.fallbacks;
      }
      put(zeros, (32 - o.nbytes % 32) % 32);
      done += t.nbytes;
      if (progress) {
        QuantizeProgress pr;
        pr.index = i + 1;
        pr.count = plan.size();
        pr.name = p.name;
        pr.out_type = p.out_type;
        pr.in_bytes_done = done;
        pr.in_bytes_total = in_total;
        pr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        progress(pr);
      }
    }
    sum.out_file_bytes = static_cast<std::uint64_t>(ftello(fp));
    if (std::fclose(fp) != 0) {
      fp = nullptr;
      fail("quantize: closing \"", tmp, "\" failed");
    }
    fp = nullptr;
    if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
      fail("quantize: cannot rename \"", tmp, "\" to \"", out_path, "\"");
    }
  } catch (...) {
    if (fp) std::fclose(fp);
    std::remove(tmp.c_str());
    throw;
  }
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace nibble
