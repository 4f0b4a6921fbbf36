// `nibble quantize` (llama-quantize compatible) tests.
//
// 1. Type selection: literal expectation tables derived by hand from llama.cpp
//    src/llama-quant.cpp (first at c392e50, the Q2_K/Q3_K/legacy/IQ4/BF16 mixes and the fallback
//    table at upstream 0253fb2: llama_tensor_get_type_impl, tensor_type_fallback and the tensor
//    loop of llama_model_quantize_impl); each rule is restated next to the table that exercises
//    it. tests/cross/llama_compare checks the same rules end to end against llama-quantize.
// 2. End to end: small llama-architecture GGUF files (random f32/f16 weights with llama's tensor
//    names and metadata keys) are quantized, read back and dequantized; the result is compared
//    with the input in double precision (relative RMS error per format, tolerances below), the
//    metadata order/keys are checked, and the driver's bytes are checked against direct
//    nibble::quantize calls on the same rows (with and without an importance matrix).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "nibble/io/gguf.hpp"
#include "nibble/io/imatrix.hpp"
#include "nibble/io/llama_quant.hpp"
#include "nibble/nibble.hpp"
#include "nibble/quant/gptq.hpp"
#include "nibble/quant/synthetic.hpp"

namespace g = nibble::gguf;
using nibble::LlamaFtype;

namespace {

constexpr std::uint32_t F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
                        Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, IQ4_NL = 20,
                        IQ4_XS = 23, BF16 = 30;

struct ModelSpec {
  int n_layer = 2;
  std::int64_t n_embd = 256, n_ff = 256, n_vocab = 64, n_kv = 64;
  int n_head = 4, n_head_kv = 1, n_expert = 0;
  bool tied = false;       // no output.weight
  bool f16 = false;        // 2-D weights stored as f16
  std::int64_t rows2 = 0;  // if > 0: every 2-D weight has this many rows (plan-only tests)
};

struct Model {
  std::vector<g::KeyValue> meta;
  std::vector<g::TensorInfo> tensors;
  std::vector<std::vector<std::uint8_t>> store;
  std::map<std::string, std::vector<float>> f32;  // the exact f32 values of every tensor
};

// Builds a llama-architecture model in the tensor order convert_hf_to_gguf.py writes.
Model make_model(const ModelSpec& sp, unsigned seed = 1) {
  Model m;
  m.meta.push_back({"general.architecture", g::Value::string("llama")});
  m.meta.push_back({"general.name", g::Value::string("nibble-test")});
  m.meta.push_back({"llama.block_count", g::Value::u32(static_cast<std::uint32_t>(sp.n_layer))});
  m.meta.push_back({"llama.context_length", g::Value::u32(512)});
  m.meta.push_back(
      {"llama.embedding_length", g::Value::u32(static_cast<std::uint32_t>(sp.n_embd))});
  m.meta.push_back(
      {"llama.feed_forward_length", g::Value::u32(static_cast<std::uint32_t>(sp.n_ff))});
  m.meta.push_back(
      {"llama.attention.head_count", g::Value::u32(static_cast<std::uint32_t>(sp.n_head))});
  m.meta.push_back(
      {"llama.attention.head_count_kv", g::Value::u32(static_cast<std::uint32_t>(sp.n_head_kv))});
  m.meta.push_back({"llama.rope.freq_base", g::Value::f32(10000.0f)});
  m.meta.push_back({"llama.attention.layer_norm_rms_epsilon", g::Value::f32(1e-5f)});
  if (sp.n_expert) {
    m.meta.push_back(
        {"llama.expert_count", g::Value::u32(static_cast<std::uint32_t>(sp.n_expert))});
  }
  m.meta.push_back({"general.file_type", g::Value::u32(sp.f16 ? 1 : 0)});
  m.meta.push_back({"tokenizer.ggml.model", g::Value::string("llama")});
  std::vector<std::string> toks;
  for (int i = 0; i < sp.n_vocab; ++i) toks.push_back("t" + std::to_string(i));
  m.meta.push_back({"tokenizer.ggml.tokens", g::Value::string_array(toks)});
  std::vector<float> scores(static_cast<std::size_t>(sp.n_vocab), 0.5f);
  m.meta.push_back({"tokenizer.ggml.scores",
                    g::Value::scalar_array(g::ValueType::f32, scores.data(), scores.size())});
  m.meta.push_back({"tokenizer.ggml.add_bos_token", g::Value::boolean(true)});

  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape, float scale) {
    if (sp.rows2 > 0 && shape.size() == 2) shape[1] = sp.rows2;
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = nd(rng) * scale;
    if (shape.size() == 1) {
      for (auto& x : v) x = 1.0f + 0.1f * x;
    } else if (n > 7) {
      v[3] *= 8.0f;  // an outlier
    }
    g::TensorInfo t;
    t.name = name;
    t.shape = shape;
    const bool half = sp.f16 && shape.size() == 2;
    t.type = half ? F16 : F32;
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n) * (half ? 2 : 4));
    for (std::int64_t i = 0; i < n; ++i) {
      if (half) {
        const nibble::fp16_t h = nibble::fp32_to_fp16(v[static_cast<std::size_t>(i)]);
        v[static_cast<std::size_t>(i)] = nibble::fp16_to_fp32(h);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      } else {
        std::memcpy(bytes.data() + 4 * i, &v[static_cast<std::size_t>(i)], 4);
      }
    }
    t.nbytes = bytes.size();
    m.store.push_back(std::move(bytes));
    m.f32[name] = std::move(v);
    m.tensors.push_back(t);
  };
  add("token_embd.weight", {sp.n_embd, sp.n_vocab}, 0.02f);
  for (int l = 0; l < sp.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", {sp.n_embd}, 1.0f);
    add(b + "attn_q.weight", {sp.n_embd, sp.n_embd}, 0.05f);
    add(b + "attn_k.weight", {sp.n_embd, sp.n_kv}, 0.05f);
    add(b + "attn_v.weight", {sp.n_embd, sp.n_kv}, 0.05f);
    add(b + "attn_output.weight", {sp.n_embd, sp.n_embd}, 0.05f);
    add(b + "ffn_norm.weight", {sp.n_embd}, 1.0f);
    add(b + "ffn_gate.weight", {sp.n_embd, sp.n_ff}, 0.05f);
    add(b + "ffn_up.weight", {sp.n_embd, sp.n_ff}, 0.05f);
    add(b + "ffn_down.weight", {sp.n_ff, sp.n_embd}, 0.05f);
  }
  add("output_norm.weight", {sp.n_embd}, 1.0f);
  if (!sp.tied) add("output.weight", {sp.n_embd, sp.n_vocab}, 0.05f);
  for (std::size_t i = 0; i < m.tensors.size(); ++i) m.tensors[i].data = m.store[i].data();
  return m;
}

std::string tmp_path(const std::string& name) {
  return (testing::TempDir().empty() ? std::string("/tmp/") : testing::TempDir()) + "nibble_lq_" +
         name;
}

struct Parsed {
  std::vector<std::uint8_t> bytes;
  g::File file;
};

Parsed to_file(const Model& m) {
  Parsed p;
  p.bytes = g::write_memory(m.meta, m.tensors);
  p.file = g::File::parse(p.bytes.data(), p.bytes.size());
  return p;
}

std::map<std::string, std::uint32_t> plan_types(const g::File& f, LlamaFtype ft) {
  std::map<std::string, std::uint32_t> r;
  for (const auto& p : nibble::plan_llama_quant(f, ft)) r[p.name] = p.out_type;
  return r;
}

const char* tname(std::uint32_t t) {
  return g::type_info(t).name;
}

// Checks every tensor of an n-layer model against: `attn_v_layers`/`ffn_down_layers` get
// `bumped_v`/`bumped_down`, other quantizable 2-D weights `base`, output.weight `out`, norms f32.
void expect_mix(const std::map<std::string, std::uint32_t>& got, int n_layer, std::uint32_t base,
                std::uint32_t out, const std::set<int>& attn_v_layers, std::uint32_t bumped_v,
                const std::set<int>& ffn_down_layers, std::uint32_t bumped_down,
                const std::string& what) {
  for (const auto& kv : got) {
    const std::string& n = kv.first;
    std::uint32_t want = base;
    int layer = -1;
    std::sscanf(n.c_str(), "blk.%d.", &layer);
    if (n.find("norm") != std::string::npos) {
      want = F32;
    } else if (n == "output.weight") {
      want = out;
    } else if (n.find("attn_v.weight") != std::string::npos && attn_v_layers.count(layer)) {
      want = bumped_v;
    } else if (n.find("ffn_down") != std::string::npos && ffn_down_layers.count(layer)) {
      want = bumped_down;
    }
    EXPECT_EQ(kv.second, want) << what << ": " << n << " is " << tname(kv.second) << ", expected "
                               << tname(want);
  }
  EXPECT_EQ(got.size(), static_cast<std::size_t>(3 + 9 * n_layer)) << what;
}

double rel_rms(const std::vector<float>& ref, const std::vector<float>& got) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  return std::sqrt(num / den);
}

nibble::Format fmt(std::uint32_t t) {
  switch (t) {
    case Q8_0:
      return nibble::Format::q8_0;
    case Q4_K:
      return nibble::Format::q4_K;
    case Q5_K:
      return nibble::Format::q5_K;
    case Q6_K:
      return nibble::Format::q6_K;
    case Q4_0:
      return nibble::Format::q4_0;
    case Q4_1:
      return nibble::Format::q4_1;
    case Q5_0:
      return nibble::Format::q5_0;
    case Q5_1:
      return nibble::Format::q5_1;
    case Q2_K:
      return nibble::Format::q2_K;
    case Q3_K:
      return nibble::Format::q3_K;
    case IQ4_NL:
      return nibble::Format::iq4_nl;
    case IQ4_XS:
      return nibble::Format::iq4_xs;
    case BF16:
      return nibble::Format::bf16;
    case F16:
      return nibble::Format::f16;
    default:
      return nibble::Format::f32;
  }
}

// Relative RMS tolerance per output type for N(0, s^2) weights with one 8x outlier per tensor,
// about twice the expected error of each format: q8_0 0.5%, bf16 0.2%, q6_K 2%, q5_0/q5_1/q5_K
// 3-4%, q4_0/q4_1/q4_K/iq4_nl/iq4_xs 7-9%, q3_K 15-18%, q2_K 30-35% (levels 0..3 per 16 values
// with a per-sub-block min).
double tolerance(std::uint32_t t) {
  switch (t) {
    case Q8_0:
      return 0.01;
    case BF16:
      return 0.005;
    case Q6_K:
      return 0.035;
    case Q5_K:
    case Q5_0:
    case Q5_1:
      return 0.07;
    case Q4_K:
    case Q4_0:
    case Q4_1:
    case IQ4_NL:
    case IQ4_XS:
      return 0.14;
    case Q3_K:
      return 0.3;
    case Q2_K:
      return 0.6;
    case F16:
      return 0.001;
    default:
      return 0.0;
  }
}

}  // namespace

// ---- 1. type selection ----

// llama_tensor_get_type, rules used below (llama.cpp c392e50, src/llama-quant.cpp):
//  R1 output.weight (or token_embd.weight when there is no output.weight): Q8_0 if falcon or
//     ne[0] % QK_K != 0, else Q6_K unless the base type is Q8_0.
//  R2 attn_v.weight: Q4_K_M/Q5_K_M and use_more_bits(i_attention_wv, n_attention_wv) -> Q6_K;
//     Q4_K_S and i_attention_wv < 4 -> Q5_K; then 70B: Q3_K/Q4_K -> Q5_K; then n_expert == 8 ->
//     Q8_0.  use_more_bits(i, n) = i < n/8 || i >= 7*n/8 || (i - n/8) % 3 == 2.
//  R3 attn_k.weight: n_expert == 8 -> Q8_0.
//  R4 ffn_down: Q4_K_M -> Q6_K if use_more_bits(i_layer, n_layer); Q5_K_M likewise;
//     Q4_K_S (not falcon) -> Q5_K if i_layer < n_layer/8.
//  R5 attn_output.weight: n_expert == 8 and Q4_K_S/Q4_K_M -> Q5_K.
//  R6 ne[0] not a multiple of the block size: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, and F16
//     if still not a multiple.
// llama_model_quantize_impl: quantize only names ending in "weight", ggml_n_dims >= 2, no
//  "_norm.weight" (R7); default type per ftype: Q4_K_S/M -> Q4_K, Q5_K_S/M -> Q5_K, Q6_K, Q8_0.

TEST(LlamaQuantPlan, EightLayerMixes) {
  ModelSpec sp;
  sp.n_layer = 8;
  sp.rows2 = 2;
  const Parsed p = to_file(make_model(sp));
  // use_more_bits(i, 8) is true for i = 0 (i < 1), 6, 7? -> i >= 7: 7; (i-1)%3 == 2: 3, 6.
  const std::set<int> more = {0, 3, 6, 7};
  expect_mix(plan_types(p.file, LlamaFtype::q4_K_M), 8, Q4_K, Q6_K, more, Q6_K, more, Q6_K,
             "Q4_K_M");
  expect_mix(plan_types(p.file, LlamaFtype::q5_K_M), 8, Q5_K, Q6_K, more, Q6_K, more, Q6_K,
             "Q5_K_M");
  // R2: attn_v of the first 4 layers Q5_K; R4: ffn_down of layer 0 (< 8/8) Q5_K.
  expect_mix(plan_types(p.file, LlamaFtype::q4_K_S), 8, Q4_K, Q6_K, {0, 1, 2, 3}, Q5_K, {0}, Q5_K,
             "Q4_K_S");
  expect_mix(plan_types(p.file, LlamaFtype::q5_K_S), 8, Q5_K, Q6_K, {}, 0, {}, 0, "Q5_K_S");
  expect_mix(plan_types(p.file, LlamaFtype::q6_K), 8, Q6_K, Q6_K, {}, 0, {}, 0, "Q6_K");
  expect_mix(plan_types(p.file, LlamaFtype::q8_0), 8, Q8_0, Q8_0, {}, 0, {}, 0, "Q8_0");
}

TEST(LlamaQuantPlan, ThirtyTwoLayersQ4KMIsHalfQ6K) {
  ModelSpec sp;
  sp.n_layer = 32;
  sp.rows2 = 2;
  const Parsed p = to_file(make_model(sp));
  // use_more_bits(i, 32): i < 4, i >= 28, or (i - 4) % 3 == 2 -> 16 of 32 layers (llama's
  // "Q6_K for half of the attention.wv and feed_forward.w2 tensors").
  const std::set<int> more = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
  expect_mix(plan_types(p.file, LlamaFtype::q4_K_M), 32, Q4_K, Q6_K, more, Q6_K, more, Q6_K,
             "Q4_K_M/32");
  // Q4_K_S: R4 ffn_down layers < 32/8 = 4.
  expect_mix(plan_types(p.file, LlamaFtype::q4_K_S), 32, Q4_K, Q6_K, {0, 1, 2, 3}, Q5_K,
             {0, 1, 2, 3}, Q5_K, "Q4_K_S/32");
}

TEST(LlamaQuantPlan, Llama70BBumpsAttnV) {
  ModelSpec sp;
  sp.n_layer = 80;  // llama: 80 layers with n_head != n_head_kv is LLM_TYPE_70B
  sp.n_head = 8;
  sp.n_head_kv = 1;
  sp.rows2 = 2;
  const Parsed p = to_file(make_model(sp));
  std::set<int> all, more, down_s;
  for (int i = 0; i < 80; ++i) {
    all.insert(i);
    if (i < 10 || i >= 70 || (i - 10) % 3 == 2) more.insert(i);
    if (i < 10) down_s.insert(i);
  }
  // Q4_K_S: attn_v i < 4 -> Q5_K, the rest Q4_K -> Q5_K by the 70B rule: all Q5_K.
  expect_mix(plan_types(p.file, LlamaFtype::q4_K_S), 80, Q4_K, Q6_K, all, Q5_K, down_s, Q5_K,
             "70B Q4_K_S");
  // Q4_K_M: attn_v Q6_K where use_more_bits, else Q4_K -> Q5_K.
  const auto got = plan_types(p.file, LlamaFtype::q4_K_M);
  for (int i = 0; i < 80; ++i) {
    const auto t = got.at("blk." + std::to_string(i) + ".attn_v.weight");
    EXPECT_EQ(t, more.count(i) ? Q6_K : Q5_K) << i;
  }
  // Same shape with n_head == n_head_kv is 65B: no bump.
  sp.n_head_kv = 8;
  const Parsed p65 = to_file(make_model(sp));
  expect_mix(plan_types(p65.file, LlamaFtype::q4_K_S), 80, Q4_K, Q6_K, {0, 1, 2, 3}, Q5_K, down_s,
             Q5_K, "65B Q4_K_S");
}

TEST(LlamaQuantPlan, EightExperts) {
  ModelSpec sp;
  sp.n_layer = 2;
  sp.n_expert = 8;
  sp.rows2 = 2;
  const Parsed p = to_file(make_model(sp));
  const auto got = plan_types(p.file, LlamaFtype::q4_K_M);
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(got.at(b + "attn_v.weight"), Q8_0);       // R2
    EXPECT_EQ(got.at(b + "attn_k.weight"), Q8_0);       // R3
    EXPECT_EQ(got.at(b + "attn_output.weight"), Q5_K);  // R5
    EXPECT_EQ(got.at(b + "attn_q.weight"), Q4_K);
    // R4 with n_layer 2: use_more_bits(i, 2) = i < 0 || i >= 1 || i % 3 == 2 -> layer 1.
    EXPECT_EQ(got.at(b + "ffn_down.weight"), l == 1 ? Q6_K : Q4_K);
  }
  EXPECT_EQ(plan_types(p.file, LlamaFtype::q5_K_S).at("blk.0.attn_output.weight"), Q5_K);
  EXPECT_EQ(plan_types(p.file, LlamaFtype::q6_K).at("blk.0.attn_k.weight"), Q8_0);
}

TEST(LlamaQuantPlan, TiedEmbeddingsAndOrder) {
  ModelSpec sp;
  sp.n_layer = 12;
  sp.tied = true;
  sp.rows2 = 2;
  const Parsed p = to_file(make_model(sp));
  const auto plan = nibble::plan_llama_quant(p.file, LlamaFtype::q4_K_M);
  // R1 for the tied embedding.
  for (const auto& t : plan) {
    if (t.name == "token_embd.weight") {
      EXPECT_EQ(t.out_type, Q6_K);
    }
  }
  EXPECT_EQ(plan_types(p.file, LlamaFtype::q8_0).at("token_embd.weight"), Q8_0);
  // Order: llama_model_loader's weights_map sorts by (layer from "blk.%d.", then name); tensors
  // without a layer (-1) come first.
  std::vector<std::string> want = {"output_norm.weight", "token_embd.weight"};
  const char* per_layer[] = {"attn_k.weight",   "attn_norm.weight", "attn_output.weight",
                             "attn_q.weight",   "attn_v.weight",    "ffn_down.weight",
                             "ffn_gate.weight", "ffn_norm.weight",  "ffn_up.weight"};
  for (int l = 0; l < 12; ++l) {
    for (const char* n : per_layer) want.push_back("blk." + std::to_string(l) + "." + n);
  }
  ASSERT_EQ(plan.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(plan[i].name, want[i]) << i;
}

TEST(LlamaQuantPlan, ShapeFallbacksAndSkippedTensors) {
  // One layer, hand-made shapes.
  std::vector<g::KeyValue> meta = {{"general.architecture", g::Value::string("llama")},
                                   {"llama.block_count", g::Value::u32(1)}};
  struct T {
    const char* name;
    std::vector<std::int64_t> shape;
  };
  const std::vector<T> ts = {
      {"output.weight", {288, 4}},              // R1: 288 % 256 != 0 -> Q8_0
      {"blk.0.attn_v.weight", {288, 4}},        // Q6_K ftype: R6 Q6_K -> Q8_0
      {"blk.0.attn_k.weight", {80, 4}},         // R6: Q6_K -> Q8_0 -> 80 % 32 != 0 -> F16
      {"blk.0.attn_q.weight", {288, 4}},        // R6: Q6_K -> Q8_0; Q4_K -> Q5_0
      {"blk.0.ffn_up.weight", {256, 1}},        // R7: ggml_n_dims == 1 -> not quantized
      {"blk.0.ffn_gate_inp.weight", {256, 4}},  // R7: expert router kept
      {"blk.0.attn_q.bias", {256, 4}},          // R7: not a "weight"
      {"rope_freqs.weight", {256}},             // R7: 1-D
      {"blk.0.ffn_down.weight", {256, 4, 2}},   // 3-D is quantized
  };
  std::vector<std::vector<float>> store;
  std::vector<g::TensorInfo> infos;
  for (const auto& t : ts) {
    std::int64_t n = 1;
    for (auto d : t.shape) n *= d;
    store.emplace_back(static_cast<std::size_t>(n), 0.25f);
    g::TensorInfo i;
    i.name = t.name;
    i.shape = t.shape;
    i.type = F32;
    i.nbytes = static_cast<std::uint64_t>(n) * 4;
    i.data = reinterpret_cast<const std::uint8_t*>(store.back().data());
    infos.push_back(i);
  }
  const auto bytes = g::write_memory(meta, infos);
  const g::File f = g::File::parse(bytes.data(), bytes.size());
  const auto q6 = plan_types(f, LlamaFtype::q6_K);
  EXPECT_EQ(q6.at("output.weight"), Q8_0);
  EXPECT_EQ(q6.at("blk.0.attn_v.weight"), Q8_0);
  EXPECT_EQ(q6.at("blk.0.attn_k.weight"), F16);
  EXPECT_EQ(q6.at("blk.0.attn_q.weight"), Q8_0);
  EXPECT_EQ(q6.at("blk.0.ffn_up.weight"), F32);
  EXPECT_EQ(q6.at("blk.0.ffn_gate_inp.weight"), F32);
  EXPECT_EQ(q6.at("blk.0.attn_q.bias"), F32);
  EXPECT_EQ(q6.at("rope_freqs.weight"), F32);
  EXPECT_EQ(q6.at("blk.0.ffn_down.weight"), Q6_K);
  // Q4_K_M: 288 columns take Q5_0 (attn_v: Q6_K for layer 0 of 1 -> Q8_0), 80 columns
  // Q5_0 -> F16.
  const auto q4m = plan_types(f, LlamaFtype::q4_K_M);
  EXPECT_EQ(q4m.at("blk.0.attn_q.weight"), Q5_0);
  EXPECT_EQ(q4m.at("blk.0.attn_v.weight"), Q8_0);
  EXPECT_EQ(q4m.at("blk.0.attn_k.weight"), F16);
  EXPECT_EQ(q4m.at("output.weight"), Q8_0);
  // Q5_K_S: 288 columns take Q5_1.
  EXPECT_EQ(plan_types(f, LlamaFtype::q5_K_S).at("blk.0.attn_q.weight"), Q5_1);
  // Q8_0 on 80 columns: llama-quantize has no fallback for Q8_0.
  EXPECT_THROW((void)nibble::plan_llama_quant(f, LlamaFtype::q8_0), nibble::Error);
}

TEST(LlamaQuantPlan, ParsesTypeNames) {
  EXPECT_EQ(nibble::parse_llama_ftype("Q4_K"), LlamaFtype::q4_K_M);
  EXPECT_EQ(nibble::parse_llama_ftype("q5_k"), LlamaFtype::q5_K_M);
  EXPECT_EQ(nibble::parse_llama_ftype("Q4_K_S"), LlamaFtype::q4_K_S);
  EXPECT_EQ(nibble::parse_llama_ftype("Q8_0"), LlamaFtype::q8_0);
  EXPECT_EQ(static_cast<int>(nibble::parse_llama_ftype("Q6_K")), 18);
  // llama.h values (general.file_type) and llama-quantize's names/aliases.
  const std::pair<const char*, int> names[] = {
      {"Q4_0", 2},    {"q4_1", 3},  {"Q5_0", 8},    {"Q5_1", 9},    {"Q2_K", 10},   {"Q3_K_S", 11},
      {"Q3_K_M", 12}, {"Q3_K", 12}, {"q3_k_l", 13}, {"IQ4_NL", 25}, {"iq4_xs", 30}, {"BF16", 32}};
  for (const auto& n : names) {
    EXPECT_EQ(static_cast<int>(nibble::parse_llama_ftype(n.first)), n.second) << n.first;
  }
  for (LlamaFtype ft : nibble::kAllLlamaFtypes) {
    EXPECT_EQ(nibble::parse_llama_ftype(nibble::llama_ftype_name(ft)), ft);
  }
  // Types llama-quantize has but nibble does not produce.
  for (const char* bad : {"Q2_K_S", "IQ3_XS", "IQ2_XXS", "F16", "TQ1_0", "MXFP4_MOE", ""}) {
    EXPECT_THROW((void)nibble::parse_llama_ftype(bad), nibble::Error) << bad;
  }
}

// Rules of llama_tensor_get_type_impl (upstream 0253fb2) for the file types added after c392e50:
//  L1 base types: Q2_K -> Q2_K; Q3_K_S/M/L -> Q3_K; Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS,
//     BF16 -> themselves. BF16 is not a quantized type: no mix rule and no fallback applies,
//     every quantizable tensor (output and token_embd included) becomes BF16.
//  L2 output.weight (and a tied token_embd): R1 (Q6_K, or Q8_0 when ne[0] does not fit the base
//     type's block); an untied token_embd keeps the base type.
//  L3 attn_v (and attn_qkv, attn_kv_b; counter i_attention_wv): Q2_K -> Q4_K if n_gqa >= 4 else
//     Q3_K; Q3_K_M -> Q5_K for i_attention_wv < 2 else Q4_K; Q3_K_L -> Q5_K; IQ4_NL/IQ4_XS ->
//     Q5_K if n_gqa >= 4; then 70B: Q3_K/Q4_K -> Q5_K; then n_expert == 8 -> Q8_0.
//  L4 ffn_down (i = layer): Q2_K -> Q3_K; Q3_K_M -> Q5_K if i < n/16, else Q4_K (not falcon);
//     Q3_K_L -> Q5_K; IQ4_NL/IQ4_XS without imatrix -> Q5_K if i < n/8; Q4_0/Q5_0 with imatrix
//     -> Q4_1/Q5_1 if i < n/8.
//  L5 attn_output: Q2_K -> Q3_K, Q3_K_M -> Q4_K, Q3_K_L -> Q5_K; with 8 experts instead Q5_K for
//     Q2_K, Q3_K_S, Q3_K_M, IQ4_NL, IQ4_XS, Q4_K_S, Q4_K_M.
//  L6 tensor_type_fallback, ne[0] not a multiple of the block: IQ4_XS -> IQ4_NL; Q2_K, Q3_K ->
//     Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0; F16 if the fallback does not fit either;
//     any other type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) is an error.
namespace {

// Expected types of one mix: v_lo for attn_v layers < v_split, else v_hi; down_lo for ffn_down
// layers < down_split, else down_hi; attn_q/attn_k/ffn_gate/ffn_up get base.
struct MixRow {
  LlamaFtype ft;
  int n_layer;
  int n_head_kv;  // of 4 query heads: 1 -> n_gqa 4, 4 -> n_gqa 1
  bool imatrix;
  std::uint32_t base, embd, out, v_lo, v_hi;
  int v_split;
  std::uint32_t attn_out, down_lo, down_hi;
  int down_split;
};

const MixRow kMixRows[] = {
    // ft, layers, kv, imatrix, base, token_embd, output, attn_v lo/hi/split, attn_output,
    // ffn_down lo/hi/split
    {LlamaFtype::q2_K, 8, 4, false, Q2_K, Q2_K, Q6_K, Q3_K, Q3_K, 0, Q3_K, Q3_K, Q3_K, 0},
    {LlamaFtype::q2_K, 8, 1, false, Q2_K, Q2_K, Q6_K, Q4_K, Q4_K, 0, Q3_K, Q3_K, Q3_K, 0},
    {LlamaFtype::q2_K, 8, 1, true, Q2_K, Q2_K, Q6_K, Q4_K, Q4_K, 0, Q3_K, Q3_K, Q3_K, 0},
    {LlamaFtype::q3_K_S, 8, 1, false, Q3_K, Q3_K, Q6_K, Q3_K, Q3_K, 0, Q3_K, Q3_K, Q3_K, 0},
    {LlamaFtype::q3_K_S, 8, 4, true, Q3_K, Q3_K, Q6_K, Q3_K, Q3_K, 0, Q3_K, Q3_K, Q3_K, 0},
    {LlamaFtype::q3_K_M, 8, 4, false, Q3_K, Q3_K, Q6_K, Q5_K, Q4_K, 2, Q4_K, Q4_K, Q4_K, 0},
    {LlamaFtype::q3_K_M, 32, 1, true, Q3_K, Q3_K, Q6_K, Q5_K, Q4_K, 2, Q4_K, Q5_K, Q4_K, 2},
    {LlamaFtype::q3_K_L, 8, 1, false, Q3_K, Q3_K, Q6_K, Q5_K, Q5_K, 0, Q5_K, Q5_K, Q5_K, 0},
    {LlamaFtype::q3_K_L, 32, 4, true, Q3_K, Q3_K, Q6_K, Q5_K, Q5_K, 0, Q5_K, Q5_K, Q5_K, 0},
    {LlamaFtype::q4_0, 8, 1, false, Q4_0, Q4_0, Q6_K, Q4_0, Q4_0, 0, Q4_0, Q4_0, Q4_0, 0},
    {LlamaFtype::q4_0, 8, 1, true, Q4_0, Q4_0, Q6_K, Q4_0, Q4_0, 0, Q4_0, Q4_1, Q4_0, 1},
    {LlamaFtype::q4_0, 32, 4, true, Q4_0, Q4_0, Q6_K, Q4_0, Q4_0, 0, Q4_0, Q4_1, Q4_0, 4},
    {LlamaFtype::q4_1, 8, 1, true, Q4_1, Q4_1, Q6_K, Q4_1, Q4_1, 0, Q4_1, Q4_1, Q4_1, 0},
    {LlamaFtype::q5_0, 8, 4, false, Q5_0, Q5_0, Q6_K, Q5_0, Q5_0, 0, Q5_0, Q5_0, Q5_0, 0},
    {LlamaFtype::q5_0, 8, 4, true, Q5_0, Q5_0, Q6_K, Q5_0, Q5_0, 0, Q5_0, Q5_1, Q5_0, 1},
    {LlamaFtype::q5_1, 8, 1, true, Q5_1, Q5_1, Q6_K, Q5_1, Q5_1, 0, Q5_1, Q5_1, Q5_1, 0},
    {LlamaFtype::iq4_nl, 8, 4, false, IQ4_NL, IQ4_NL, Q6_K, IQ4_NL, IQ4_NL, 0, IQ4_NL, Q5_K, IQ4_NL,
     1},
    {LlamaFtype::iq4_nl, 8, 1, false, IQ4_NL, IQ4_NL, Q6_K, Q5_K, Q5_K, 0, IQ4_NL, Q5_K, IQ4_NL, 1},
    {LlamaFtype::iq4_nl, 32, 1, true, IQ4_NL, IQ4_NL, Q6_K, Q5_K, Q5_K, 0, IQ4_NL, IQ4_NL, IQ4_NL,
     0},
    {LlamaFtype::iq4_xs, 32, 4, false, IQ4_XS, IQ4_XS, Q6_K, IQ4_XS, IQ4_XS, 0, IQ4_XS, Q5_K,
     IQ4_XS, 4},
    {LlamaFtype::iq4_xs, 8, 1, true, IQ4_XS, IQ4_XS, Q6_K, Q5_K, Q5_K, 0, IQ4_XS, IQ4_XS, IQ4_XS,
     0},
    {LlamaFtype::bf16, 8, 1, false, BF16, BF16, BF16, BF16, BF16, 0, BF16, BF16, BF16, 0},
    {LlamaFtype::bf16, 8, 4, true, BF16, BF16, BF16, BF16, BF16, 0, BF16, BF16, BF16, 0},
};

}  // namespace

TEST(LlamaQuantPlan, LowBitLegacyIq4AndBf16Mixes) {
  for (const MixRow& r : kMixRows) {
    ModelSpec sp;
    sp.n_layer = r.n_layer;
    sp.n_head = 4;
    sp.n_head_kv = r.n_head_kv;
    sp.rows2 = 2;
    const Parsed p = to_file(make_model(sp));
    const std::string what = std::string(nibble::llama_ftype_name(r.ft)) + " layers " +
                             std::to_string(r.n_layer) + " kv " + std::to_string(r.n_head_kv) +
                             (r.imatrix ? " imatrix" : "");
    std::map<std::string, std::uint32_t> got;
    for (const auto& t : nibble::plan_llama_quant(p.file, r.ft, r.imatrix))
      got[t.name] = t.out_type;
    ASSERT_EQ(got.size(), static_cast<std::size_t>(3 + 9 * r.n_layer)) << what;
    for (const auto& kv : got) {
      const std::string& n = kv.first;
      int layer = -1;
      std::sscanf(n.c_str(), "blk.%d.", &layer);
      std::uint32_t want = r.base;
      if (n.find("norm") != std::string::npos) {
        want = F32;
      } else if (n == "token_embd.weight") {
        want = r.embd;
      } else if (n == "output.weight") {
        want = r.out;
      } else if (n.find("attn_v.") != std::string::npos) {
        want = layer < r.v_split ? r.v_lo : r.v_hi;
      } else if (n.find("attn_output.") != std::string::npos) {
        want = r.attn_out;
      } else if (n.find("ffn_down.") != std::string::npos) {
        want = layer < r.down_split ? r.down_lo : r.down_hi;
      }
      EXPECT_EQ(kv.second, want) << what << ": " << n << " is " << tname(kv.second) << ", expected "
                                 << tname(want);
    }
  }
}

TEST(LlamaQuantPlan, LowBitMixesOn70BExpertsTiedAndFusedQkv) {
  // L3 70B bump (llama, 80 layers, n_gqa 8): every attn_v of Q2_K / Q3_K_* ends up Q5_K; the
  // 32-value types are untouched.
  ModelSpec sp;
  sp.n_layer = 80;
  sp.n_head = 8;
  sp.n_head_kv = 1;
  sp.rows2 = 2;
  const Parsed p70 = to_file(make_model(sp));
  for (LlamaFtype ft : {LlamaFtype::q2_K, LlamaFtype::q3_K_S, LlamaFtype::q3_K_M,
                        LlamaFtype::q3_K_L, LlamaFtype::iq4_nl}) {
    const auto got = plan_types(p70.file, ft);
    for (int i = 0; i < 80; ++i)
      EXPECT_EQ(got.at("blk." + std::to_string(i) + ".attn_v.weight"), Q5_K)
          << nibble::llama_ftype_name(ft) << " layer " << i;
  }
  EXPECT_EQ(plan_types(p70.file, LlamaFtype::q4_0).at("blk.5.attn_v.weight"), Q4_0);
  // qwen2 with 80 layers is 70B whatever its attention (load_arch_hparams).
  sp.n_head_kv = 8;
  Model q = make_model(sp);
  q.meta[0].value = g::Value::string("qwen2");
  for (auto& kv : q.meta) {
    if (kv.key.rfind("llama.", 0) == 0) kv.key = "qwen2." + kv.key.substr(6);
  }
  const Parsed pq = to_file(q);
  EXPECT_EQ(plan_types(pq.file, LlamaFtype::q3_K_S).at("blk.40.attn_v.weight"), Q5_K);
  Model l65 = make_model(sp);  // the same as llama without GQA is 65B: no bump
  const Parsed p65 = to_file(l65);
  EXPECT_EQ(plan_types(p65.file, LlamaFtype::q3_K_S).at("blk.40.attn_v.weight"), Q3_K);

  // L3/L5 with 8 experts (layer taken from the name).
  ModelSpec se;
  se.n_layer = 2;
  se.n_expert = 8;
  se.rows2 = 2;
  const Parsed pe = to_file(make_model(se));
  const auto q2 = plan_types(pe.file, LlamaFtype::q2_K);
  EXPECT_EQ(q2.at("blk.1.attn_v.weight"), Q8_0);
  EXPECT_EQ(q2.at("blk.1.attn_k.weight"), Q8_0);
  EXPECT_EQ(q2.at("blk.1.attn_output.weight"), Q5_K);
  EXPECT_EQ(q2.at("blk.1.ffn_down.weight"), Q3_K);
  EXPECT_EQ(plan_types(pe.file, LlamaFtype::q3_K_L).at("blk.0.attn_output.weight"), Q3_K);
  EXPECT_EQ(plan_types(pe.file, LlamaFtype::iq4_xs).at("blk.0.attn_output.weight"), Q5_K);
  EXPECT_EQ(plan_types(pe.file, LlamaFtype::q4_0).at("blk.0.attn_output.weight"), Q4_0);
  EXPECT_EQ(plan_types(pe.file, LlamaFtype::q4_0).at("blk.0.attn_v.weight"), Q8_0);

  // L2 tied embeddings: token_embd takes the output rule.
  ModelSpec st;
  st.n_layer = 2;
  st.tied = true;
  st.rows2 = 2;
  const Parsed pt = to_file(make_model(st));
  EXPECT_EQ(plan_types(pt.file, LlamaFtype::q2_K).at("token_embd.weight"), Q6_K);
  EXPECT_EQ(plan_types(pt.file, LlamaFtype::iq4_nl).at("token_embd.weight"), Q6_K);
  EXPECT_EQ(plan_types(pt.file, LlamaFtype::bf16).at("token_embd.weight"), BF16);

  // Fused QKV (phi3-style attn_qkv): llama-quant.cpp at 0253fb2 files attn_qkv under the attn_v
  // rules and counter (its separate attn_qkv branch, which c392e50 used -- Q4_K_M -> Q5_K,
  // Q5_K_M -> Q6_K, Q3_K_M/L -> Q4_K -- can no longer be reached).
  std::vector<g::KeyValue> meta = {{"general.architecture", g::Value::string("phi3")},
                                   {"phi3.block_count", g::Value::u32(8)},
                                   {"phi3.attention.head_count", g::Value::u32(4)}};
  std::vector<float> zeros(512, 0.5f);
  std::vector<g::TensorInfo> infos;
  for (int l = 0; l < 8; ++l) {
    for (const char* n : {"attn_qkv", "ffn_down"}) {
      g::TensorInfo i;
      i.name = "blk." + std::to_string(l) + "." + n + ".weight";
      i.shape = {256, 2};
      i.type = F32;
      i.nbytes = 512 * 4;
      i.data = reinterpret_cast<const std::uint8_t*>(zeros.data());
      infos.push_back(i);
    }
  }
  const auto bytes = g::write_memory(meta, infos);
  const g::File f = g::File::parse(bytes.data(), bytes.size());
  const auto m4 = plan_types(f, LlamaFtype::q4_K_M);
  const auto m3 = plan_types(f, LlamaFtype::q3_K_M);
  const std::set<int> more = {0, 3, 6, 7};  // use_more_bits(i, 8)
  for (int l = 0; l < 8; ++l) {
    const std::string n = "blk." + std::to_string(l) + ".attn_qkv.weight";
    EXPECT_EQ(m4.at(n), more.count(l) ? Q6_K : Q4_K) << n;
    EXPECT_EQ(m3.at(n), l < 2 ? Q5_K : Q4_K) << n;
  }
}

TEST(LlamaQuantPlan, FallbackTableForEveryFileType) {
  // L6 on hand-made shapes: 320 columns (a multiple of 32, not of 256) and 840 (not of 32).
  std::vector<g::KeyValue> meta = {{"general.architecture", g::Value::string("llama")},
                                   {"llama.block_count", g::Value::u32(1)},
                                   {"llama.attention.head_count", g::Value::u32(4)},
                                   {"llama.attention.head_count_kv", g::Value::u32(4)}};
  struct T {
    const char* name;
    std::int64_t cols;
  };
  const T ts[] = {{"output.weight", 320},
                  {"token_embd.weight", 320},
                  {"blk.0.attn_q.weight", 320},
                  {"blk.0.attn_v.weight", 320},
                  {"blk.0.attn_output.weight", 320},
                  {"blk.0.ffn_down.weight", 840}};
  std::vector<std::vector<float>> store;
  std::vector<g::TensorInfo> infos;
  for (const auto& t : ts) {
    store.emplace_back(static_cast<std::size_t>(t.cols * 2), 0.25f);
    g::TensorInfo i;
    i.name = t.name;
    i.shape = {t.cols, 2};
    i.type = F32;
    i.nbytes = static_cast<std::uint64_t>(t.cols) * 8;
    i.data = reinterpret_cast<const std::uint8_t*>(store.back().data());
    infos.push_back(i);
  }
  const auto bytes = g::write_memory(meta, infos);
  const g::File f = g::File::parse(bytes.data(), bytes.size());
  struct Want {
    LlamaFtype ft;
    std::uint32_t out, embd, q, v, o, down;
  };
  const Want want[] = {
      // Q2_K: v Q3_K -> Q4_0, o Q3_K -> Q4_0, down Q3_K -> Q4_0 -> F16 (840 % 32 != 0).
      {LlamaFtype::q2_K, Q8_0, Q4_0, Q4_0, Q4_0, Q4_0, F16},
      {LlamaFtype::q3_K_S, Q8_0, Q4_0, Q4_0, Q4_0, Q4_0, F16},
      // Q3_K_M: v (layer 0) Q5_K -> Q5_1, o Q4_K -> Q5_0, down (0 < 1/16 no) Q4_K -> Q5_0 -> F16.
      {LlamaFtype::q3_K_M, Q8_0, Q4_0, Q4_0, Q5_1, Q5_0, F16},
      {LlamaFtype::q3_K_L, Q8_0, Q4_0, Q4_0, Q5_1, Q5_1, F16},
      // IQ4_XS -> IQ4_NL; no imatrix: down of layer 0 (< 1/8? no) stays IQ4_XS -> IQ4_NL -> F16.
      {LlamaFtype::iq4_xs, Q8_0, IQ4_NL, IQ4_NL, IQ4_NL, IQ4_NL, F16},
      {LlamaFtype::q4_K_S, Q8_0, Q5_0, Q5_0, Q5_1, Q5_0, F16},
      {LlamaFtype::q5_K_M, Q8_0, Q5_1, Q5_1, Q8_0, Q5_1, F16},
      {LlamaFtype::q6_K, Q8_0, Q8_0, Q8_0, Q8_0, Q8_0, F16},
      {LlamaFtype::bf16, BF16, BF16, BF16, BF16, BF16, BF16},
  };
  for (const Want& w : want) {
    SCOPED_TRACE(nibble::llama_ftype_name(w.ft));
    const auto plan = nibble::plan_llama_quant(f, w.ft);
    std::map<std::string, std::pair<std::uint32_t, bool>> got;
    for (const auto& t : plan) got[t.name] = {t.out_type, t.fallback};
    EXPECT_EQ(got.at("output.weight").first, w.out);
    EXPECT_EQ(got.at("token_embd.weight").first, w.embd);
    EXPECT_EQ(got.at("blk.0.attn_q.weight").first, w.q);
    EXPECT_EQ(got.at("blk.0.attn_v.weight").first, w.v);
    EXPECT_EQ(got.at("blk.0.attn_output.weight").first, w.o);
    EXPECT_EQ(got.at("blk.0.ffn_down.weight").first, w.down);
    EXPECT_EQ(got.at("blk.0.attn_q.weight").second, w.ft != LlamaFtype::bf16);
  }
  // 32-value types on 840 columns (and Q8_0, the output's fallback): no fallback defined.
  for (LlamaFtype ft : {LlamaFtype::q4_0, LlamaFtype::q4_1, LlamaFtype::q5_0, LlamaFtype::q5_1,
                        LlamaFtype::q8_0, LlamaFtype::iq4_nl}) {
    EXPECT_THROW((void)nibble::plan_llama_quant(f, ft), nibble::Error)
        << nibble::llama_ftype_name(ft);
  }
}

// ---- 2. end to end ----

namespace {

void check_quantized(const Model& m, const std::string& out_path, LlamaFtype ft,
                     const nibble::Imatrix* im = nullptr) {
  const g::File in_file = [&] {
    static std::vector<std::uint8_t> keep;
    keep = g::write_memory(m.meta, m.tensors);
    return g::File::parse(keep.data(), keep.size());
  }();
  const auto plan = nibble::plan_llama_quant(in_file, ft, im != nullptr);
  const g::File out = g::File::open(out_path);
  // Metadata: the input's keys in order without general.file_type, then
  // general.quantization_version = 2 and general.file_type = ftype (llama's gguf_set_val_u32
  // removes and re-appends), then the imatrix keys.
  std::vector<std::string> want_keys;
  for (const auto& kv : m.meta) {
    if (kv.key != "general.file_type") want_keys.push_back(kv.key);
  }
  want_keys.push_back("general.quantization_version");
  want_keys.push_back("general.file_type");
  if (im) {
    want_keys.push_back("quantize.imatrix.file");
    if (!im->datasets.empty()) want_keys.push_back("quantize.imatrix.dataset");
    want_keys.push_back("quantize.imatrix.entries_count");
    if (im->chunks > 0) want_keys.push_back("quantize.imatrix.chunks_count");
  }
  ASSERT_EQ(out.metadata.size(), want_keys.size());
  for (std::size_t i = 0; i < want_keys.size(); ++i) {
    EXPECT_EQ(out.metadata[i].key, want_keys[i]);
    const g::KeyValue* src = nullptr;
    for (const auto& kv : m.meta) {
      if (kv.key == want_keys[i] && kv.key != "general.file_type") src = &kv;
    }
    if (src) {
      EXPECT_EQ(out.metadata[i].value.type, src->value.type);
      EXPECT_EQ(out.metadata[i].value.to_string(1000), src->value.to_string(1000));
    }
  }
  EXPECT_EQ(out.find("general.quantization_version")->value.type, g::ValueType::u32);
  EXPECT_EQ(out.find("general.quantization_version")->value.as_int(), 2);
  EXPECT_EQ(out.find("general.file_type")->value.type, g::ValueType::u32);
  EXPECT_EQ(out.find("general.file_type")->value.as_int(), static_cast<int>(ft));
  EXPECT_EQ(out.alignment, 32u);
  EXPECT_EQ(out.data_offset % 32, 0u);

  // Tensors: plan order, dense 32-byte aligned offsets, file ends after the last padding.
  ASSERT_EQ(out.tensors.size(), plan.size());
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const g::TensorInfo& t = out.tensors[i];
    EXPECT_EQ(t.name, plan[i].name);
    EXPECT_EQ(t.type, plan[i].out_type) << t.name;
    EXPECT_EQ(t.offset, off) << t.name;
    off += (t.nbytes + 31) / 32 * 32;
    const std::vector<float>& ref = m.f32.at(t.name);
    const g::TensorInfo* src = in_file.find_tensor(t.name);
    ASSERT_NE(src, nullptr);
    EXPECT_EQ(t.shape, src->shape) << t.name;
    if (!plan[i].quantize) {
      ASSERT_EQ(t.nbytes, src->nbytes);
      EXPECT_EQ(0, std::memcmp(t.data, src->data, t.nbytes)) << t.name;
      continue;
    }
    const std::int64_t cols = t.shape[0], rows = t.rows();
    const nibble::Format f = fmt(t.type);
    std::vector<float> deq(static_cast<std::size_t>(cols * rows));
    nibble::dequantize(f, t.data, rows, cols, deq.data());
    const double e = rel_rms(ref, deq);
    EXPECT_LT(e, tolerance(t.type)) << t.name << " as " << tname(t.type);
    // The driver's bytes are those of quantizing the same rows directly.
    const std::vector<float>* imv = im ? im->find(t.name) : nullptr;
    std::vector<std::uint8_t> direct(t.nbytes);
    nibble::quantize(f, ref.data(), rows, cols, direct.data(), imv ? imv->data() : nullptr);
    EXPECT_EQ(0, std::memcmp(direct.data(), t.data, t.nbytes)) << t.name;
  }
  EXPECT_EQ(out.file_size, out.data_offset + off);
}

}  // namespace

TEST(LlamaQuantEndToEnd, EveryFileTypeF32Input) {
  ModelSpec sp;
  sp.n_layer = 3;
  const Model m = make_model(sp, 7);
  const std::string in = tmp_path("in.gguf"), out = tmp_path("out.gguf");
  g::write_file(in, m.meta, m.tensors);
  for (LlamaFtype ft : nibble::kAllLlamaFtypes) {
    SCOPED_TRACE(nibble::llama_ftype_name(ft));
    int calls = 0;
    nibble::QuantizeOptions opt;
    opt.threads = 2;
    const auto s = nibble::quantize_model(in, out, ft, opt, [&](const nibble::QuantizeProgress& p) {
      ++calls;
      EXPECT_EQ(p.index, static_cast<std::size_t>(calls));
    });
    EXPECT_EQ(calls, 3 + 9 * 3);
    EXPECT_EQ(s.quantized + s.copied, calls);
    EXPECT_EQ(s.copied, 1 + 2 * 3);  // norms
    // The norms stay f32; the weights are mostly 2.6 (Q2_K) .. 16 (BF16) bits.
    EXPECT_GT(s.bits_per_weight(), 2.6);
    EXPECT_LT(s.bits_per_weight(), ft == LlamaFtype::bf16 ? 17.0 : 9.0);
    check_quantized(m, out, ft);
  }
  std::remove(in.c_str());
  std::remove(out.c_str());
}

TEST(LlamaQuantEndToEnd, F16InputAndTiedEmbeddings) {
  ModelSpec sp;
  sp.n_layer = 2;
  sp.f16 = true;
  sp.tied = true;
  const Model m = make_model(sp, 11);
  const std::string in = tmp_path("in16.gguf"), out = tmp_path("out16.gguf");
  g::write_file(in, m.meta, m.tensors);
  for (LlamaFtype ft : {LlamaFtype::q8_0, LlamaFtype::q4_K_M}) {
    SCOPED_TRACE(nibble::llama_ftype_name(ft));
    nibble::quantize_model(in, out, ft);
    check_quantized(m, out, ft);
  }
  std::remove(in.c_str());
  std::remove(out.c_str());
}

TEST(LlamaQuantEndToEnd, FallbackShapes) {
  // Rows of 320 (token_embd, attention, ffn_gate/up, output) and 840 values (ffn_down): the
  // 256-value types fall back (Q4_0, IQ4_NL, Q5_0, Q5_1, Q8_0, F16), the bytes are those of the
  // fallback type's own quantizer, with and without an importance matrix.
  ModelSpec sp;
  sp.n_layer = 1;
  sp.n_embd = 320;
  sp.n_ff = 840;
  sp.n_kv = 80;
  const Model m = make_model(sp, 13);
  const std::string in = tmp_path("infb.gguf"), out = tmp_path("outfb.gguf");
  g::write_file(in, m.meta, m.tensors);
  nibble::Imatrix im;
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> ud(0.1f, 4.0f);
  for (const auto& t : m.tensors) {
    if (t.shape.size() != 2 || t.name == "token_embd.weight") continue;
    std::vector<float> v(static_cast<std::size_t>(t.shape[0]));
    for (auto& x : v) x = ud(rng);
    im.entries[t.name] = v;
  }
  const std::pair<LlamaFtype, bool> cases[] = {
      {LlamaFtype::q2_K, false},  {LlamaFtype::q2_K, true},    {LlamaFtype::q3_K_L, false},
      {LlamaFtype::q4_K_M, true}, {LlamaFtype::q5_K_S, false}, {LlamaFtype::q6_K, false},
      {LlamaFtype::iq4_xs, true}};
  for (const auto& c : cases) {
    const LlamaFtype ft = c.first;
    const nibble::Imatrix* imp = c.second ? &im : nullptr;
    SCOPED_TRACE(std::string(nibble::llama_ftype_name(ft)) + (imp ? " imatrix" : ""));
    nibble::QuantizeOptions opt;
    opt.imatrix = imp;
    const auto s = nibble::quantize_model(in, out, ft, opt);
    EXPECT_EQ(s.fallbacks, 1 + 7);  // all but output.weight (Q8_0 by the output rule)
    check_quantized(m, out, ft, imp);
    const g::File o = g::File::open(out);
    EXPECT_EQ(o.find_tensor("blk.0.ffn_down.weight")->type, F16);
  }
  // A 32-value type on the 840-value rows: rejected before anything is written.
  std::remove(out.c_str());
  EXPECT_THROW(nibble::quantize_model(in, out, LlamaFtype::q4_0), nibble::Error);
  EXPECT_EQ(std::fopen(out.c_str(), "rb"), nullptr);
  std::remove(in.c_str());
}

TEST(LlamaQuantEndToEnd, ImatrixIsUsedPerTensor) {
  ModelSpec sp;
  sp.n_layer = 2;
  const Model m = make_model(sp, 5);
  const std::string in = tmp_path("inim.gguf"), out = tmp_path("outim.gguf"),
                    imf = tmp_path("imatrix.dat");
  g::write_file(in, m.meta, m.tensors);
  nibble::Imatrix w;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> ud(0.1f, 4.0f);
  for (const auto& t : m.tensors) {
    if (t.shape.size() != 2 || t.name == "blk.1.ffn_up.weight") continue;  // one without data
    std::vector<float> v(static_cast<std::size_t>(t.shape[0]));
    for (auto& x : v) x = ud(rng);
    w.entries[t.name] = v;
  }
  w.chunks = 12;
  w.datasets = {"calib.txt"};
  nibble::write_legacy_imatrix(imf, w);
  const nibble::Imatrix im = nibble::read_imatrix(imf);
  ASSERT_EQ(im.entries.size(), w.entries.size());
  for (LlamaFtype ft :
       {LlamaFtype::q4_K_M, LlamaFtype::q6_K, LlamaFtype::q5_K_S, LlamaFtype::q2_K,
        LlamaFtype::q3_K_M, LlamaFtype::q4_0, LlamaFtype::iq4_xs, LlamaFtype::bf16}) {
    SCOPED_TRACE(nibble::llama_ftype_name(ft));
    nibble::QuantizeOptions opt;
    opt.imatrix = &im;
    opt.imatrix_path = imf;
    nibble::quantize_model(in, out, ft, opt);
    check_quantized(m, out, ft, &im);
    const g::File o = g::File::open(out);
    EXPECT_EQ(o.find("quantize.imatrix.file")->value.as_string(), imf);
    EXPECT_EQ(o.find("quantize.imatrix.dataset")->value.as_string(), "calib.txt");
    EXPECT_EQ(o.find("quantize.imatrix.entries_count")->value.type, g::ValueType::u32);
    EXPECT_EQ(o.find("quantize.imatrix.chunks_count")->value.type, g::ValueType::u32);
    EXPECT_EQ(o.find("quantize.imatrix.entries_count")->value.as_int(),
              static_cast<std::int64_t>(im.entries.size()));
    EXPECT_EQ(o.find("quantize.imatrix.chunks_count")->value.as_int(), 12);
  }
  // A wrong-sized entry is an error (llama-quantize throws), and no output is left behind.
  nibble::Imatrix bad = im;
  bad.entries["blk.0.attn_q.weight"].resize(128);
  std::remove(out.c_str());
  nibble::QuantizeOptions opt;
  opt.imatrix = &bad;
  EXPECT_THROW(nibble::quantize_model(in, out, LlamaFtype::q4_K_M, opt), nibble::Error);
  EXPECT_EQ(std::fopen(out.c_str(), "rb"), nullptr);
  std::remove(in.c_str());
  std::remove(imf.c_str());
}

TEST(LlamaQuantEndToEnd, RejectsBadInput) {
  const std::string out = tmp_path("never.gguf");
  EXPECT_THROW(nibble::quantize_model("/nonexistent.gguf", out, LlamaFtype::q8_0), nibble::Error);
  ModelSpec sp;
  const Model m = make_model(sp);
  const std::string in = tmp_path("inbad.gguf");
  g::write_file(in, m.meta, m.tensors);
  nibble::QuantizeOptions opt;
  opt.method = nibble::QuantMethod::gptq;
  opt.calib_path = "/nonexistent-calib.gguf";
  EXPECT_THROW(nibble::quantize_model(in, out, LlamaFtype::q4_K_M, opt), nibble::Error);
  opt.method = nibble::QuantMethod::awq;
  EXPECT_THROW(nibble::quantize_model(in, out, LlamaFtype::q4_K_M, opt), nibble::Error);
  EXPECT_EQ(std::fopen(out.c_str(), "rb"), nullptr);
  std::remove(in.c_str());
}

TEST(LlamaQuantEndToEnd, GptqLowersTheLayerOutputError) {
  // Calibration GGUF with input activations for two weights; GPTQ must give a smaller layer
  // output error sum_t |(W - Q) x_t|^2 (computed in double) than RTN for both.
  ModelSpec sp;
  sp.n_layer = 1;
  const Model m = make_model(sp, 21);
  const std::string in = tmp_path("ing.gguf"), out_rtn = tmp_path("outr.gguf"),
                    out_gptq = tmp_path("outg.gguf"), cal = tmp_path("calib.gguf");
  g::write_file(in, m.meta, m.tensors);
  const std::int64_t cols = 256, tokens = 512;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> chan(cols);
  for (auto& c : chan) c = std::exp(nd(rng));  // channels of very different magnitude
  std::vector<float> X(static_cast<std::size_t>(cols * tokens));
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float common = nd(rng);
    for (std::int64_t c = 0; c < cols; ++c) {
      X[static_cast<std::size_t>(t * cols + c)] =
          chan[static_cast<std::size_t>(c)] * (nd(rng) + 0.5f * common);
    }
  }
  const std::vector<std::string> names = {"blk.0.attn_q.weight", "blk.0.ffn_up.weight"};
  std::vector<g::TensorInfo> ct;
  for (const auto& n : names) {
    g::TensorInfo t;
    t.name = n + ".inputs";
    t.shape = {cols, tokens};
    t.type = F32;
    t.nbytes = X.size() * 4;
    t.data = reinterpret_cast<const std::uint8_t*>(X.data());
    ct.push_back(t);
  }
  g::write_file(cal, {{"general.type", g::Value::string("nibble-calibration")}}, ct);
  // The mixes whose attn_q and ffn_up take each K-quant that GPTQ handles below Q5_K.
  const std::pair<LlamaFtype, std::uint32_t> mixes[] = {{LlamaFtype::q4_K_M, Q4_K},
                                                        {LlamaFtype::q2_K, Q2_K},
                                                        {LlamaFtype::q3_K_S, Q3_K},
                                                        {LlamaFtype::q3_K_M, Q3_K},
                                                        {LlamaFtype::q3_K_L, Q3_K}};
  for (const auto& mix : mixes) {
    SCOPED_TRACE(nibble::llama_ftype_name(mix.first));
    nibble::quantize_model(in, out_rtn, mix.first);
    nibble::QuantizeOptions opt;
    opt.method = nibble::QuantMethod::gptq;
    opt.calib_path = cal;
    const auto s = nibble::quantize_model(in, out_gptq, mix.first, opt);
    EXPECT_EQ(s.calibrated, 2);
    const g::File fr = g::File::open(out_rtn), fg = g::File::open(out_gptq);
    for (const auto& n : names) {
      const g::TensorInfo* tr = fr.find_tensor(n);
      const g::TensorInfo* tg = fg.find_tensor(n);
      ASSERT_TRUE(tr && tg);
      ASSERT_EQ(tr->type, mix.second);
      ASSERT_EQ(tg->type, mix.second);
      const std::int64_t rows = tr->rows();
      std::vector<float> qr(static_cast<std::size_t>(rows * cols)), qg(qr.size());
      nibble::dequantize(fmt(mix.second), tr->data, rows, cols, qr.data());
      nibble::dequantize(fmt(mix.second), tg->data, rows, cols, qg.data());
      const std::vector<float>& w = m.f32.at(n);
      auto out_err = [&](const std::vector<float>& q) {
        double e = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
          for (std::int64_t t = 0; t < tokens; ++t) {
            double acc = 0;
            for (std::int64_t c = 0; c < cols; ++c) {
              const std::size_t i = static_cast<std::size_t>(r * cols + c);
              acc += (static_cast<double>(w[i]) - q[i]) * X[static_cast<std::size_t>(t * cols + c)];
            }
            e += acc * acc;
          }
        }
        return e;
      };
      const double er = out_err(qr), eg = out_err(qg);
      EXPECT_LT(eg, 0.9 * er) << n << ": GPTQ " << eg << " vs RTN " << er;
      // The other tensors are untouched by GPTQ.
      EXPECT_EQ(0, std::memcmp(fr.find_tensor("blk.0.attn_k.weight")->data,
                               fg.find_tensor("blk.0.attn_k.weight")->data,
                               fr.find_tensor("blk.0.attn_k.weight")->nbytes));
    }
  }
  for (const auto& p : {in, out_rtn, out_gptq, cal}) std::remove(p.c_str());
}

TEST(LlamaQuantEndToEnd, InputAlignmentIsNormalisedTo32) {
  // llama-quantize always writes with GGUF_DEFAULT_ALIGNMENT (32). nibble also rewrites a copied
  // general.alignment to 32 so that the output stays self-consistent.
  ModelSpec sp;
  sp.n_layer = 1;
  Model m = make_model(sp, 2);
  m.meta.insert(m.meta.begin() + 1, {"general.alignment", g::Value::u32(64)});
  const std::string in = tmp_path("in64.gguf"), out = tmp_path("out64.gguf");
  g::write_file(in, m.meta, m.tensors);
  ASSERT_EQ(g::File::open(in).alignment, 64u);
  nibble::quantize_model(in, out, LlamaFtype::q8_0);
  const g::File o = g::File::open(out);
  EXPECT_EQ(o.alignment, 32u);
  ASSERT_NE(o.find("general.alignment"), nullptr);
  EXPECT_EQ(o.metadata[1].key, "general.alignment");
  EXPECT_EQ(o.find("general.alignment")->value.as_int(), 32);
  for (const auto& t : o.tensors) EXPECT_EQ(t.offset % 32, 0u);
  std::remove(in.c_str());
  std::remove(out.c_str());
}

namespace {

using RowMajorXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A 2-D tensor of a written model as rows x cols f32 (dequantized when quantized).
Eigen::MatrixXd read_matrix(const g::File& f, const std::string& name) {
  const g::TensorInfo* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  const std::int64_t cols = t->shape[0], rows = t->rows();
  RowMajorXf M(rows, cols);
  switch (t->type) {
    case F32:
      std::memcpy(M.data(), t->data, static_cast<std::size_t>(rows * cols) * 4);
      break;
    case Q4_K:
      nibble::dequantize(nibble::Format::q4_K, t->data, rows, cols, M.data());
      break;
    case Q5_K:
      nibble::dequantize(nibble::Format::q5_K, t->data, rows, cols, M.data());
      break;
    case Q6_K:
      nibble::dequantize(nibble::Format::q6_K, t->data, rows, cols, M.data());
      break;
    default:
      ADD_FAILURE() << name << " has unexpected type " << tname(t->type);
  }
  return M.cast<double>();
}

Eigen::VectorXd read_vector(const g::File& f, const std::string& name) {
  const g::TensorInfo* t = f.find_tensor(name);
  EXPECT_TRUE(t && t->type == F32 && t->shape.size() == 1) << name;
  Eigen::VectorXf v(t->shape[0]);
  std::memcpy(v.data(), t->data, static_cast<std::size_t>(v.size()) * 4);
  return v.cast<double>();
}

Eigen::MatrixXd silu(const Eigen::MatrixXd& A) {
  return A.array() / (1.0 + (-A.array()).exp());
}

}  // namespace

// --method awq on a one-block llama model (no grouped-query attention, so all four scaling
// groups apply) with LLM-like calibration inputs (outlier channels). The output file is checked
// functionally in double: each norm's folded scale s = old / new weight, the inputs seen by the
// quantized weights are x / s, and the attention projections, v -> o and the whole MLP must have a
// lower output error than the round-to-nearest file. Tensors outside the groups are unchanged.
TEST(LlamaQuantEndToEnd, AwqFoldsScalesAndLowersTheBlockOutputError) {
  ModelSpec sp;
  sp.n_layer = 1;
  sp.n_kv = 256;
  sp.n_head_kv = 4;
  const Model m = make_model(sp, 33);
  const std::string in = tmp_path("in_awq.gguf"), out_rtn = tmp_path("out_awq_rtn.gguf"),
                    out_awq = tmp_path("out_awq.gguf"), cal = tmp_path("calib_awq.gguf");
  g::write_file(in, m.meta, m.tensors);
  auto W = [&](const std::string& n) {
    const std::vector<float>& v = m.f32.at("blk.0." + n + ".weight");
    return Eigen::Map<const RowMajorXf>(v.data(), static_cast<Eigen::Index>(v.size() / 256), 256)
        .cast<double>()
        .eval();
  };
  nibble::synthetic::LayerSpec ls;
  ls.out = 1;
  ls.in = 256;
  ls.tokens = 512;
  ls.outlier_frac = 0.02f;
  ls.seed = 5;
  const Eigen::MatrixXd Xa = nibble::synthetic::make_layer(ls).X.cast<double>();
  ls.seed = 6;
  const Eigen::MatrixXd Xf = nibble::synthetic::make_layer(ls).X.cast<double>();
  // Consistent downstream inputs: attention as identity mixing, the SwiGLU MLP.
  const Eigen::MatrixXd Xo = Xa * W("attn_v").transpose();
  const Eigen::MatrixXd Xd =
      silu(Xf * W("ffn_gate").transpose()).cwiseProduct(Xf * W("ffn_up").transpose());
  std::vector<RowMajorXf> keep;
  std::vector<g::TensorInfo> ct;
  const std::pair<const char*, const Eigen::MatrixXd*> cal_inputs[] = {
      {"attn_q", &Xa}, {"attn_output", &Xo}, {"ffn_gate", &Xf}, {"ffn_down", &Xd}};
  for (const auto& ci : cal_inputs) {
    keep.emplace_back(ci.second->cast<float>());
    g::TensorInfo t;
    t.name = std::string("blk.0.") + ci.first + ".weight.inputs";
    t.shape = {256, keep.back().rows()};
    t.type = F32;
    t.nbytes = static_cast<std::uint64_t>(keep.back().size()) * 4;
    ct.push_back(t);
  }
  for (std::size_t i = 0; i < ct.size(); ++i)
    ct[i].data = reinterpret_cast<const std::uint8_t*>(keep[i].data());
  g::write_file(cal, {{"general.type", g::Value::string("nibble-calibration")}}, ct);

  nibble::quantize_model(in, out_rtn, LlamaFtype::q4_K_M);
  nibble::QuantizeOptions opt;
  opt.method = nibble::QuantMethod::awq;
  opt.calib_path = cal;
  const auto sum = nibble::quantize_model(in, out_awq, LlamaFtype::q4_K_M, opt);
  EXPECT_EQ(sum.calibrated, 7);  // q, k, v, o, gate, up, down
  const g::File fr = g::File::open(out_rtn), fa = g::File::open(out_awq);
  ASSERT_EQ(fr.tensors.size(), fa.tensors.size());
  for (std::size_t i = 0; i < fr.tensors.size(); ++i) {
    EXPECT_EQ(fr.tensors[i].name, fa.tensors[i].name);
    EXPECT_EQ(fr.tensors[i].type, fa.tensors[i].type) << fr.tensors[i].name;
  }
  for (const char* n : {"token_embd.weight", "output.weight", "output_norm.weight"}) {
    EXPECT_EQ(
        0, std::memcmp(fr.find_tensor(n)->data, fa.find_tensor(n)->data, fr.find_tensor(n)->nbytes))
        << n;
  }
  // Folded scales, normalised as AWQ does: max(s) * min(s) = 1 (to float rounding).
  const Eigen::VectorXd sa = read_vector(fr, "blk.0.attn_norm.weight")
                                 .cwiseQuotient(read_vector(fa, "blk.0.attn_norm.weight")),
                        sf = read_vector(fr, "blk.0.ffn_norm.weight")
                                 .cwiseQuotient(read_vector(fa, "blk.0.ffn_norm.weight"));
  EXPECT_NEAR(sa.maxCoeff() * sa.minCoeff(), 1.0, 1e-4);
  EXPECT_NEAR(sf.maxCoeff() * sf.minCoeff(), 1.0, 1e-4);
  EXPECT_GT(sa.maxCoeff() / sa.minCoeff(), 2.0);  // the outlier channels were scaled
  const Eigen::MatrixXd Xa_s = Xa * sa.cwiseInverse().asDiagonal(),
                        Xf_s = Xf * sf.cwiseInverse().asDiagonal();
  auto rel = [](const Eigen::MatrixXd& y, const Eigen::MatrixXd& ref) {
    return (y - ref).squaredNorm() / ref.squaredNorm();
  };
  std::printf("  AWQ Q4_K_M block (relative output error, AWQ / RTN):\n");
  // attn_v's output rows are also divided by the v -> o scales, so v is checked through v -> o.
  for (const char* n : {"attn_q", "attn_k"}) {
    const std::string t = std::string("blk.0.") + n + ".weight";
    const Eigen::MatrixXd ref = Xa * W(n).transpose();
    const double er = rel(Xa * read_matrix(fr, t).transpose(), ref);
    const double ea = rel(Xa_s * read_matrix(fa, t).transpose(), ref);
    std::printf("    %-8s %.3e / %.3e = %.3f\n", n, ea, er, ea / er);
    EXPECT_LT(ea, 0.8 * er) << n;
  }
  {
    const Eigen::MatrixXd ref = Xo * W("attn_output").transpose();
    const Eigen::MatrixXd yr = (Xa * read_matrix(fr, "blk.0.attn_v.weight").transpose()) *
                               read_matrix(fr, "blk.0.attn_output.weight").transpose();
    const Eigen::MatrixXd ya = (Xa_s * read_matrix(fa, "blk.0.attn_v.weight").transpose()) *
                               read_matrix(fa, "blk.0.attn_output.weight").transpose();
    const double er = rel(yr, ref), ea = rel(ya, ref);
    std::printf("    %-8s %.3e / %.3e = %.3f\n", "v->o", ea, er, ea / er);
    EXPECT_LT(ea, 0.8 * er);
  }
  {
    const Eigen::MatrixXd ref = Xd * W("ffn_down").transpose();
    auto mlp = [&](const g::File& f, const Eigen::MatrixXd& X) {
      const Eigen::MatrixXd h =
          silu(X * read_matrix(f, "blk.0.ffn_gate.weight").transpose())
              .cwiseProduct(X * read_matrix(f, "blk.0.ffn_up.weight").transpose());
      return Eigen::MatrixXd(h * read_matrix(f, "blk.0.ffn_down.weight").transpose());
    };
    const double er = rel(mlp(fr, Xf), ref), ea = rel(mlp(fa, Xf_s), ref);
    std::printf("    %-8s %.3e / %.3e = %.3f\n", "mlp", ea, er, ea / er);
    EXPECT_LT(ea, 0.8 * er);
  }
  // Refused: file types without a Q4_K/Q5_K base, missing calibration file.
  EXPECT_THROW(nibble::quantize_model(in, out_awq + "2", LlamaFtype::q8_0, opt), nibble::Error);
  EXPECT_THROW(nibble::quantize_model(in, out_awq + "2", LlamaFtype::q6_K, opt), nibble::Error);
  opt.calib_path.clear();
  EXPECT_THROW(nibble::quantize_model(in, out_awq + "2", LlamaFtype::q4_K_M, opt), nibble::Error);
  EXPECT_EQ(std::fopen((out_awq + "2").c_str(), "rb"), nullptr);
  for (const auto& f : {in, out_rtn, out_awq, cal}) std::remove(f.c_str());
}
