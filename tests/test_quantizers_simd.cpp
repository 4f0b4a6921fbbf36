// The SIMD weight quantizers of the kernel tables (kernels/quantize-inl.hpp) must be
// byte-identical to the scalar reference quantizers (nibble/formats, themselves checked against
// ggml's / bitsandbytes' golden vectors): Q8_0, Q4_K, Q5_K and Q6_K, with and without
// importance weights, NF4 and FP4, on many random rows (mixed magnitudes 1e-30..1e30 per
// sub-block, zero and constant sub-blocks, integer-valued rows with exact rounding ties, a few
// inf/NaN). Also prints a quick throughput comparison (GB/s of fp32 input, one thread).
// Every SIMD table built and runnable on this CPU is checked (x86: avx2, avxvnni, avx512,
// avx512vnni; aarch64: neon, neondot).
//
// NIBBLE_QZ_SUPERBLOCKS (environment) sets the number of random 256-value super-blocks per
// format and path (default 6144 = 49152 32-value sub-blocks, halved for the Q4_K/Q5_K
// importance-weighted paths; each sub-block is one lane of the SIMD code). Q6_K uses twice as
// many (196608 16-value sub-blocks; 5/4 as many with importance), NF4/FP4 five times as many
// values (122880 64-value blocks).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nibble/formats/nf4.hpp"
#include "nibble/formats/q4_k.hpp"
#include "nibble/formats/q5_k.hpp"
#include "nibble/formats/q6_k.hpp"
#include "nibble/formats/q8_0.hpp"
#include "nibble/kernels/table.hpp"

#include "../src/dispatch.hpp"

namespace {

using namespace nibble;
using kernels::KernelTable;

struct Isa {
  const char* name;
  const KernelTable* table;
};

// Every SIMD table variant built into the library that this CPU runs (dispatch's registry;
// Dispatch.EveryIsaThisCpuRunsIsBuilt checks that none the CPU runs is missing).
std::vector<Isa> simd_tables() {
  std::vector<Isa> v;
  for (const auto& t : nibble::detail::runnable_tables())
    if (t.isa != nibble::Isa::scalar) v.push_back({t.name, t.table});
  return v;
}

std::int64_t superblocks() {
  const char* e = std::getenv("NIBBLE_QZ_SUPERBLOCKS");
  const long v = e ? std::atol(e) : 0;
  return v > 0 ? v : 6144;
}

// Random row of nsb super-blocks; every `sub`-value sub-block gets its own kind and magnitude.
std::vector<float> random_row(std::int64_t nsb, std::uint32_t seed, int sub = 32) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::uniform_int_distribution<int> kind_d(0, 99), mag_d(-30, 30), small(-8, 8);
  std::vector<float> x(static_cast<std::size_t>(nsb) * 256);
  const std::size_t su = static_cast<std::size_t>(sub);
  for (std::size_t s = 0; s < x.size() / su; ++s) {
    float* p = x.data() + su * s;
    const int kind = kind_d(rng);
    const int e = mag_d(rng);
    const float mag = kind < 60 ? 1.f : std::pow(10.f, static_cast<float>(e));
    for (int i = 0; i < sub; ++i) {
      if (kind < 40)
        p[i] = mag * g(rng);
      else if (kind < 60)
        p[i] = mag * 0.02f * g(rng) + (kind < 50 ? 0.f : 0.05f);  // shifted: all positive-ish
      else if (kind < 80)
        p[i] = mag * u(rng);
      else if (kind < 85)
        p[i] = 0.f;
      else if (kind < 88)
        p[i] = mag * 0.75f;
      else if (kind < 91)
        p[i] = -mag * 0.5f;
      else if (kind < 97)
        p[i] = static_cast<float>(small(rng)) * (kind < 94 ? 1.f : 0.5f);  // exact ties
      else if (kind < 98)
        p[i] = i == 5 ? std::numeric_limits<float>::infinity() : g(rng);
      else if (kind < 99)
        p[i] = i == (sub == 16 ? 3 : 9) ? std::numeric_limits<float>::quiet_NaN() : g(rng);
      else
        p[i] = i == 0 ? 1e30f : 1e-30f * g(rng);
    }
  }
  return x;
}

std::vector<float> random_importance(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> w(n);
  for (float& v : w) v = std::exp(0.5f * g(rng));
  return w;
}

template <class Block>
void expect_same_blocks(const std::vector<Block>& got, const std::vector<Block>& want,
                        const std::string& what, const std::vector<float>& x) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t ndiff = 0, first = 0;
  for (std::size_t b = 0; b < got.size(); ++b) {
    if (std::memcmp(&got[b], &want[b], sizeof(Block)) != 0) {
      if (ndiff++ == 0) first = b;
    }
  }
  if (ndiff) {
    const std::size_t vals =
        sizeof(Block) == sizeof(BlockQ8_0) ? 32 : (sizeof(Block) == sizeof(BlockNF4) ? 64 : 256);
    ADD_FAILURE() << what << ": " << ndiff << " of " << got.size() << " blocks differ, first block "
                  << first << " (x[0] = " << x[first * vals] << ")";
  }
}

constexpr int kQ8_0 = static_cast<int>(Format::q8_0);
constexpr int kQ4_K = static_cast<int>(Format::q4_K);
constexpr int kQ5_K = static_cast<int>(Format::q5_K);
constexpr int kQ6_K = static_cast<int>(Format::q6_K);
constexpr int kNF4 = static_cast<int>(Format::nf4);
constexpr int kFP4 = static_cast<int>(Format::fp4);

template <class Block>
void check_format(int fmt, bool imatrix, std::int64_t nsb, std::uint32_t seed,
                  void (*reference)(const float*, Block*, std::int64_t, const float*),
                  int sub = 32) {
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD table runnable on this CPU";
  const std::int64_t n = nsb * 256;
  const auto x = random_row(nsb, seed, sub);
  const auto qw = random_importance(static_cast<std::size_t>(n), seed + 1);
  const std::int64_t nblk = n / static_cast<std::int64_t>(traits(Format(fmt)).block_elems);
  std::vector<Block> want(static_cast<std::size_t>(nblk));
  reference(x.data(), want.data(), n, imatrix ? qw.data() : nullptr);
  // The scalar table registers the reference itself.
  std::vector<Block> got(want.size());
  ASSERT_NE(nibble::detail::scalar_table().fmt[fmt].quantize, nullptr);
  nibble::detail::scalar_table().fmt[fmt].quantize(x.data(), n, got.data(),
                                                   imatrix ? qw.data() : nullptr);
  expect_same_blocks(got, want, "scalar table", x);
  for (const Isa& isa : tables) {
    auto fn = isa.table->fmt[fmt].quantize;
    ASSERT_NE(fn, nullptr) << isa.name;
    std::memset(got.data(), 0xAB, got.size() * sizeof(Block));
    fn(x.data(), n, got.data(), imatrix ? qw.data() : nullptr);
    expect_same_blocks(got, want, isa.name, x);
    // odd lengths: 1..3 super-blocks (partial lane groups)
    for (std::int64_t k = 1; k <= 3; ++k) {
      const std::int64_t m = k * 256;
      std::vector<Block> a(static_cast<std::size_t>(m / traits(Format(fmt)).block_elems)),
          r(a.size());
      fn(x.data() + 256 * 5, m, a.data(), imatrix ? qw.data() : nullptr);
      reference(x.data() + 256 * 5, r.data(), m, imatrix ? qw.data() : nullptr);
      ASSERT_EQ(std::memcmp(a.data(), r.data(), a.size() * sizeof(Block)), 0)
          << isa.name << " length " << m;
    }
  }
}

void ref_q8_0(const float* x, BlockQ8_0* y, std::int64_t n, const float*) {
  ref::quantize_q8_0(x, y, n);
}
void ref_q4_K(const float* x, BlockQ4_K* y, std::int64_t n, const float* w) {
  w ? ref::quantize_q4_K_imatrix(x, y, n, w) : ref::quantize_q4_K(x, y, n);
}
void ref_q5_K(const float* x, BlockQ5_K* y, std::int64_t n, const float* w) {
  w ? ref::quantize_q5_K_imatrix(x, y, n, w) : ref::quantize_q5_K(x, y, n);
}
void ref_q6_K(const float* x, BlockQ6_K* y, std::int64_t n, const float* w) {
  w ? ref::quantize_q6_K_imatrix(x, y, n, w) : ref::quantize_q6_K(x, y, n);
}
void ref_nf4(const float* x, BlockNF4* y, std::int64_t n, const float*) {
  ref::quantize_nf4(x, y, n, false);
}
void ref_fp4(const float* x, BlockNF4* y, std::int64_t n, const float*) {
  ref::quantize_nf4(x, y, n, true);
}

TEST(QuantizersSimd, Q8_0) {
  check_format<BlockQ8_0>(kQ8_0, false, superblocks(), 101, ref_q8_0);
}
TEST(QuantizersSimd, Q4_K) {
  check_format<BlockQ4_K>(kQ4_K, false, superblocks(), 102, ref_q4_K);
}
TEST(QuantizersSimd, Q5_K) {
  check_format<BlockQ5_K>(kQ5_K, false, superblocks(), 103, ref_q5_K);
}
TEST(QuantizersSimd, Q4_K_Imatrix) {
  check_format<BlockQ4_K>(kQ4_K, true, superblocks() / 2, 104, ref_q4_K);
}
TEST(QuantizersSimd, Q5_K_Imatrix) {
  check_format<BlockQ5_K>(kQ5_K, true, superblocks() / 2, 105, ref_q5_K);
}
TEST(QuantizersSimd, Q6_K) {
  check_format<BlockQ6_K>(kQ6_K, false, superblocks() * 2, 106, ref_q6_K, 16);
}
TEST(QuantizersSimd, Q6_K_Imatrix) {
  check_format<BlockQ6_K>(kQ6_K, true, superblocks() * 5 / 4, 107, ref_q6_K, 16);
}
TEST(QuantizersSimd, NF4) {
  check_format<BlockNF4>(kNF4, false, superblocks() * 5, 108, ref_nf4, 64);
}
TEST(QuantizersSimd, FP4) {
  check_format<BlockNF4>(kFP4, false, superblocks() * 5, 109, ref_fp4, 64);
}

// Throughput, GB/s of fp32 input, single thread (informational; no assertion).
TEST(QuantizersSimd, Speed) {
  const std::int64_t nsb = 96, n = nsb * 256;
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& v : x) v = g(rng);
  const auto qw = random_importance(x.size(), 8);
  std::vector<unsigned char> out(static_cast<std::size_t>(n) * 2);
  auto time_it = [&](decltype(kernels::FormatKernels::quantize) fn, bool imatrix) {
    double best = 1e30;
    for (int rep = 0; rep < 15; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      fn(x.data(), n, out.data(), imatrix ? qw.data() : nullptr);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = s < best ? s : best;
    }
    return 4.0 * static_cast<double>(n) / best / 1e9;
  };
  std::vector<Isa> all = {{"scalar", &nibble::detail::scalar_table()}};
  for (const Isa& i : simd_tables()) all.push_back(i);
  const struct {
    const char* name;
    int fmt;
    bool imatrix;
  } cases[] = {{"q8_0", kQ8_0, false},        {"q4_K", kQ4_K, false},        {"q5_K", kQ5_K, false},
               {"q4_K+imatrix", kQ4_K, true}, {"q5_K+imatrix", kQ5_K, true}, {"q6_K", kQ6_K, false},
               {"q6_K+imatrix", kQ6_K, true}, {"nf4", kNF4, false},          {"fp4", kFP4, false}};
  for (const auto& c : cases) {
    double base = 0;
    for (const Isa& i : all) {
      const double gbs = time_it(i.table->fmt[c.fmt].quantize, c.imatrix);
      if (base == 0) base = gbs;
      std::printf("quantize %-13s %-11s %8.4f GB/s  (%5.1fx scalar)\n", c.name, i.name, gbs,
                  gbs / base);
    }
  }
}

}  // namespace
