// The model decode step shared by nibble-bench and `nibble bench MODEL.gguf`
// (src/decode_step.hpp): llama-quantize's use_more_bits rule, the built-in Q4_K_M stack's types
// and bytes, GGUF tensor selection, and the step's products.
//
// DecodeStep.GgufStackFromFile also writes the tiny GGUF used by the `nibble bench MODEL.gguf`
// ctest (cli_bench_model) to $NIBBLE_DECODE_TINY_GGUF when that is set.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "../src/decode_step.hpp"
#include "nibble/io/gguf.hpp"
#include "nibble/io/packed_gguf.hpp"
#include "nibble/nibble.hpp"
#include "nibble/packed.hpp"

namespace {

namespace d = nibble::decode;
namespace g = nibble::gguf;
using nibble::Format;

// Reference y[r] of one linear: dequantized row . x in double; *mag = sum |w_k x_k| (the scale
// of the 8-bit activation rounding error, as in nibble-bench's product check).
double ref_dot(const d::Linear& l, std::int64_t r, const std::vector<float>& x, double* mag) {
  std::vector<float> w(static_cast<std::size_t>(l.cols));
  nibble::dequantize(l.format,
                     static_cast<const char*>(l.data) + r * nibble::row_bytes(l.format, l.cols), 1,
                     l.cols, w.data());
  double s = 0;
  *mag = 0;
  for (std::int64_t k = 0; k < l.cols; ++k) {
    s += static_cast<double>(w[k]) * x[k];
    *mag += std::fabs(static_cast<double>(w[k]) * x[k]);
  }
  return s;
}

TEST(DecodeStep, UseMoreBitsIsLlamaRule) {
  // n = 32: n/8 = 4, 7n/8 = 28: layers 0-3, 28-31 and 6, 9, ..., 27 ((i - 4) % 3 == 2).
  std::set<int> want32 = {0, 1, 2, 3, 28, 29, 30, 31, 6, 9, 12, 15, 18, 21, 24, 27};
  for (int i = 0; i < 32; ++i) EXPECT_EQ(d::use_more_bits(i, 32), want32.count(i) == 1) << i;
  // n = 4: n/8 = 0, 7n/8 = 3: layer 3, and layer 2 (2 % 3 == 2).
  std::set<int> want4 = {2, 3};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(d::use_more_bits(i, 4), want4.count(i) == 1) << i;
}

TEST(DecodeStep, BuiltinStackTypesBytesAndProducts) {
  const d::Stack s = d::make_llama7b_q4km_stack(2, 2);
  ASSERT_EQ(s.linears.size(), 2u * 7u + 1u);
  // Q4_K row of 4096 values: 16 blocks x 144 bytes; of 11008: 43 x 144. Q6_K: x 210.
  const std::uint64_t q4_4096 = 2304, q4_11008 = 6192, q6_4096 = 3360, q6_11008 = 9030;
  std::uint64_t want = 0;
  for (int i = 0; i < 2; ++i) {
    const bool more = i == 1;  // use_more_bits(i, 2): 7 * 2 / 8 = 1
    const d::Linear* l = &s.linears[static_cast<std::size_t>(i) * 7];
    EXPECT_EQ(l[0].name, "blk." + std::to_string(i) + ".attn_q.weight");
    EXPECT_EQ(l[2].format, more ? Format::q6_K : Format::q4_K) << i;
    EXPECT_EQ(l[6].format, more ? Format::q6_K : Format::q4_K) << i;
    EXPECT_EQ(l[4].format, Format::q4_K);
    EXPECT_EQ(l[4].rows, 11008);
    EXPECT_EQ(l[6].cols, 11008);
    want += 3 * 4096 * q4_4096 + 4096 * (more ? q6_4096 : q4_4096) + 2 * 11008 * q4_4096 +
            4096 * (more ? q6_11008 : q4_11008);
  }
  const d::Linear& out = s.linears.back();
  EXPECT_EQ(out.name, "output.weight");
  EXPECT_EQ(out.format, Format::q6_K);
  EXPECT_EQ(out.rows, 32000);
  want += 32000 * q6_4096;
  EXPECT_EQ(s.bytes(), want);

  // The step's last product (output.weight, rows beyond the tiled slab included) matches the
  // dequantized weights; the weights are not all zero.
  nibble::Context ctx;
  ctx.threads = 2;
  d::Runner r(s, ctx);
  r.step();
  std::vector<float> x(4096);
  d::detail::fill_random(x.data(), x.size(), 7, 1.0f);
  double total = 0;
  for (std::int64_t row : {0L, 255L, 256L, 31999L}) {
    double mag = 0;
    const double ref = ref_dot(out, row, x, &mag);
    EXPECT_NEAR(r.y()[row], ref, 2e-2 * mag + 1e-6) << row;
    total += mag;
  }
  EXPECT_GT(total, 0.0);
}

TEST(DecodeStep, BuiltinStackRejectsLayerCount) {
  EXPECT_THROW(d::make_llama7b_q4km_stack(0), nibble::Error);
  EXPECT_THROW(d::make_llama7b_q4km_stack(33), nibble::Error);
}

// A tiny llama-like file: token_embd, a norm, three linears (one q4_0), an unsupported iq2_xxs
// tensor, output.
struct TinyModel {
  std::vector<std::vector<std::uint8_t>> blobs;
  std::vector<g::TensorInfo> tensors;
  void add(const std::string& name, Format f, std::int64_t rows, std::int64_t cols,
           std::uint64_t seed) {
    std::vector<float> v(static_cast<std::size_t>(rows * cols));
    d::detail::fill_random(v.data(), v.size(), seed, 0.05f);
    std::vector<std::uint8_t> q(static_cast<std::size_t>(rows) * nibble::row_bytes(f, cols));
    nibble::quantize(f, v.data(), rows, cols, q.data());
    add_raw(name, static_cast<std::uint32_t>(nibble::traits(f).gguf_type), {cols, rows},
            std::move(q));
  }
  void add_raw(const std::string& name, std::uint32_t type, std::vector<std::int64_t> shape,
               std::vector<std::uint8_t> bytes) {
    blobs.push_back(std::move(bytes));
    g::TensorInfo t;
    t.name = name;
    t.type = type;
    t.shape = std::move(shape);
    t.nbytes = blobs.back().size();
    t.data = blobs.back().data();
    tensors.push_back(t);
  }
};

std::string write_tiny(const std::string& path) {
  TinyModel m;
  m.blobs.reserve(16);
  m.add("token_embd.weight", Format::f32, 8, 256, 1);
  m.add_raw("blk.0.attn_norm.weight", 0, {256}, std::vector<std::uint8_t>(256 * 4, 0));
  m.add("blk.0.attn_q.weight", Format::q4_K, 16, 256, 2);
  m.add("blk.0.ffn_down.weight", Format::q6_K, 16, 512, 3);
  m.add("blk.0.ffn_gate.weight", Format::q4_0, 16, 256, 5);
  m.add_raw("blk.0.ffn_up.weight", 16 /* iq2_xxs */, {256, 4}, std::vector<std::uint8_t>(4 * 66));
  m.add("output.weight", Format::q8_0, 32, 256, 4);
  m.add_raw("blk.0.ffn_up_exps.weight", 0, {256, 2, 2}, std::vector<std::uint8_t>(256 * 4 * 4));
  std::vector<g::KeyValue> meta = {{"general.architecture", g::Value::string("llama")}};
  g::write_file(path, meta, m.tensors);
  return path;
}

TEST(DecodeStep, GgufStackFromFile) {
  const char* env = std::getenv("NIBBLE_DECODE_TINY_GGUF");
  const std::string path =
      env && *env ? std::string(env) : ::testing::TempDir() + "nibble_decode_tiny.gguf";
  write_tiny(path);
  const d::Stack s = d::load_gguf_stack(path);
  ASSERT_EQ(s.linears.size(), 4u);
  EXPECT_EQ(s.linears[0].name, "blk.0.attn_q.weight");
  EXPECT_EQ(s.linears[0].format, Format::q4_K);
  EXPECT_EQ(s.linears[0].rows, 16);
  EXPECT_EQ(s.linears[0].cols, 256);
  EXPECT_EQ(s.linears[1].name, "blk.0.ffn_down.weight");
  EXPECT_EQ(s.linears[1].format, Format::q6_K);
  EXPECT_EQ(s.linears[1].cols, 512);
  EXPECT_EQ(s.linears[2].name, "blk.0.ffn_gate.weight");
  EXPECT_EQ(s.linears[2].format, Format::q4_0);
  EXPECT_EQ(s.linears[3].name, "output.weight");
  EXPECT_EQ(s.linears[3].format, Format::q8_0);
  // q4_K 16 x 144 + q6_K 16 x 2 x 210 + q4_0 16 x 8 x 18 + q8_0 32 x 8 x 34
  EXPECT_EQ(s.bytes(), 16u * 144u + 16u * 420u + 16u * 144u + 32u * 272u);
  ASSERT_EQ(s.skipped.size(), 3u);
  EXPECT_NE(s.skipped[0].find("token_embd.weight"), std::string::npos);
  EXPECT_NE(s.skipped[1].find("iq2_xxs"), std::string::npos);
  EXPECT_NE(s.skipped[2].find("ffn_up_exps.weight (3-D"), std::string::npos);

  nibble::Context ctx;
  ctx.threads = 1;
  d::Runner r(s, ctx);
  r.step();
  std::vector<float> x(512);
  d::detail::fill_random(x.data(), x.size(), 7, 1.0f);
  for (std::int64_t row = 0; row < 32; ++row) {
    double mag = 0;
    const double ref = ref_dot(s.linears[3], row, x, &mag);
    EXPECT_NEAR(r.y()[row], ref, 2e-2 * mag + 1e-6) << row;
  }
  EXPECT_GT(d::time_steps(r, 0.0, 2), 0.0);
}

TEST(DecodeStep, GgufWithoutOutputUsesTiedEmbedding) {
  TinyModel m;
  m.add("token_embd.weight", Format::f16, 8, 256, 1);
  const std::string path = ::testing::TempDir() + "nibble_decode_tied.gguf";
  g::write_file(path, {}, m.tensors);
  const d::Stack s = d::load_gguf_stack(path);
  ASSERT_EQ(s.linears.size(), 1u);
  EXPECT_EQ(s.linears[0].format, Format::f16);
  std::remove(path.c_str());
}

TEST(DecodeStep, GgufErrors) {
  EXPECT_THROW(d::load_gguf_stack("/nonexistent/nibble-decode.gguf"), nibble::Error);
  TinyModel m;
  m.add_raw("norm.weight", 0, {256}, std::vector<std::uint8_t>(256 * 4, 0));
  const std::string path = ::testing::TempDir() + "nibble_decode_norm.gguf";
  g::write_file(path, {}, m.tensors);
  EXPECT_THROW(d::load_gguf_stack(path), nibble::Error);
  std::remove(path.c_str());
}

// with_layout(): packable linears of 16+ rows packed (bytes = nibble::pack), the rest untouched;
// the packed step computes what the plain one does; a packed file's tensors are loaded as packed
// and with_layout(false) gives back the plain bytes.
TEST(DecodeStep, PackedLayout) {
  TinyModel m;
  m.blobs.reserve(8);
  m.add("blk.0.attn_q.weight", Format::q4_K, 40, 256, 2);      // 2 groups + 8 plain rows
  m.add("blk.0.attn_k.weight", Format::q4_K, 8, 256, 5);       // fewer than 16 rows: stays plain
  m.add("blk.0.attn_v.weight", Format::f32, 32, 256, 6);       // not packable
  m.add("blk.0.attn_output.weight", Format::f16, 32, 256, 7);  // 2 groups of f16
  m.add("blk.0.ffn_down.weight", Format::q6_K, 16, 512, 3);
  m.add("output.weight", Format::q8_0, 48, 256, 4);
  const std::string path = ::testing::TempDir() + "nibble_decode_packed.gguf";
  g::write_file(path, {}, m.tensors);
  const d::Stack s = d::load_gguf_stack(path);
  ASSERT_EQ(s.linears.size(), 6u);
  EXPECT_EQ(s.packed_count(), 0u);
  const d::Stack p = d::with_layout(s, true, 2);
  ASSERT_EQ(p.linears.size(), 6u);
  EXPECT_EQ(p.packed_count(), 4u);
  EXPECT_EQ(p.bytes(), s.bytes());
  const bool want[] = {true, false, false, true, true, true};
  for (std::size_t i = 0; i < 6; ++i) {
    const d::Linear& a = s.linears[i];
    const d::Linear& b = p.linears[i];
    EXPECT_EQ(b.packed, want[i]) << a.name;
    if (!want[i]) {
      EXPECT_EQ(b.data, a.data) << a.name;  // not copied
      continue;
    }
    std::vector<std::uint8_t> ref(a.bytes);
    nibble::pack(nibble::Context{}, a.format, a.data, a.rows, a.cols, ref.data());
    EXPECT_EQ(0, std::memcmp(b.data, ref.data(), ref.size())) << a.name;
  }
  EXPECT_NE(p.label.find("[packed]"), std::string::npos);
  // the packed step computes the same outputs (the last linear's y) as the plain one
  nibble::Context ctx;
  ctx.threads = 2;
  d::Runner rs(s, ctx), rp(p, ctx);
  rs.step();
  rp.step();
  for (std::int64_t r = 0; r < 48; ++r)
    EXPECT_NEAR(rp.y()[r], rs.y()[r], 1e-4 * (1.0 + std::fabs(rs.y()[r]))) << r;
  // a packed file: its packed tensors are used as mapped; unpacked they are the original bytes
  const std::string packed_path = ::testing::TempDir() + "nibble_decode_packed.x16.gguf";
  nibble::pack_gguf(path, packed_path);
  const d::Stack f = d::load_gguf_stack(packed_path);
  EXPECT_TRUE(f.skipped.empty());
  ASSERT_EQ(f.linears.size(), 6u);
  EXPECT_EQ(f.packed_count(), 4u);
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(f.linears[i].packed, want[i]);
    EXPECT_EQ(0, std::memcmp(f.linears[i].data, p.linears[i].data, p.linears[i].bytes));
  }
  const d::Stack u = d::with_layout(f, false);
  EXPECT_EQ(u.packed_count(), 0u);
  for (std::size_t i = 0; i < 5; ++i)
    EXPECT_EQ(0, std::memcmp(u.linears[i].data, s.linears[i].data, s.linears[i].bytes));
  const d::Stack again = d::with_layout(f, true);  // nothing left to pack: no copy
  EXPECT_EQ(again.converted, nullptr);
  d::Runner rf(f, ctx);
  rf.step();
  for (std::int64_t r = 0; r < 48; ++r) EXPECT_EQ(rf.y()[r], rp.y()[r]) << r;
  std::remove(path.c_str());
  std::remove(packed_path.c_str());
}

TEST(DecodeStep, ReadBandwidthPositive) {
  EXPECT_GT(d::read_bandwidth(std::size_t{8} << 20, 1, 2), 0.0);
  EXPECT_GT(d::read_bandwidth(std::size_t{8} << 20, 2, 1), 0.0);
}

// Every read pattern of the roofline loops sums every word exactly once: lengths that split
// evenly into the streams and lengths that leave a tail, each word a distinct power-of-two
// multiple so that a skipped or doubled word changes the sum.
TEST(DecodeStep, ReadPatternsSumEveryWordOnce) {
  namespace m = nibble::membw;
  for (std::size_t n : {std::size_t{16}, std::size_t{48}, std::size_t{64}, std::size_t{112},
                        std::size_t{4096}, std::size_t{4096 + 48}, std::size_t{100000}}) {
    std::vector<std::uint64_t> w(n + 4096);  // slack: the prefetches run past the end
    std::uint64_t want = 0;
    for (std::size_t i = 0; i < n; ++i) {
      w[i] = (i + 1) * 0x9E3779B97F4A7C15ull ^ (std::uint64_t{1} << (i % 64));
      want += w[i];
    }
    for (std::size_t i = n; i < w.size(); ++i) w[i] = 0xDEADBEEFull;  // must not be summed
    for (int k = 0; k < m::kNumReadPatterns; ++k)
      EXPECT_EQ(m::sum_pattern(k, w.data(), n), want) << m::kReadPatternNames[k] << ", n " << n;
  }
}

}  // namespace
