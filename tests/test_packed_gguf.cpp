// Packed tensors in GGUF files (nibble/io/packed_gguf.hpp, the packed type ids of the reader):
// - the reader knows the packed types of the packable formats only (clear errors otherwise);
// - pack_gguf writes the input with exactly the selected tensors packed (type id flagged, bytes
//   = nibble::pack of the original tensor), every other byte unchanged, and unpack_gguf of that is
//   the input byte for byte: on tests/data/capi_small.gguf, llama-like models written by
//   nibble quantize (Q4_K_M, Q5_K_M, Q8_0 mixes), and a hand-made file with GGUF v2, alignment
//   64, non-zero padding, 3-D tensors, tails and formats that are not packable;
// - packed tensors of the mapped file give the same products as the plain ones;
// - bad input throws and leaves no output (nor a .tmp file).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "nibble/io/gguf.hpp"
#include "nibble/io/llama_quant.hpp"
#include "nibble/io/packed_gguf.hpp"
#include "nibble/packed.hpp"
#include "tiny_llama.hpp"

namespace {

namespace g = nibble::gguf;
using nibble::Format;

const std::string kData = NIBBLE_TEST_DATA_DIR;

std::string tmp(const std::string& name) {
  return (testing::TempDir().empty() ? std::string("/tmp/") : testing::TempDir()) + "nibble_pk_" +
         name;
}

std::vector<std::uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return {std::istreambuf_iterator<char>(f), {}};
}

void write_all(const std::string& path, const std::vector<std::uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

Format format_of(std::uint32_t type) {
  for (int k = 0; k <= static_cast<int>(nibble::kLastFormat); ++k) {
    const Format f = static_cast<Format>(k);
    if (nibble::traits(f).gguf_type == static_cast<int>(type)) return f;
  }
  ADD_FAILURE() << "no format for type " << type;
  return Format::f32;
}

// P must be F with exactly the tensors pack_gguf_selects() packed: the flagged type id, the bytes
// of nibble::pack(); every other byte of the file unchanged. Returns the number packed.
int expect_packed_of(const std::string& F, const std::string& P) {
  const std::vector<std::uint8_t> fb = read_all(F), pb = read_all(P);
  EXPECT_EQ(fb.size(), pb.size());
  if (fb.size() != pb.size()) return -1;
  const g::File ff = g::File::parse(fb.data(), fb.size());
  const g::File fp = g::File::parse(pb.data(), pb.size());
  EXPECT_EQ(ff.data_offset, fp.data_offset);
  EXPECT_EQ(ff.metadata.size(), fp.metadata.size());
  EXPECT_EQ(ff.tensors.size(), fp.tensors.size());
  if (ff.tensors.size() != fp.tensors.size()) return -1;
  std::vector<bool> changed(pb.size(), false);
  int packed = 0;
  for (std::size_t i = 0; i < ff.tensors.size(); ++i) {
    const g::TensorInfo& a = ff.tensors[i];
    const g::TensorInfo& b = fp.tensors[i];
    SCOPED_TRACE(a.name);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.offset, b.offset);
    EXPECT_EQ(a.type_at, b.type_at);
    EXPECT_FALSE(a.packed());
    if (nibble::pack_gguf_selects(a)) {
      ++packed;
      EXPECT_TRUE(b.packed());
      EXPECT_EQ(b.type, g::kPackedTypeFlag | a.type);
      EXPECT_EQ(g::base_type(b.type), a.type);
      std::vector<std::uint8_t> want(a.nbytes);
      nibble::pack(nibble::Context{}, format_of(a.type), a.data, a.rows(), a.shape[0], want.data());
      EXPECT_EQ(0, std::memcmp(b.data, want.data(), want.size()));
      const std::size_t at = static_cast<std::size_t>(b.data - pb.data());
      for (std::size_t k = 0; k < b.nbytes; ++k) changed[at + k] = true;
      for (std::size_t k = 0; k < 4; ++k) changed[b.type_at + k] = true;
    } else {
      EXPECT_EQ(a.type, b.type);
      EXPECT_FALSE(b.packed());
    }
  }
  std::size_t diff = 0;
  for (std::size_t k = 0; k < pb.size(); ++k) diff += !changed[k] && pb[k] != fb[k];
  EXPECT_EQ(diff, 0u) << "bytes outside the packed tensors and their type ids changed";
  return packed;
}

// pack -> check -> unpack == F; pack of the packed file and unpack of F are copies.
int round_trip(const std::string& F, const std::string& tag, int threads = 2) {
  const std::string P = tmp(tag + ".x16.gguf"), U = tmp(tag + ".rt.gguf");
  nibble::Context ctx;
  ctx.threads = threads;
  int calls = 0;
  const nibble::PackGgufSummary s =
      nibble::pack_gguf(F, P, ctx, [&](const nibble::PackGgufProgress& p) {
        ++calls;
        EXPECT_EQ(p.index, static_cast<std::size_t>(calls));
        EXPECT_LE(p.bytes_done, p.bytes_total);
      });
  EXPECT_FALSE(exists(P + ".tmp"));
  const int packed = expect_packed_of(F, P);
  EXPECT_EQ(s.converted, packed);
  EXPECT_EQ(static_cast<std::size_t>(s.converted + s.copied), g::File::open(F).tensors.size());
  EXPECT_EQ(calls, s.converted + s.copied);
  EXPECT_EQ(s.file_bytes, read_all(F).size());
  const nibble::PackGgufSummary u = nibble::unpack_gguf(P, U, ctx);
  EXPECT_EQ(u.converted, packed);
  EXPECT_TRUE(read_all(U) == read_all(F)) << "unpack(pack(F)) differs from F";
  // Small steps (one 16-row group, or a few groups with the tail in the last step): same bytes.
  const std::string P1 = tmp(tag + ".x16.small.gguf"), U1 = tmp(tag + ".rt.small.gguf");
  nibble::pack_gguf(F, P1, ctx, {}, 1);
  EXPECT_TRUE(read_all(P1) == read_all(P)) << "packed in steps of one group";
  nibble::unpack_gguf(P, U1, ctx, {}, 5000);
  EXPECT_TRUE(read_all(U1) == read_all(F)) << "unpacked in steps of ~5000 bytes";
  std::remove(P1.c_str());
  std::remove(U1.c_str());
  // Idempotence: nothing left to pack / unpack gives a byte copy.
  const std::string P2 = tmp(tag + ".x16x16.gguf"), U2 = tmp(tag + ".u.gguf");
  EXPECT_EQ(nibble::pack_gguf(P, P2, ctx).converted, 0);
  EXPECT_TRUE(read_all(P2) == read_all(P));
  EXPECT_EQ(nibble::unpack_gguf(F, U2, ctx).converted, 0);
  EXPECT_TRUE(read_all(U2) == read_all(F));
  for (const std::string& p : {P, U, P2, U2}) std::remove(p.c_str());
  return packed;
}

TEST(PackedGguf, TypeIds) {
  EXPECT_EQ(g::kPackedTypeFlag, 0x1000u);
  for (Format f : {Format::q8_0, Format::q4_K, Format::q5_K, Format::q6_K}) {
    const auto t = static_cast<std::uint32_t>(nibble::traits(f).gguf_type);
    const std::uint32_t p = g::packed_type(t);
    EXPECT_EQ(p, t | 0x1000u);
    EXPECT_TRUE(g::is_packed_type(p));
    EXPECT_FALSE(g::is_packed_type(t));
    EXPECT_EQ(g::base_type(p), t);
    const g::TypeInfo pi = g::type_info(p), bi = g::type_info(t);
    ASSERT_NE(pi.name, nullptr);
    EXPECT_EQ(std::string(pi.name), std::string(bi.name) + ".x16");
    EXPECT_EQ(pi.block_elems, bi.block_elems);
    EXPECT_EQ(pi.block_bytes, bi.block_bytes);
    EXPECT_EQ(g::tensor_nbytes(p, {512, 40}), g::tensor_nbytes(t, {512, 40}));
  }
  // every base type that type_info knows with the flag is the type of a packable format
  for (std::uint32_t t = 0; t < 64; ++t) {
    const bool known = g::type_info(t | g::kPackedTypeFlag).name != nullptr;
    bool packable = false;
    for (int k = 0; k <= static_cast<int>(nibble::kLastFormat); ++k) {
      const Format f = static_cast<Format>(k);
      packable |= nibble::traits(f).gguf_type == static_cast<int>(t) && nibble::packable(f);
    }
    EXPECT_EQ(known, packable) << t;
  }
  EXPECT_EQ(g::type_info(0x1000u | 0).name, nullptr);  // f32
  EXPECT_EQ(g::type_info(0x3000u | 12).name, nullptr);
  EXPECT_THROW(g::packed_type(0), nibble::Error);
  EXPECT_THROW(g::packed_type(0x100C), nibble::Error);
  EXPECT_THROW(g::tensor_nbytes(0x1000, {32, 2}), nibble::Error);
}

// The reader: packed q4_K accepted (TensorInfo::packed), the flag on other types refused.
TEST(PackedGguf, ReaderAcceptsPackedTypesOfPackableFormatsOnly) {
  const std::vector<std::uint8_t> base = read_all(kData + "/capi_small.gguf");
  const g::File f = g::File::parse(base.data(), base.size());
  ASSERT_EQ(f.tensors[0].type, 12u);  // q4_K [2048, 64]
  ASSERT_EQ(f.tensors[2].type, 0u);   // f32
  auto with_type = [&](std::size_t i, std::uint32_t type) {
    std::vector<std::uint8_t> b = base;
    std::memcpy(b.data() + f.tensors[i].type_at, &type, 4);
    return b;
  };
  const auto ok = with_type(0, 0x100C);
  const g::File p = g::File::parse(ok.data(), ok.size());
  EXPECT_TRUE(p.tensors[0].packed());
  EXPECT_FALSE(p.tensors[1].packed());
  EXPECT_EQ(p.tensors[0].nbytes, f.tensors[0].nbytes);
  EXPECT_STREQ(g::type_info(p.tensors[0].type).name, "q4_K.x16");
  for (std::uint32_t bad : {0x1000u, 0x100Fu, 0x1000u | 99u, 0x3000u | 12u}) {
    const auto b = with_type(bad == 0x1000u ? 2 : 0, bad);
    try {
      (void)g::File::parse(b.data(), b.size());
      ADD_FAILURE() << "type " << bad << " accepted";
    } catch (const nibble::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("type id " + std::to_string(bad)), std::string::npos) << m;
      if ((bad & ~0x1000u) < 64) {
        EXPECT_NE(m.find("no packed layout"), std::string::npos) << m;
        EXPECT_NE(m.find("q4_K"), std::string::npos) << m;  // lists the packable types
      }
    }
  }
}

TEST(PackedGguf, CapiSmallRoundTrip) {
  EXPECT_EQ(round_trip(kData + "/capi_small.gguf", "capi_small"), 1);  // q8_0 [4096, 4]: 4 rows
}

// Llama-like models as `nibble quantize` writes them (type mixes of llama-quantize).
TEST(PackedGguf, QuantizedLlamaRoundTrip) {
  nibble::test::TinyLlama p;
  p.n_embd = 256;
  p.n_ff = 512;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_vocab = 300;
  const std::string f32 = tmp("llama.f32.gguf");
  nibble::test::write_tiny_llama(f32, p);
  for (const char* ft : {"Q4_K_M", "Q5_K_M", "Q8_0", "Q6_K"}) {
    SCOPED_TRACE(ft);
    const std::string q = tmp(std::string("llama.") + ft + ".gguf");
    nibble::quantize_model(f32, q, nibble::parse_llama_ftype(ft));
    const int packed = round_trip(q, ft, 1);
    // token_embd, 2 x (q k v o gate up down), output: all 2-D with >= 16 rows
    EXPECT_EQ(packed, 16);
    std::remove(q.c_str());
  }
  // tied embeddings, q8_0 everywhere (64-wide rows)
  p = nibble::test::TinyLlama{};
  p.weights = Format::q8_0;
  p.tied = true;
  const std::string q8 = tmp("llama.q8_0.tied.gguf");
  nibble::test::write_tiny_llama(q8, p);
  EXPECT_EQ(round_trip(q8, "tied", 3), 15);
  std::remove(q8.c_str());
  std::remove(f32.c_str());
}

// A hand-made file: GGUF v2, alignment 64, non-zero padding everywhere, 3-D tensors, tails,
// fewer than 16 rows, formats that are not packable.
TEST(PackedGguf, OddFileRoundTrip) {
  std::vector<g::KeyValue> meta = {{"general.architecture", g::Value::string("test")},
                                   {"general.alignment", g::Value::u32(64)}};
  struct T {
    const char* name;
    Format f;
    std::vector<std::int64_t> shape;
    bool packed;
  };
  const std::vector<T> ts = {
      {"a.q4_K.tail", Format::q4_K, {512, 40}, true},      // 2 groups + 8 plain rows
      {"b.q8_0", Format::q8_0, {64, 16}, true},            // exactly one group
      {"c.q6_K.short", Format::q6_K, {256, 15}, false},    // fewer than 16 rows
      {"d.q5_K.3d", Format::q5_K, {256, 16, 3}, true},     // 3 experts of 16 rows
      {"e.q8_0.3d", Format::q8_0, {32, 8, 4}, false},      // 32 rows, but slices of 8
      {"f.f32", Format::f32, {32, 32}, false},             // not packable
      {"g.f16", Format::f16, {32, 33}, true},              // 2 groups + 1 plain row
      {"h.q6_K.1x", Format::q6_K, {256, 20, 1, 1}, true},  // 2-D with trailing 1s
  };
  std::vector<std::vector<std::uint8_t>> blobs;
  std::vector<g::TensorInfo> infos;
  std::mt19937 rng(5);
  for (const T& t : ts) {
    g::TensorInfo i;
    i.name = t.name;
    i.shape = t.shape;
    i.type = static_cast<std::uint32_t>(nibble::traits(t.f).gguf_type);
    i.nbytes = g::tensor_nbytes(i.type, i.shape);
    blobs.emplace_back(i.nbytes);
    for (auto& b : blobs.back()) b = static_cast<std::uint8_t>(rng());
    i.data = blobs.back().data();
    infos.push_back(i);
  }
  std::vector<std::uint8_t> bytes = g::write_memory(meta, infos);
  bytes[4] = 2;  // version 2 (same layout)
  const g::File f = g::File::parse(bytes.data(), bytes.size());
  ASSERT_EQ(f.version, 2u);
  // fill every padding byte (after the tensor infos, between tensors) with non-zero values
  std::vector<bool> used(bytes.size(), false);
  for (std::size_t k = 0; k < f.tensors[0].type_at; ++k) used[k] = true;
  std::size_t infos_end = 0;
  for (const g::TensorInfo& t : f.tensors) {
    infos_end = std::max<std::size_t>(infos_end, t.type_at + 12);
    const std::size_t at = static_cast<std::size_t>(t.data - bytes.data());
    for (std::size_t k = 0; k < t.nbytes; ++k) used[at + k] = true;
  }
  for (std::size_t k = 0; k < infos_end; ++k) used[k] = true;
  int filled = 0;
  for (std::size_t k = 0; k < bytes.size(); ++k)
    if (!used[k]) bytes[k] = static_cast<std::uint8_t>(0xE0 + (filled++ % 16));
  EXPECT_GT(filled, 100);
  bytes.push_back(0x77);  // and a trailing byte after the last tensor's padding
  const std::string F = tmp("odd.gguf");
  write_all(F, bytes);
  const g::File f2 = g::File::open(F);
  int want = 0;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    EXPECT_EQ(nibble::pack_gguf_selects(f2.tensors[i]), ts[i].packed) << ts[i].name;
    want += ts[i].packed;
  }
  EXPECT_EQ(round_trip(F, "odd", 2), want);
  std::remove(F.c_str());
}

// Packed tensors of the mapped file multiply like the plain ones (PackedWeights::view: no copy).
TEST(PackedGguf, MappedPackedTensorsMultiply) {
  const std::string P = tmp("mul.x16.gguf");
  nibble::pack_gguf(kData + "/capi_small.gguf", P);
  const g::File a = g::File::open(kData + "/capi_small.gguf");
  const g::File b = g::File::open(P);
  const g::TensorInfo& w = a.tensors[0];
  const g::TensorInfo& pw = b.tensors[0];
  ASSERT_TRUE(pw.packed());
  const std::int64_t rows = w.rows(), cols = w.shape[0];
  std::vector<float> x(static_cast<std::size_t>(cols)), y(rows), yp(rows);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.01f * static_cast<float>(i));
  nibble::gemv(nibble::Context{}, Format::q4_K, w.data, rows, cols, x.data(), y.data());
  const nibble::PackedWeights v = nibble::PackedWeights::view(Format::q4_K, pw.data, rows, cols);
  EXPECT_EQ(v.data(), pw.data);
  nibble::gemv(nibble::Context{}, v, x.data(), yp.data());
  for (std::int64_t r = 0; r < rows; ++r)
    EXPECT_NEAR(yp[r], y[r], 1e-4 * (1.0 + std::fabs(y[r]))) << r;
  std::remove(P.c_str());
}

TEST(PackedGguf, BadInputWritesNothing) {
  const std::string out = tmp("bad.out.gguf");
  std::remove(out.c_str());
  auto expect_fails = [&](const std::string& in, const std::string& o, const char* what) {
    for (bool pack : {true, false}) {
      try {
        if (pack) {
          nibble::pack_gguf(in, o);
        } else {
          nibble::unpack_gguf(in, o);
        }
        ADD_FAILURE() << "no error for " << in;
      } catch (const nibble::Error& e) {
        EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(pack ? "pack_gguf" : "unpack_gguf"), std::string::npos)
            << e.what();
      }
      EXPECT_FALSE(exists(o)) << o;
      EXPECT_FALSE(exists(o + ".tmp")) << o;
    }
  };
  expect_fails(tmp("no-such-file.gguf"), out, "cannot open");
  std::vector<std::uint8_t> b = read_all(kData + "/capi_small.gguf");
  b.resize(b.size() - 100);
  const std::string trunc = tmp("trunc.gguf");
  write_all(trunc, b);
  expect_fails(trunc, out, "extends past the end");
  expect_fails(kData + "/capi_small.gguf", tmp("no-such-dir/out.gguf"), "cannot create");
  std::remove(trunc.c_str());

  // Two tensors sharing bytes: refused when one of them would be converted; copied as they are
  // otherwise.
  auto shared_file = [&](Format f) {
    std::vector<std::uint8_t> blob(2 * 16 * nibble::row_bytes(f, 64), 0x42);
    std::vector<g::TensorInfo> ts(2);
    for (int i = 0; i < 2; ++i) {
      ts[i].name = i ? "second" : "first";
      ts[i].shape = {64, 16};
      ts[i].type = static_cast<std::uint32_t>(nibble::traits(f).gguf_type);
      ts[i].nbytes = g::tensor_nbytes(ts[i].type, ts[i].shape);
      ts[i].data = blob.data();
    }
    std::vector<std::uint8_t> bytes = g::write_memory({}, ts);
    const g::File parsed = g::File::parse(bytes.data(), bytes.size());
    const std::uint64_t zero = 0;  // the second tensor's offset := the first one's
    std::memcpy(bytes.data() + parsed.tensors[1].type_at + 4, &zero, 8);
    return bytes;
  };
  const std::string shared = tmp("shared.gguf");
  write_all(shared, shared_file(Format::q8_0));
  try {
    nibble::pack_gguf(shared, out);
    ADD_FAILURE() << "shared bytes packed";
  } catch (const nibble::Error& e) {
    EXPECT_NE(std::string(e.what()).find("share bytes"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(exists(out));
  EXPECT_FALSE(exists(out + ".tmp"));
  write_all(shared, shared_file(Format::f32));
  EXPECT_EQ(nibble::pack_gguf(shared, out).copied, 2);
  EXPECT_TRUE(read_all(out) == read_all(shared));
  std::remove(out.c_str());
  std::remove(shared.c_str());
}

// The output may replace the input (it is renamed over it at the end).
TEST(PackedGguf, InPlace) {
  const std::string F = tmp("inplace.gguf");
  write_all(F, read_all(kData + "/capi_small.gguf"));
  nibble::pack_gguf(F, F);
  EXPECT_TRUE(g::File::open(F).tensors[0].packed());
  nibble::unpack_gguf(F, F);
  EXPECT_TRUE(read_all(F) == read_all(kData + "/capi_small.gguf"));
  std::remove(F.c_str());
}

}  // namespace
