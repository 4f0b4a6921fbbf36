// Tests of the packed (row-interleaved) weight layout (nibble/packed.hpp):
// - the byte positions of pack(), from the layout written out here independently of the library;
// - unpack(pack(W)) == W byte for byte (full groups, tails, fewer than 16 rows, threads);
// - bad input throws and writes nothing;
// - gemv / gemm on packed weights on every runnable ISA variant against Eigen in double on the
//   dequantized weights and activations (|err| <= 2e-5 * sum of |products| + 1e-30, the tolerance
//   of the plain K-quant kernels: integer sums are exact, only the float steps differ; 1e-3 for
//   the Q8_1 activations of q4_1 / q5_1, whose fp16 block sums the dequantized activations do
//   not show; for the int16 NF4 / FP4 GEMV of the x86 tables, plus its rounding bound,
//   nf4_int16_bound), and against the plain layout's gemm of the same table (4e-5, plus both
//   rounding bounds for NF4 / FP4), threads 1 and 3.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernel_test_util.hpp"
#include "nibble/core/cpu.hpp"
#include "nibble/packed.hpp"

namespace {

using nibble::Format;
using nibble::test::KernelTest;

constexpr double kRtol = 2e-5;
constexpr double kAtol = 1e-30;
const Format kPackable[] = {
    Format::q4_K,  Format::q5_K, Format::q6_K, Format::q8_0, Format::q4_0,   Format::q4_1,
    Format::q5_0,  Format::q5_1, Format::q2_K, Format::q3_K, Format::iq4_nl, Format::iq4_xs,
    Format::mxfp4, Format::nf4,  Format::fp4,  Format::f16,  Format::bf16};

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(g());
  return v;
}

std::size_t plain_bytes(Format f, std::int64_t rows, std::int64_t cols) {
  return static_cast<std::size_t>(rows) * nibble::row_bytes(f, cols);
}

TEST(Packed, WhichFormats) {
  for (Format f : kPackable) EXPECT_TRUE(nibble::packable(f)) << nibble::traits(f).name;
  EXPECT_FALSE(nibble::packable(Format::f32));
  EXPECT_FALSE(nibble::packable(Format::q8_K));
  EXPECT_FALSE(nibble::packable(Format::q8_1));
  EXPECT_FALSE(nibble::packable(static_cast<Format>(99)));
}

// Where byte k of block b of row 16 g + i must land, written out per format from the layout
// description in nibble/packed.hpp: the block's fields in order, each cut into units (4 bytes;
// 2 for an fp16 scalar), unit u of row i at 16 * field offset + (16 u + i) * unit.
std::size_t packed_offset(Format f, std::size_t k, int i) {
  auto at = [&](std::size_t field_off, std::size_t unit) {
    const std::size_t kk = k - field_off;
    return 16 * field_off + (16 * (kk / unit) + i) * unit + kk % unit;
  };
  switch (f) {
    case Format::q6_K: {  // 4-byte units of ql / ql / qh interleaved per half, scales, d
      if (k >= 208) return 16 * 208 + 2 * i + (k - 208);  // d: 2-byte unit after 208 bytes
      if (k >= 192) return 16 * 192 + 4 * (16 * ((k - 192) / 4) + i) + k % 4;  // the scales
      // unit (source dword) q of ql (q < 32) or qh (q >= 32): storage slot of that dword
      const std::size_t q = k / 4;
      std::size_t slot;
      if (q < 32) {
        const std::size_t hh = q / 16, r = q % 16;
        slot = 24 * hh + 3 * (r % 8) + (r / 8);
      } else {
        const std::size_t hq = q - 32, hh = hq / 8;
        slot = 24 * hh + 3 * (hq % 8) + 2;
      }
      return 64 * slot + 4 * i + k % 4;
    }
    case Format::q8_0:  // d (fp16), then 32 quants
      return k < 2 ? at(0, 2) : at(2, 4);
    case Format::q4_0:    // d (fp16), then 16 quant bytes
    case Format::iq4_nl:  // the same
      return k < 2 ? at(0, 2) : at(2, 4);
    case Format::q4_1:  // d and m as one 4-byte unit, then 16 quant bytes
      return at(0, 4);
    case Format::q5_0:  // d (fp16), qh (4 bytes), 16 quant bytes
      return k < 2 ? at(0, 2) : at(2, 4);
    case Format::q5_1:  // d and m, qh, 16 quant bytes: 4-byte units from the start
      return at(0, 4);
    case Format::mxfp4:  // the E8M0 byte (a 1-byte unit), then 16 quant bytes
      return k < 1 ? at(0, 1) : at(1, 4);
    case Format::q3_K:  // all but d in 4-byte units, then d (fp16)
      return k < 108 ? at(0, 4) : at(108, 2);
    case Format::f16:  // a block of one value: a 2-byte unit (column c of the 16 rows together)
    case Format::bf16:
      return at(0, 2);
    case Format::nf4:  // the fp32 absmax, then the 32 code bytes: 4-byte units from the start
    case Format::fp4:
      return at(0, 4);
    default:  // q4_K, q5_K, q2_K, iq4_xs: the whole block in 4-byte units
      return at(0, 4);
  }
}

TEST(Packed, BytePositions) {
  for (Format f : kPackable) {
    const std::int64_t bel = nibble::traits(f).block_elems;
    const std::int64_t rows = 37, nb = 2, cols = nb * bel;
    const std::size_t B = nibble::traits(f).block_bytes, rb = nb * B;
    const auto W = random_bytes(plain_bytes(f, rows, cols), 7);
    std::vector<std::uint8_t> P(W.size(), 0xAA);
    nibble::pack(nibble::Context{}, f, W.data(), rows, cols, P.data());
    int bad = 0;
    for (std::int64_t g = 0; g < 2; ++g)
      for (std::int64_t b = 0; b < nb; ++b)
        for (int i = 0; i < 16; ++i)
          for (std::size_t k = 0; k < B; ++k) {
            const std::size_t at = (g * nb + b) * 16 * B + packed_offset(f, k, i);
            const std::size_t from = (16 * g + i) * rb + b * B + k;
            if (P[at] != W[from] && ++bad < 5)
              ADD_FAILURE() << nibble::traits(f).name << " g " << g << " b " << b << " row " << i
                            << " byte " << k;
          }
    for (std::size_t k = 32 * rb; k < W.size(); ++k) bad += P[k] != W[k];
    EXPECT_EQ(bad, 0) << nibble::traits(f).name;
  }
}

// f16 / bf16 pack as a tiled transpose (16 columns at a time, then the rest one by one): the
// byte positions and the round trip for column counts around the tile size.
TEST(Packed, Float16TilesAndTail) {
  for (Format f : {Format::f16, Format::bf16}) {
    for (std::int64_t cols : {1, 15, 16, 17, 37, 64}) {
      const std::int64_t rows = 33;  // 2 groups + a plain row
      const auto W = random_bytes(plain_bytes(f, rows, cols), 3 + static_cast<int>(cols));
      std::vector<std::uint8_t> P(W.size(), 0xAA), U(W.size(), 0x55);
      nibble::pack(nibble::Context{}, f, W.data(), rows, cols, P.data());
      const std::size_t rb = static_cast<std::size_t>(cols) * 2;
      int bad = 0;
      for (std::int64_t g = 0; g < 2; ++g)
        for (std::int64_t c = 0; c < cols; ++c)
          for (int i = 0; i < 16; ++i)
            for (int k = 0; k < 2; ++k) {
              const std::size_t at = g * 16 * rb + (16 * c + i) * 2 + k;
              const std::size_t from = (16 * g + i) * rb + 2 * c + k;
              bad += P[at] != W[from];
            }
      for (std::size_t k = 32 * rb; k < W.size(); ++k) bad += P[k] != W[k];
      EXPECT_EQ(bad, 0) << nibble::traits(f).name << " cols " << cols;
      nibble::unpack(nibble::Context{}, f, P.data(), rows, cols, U.data());
      EXPECT_EQ(U, W) << nibble::traits(f).name << " cols " << cols;
    }
  }
}

TEST(Packed, RoundTripIsExact) {
  for (Format f : kPackable) {
    for (std::int64_t rows : {0, 1, 15, 16, 17, 33, 64}) {
      for (int threads : {1, 3}) {
        const std::int64_t cols = 768;
        const auto W = random_bytes(plain_bytes(f, rows, cols), 11 + static_cast<int>(rows));
        nibble::Context ctx;
        ctx.threads = threads;
        std::vector<std::uint8_t> P(W.size()), U(W.size());
        nibble::pack(ctx, f, W.data(), rows, cols, P.data());
        nibble::unpack(ctx, f, P.data(), rows, cols, U.data());
        nibble::test::expect_bytes_equal(
            U, W, std::string(nibble::traits(f).name) + " rows " + std::to_string(rows));
        if (rows >= 16) {
          EXPECT_NE(P, W) << "a full group must be permuted";
        }
        const nibble::PackedWeights pw = nibble::pack(ctx, f, W.data(), rows, cols);
        EXPECT_TRUE(pw.owns());
        ASSERT_EQ(pw.bytes(), W.size());
        if (rows > 0) {
          EXPECT_EQ(std::memcmp(pw.data(), P.data(), P.size()), 0);
        }
      }
    }
  }
}

// pack_in_place / unpack_in_place against the two-buffer calls: the same bytes, every packable
// format, partial groups, more groups than tasks (117 rows: 7 groups, chunks of 3 on 3 threads).
TEST(Packed, InPlaceEqualsTwoBuffers) {
  for (Format f : kPackable) {
    for (std::int64_t rows : {0, 1, 15, 16, 17, 64, 117}) {
      for (int threads : {1, 3}) {
        const std::int64_t cols = 512;
        const auto W = random_bytes(plain_bytes(f, rows, cols), 29 + static_cast<int>(rows));
        nibble::Context ctx;
        ctx.threads = threads;
        const std::string what = std::string(nibble::traits(f).name) + " rows " +
                                 std::to_string(rows) + " threads " + std::to_string(threads);
        std::vector<std::uint8_t> P(W.size());
        nibble::pack(ctx, f, W.data(), rows, cols, P.data());
        std::vector<std::uint8_t> B = W;
        nibble::pack_in_place(ctx, f, B.data(), rows, cols);
        nibble::test::expect_bytes_equal(B, P, what + " (pack_in_place)");
        nibble::unpack_in_place(ctx, f, B.data(), rows, cols);
        nibble::test::expect_bytes_equal(B, W, what + " (unpack_in_place)");
      }
    }
  }
}

TEST(Packed, InPlaceBadInputThrowsAndWritesNothing) {
  const nibble::Context ctx;
  const std::int64_t rows = 32, cols = 256;
  const auto W = random_bytes(plain_bytes(Format::q4_K, rows, cols), 5);
  std::vector<std::uint8_t> B = W;
  EXPECT_THROW(nibble::pack_in_place(ctx, Format::f32, B.data(), rows, cols), nibble::Error);
  EXPECT_THROW(nibble::pack_in_place(ctx, Format::q4_K, B.data(), rows, 100), nibble::Error);
  EXPECT_THROW(nibble::pack_in_place(ctx, Format::q4_K, B.data(), -1, cols), nibble::Error);
  EXPECT_THROW(nibble::pack_in_place(ctx, Format::q4_K, nullptr, rows, cols), nibble::Error);
  EXPECT_THROW(nibble::unpack_in_place(ctx, Format::q8_K, B.data(), rows, cols), nibble::Error);
  EXPECT_THROW(nibble::unpack_in_place(ctx, Format::q4_K, nullptr, rows, cols), nibble::Error);
  EXPECT_EQ(B, W);
  nibble::pack_in_place(ctx, Format::q4_K, nullptr, 0, cols);  // nothing to pack: no pointer needed
}

TEST(Packed, BadInputThrowsAndWritesNothing) {
  const nibble::Context ctx;
  const std::int64_t rows = 32, cols = 256;
  const auto W = random_bytes(plain_bytes(Format::q4_K, rows, cols), 3);
  std::vector<std::uint8_t> out(W.size(), 0x5C);
  const std::vector<std::uint8_t> untouched = out;
  EXPECT_THROW(nibble::pack(ctx, Format::f32, W.data(), rows, cols, out.data()), nibble::Error);
  EXPECT_THROW(nibble::pack(ctx, Format::q4_K, W.data(), rows, 100, out.data()), nibble::Error);
  EXPECT_THROW(nibble::pack(ctx, Format::q4_K, W.data(), -1, cols, out.data()), nibble::Error);
  EXPECT_THROW(nibble::pack(ctx, Format::q4_K, nullptr, rows, cols, out.data()), nibble::Error);
  EXPECT_THROW(nibble::pack(ctx, Format::q4_K, W.data(), rows, cols, nullptr), nibble::Error);
  EXPECT_THROW(nibble::unpack(ctx, Format::q8_K, W.data(), rows, cols, out.data()), nibble::Error);
  EXPECT_EQ(out, untouched);
  std::vector<std::uint8_t> buf = W;  // in-place / overlapping buffers are refused
  EXPECT_THROW(nibble::pack(ctx, Format::q4_K, buf.data(), rows, cols, buf.data() + 64),
               nibble::Error);
  EXPECT_EQ(buf, W);
  EXPECT_THROW(nibble::PackedWeights::view(Format::q4_K, nullptr, rows, cols), nibble::Error);
  EXPECT_THROW(nibble::PackedWeights::view(Format::q8_K, W.data(), rows, cols), nibble::Error);
  const nibble::PackedWeights v = nibble::PackedWeights::view(Format::q4_K, W.data(), rows, cols);
  EXPECT_FALSE(v.owns());
  std::vector<float> x(cols, 1.0f), y(rows, 7.0f);
  x[3] = std::nanf("");
  EXPECT_THROW(nibble::gemv(ctx, v, x.data(), y.data()), nibble::Error);
  EXPECT_THROW(nibble::gemm(ctx, v, x.data(), -1, y.data()), nibble::Error);
  EXPECT_EQ(y, std::vector<float>(rows, 7.0f));
  // an empty (default) PackedWeights is a 0 x 0 matrix: nothing to compute, nothing to check
  EXPECT_NO_THROW(nibble::gemv(ctx, nibble::PackedWeights{}, x.data(), nullptr));
}

class PackedKernels : public KernelTest {};

// Weights from real quantization of LLM-like values; Y on the packed layout against Eigen on the
// dequantized operands and against the plain layout of the same table.
TEST_P(PackedKernels, GemvGemmMatchEigenAndPlain) {
  const nibble::kernels::KernelTable& t = table();
  for (Format f : kPackable) {
    // 150 rows (10 groups, the last one partial): the GEMV driver's streams (2 or 4) then end
    // unevenly within one call (one thread), which 16-64 rows do not reach.
    for (std::int64_t rows : {16, 37, 64, 150}) {
      for (std::int64_t cols : {256, 1024, 32 * 37}) {
        if (cols % nibble::traits(f).block_elems != 0) continue;
        if (rows == 150 && cols != 256) continue;
        const auto src = nibble::test::random_normal(
            static_cast<std::size_t>(rows * cols), static_cast<std::uint32_t>(rows + cols), 0.02f);
        std::vector<std::uint8_t> W(plain_bytes(f, rows, cols)), P(W.size());
        nibble::quantize(f, src.data(), rows, cols, W.data());
        nibble::pack(nibble::Context{}, f, W.data(), rows, cols, P.data());
        std::vector<float> Wd(static_cast<std::size_t>(rows * cols));
        nibble::dequantize(f, W.data(), rows, cols, Wd.data());
        for (std::int64_t n : {1, 2, 7, 17}) {
          if (rows == 150 && n != 1) continue;
          const auto X = nibble::test::random_normal(static_cast<std::size_t>(n * cols),
                                                     static_cast<std::uint32_t>(n * 13 + cols));
          // the products see the quantized activations (Q8_K / Q8_0): the reference does too
          const Format af = nibble::traits(f).activation;
          std::vector<std::uint8_t> Aq(static_cast<std::size_t>(n) * nibble::row_bytes(af, cols));
          nibble::quantize(af, X.data(), n, cols, Aq.data());
          std::vector<float> Xd(static_cast<std::size_t>(n * cols));
          nibble::dequantize(af, Aq.data(), n, cols, Xd.data());
          const auto ref = nibble::test::eigen_reference(Wd.data(), rows, cols, Xd.data(), n);
          for (int threads : {1, 3}) {
            nibble::Context ctx;
            ctx.threads = threads;
            std::vector<float> Yp(static_cast<std::size_t>(n * rows), std::nanf(""));
            std::vector<float> Yq(Yp.size(), std::nanf(""));
            nibble::detail::run_gemm_packed(t, ctx, f, P.data(), rows, cols, X.data(), n,
                                            Yp.data());
            nibble::detail::run_gemm(t, ctx, f, W.data(), rows, cols, X.data(), n, Yq.data());
            const std::string what = variant_name() + " " + nibble::traits(f).name + " " +
                                     std::to_string(rows) + "x" + std::to_string(cols) + " n " +
                                     std::to_string(n) + " threads " + std::to_string(threads);
            // Q8_1 (q4_1 / q5_1): the products use the block sums s rounded to fp16, which the
            // dequantized activations do not show: a relative error of up to 2^-11 per min term
            const double rtol = af == Format::q8_1 ? 1e-3 : kRtol;
            // NF4 / FP4 GEMV on x86: int16 code book and activations (per block on the packed
            // layout, per 4 blocks on the plain one), within their rounding bounds
            const bool int16 = (f == Format::nf4 || f == Format::fp4) && n == 1 &&
                               nibble::test::nf4_int16_gemv(variant_name());
            std::vector<double> bp(ref.y.size(), kAtol), bq = bp, both = bp;
            if (int16) {
              const bool fp4 = f == Format::fp4;
              bp = nibble::test::nf4_int16_bound(W.data(), rows, cols, X.data(), 1, fp4, true);
              bq = nibble::test::nf4_int16_bound(W.data(), rows, cols, X.data(), 1, fp4, false);
              for (std::size_t i = 0; i < both.size(); ++i) both[i] = bp[i] + bq[i];
            }
            nibble::test::expect_close(Yp, ref, rtol, bp, what + " packed vs Eigen");
            nibble::test::expect_close(Yq, ref, rtol, bq, what + " plain vs Eigen");
            // packed against plain: the same integer sums, only the float steps differ
            nibble::test::RefProduct plain{std::vector<double>(Yq.begin(), Yq.end()), ref.scale};
            nibble::test::expect_close(Yp, plain, 2 * kRtol, both, what + " packed vs plain");
          }
        }
      }
    }
  }
}

// The packed GEMV's streaming schemes (detail::intel_streaming_tuning: two streams, or four with
// crossing L2 prefetches for the large group blocks; override 2, AMD family 25: no L1 prefetch for
// some bodies, Q8_0's body on ymm registers on the AVX-512 tables) give bit-identical outputs
// for the packed groups: each group is summed in the same order. 64 rows are one group per stream
// of four; 150 and 272 rows (10 and 17 groups) end the streams unevenly. The weights are quantized
// once per binary (the quantizers dominate the time under qemu).
TEST_P(PackedKernels, StreamingTuningsAgree) {
  const nibble::kernels::KernelTable& t = table();
  struct Restore {
    ~Restore() { nibble::detail::set_vendor_tuning_override(-1); }
  } restore;
  static std::map<std::pair<Format, std::int64_t>, std::vector<std::uint8_t>> packed;
  const std::int64_t cols = 256;
  const auto X = nibble::test::random_normal(static_cast<std::size_t>(cols), 77);
  for (Format f : kPackable) {
    for (std::int64_t rows : {64, 150, 272}) {
      std::vector<std::uint8_t>& P = packed[{f, rows}];
      if (P.empty()) {
        const auto src = nibble::test::random_normal(static_cast<std::size_t>(rows * cols),
                                                     static_cast<std::uint32_t>(rows), 0.02f);
        std::vector<std::uint8_t> W(plain_bytes(f, rows, cols));
        nibble::quantize(f, src.data(), rows, cols, W.data());
        P.resize(W.size());
        nibble::pack(nibble::Context{}, f, W.data(), rows, cols, P.data());
      }
      for (int threads : {1, 3}) {
        nibble::Context ctx;
        ctx.threads = threads;
        std::vector<float> Y[3];
        for (int tuning : {0, 1, 2}) {
          nibble::detail::set_vendor_tuning_override(tuning);
          Y[tuning].assign(static_cast<std::size_t>(rows), std::nanf(""));
          nibble::detail::run_gemm_packed(t, ctx, f, P.data(), rows, cols, X.data(), 1,
                                          Y[tuning].data());
        }
        for (std::int64_t r = 0; r < rows; ++r) {
          ASSERT_TRUE(std::isfinite(Y[0][r])) << nibble::traits(f).name << " row " << r;
          for (int tuning : {1, 2}) {
            // the tail rows (after the last group of 16) run the plain GEMM, whose family-25
            // schemes sum in another order by design (BasicKernels.GemvFamily25SchemesAgree)
            if (tuning == 2 && r >= rows / nibble::kPackedGroupRows * nibble::kPackedGroupRows)
              continue;
            ASSERT_EQ(std::memcmp(&Y[0][r], &Y[tuning][r], sizeof(float)), 0)
                << variant_name() << " " << nibble::traits(f).name << " " << rows << " rows, "
                << threads << " threads, tuning " << tuning << ", row " << r << ": " << Y[0][r]
                << " vs " << Y[tuning][r];
          }
        }
      }
    }
  }
}

// The public entry points pick the best table and agree with the plain layout's public gemv.
TEST(Packed, PublicGemvMatchesPlain) {
  for (Format f : kPackable) {
    const std::int64_t rows = 50, cols = 512;
    const auto src = nibble::test::random_normal(static_cast<std::size_t>(rows * cols), 5, 0.05f);
    std::vector<std::uint8_t> W(plain_bytes(f, rows, cols));
    nibble::quantize(f, src.data(), rows, cols, W.data());
    const nibble::PackedWeights pw = nibble::pack(nibble::Context{}, f, W.data(), rows, cols);
    const auto x = nibble::test::random_normal(static_cast<std::size_t>(cols), 9);
    std::vector<float> yp(rows), yq(rows), Wd(static_cast<std::size_t>(rows * cols));
    nibble::gemv(nibble::Context{}, pw, x.data(), yp.data());
    nibble::gemv(nibble::Context{}, f, W.data(), rows, cols, x.data(), yq.data());
    // NF4 / FP4 on x86: the two layouts' int16 GEMVs round the activations differently
    std::vector<double> extra(static_cast<std::size_t>(rows), 0.0);
    if (f == Format::nf4 || f == Format::fp4) {
      const bool fp4 = f == Format::fp4;
      const auto bp = nibble::test::nf4_int16_bound(W.data(), rows, cols, x.data(), 1, fp4, true);
      const auto bq = nibble::test::nf4_int16_bound(W.data(), rows, cols, x.data(), 1, fp4, false);
      for (std::int64_t r = 0; r < rows; ++r) extra[r] = bp[r] + bq[r];
    }
    for (std::int64_t r = 0; r < rows; ++r)
      EXPECT_NEAR(yp[r], yq[r], 1e-4 * (std::fabs(yq[r]) + 1.0) + extra[r])
          << nibble::traits(f).name << r;
    if (f == Format::nf4 || f == Format::fp4) {  // Context::exact_nf4: the fp32 product on both
      nibble::Context exact;
      exact.exact_nf4 = true;
      nibble::gemv(exact, pw, x.data(), yp.data());
      nibble::gemv(exact, f, W.data(), rows, cols, x.data(), yq.data());
      for (std::int64_t r = 0; r < rows; ++r)
        EXPECT_NEAR(yp[r], yq[r], 1e-6 * (std::fabs(yq[r]) + 1.0)) << "exact " << r;
    }
  }
}

NIBBLE_INSTANTIATE_KERNEL_TEST(PackedKernels);

}  // namespace
