// GGUF reader/writer tests: every value type, byte-identical round trips (against bytes encoded
// independently in this file), v2 input, alignment, truncation at every byte offset, corrupted
// counts/offsets/dims, and random byte flips (must give a clean nibble::Error, never a crash).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nibble/core/error.hpp"
#include "nibble/core/types.hpp"
#include "nibble/io/gguf.hpp"
#include "nibble/io/imatrix.hpp"

namespace g = nibble::gguf;

namespace {

// Independent little-endian GGUF encoder used to build expected bytes.
struct Bytes {
  std::vector<std::uint8_t> b;
  template <class T>
  Bytes& put(T v) {
    std::uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<std::uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& pad(std::size_t a) {
    while (b.size() % a) b.push_back(0);
    return *this;
  }
  std::size_t size() const { return b.size(); }
};

// Writes one header + metadata + two tensors (f32 [8, 2] = 64 bytes, q8_0 [32, 1] = 34 bytes)
// with the given alignment and version; returns the bytes and offsets of interesting fields.
struct Sample {
  std::vector<std::uint8_t> bytes;
  std::size_t n_kv_at = 16, n_tensors_at = 8;
  std::size_t str_len_at = 0;    // length field of the string value
  std::size_t arr_count_at = 0;  // count field of the u16 array
  std::size_t dims_at = 0;       // n_dims of tensor 0
  std::size_t ne0_at = 0;        // ne[0] of tensor 0
  std::size_t type_at = 0;       // type of tensor 0
  std::size_t off1_at = 0;       // offset field of tensor 1
  std::size_t data_at = 0;
};

Sample make_sample(std::uint32_t version = 3, std::uint32_t alignment = 32,
                   bool last_padded = true) {
  Sample s;
  Bytes o;
  const bool explicit_align = alignment != 32;
  o.put<std::uint32_t>(0x46554747u).put<std::uint32_t>(version);
  o.put<std::uint64_t>(2);                              // tensors
  o.put<std::uint64_t>(15 + (explicit_align ? 1 : 0));  // kv
  o.str("general.architecture").put<std::uint32_t>(8);
  s.str_len_at = o.size();
  o.str("llama");
  o.str("k.u8").put<std::uint32_t>(0).put<std::uint8_t>(200);
  o.str("k.i8").put<std::uint32_t>(1).put<std::int8_t>(-7);
  o.str("k.u16").put<std::uint32_t>(2).put<std::uint16_t>(65000);
  o.str("k.i16").put<std::uint32_t>(3).put<std::int16_t>(-30000);
  o.str("k.u32").put<std::uint32_t>(4).put<std::uint32_t>(4000000000u);
  o.str("k.i32").put<std::uint32_t>(5).put<std::int32_t>(-2000000000);
  o.str("k.f32").put<std::uint32_t>(6).put<float>(1.5f);
  o.str("k.bool").put<std::uint32_t>(7).put<std::uint8_t>(1);
  o.str("k.u64").put<std::uint32_t>(10).put<std::uint64_t>(0xFFFFFFFFFFFFFFF0ull);
  o.str("k.i64").put<std::uint32_t>(11).put<std::int64_t>(-5000000000ll);
  o.str("k.f64").put<std::uint32_t>(12).put<double>(-2.25);
  o.str("k.arr_u16").put<std::uint32_t>(9).put<std::uint32_t>(2);
  s.arr_count_at = o.size();
  o.put<std::uint64_t>(3).put<std::uint16_t>(1).put<std::uint16_t>(2).put<std::uint16_t>(3);
  o.str("k.arr_str").put<std::uint32_t>(9).put<std::uint32_t>(8).put<std::uint64_t>(3);
  o.str("a").str("").str("ccc");
  // nested: array of 2 arrays: [i32 x2], [] (empty f32 array)
  o.str("k.nested").put<std::uint32_t>(9).put<std::uint32_t>(9).put<std::uint64_t>(2);
  o.put<std::uint32_t>(5).put<std::uint64_t>(2).put<std::int32_t>(-1).put<std::int32_t>(7);
  o.put<std::uint32_t>(6).put<std::uint64_t>(0);
  if (explicit_align)
    o.str("general.alignment").put<std::uint32_t>(4).put<std::uint32_t>(alignment);
  // tensor 0: f32 [8, 2] at 0
  o.str("t.f32");
  s.dims_at = o.size();
  o.put<std::uint32_t>(2);
  s.ne0_at = o.size();
  o.put<std::int64_t>(8).put<std::int64_t>(2);
  s.type_at = o.size();
  o.put<std::uint32_t>(0).put<std::uint64_t>(0);
  // tensor 1: q8_0 [32] after 64 bytes padded
  const std::uint64_t off1 = (64 + alignment - 1) / alignment * alignment;
  o.str("t.q8").put<std::uint32_t>(1).put<std::int64_t>(32).put<std::uint32_t>(8);
  s.off1_at = o.size();
  o.put<std::uint64_t>(off1);
  o.pad(alignment);
  s.data_at = o.size();
  for (int i = 0; i < 16; ++i) o.put<float>(static_cast<float>(i) - 3.5f);
  o.pad(alignment);
  for (int i = 0; i < 34; ++i) o.put<std::uint8_t>(static_cast<std::uint8_t>(i * 7 + 1));
  if (last_padded) o.pad(alignment);
  s.bytes = o.b;
  return s;
}

template <class T>
void poke(std::vector<std::uint8_t>& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

void expect_error(const std::vector<std::uint8_t>& b, const char* what) {
  try {
    (void)g::File::parse(b.data(), b.size());
    ADD_FAILURE() << "no error for " << what;
  } catch (const nibble::Error& e) {
    EXPECT_NE(std::string(e.what()).find("offset"), std::string::npos)
        << what << ": message lacks a byte offset: " << e.what();
  }
}

std::string tmp_path(const std::string& name) {
  return (testing::TempDir().empty() ? std::string("/tmp/") : testing::TempDir()) + "nibble_gguf_" +
         name;
}

std::vector<std::uint8_t> slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<std::uint8_t>((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
}

}  // namespace

TEST(Gguf, ReadsEveryValueType) {
  const Sample s = make_sample();
  const g::File f = g::File::parse(s.bytes.data(), s.bytes.size());
  EXPECT_EQ(f.version, 3u);
  ASSERT_EQ(f.metadata.size(), 15u);
  EXPECT_EQ(f.find("general.architecture")->value.as_string(), "llama");
  EXPECT_EQ(f.find("k.u8")->value.as_int(), 200);
  EXPECT_EQ(f.find("k.i8")->value.as_int(), -7);
  EXPECT_EQ(f.find("k.u16")->value.as_int(), 65000);
  EXPECT_EQ(f.find("k.i16")->value.as_int(), -30000);
  EXPECT_EQ(f.find("k.u32")->value.as_int(), 4000000000ll);
  EXPECT_EQ(f.find("k.i32")->value.as_int(), -2000000000ll);
  EXPECT_EQ(f.find("k.f32")->value.as_double(), 1.5);
  EXPECT_EQ(f.find("k.bool")->value.type, g::ValueType::boolean);
  EXPECT_EQ(f.find("k.bool")->value.as_int(), 1);
  EXPECT_EQ(f.find("k.u64")->value.bits, 0xFFFFFFFFFFFFFFF0ull);
  EXPECT_THROW((void)f.find("k.u64")->value.as_int(), nibble::Error);
  EXPECT_EQ(f.find("k.i64")->value.as_int(), -5000000000ll);
  EXPECT_EQ(f.find("k.f64")->value.as_double(), -2.25);
  const g::Value& a = f.find("k.arr_u16")->value;
  EXPECT_EQ(a.elem, g::ValueType::u16);
  EXPECT_EQ(a.count, 3u);
  ASSERT_EQ(a.raw.size(), 6u);
  EXPECT_EQ(a.raw[2], 2);
  const g::Value& as = f.find("k.arr_str")->value;
  ASSERT_EQ(as.strings.size(), 3u);
  EXPECT_EQ(as.strings[1], "");
  EXPECT_EQ(as.strings[2], "ccc");
  const g::Value& n = f.find("k.nested")->value;
  EXPECT_EQ(n.elem, g::ValueType::array);
  ASSERT_EQ(n.items.size(), 2u);
  EXPECT_EQ(n.items[0].elem, g::ValueType::i32);
  EXPECT_EQ(n.items[0].count, 2u);
  EXPECT_EQ(n.items[1].elem, g::ValueType::f32);
  EXPECT_EQ(n.items[1].count, 0u);
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].name, "t.f32");
  EXPECT_EQ(f.tensors[0].shape, (std::vector<std::int64_t>{8, 2}));
  EXPECT_EQ(f.tensors[0].nbytes, 64u);
  EXPECT_EQ(f.tensors[1].nbytes, 34u);
  EXPECT_EQ(f.data_offset, s.data_at);
  float v;
  std::memcpy(&v, f.tensors[0].data + 4 * 5, 4);
  EXPECT_EQ(v, 1.5f);
  EXPECT_EQ(f.tensors[1].data[3], 22);
  EXPECT_EQ(f.tensors[1].data - f.tensors[0].data, 64);
}

TEST(Gguf, RoundTripIsByteIdentical) {
  for (std::uint32_t align : {32u, 64u, 8u}) {
    const Sample s = make_sample(3, align);
    const g::File f = g::File::parse(s.bytes.data(), s.bytes.size());
    EXPECT_EQ(f.alignment, align);
    EXPECT_EQ(f.data_offset % align, 0u);
    const std::vector<std::uint8_t> out = g::write_memory(f.metadata, f.tensors);
    EXPECT_EQ(out, s.bytes) << "alignment " << align;
  }
  // Through the file system with mmap.
  const Sample s = make_sample();
  const g::File f = g::File::parse(s.bytes.data(), s.bytes.size());
  const std::string p = tmp_path("rt.gguf");
  g::write_file(p, f.metadata, f.tensors);
  EXPECT_EQ(slurp(p), s.bytes);
  const g::File f2 = g::File::open(p);
  const std::string p2 = tmp_path("rt2.gguf");
  g::write_file(p2, f2.metadata, f2.tensors);
  EXPECT_EQ(slurp(p2), s.bytes);
  std::remove(p.c_str());
  std::remove(p2.c_str());
}

TEST(Gguf, ReadsVersion2AndWritesVersion3) {
  Sample s2 = make_sample(2);
  const g::File f = g::File::parse(s2.bytes.data(), s2.bytes.size());
  EXPECT_EQ(f.version, 2u);
  std::vector<std::uint8_t> out = g::write_memory(f.metadata, f.tensors);
  poke<std::uint32_t>(s2.bytes, 4, 3);
  EXPECT_EQ(out, s2.bytes);
}

TEST(Gguf, BuildsFromValues) {
  std::vector<g::KeyValue> meta;
  meta.push_back({"a", g::Value::string("x")});
  const std::int32_t xs[2] = {-1, 7};
  meta.push_back(
      {"n", g::Value::array_of_arrays({g::Value::scalar_array(g::ValueType::i32, xs, 2),
                                       g::Value::scalar_array(g::ValueType::f32, nullptr, 0)})});
  meta.push_back({"b", g::Value::boolean(true)});
  std::vector<std::uint8_t> data(64, 0x5A);
  g::TensorInfo t;
  t.name = "w";
  t.shape = {16};
  t.type = 0;
  t.nbytes = 64;
  t.data = data.data();
  const auto bytes = g::write_memory(meta, {t});
  Bytes e;
  e.put<std::uint32_t>(0x46554747u)
      .put<std::uint32_t>(3)
      .put<std::uint64_t>(1)
      .put<std::uint64_t>(3);
  e.str("a").put<std::uint32_t>(8).str("x");
  e.str("n").put<std::uint32_t>(9).put<std::uint32_t>(9).put<std::uint64_t>(2);
  e.put<std::uint32_t>(5).put<std::uint64_t>(2).put<std::int32_t>(-1).put<std::int32_t>(7);
  e.put<std::uint32_t>(6).put<std::uint64_t>(0);
  e.str("b").put<std::uint32_t>(7).put<std::uint8_t>(1);
  e.str("w").put<std::uint32_t>(1).put<std::int64_t>(16).put<std::uint32_t>(0).put<std::uint64_t>(
      0);
  e.pad(32);
  e.b.insert(e.b.end(), data.begin(), data.end());
  EXPECT_EQ(bytes, e.b);
}

TEST(Gguf, TruncationAtEveryOffsetThrows) {
  // The last tensor is 34 bytes, so the file ends with padding; cut the padding away first so
  // that every shorter prefix lacks data the header promises.
  const Sample s = make_sample(3, 32, /*last_padded=*/false);
  ASSERT_NO_THROW((void)g::File::parse(s.bytes.data(), s.bytes.size()));
  for (std::size_t n = 0; n < s.bytes.size(); ++n) {
    std::vector<std::uint8_t> cut(s.bytes.begin(),
                                  s.bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW((void)g::File::parse(cut.data(), cut.size()), nibble::Error) << "prefix " << n;
  }
}

TEST(Gguf, CorruptedFieldsThrow) {
  const Sample s = make_sample();
  auto with = [&](auto fn) {
    std::vector<std::uint8_t> b = s.bytes;
    fn(b);
    return b;
  };
  expect_error(with([](auto& b) { b[0] = 'X'; }), "bad magic");
  expect_error(with([](auto& b) { poke<std::uint32_t>(b, 4, 1); }), "version 1");
  expect_error(with([](auto& b) { poke<std::uint32_t>(b, 4, 4); }), "version 4");
  expect_error(with([&](auto& b) { poke<std::uint64_t>(b, s.n_kv_at, ~0ull); }), "huge n_kv");
  expect_error(with([&](auto& b) { poke<std::uint64_t>(b, s.n_kv_at, 16); }), "n_kv + 1");
  expect_error(with([&](auto& b) { poke<std::uint64_t>(b, s.n_tensors_at, 1ull << 60); }),
               "huge n_tensors");
  expect_error(with([&](auto& b) { poke<std::uint64_t>(b, s.n_tensors_at, 3); }), "n_tensors + 1");
  expect_error(with([&](auto& b) { poke<std::uint64_t>(b, s.str_len_at, ~0ull); }),
               "string length");
  expect_error(with([&](auto& b) { poke<std::uint64_t>(b, s.str_len_at, 1ull << 62); }),
               "string length 2^62");
  expect_error(with([&](auto& b) { poke<std::uint64_t>(b, s.arr_count_at, ~0ull / 2 + 1); }),
               "array count overflowing count*2");
  expect_error(with([&](auto& b) { poke<std::uint64_t>(b, s.arr_count_at, 1000000); }),
               "array count");
  expect_error(with([&](auto& b) { poke<std::uint32_t>(b, s.arr_count_at - 4, 13); }),
               "array element type");
  expect_error(with([&](auto& b) { poke<std::uint32_t>(b, s.dims_at, 0); }), "0 dims");
  expect_error(with([&](auto& b) { poke<std::uint32_t>(b, s.dims_at, 5); }), "5 dims");
  expect_error(with([&](auto& b) { poke<std::int64_t>(b, s.ne0_at, -8); }), "negative dim");
  expect_error(with([&](auto& b) { poke<std::int64_t>(b, s.ne0_at, 1ll << 62); }), "huge dim");
  expect_error(with([&](auto& b) {
                 poke<std::int64_t>(b, s.ne0_at, 1ll << 40);
                 poke<std::int64_t>(b, s.ne0_at + 8, 1ll << 40);
               }),
               "element count overflow");
  expect_error(with([&](auto& b) { poke<std::uint32_t>(b, s.type_at, 4); }), "removed type");
  expect_error(with([&](auto& b) { poke<std::uint32_t>(b, s.type_at, 99); }), "unknown type");
  expect_error(with([&](auto& b) { poke<std::uint32_t>(b, s.type_at, 8); }),
               "ne0 = 8 not a multiple of q8_0's 32");
  expect_error(with([&](auto& b) { poke<std::uint64_t>(b, s.off1_at, 65); }), "misaligned offset");
  expect_error(with([&](auto& b) { poke<std::uint64_t>(b, s.off1_at, 96); }), "offset past end");
  expect_error(with([&](auto& b) { poke<std::uint64_t>(b, s.off1_at, ~0ull - 31); }),
               "offset + size overflows");
  auto rename = [&](const char* from, const char* to) {
    std::vector<std::uint8_t> b = s.bytes;
    const std::string f = from;
    auto it = std::search(b.begin(), b.end(), f.begin(), f.end());
    EXPECT_NE(it, b.end());
    std::memcpy(&*it, to, f.size());
    return b;
  };
  expect_error(rename("k.i8", "k.u8"), "duplicate key");
  {
    Bytes o;
    o.put<std::uint32_t>(0x46554747u)
        .put<std::uint32_t>(3)
        .put<std::uint64_t>(2)
        .put<std::uint64_t>(0);
    o.str("t").put<std::uint32_t>(1).put<std::int64_t>(8).put<std::uint32_t>(0).put<std::uint64_t>(
        0);
    o.str("t").put<std::uint32_t>(1).put<std::int64_t>(8).put<std::uint32_t>(0).put<std::uint64_t>(
        32);
    o.pad(32);
    o.b.resize(o.b.size() + 64);
    expect_error(o.b, "duplicate tensor name");
    std::memcpy(o.b.data() + 24 + 8 + 1 + 4 + 8 + 4 + 8 + 8, "u", 1);  // rename the second
    EXPECT_NO_THROW((void)g::File::parse(o.b.data(), o.b.size()));
  }
}

TEST(Gguf, AlignmentKeyIsChecked) {
  for (std::uint32_t bad : {0u, 3u, 48u}) {
    Sample s = make_sample(3, 64);
    // general.alignment value sits right before the first tensor name length.
    const std::size_t val_at = s.dims_at - 5 - 8 - 4;  // back over "t.f32", its length, value
    std::uint32_t cur;
    std::memcpy(&cur, s.bytes.data() + val_at, 4);
    ASSERT_EQ(cur, 64u);
    poke<std::uint32_t>(s.bytes, val_at, bad);
    expect_error(s.bytes, "bad alignment");
  }
}

TEST(Gguf, DeepNestingIsRejected) {
  Bytes o;
  o.put<std::uint32_t>(0x46554747u)
      .put<std::uint32_t>(3)
      .put<std::uint64_t>(0)
      .put<std::uint64_t>(1);
  o.str("deep").put<std::uint32_t>(9);
  for (int i = 0; i < 40; ++i) o.put<std::uint32_t>(9).put<std::uint64_t>(1);
  o.put<std::uint32_t>(0).put<std::uint64_t>(0);
  expect_error(o.b, "40-deep nesting");
}

TEST(Gguf, RandomByteFlipsNeverCrash) {
  const Sample s = make_sample();
  std::mt19937 rng(1234);
  int errors = 0, ok = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<std::uint8_t> b = s.bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k)
      b[rng() % b.size()] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
    try {
      const g::File f = g::File::parse(b.data(), b.size());
      for (const auto& t : f.tensors) {
        ASSERT_GE(t.data, b.data());
        ASSERT_LE(t.data + t.nbytes, b.data() + b.size());
      }
      ++ok;
    } catch (const nibble::Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(ok, 0);
}

TEST(Gguf, OpenMissingOrEmptyFileThrows) {
  EXPECT_THROW((void)g::File::open("/nonexistent/nibble.gguf"), nibble::Error);
  const std::string p = tmp_path("empty.gguf");
  std::fclose(std::fopen(p.c_str(), "wb"));
  EXPECT_THROW((void)g::File::open(p), nibble::Error);
  std::remove(p.c_str());
}

TEST(Imatrix, LegacyFormatIsAveragedByNcall) {
  Bytes o;
  o.put<std::int32_t>(2);
  o.put<std::int32_t>(5);
  o.b.insert(o.b.end(), {'a', '.', 'w', 0, 'z'});  // name up to the NUL, like llama
  o.put<std::int32_t>(4).put<std::int32_t>(2).put<float>(8.0f).put<float>(2.0f);
  o.put<std::int32_t>(1);
  o.b.push_back('b');
  o.put<std::int32_t>(0).put<std::int32_t>(1).put<float>(3.0f);
  o.put<std::int32_t>(17).put<std::int32_t>(4);
  o.b.insert(o.b.end(), {'w', 'i', 'k', 'i'});
  const nibble::Imatrix m = nibble::parse_imatrix(o.b.data(), o.b.size());
  ASSERT_EQ(m.entries.size(), 2u);
  EXPECT_EQ(m.entries.at("a.w"), (std::vector<float>{2.0f, 0.5f}));
  EXPECT_EQ(m.entries.at("b"), (std::vector<float>{3.0f}));  // ncall 0: unchanged
  EXPECT_EQ(m.chunks, 17);
  ASSERT_EQ(m.datasets.size(), 1u);
  EXPECT_EQ(m.datasets[0], "wiki");
  for (std::size_t n = 0; n + 4 < o.b.size(); ++n) {
    // Every cut inside the entries (before the optional trailer) must fail cleanly; cuts that
    // remove the whole trailer are valid files.
    std::vector<std::uint8_t> cut(o.b.begin(), o.b.begin() + static_cast<std::ptrdiff_t>(n));
    const std::size_t entries_end = o.b.size() - 12;
    if (n == entries_end) continue;
    EXPECT_THROW((void)nibble::parse_imatrix(cut.data(), cut.size()), nibble::Error) << n;
  }
}

TEST(Imatrix, GgufFormatDividesByCounts) {
  std::vector<g::KeyValue> meta;
  meta.push_back({"general.type", g::Value::string("imatrix")});
  meta.push_back({"imatrix.datasets", g::Value::string_array({"d1", "d2"})});
  meta.push_back({"imatrix.chunk_count", g::Value::u32(9)});
  meta.push_back({"imatrix.chunk_size", g::Value::u32(512)});
  std::vector<float> sums = {2, 4, 6, 8, 10, 12};  // [3, 2]
  std::vector<float> counts = {2, 0};              // second matrix never saw input
  g::TensorInfo s{"blk.0.ffn_down.weight.in_sum2",
                  {3, 2},
                  0,
                  0,
                  24,
                  reinterpret_cast<const std::uint8_t*>(sums.data())};
  g::TensorInfo c{"blk.0.ffn_down.weight.counts",
                  {1, 2},
                  0,
                  0,
                  8,
                  reinterpret_cast<const std::uint8_t*>(counts.data())};
  const auto bytes = g::write_memory(meta, {s, c});
  const nibble::Imatrix m = nibble::parse_imatrix(bytes.data(), bytes.size());
  EXPECT_TRUE(m.gguf_format);
  EXPECT_EQ(m.chunks, 9);
  EXPECT_EQ(m.datasets, (std::vector<std::string>{"d1", "d2"}));
  EXPECT_EQ(m.entries.at("blk.0.ffn_down.weight"), (std::vector<float>{1, 2, 3, 1, 1, 1}));
}

// Every nibble format with a GGUF type id is known to the reader with the same block geometry
// (mxfp4, id 39, was missing: files with mxfp4 tensors were rejected).
TEST(Gguf, ReaderKnowsEveryFormatsTypeId) {
  for (int k = 0; k <= static_cast<int>(nibble::kLastFormat); ++k) {
    const nibble::FormatTraits t = nibble::traits(static_cast<nibble::Format>(k));
    if (t.gguf_type < 0) continue;
    const nibble::gguf::TypeInfo ti =
        nibble::gguf::type_info(static_cast<std::uint32_t>(t.gguf_type));
    ASSERT_NE(ti.name, nullptr) << t.name << " (GGUF type " << t.gguf_type << ")";
    EXPECT_STREQ(ti.name, t.name);
    EXPECT_EQ(ti.block_elems, t.block_elems) << t.name;
    EXPECT_EQ(ti.block_bytes, t.block_bytes) << t.name;
  }
}
