// Test helper: writes a tiny random-weight llama-family GGUF that llama.cpp can load too
// (minimal SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, then
// unused filler tokens). Deterministic for a given seed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "nibble/io/gguf.hpp"
#include "nibble/nibble.hpp"

namespace nibble::test {

/// Shape and options of the generated model.
struct TinyLlama {
  std::string arch = "llama";  ///< "llama" or "qwen2" (qwen2 adds q/k/v biases)
  std::int64_t n_vocab = 272;  ///< >= 259
  std::int64_t n_embd = 64;
  std::int64_t n_layer = 2;
  std::int64_t n_head = 4;
  std::int64_t n_head_kv = 2;
  std::int64_t n_ff = 128;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_linear_factor = 0.0f;  ///< > 0: linear rope scaling with this factor
  bool tied = false;                ///< omit output.weight
  Format weights = Format::f32;     ///< format of the 2-D weights (f32, f16, q8_0, q4_K, ...)
  std::uint32_t seed = 1;
};

namespace detail_tiny {

struct Builder {
  std::vector<gguf::TensorInfo> tensors;
  std::vector<std::vector<std::uint8_t>> blobs;
  std::mt19937 rng;
  explicit Builder(std::uint32_t seed) : rng(seed) {}

  // Normal values by Box-Muller on mt19937 words (std::normal_distribution is not the same on
  // every standard library, and the committed llama.cpp reference data depend on these weights).
  std::vector<float> randn(std::int64_t n, float std, float mean = 0.0f) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) {
      const double u1 = (static_cast<double>(rng()) + 1.0) / 4294967297.0;
      const double u2 = static_cast<double>(rng()) / 4294967296.0;
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
      x = mean + std * static_cast<float>(z);
    }
    return v;
  }
  void add(const std::string& name, const std::vector<float>& v, std::int64_t rows,
           std::int64_t cols, Format f) {
    std::vector<std::uint8_t> b(static_cast<std::size_t>(rows) * row_bytes(f, cols));
    if (f == Format::f32) {
      std::memcpy(b.data(), v.data(), b.size());
    } else {
      quantize(f, v.data(), rows, cols, b.data());
    }
    blobs.push_back(std::move(b));
    gguf::TensorInfo t;
    t.name = name;
    t.shape = rows == 1 ? std::vector<std::int64_t>{cols} : std::vector<std::int64_t>{cols, rows};
    t.type = static_cast<std::uint32_t>(traits(f).gguf_type);
    t.nbytes = blobs.back().size();
    t.data = blobs.back().data();
    tensors.push_back(t);
  }
};

}  // namespace detail_tiny

/// Writes the model to `path`.
inline void write_tiny_llama(const std::string& path, const TinyLlama& p) {
  using gguf::KeyValue;
  using gguf::Value;
  const std::string a = p.arch + ".";
  const std::int64_t hd = p.n_embd / p.n_head;
  std::vector<KeyValue> meta;
  meta.push_back({"general.architecture", Value::string(p.arch)});
  meta.push_back({"general.name", Value::string("nibble tiny " + p.arch)});
  meta.push_back({a + "context_length", Value::u32(4096)});
  meta.push_back({a + "embedding_length", Value::u32(static_cast<std::uint32_t>(p.n_embd))});
  meta.push_back({a + "block_count", Value::u32(static_cast<std::uint32_t>(p.n_layer))});
  meta.push_back({a + "feed_forward_length", Value::u32(static_cast<std::uint32_t>(p.n_ff))});
  meta.push_back({a + "attention.head_count", Value::u32(static_cast<std::uint32_t>(p.n_head))});
  meta.push_back(
      {a + "attention.head_count_kv", Value::u32(static_cast<std::uint32_t>(p.n_head_kv))});
  meta.push_back({a + "rope.dimension_count", Value::u32(static_cast<std::uint32_t>(hd))});
  meta.push_back({a + "attention.layer_norm_rms_epsilon", Value::f32(p.rms_eps)});
  meta.push_back({a + "rope.freq_base", Value::f32(p.rope_base)});
  if (p.rope_linear_factor > 0) {
    meta.push_back({a + "rope.scaling.type", Value::string("linear")});
    meta.push_back({a + "rope.scaling.factor", Value::f32(p.rope_linear_factor)});
  }
  meta.push_back({"general.file_type", Value::u32(p.weights == Format::f32 ? 0u : 1u)});
  // Minimal SentencePiece vocabulary.
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  std::vector<std::int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    toks.emplace_back(buf);
    types.push_back(6);
  }
  for (std::int64_t i = static_cast<std::int64_t>(toks.size()); i < p.n_vocab; ++i) {
    toks.push_back("<extra_" + std::to_string(i) + ">");
    types.push_back(5);
  }
  toks.resize(static_cast<std::size_t>(p.n_vocab));
  types.resize(static_cast<std::size_t>(p.n_vocab));
  const std::vector<float> scores(toks.size(), 0.0f);
  meta.push_back({"tokenizer.ggml.model", Value::string("llama")});
  meta.push_back({"tokenizer.ggml.tokens", Value::string_array(toks)});
  meta.push_back({"tokenizer.ggml.scores",
                  Value::scalar_array(gguf::ValueType::f32, scores.data(), scores.size())});
  meta.push_back({"tokenizer.ggml.token_type",
                  Value::scalar_array(gguf::ValueType::i32, types.data(), types.size())});
  meta.push_back({"tokenizer.ggml.bos_token_id", Value::u32(1)});
  meta.push_back({"tokenizer.ggml.eos_token_id", Value::u32(2)});
  meta.push_back({"tokenizer.ggml.unknown_token_id", Value::u32(0)});
  meta.push_back({"tokenizer.ggml.add_bos_token", Value::boolean(true)});
  meta.push_back({"tokenizer.ggml.add_eos_token", Value::boolean(false)});
  meta.push_back({"tokenizer.ggml.add_space_prefix", Value::boolean(false)});

  detail_tiny::Builder b(p.seed);
  const std::int64_t d = p.n_embd, dkv = p.n_head_kv * hd;
  const float sd = 1.0f / std::sqrt(static_cast<float>(d));
  const Format w = p.weights;
  // Tied models use the embedding as output matrix too: keep its logits in a sane range.
  b.add("token_embd.weight", b.randn(p.n_vocab * d, p.tied ? 2.0f * sd : 1.0f), p.n_vocab, d, w);
  for (std::int64_t l = 0; l < p.n_layer; ++l) {
    const std::string s = "blk." + std::to_string(l) + ".";
    b.add(s + "attn_norm.weight", b.randn(d, 0.1f, 1.0f), 1, d, Format::f32);
    b.add(s + "attn_q.weight", b.randn(d * d, 2.0f * sd), d, d, w);
    b.add(s + "attn_k.weight", b.randn(dkv * d, 2.0f * sd), dkv, d, w);
    b.add(s + "attn_v.weight", b.randn(dkv * d, sd), dkv, d, w);
    if (p.arch == "qwen2") {
      b.add(s + "attn_q.bias", b.randn(d, 0.5f), 1, d, Format::f32);
      b.add(s + "attn_k.bias", b.randn(dkv, 0.5f), 1, dkv, Format::f32);
      b.add(s + "attn_v.bias", b.randn(dkv, 0.5f), 1, dkv, Format::f32);
    }
    b.add(s + "attn_output.weight", b.randn(d * d, sd), d, d, w);
    b.add(s + "ffn_norm.weight", b.randn(d, 0.1f, 1.0f), 1, d, Format::f32);
    b.add(s + "ffn_gate.weight", b.randn(p.n_ff * d, sd), p.n_ff, d, w);
    b.add(s + "ffn_up.weight", b.randn(p.n_ff * d, sd), p.n_ff, d, w);
    b.add(s + "ffn_down.weight", b.randn(d * p.n_ff, 1.0f / std::sqrt(float(p.n_ff))), d, p.n_ff,
          w);
  }
  b.add("output_norm.weight", b.randn(d, 0.1f, 1.0f), 1, d, Format::f32);
  if (!p.tied) b.add("output.weight", b.randn(p.n_vocab * d, 2.0f * sd), p.n_vocab, d, w);
  gguf::write_file(path, meta, b.tensors);
}

}  // namespace nibble::test
