// Tests of the GPTQ v1 and AutoAWQ GEMM int32 packings: known bit patterns written out by hand
// from ALGORITHMS.md 2.6 / 3.7, round trips for 2/3/4/8 bits, and checkpoint dequantization.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "llm_layer.hpp"
#include "nibble/quant/gptq.hpp"
#include "nibble/quant/hessian.hpp"
#include "nibble/quant/packing.hpp"
#include "nibble/quant/rtn.hpp"

namespace pk = nibble::packing;
namespace gptq = nibble::gptq;

namespace {
std::uint32_t u(std::int32_t v) {
  return static_cast<std::uint32_t>(v);
}

std::vector<std::int32_t> random_codes(std::int64_t n, int bits, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> c(static_cast<std::size_t>(n));
  for (auto& v : c) v = static_cast<std::int32_t>(rng() % (1u << bits));
  return c;
}
}  // namespace

TEST(GptqPacking, FourBitLowestInputInLowestNibble) {
  // K = 32 inputs, N = 2 outputs; code[j, o] = (j + o) % 16.
  std::vector<std::int32_t> codes(64);
  for (int j = 0; j < 32; ++j)
    for (int o = 0; o < 2; ++o) codes[j * 2 + o] = (j + o) % 16;
  const auto q = pk::pack_rows(codes.data(), 32, 2, 4);
  ASSERT_EQ(q.size(), 8u);  // [32/32*4, 2]
  EXPECT_EQ(u(q[0 * 2 + 0]), 0x76543210u);
  EXPECT_EQ(u(q[1 * 2 + 0]), 0xFEDCBA98u);
  EXPECT_EQ(u(q[2 * 2 + 0]), 0x76543210u);
  EXPECT_EQ(u(q[0 * 2 + 1]), 0x87654321u);
  EXPECT_EQ(u(q[1 * 2 + 1]), 0x0FEDCBA9u);
  EXPECT_EQ(pk::unpack_rows(q.data(), 32, 2, 4), codes);
}

TEST(GptqPacking, TwoAndEightBitWords) {
  std::vector<std::int32_t> c8(32), c2(32);
  for (int j = 0; j < 32; ++j) {
    c8[j] = j * 7 + 1;
    c2[j] = j % 4;
  }
  const auto q8 = pk::pack_rows(c8.data(), 32, 1, 8);
  ASSERT_EQ(q8.size(), 8u);
  EXPECT_EQ(u(q8[0]), 0x160F0801u);  // 1, 8, 15, 22
  const auto q2 = pk::pack_rows(c2.data(), 32, 1, 2);
  ASSERT_EQ(q2.size(), 2u);
  EXPECT_EQ(u(q2[0]), 0xE4E4E4E4u);  // 0,1,2,3 -> 0b11100100 per byte
  EXPECT_EQ(u(q2[1]), 0xE4E4E4E4u);
}

TEST(GptqPacking, ThreeBitStraddlingValues) {
  // Value 10 occupies stream bits 30..32 (w0 bits 30-31, w1 bit 0); value 21 bits 63..65
  // (w1 bit 31, w2 bits 0-1).
  std::vector<std::int32_t> c(32, 0);
  c[10] = 7;
  auto q = pk::pack_rows(c.data(), 32, 1, 3);
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(u(q[0]), 0xC0000000u);
  EXPECT_EQ(u(q[1]), 0x00000001u);
  EXPECT_EQ(u(q[2]), 0u);
  c[10] = 0b101;  // low bits in w0, high bit in w1
  q = pk::pack_rows(c.data(), 32, 1, 3);
  EXPECT_EQ(u(q[0]), 0x40000000u);
  EXPECT_EQ(u(q[1]), 0x00000001u);
  c[10] = 0;
  c[21] = 0b110;  // bit0 = 0 -> w1 bit 31 clear; bits 1-2 -> w2 bits 0-1
  q = pk::pack_rows(c.data(), 32, 1, 3);
  EXPECT_EQ(u(q[0]), 0u);
  EXPECT_EQ(u(q[1]), 0u);
  EXPECT_EQ(u(q[2]), 0x00000003u);
  c[21] = 7;
  c[0] = 5;
  c[31] = 6;  // stream bits 93..95 -> w2 bits 29..31
  q = pk::pack_rows(c.data(), 32, 1, 3);
  EXPECT_EQ(u(q[0]), 0x00000005u);
  EXPECT_EQ(u(q[1]), 0x80000000u);
  EXPECT_EQ(u(q[2]), 0xC0000003u);
  EXPECT_EQ(pk::unpack_rows(q.data(), 32, 1, 3), c);
}

TEST(GptqPacking, RoundTripsAllWidthsBothAxes) {
  for (int bits : {2, 3, 4, 8}) {
    const auto codes = random_codes(96 * 64, bits, 40 + bits);
    const auto r = pk::pack_rows(codes.data(), 96, 64, bits);
    EXPECT_EQ(r.size(), static_cast<std::size_t>(96 / 32 * bits * 64));
    EXPECT_EQ(pk::unpack_rows(r.data(), 96, 64, bits), codes) << bits;
    const auto c = pk::pack_cols(codes.data(), 96, 64, bits);
    EXPECT_EQ(c.size(), static_cast<std::size_t>(96 * 64 / 32 * bits));
    EXPECT_EQ(pk::unpack_cols(c.data(), 96, 64, bits), codes) << bits;
  }
}

TEST(GptqPacking, RejectsBadInput) {
  std::vector<std::int32_t> codes(64 * 32, 0);
  EXPECT_THROW(pk::pack_rows(codes.data(), 48, 32, 4), nibble::Error);  // K % 32
  EXPECT_THROW(pk::pack_cols(codes.data(), 32, 48, 4), nibble::Error);  // N % 32
  EXPECT_THROW(pk::pack_rows(codes.data(), 32, 32, 5), nibble::Error);
  codes[7] = 16;
  EXPECT_THROW(pk::pack_rows(codes.data(), 32, 32, 4), nibble::Error);
  codes[7] = -1;
  EXPECT_THROW(pk::pack_cols(codes.data(), 32, 32, 4), nibble::Error);
  std::vector<std::int32_t> c8(64, 0);
  EXPECT_THROW(pk::awq_pack_gemm(c8.data(), 1, 12), nibble::Error);
}

namespace {
// A GPTQ result on a 64 x 64 synthetic layer.
gptq::Result small_gptq(int bits, bool sym, bool act_order) {
  nibble_test::LayerSpec s;
  s.out = 64;
  s.in = 64;
  s.tokens = 256;
  s.outlier_frac = 0.0f;
  const auto L = nibble_test::make_layer(s);
  nibble::Hessian h(64);
  const Eigen::Matrix<float, -1, -1, Eigen::RowMajor> Xr = L.X;
  h.add_batch(Xr.data(), Xr.rows());
  gptq::Config cfg;
  cfg.bits = bits;
  cfg.group_size = 32;
  cfg.sym = sym;
  cfg.act_order = act_order;
  return gptq::quantize(L.W, h.matrix(), cfg);
}
}  // namespace

TEST(GptqPacking, SymmetricFourBitQzerosAre0x77777777) {
  const auto r = small_gptq(4, true, false);
  const auto t = pk::gptq_pack(r, 4);
  ASSERT_EQ(t.qzeros.size(), static_cast<std::size_t>(2 * 64 / 32 * 4));
  for (auto w : t.qzeros) EXPECT_EQ(u(w), 0x77777777u);
}

TEST(GptqPacking, CheckpointDequantizesToGptqResult) {
  for (int bits : {2, 3, 4, 8})
    for (bool act : {false, true}) {
      const auto r = small_gptq(bits, false, act);
      const auto t = pk::gptq_pack(r, bits);
      EXPECT_EQ(t.g_idx, r.g_idx);
      const Eigen::MatrixXf D = pk::gptq_dequantize(t);
      // Equal up to the fp16 rounding of the scales: |s16 - s| * (maxq + 1) per element.
      for (int j = 0; j < 64; ++j)
        for (int o = 0; o < 64; ++o) {
          const int g = r.g_idx[j];
          const float s = r.scale(o, g);
          const float tol = 1e-3f * s * static_cast<float>(1 << bits);
          ASSERT_NEAR(D(o, j), r.Q(o, j), tol) << bits << " " << act << " " << o << "," << j;
        }
      // The stored zeros are zero - 1.
      const auto iz = pk::unpack_cols(t.qzeros.data(), t.n_groups, 64, bits);
      for (int g = 0; g < t.n_groups; ++g)
        for (int o = 0; o < 64; ++o)
          if (r.zero(o, g) >= 1.0f) {
            EXPECT_EQ(iz[g * 64 + o] + 1, static_cast<int>(r.zero(o, g)));
          }
    }
}

TEST(AwqPacking, GemmInterleaveOrder) {
  // Row of outputs 0..7 with code = output index: nibble i holds output ORDER[i].
  std::vector<std::int32_t> codes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const auto q = pk::awq_pack_gemm(codes.data(), 1, 16);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(u(q[0]), 0x75316420u);
  EXPECT_EQ(u(q[1]), 0xFDB9ECA8u);
  EXPECT_EQ(pk::awq_unpack_gemm(q.data(), 1, 16), codes);
  for (int m = 0; m < 8; ++m) EXPECT_EQ(pk::kAwqOrder[pk::kAwqReverse[m]], m);
  const auto codes2 = random_codes(24 * 64, 4, 9);
  const auto q2 = pk::awq_pack_gemm(codes2.data(), 24, 64);
  EXPECT_EQ(pk::awq_unpack_gemm(q2.data(), 24, 64), codes2);
}

TEST(AwqPacking, CheckpointDequantizesToAwqGrid) {
  nibble_test::LayerSpec s;
  s.out = 64;
  s.in = 256;
  const auto L = nibble_test::make_layer(s);
  Eigen::MatrixXf sc, zp;
  const Eigen::MatrixXf Q = nibble::rtn::awq_rtn(L.W, 4, 128, true, &sc, &zp);
  const auto t = pk::awq_pack(Q, sc, zp, 128);
  EXPECT_EQ(t.qweight.size(), static_cast<std::size_t>(256 * 64 / 8));
  EXPECT_EQ(t.qzeros.size(), static_cast<std::size_t>(2 * 64 / 8));
  const Eigen::MatrixXf D = pk::awq_dequantize(t);
  for (int j = 0; j < 256; ++j)
    for (int o = 0; o < 64; ++o)
      ASSERT_NEAR(D(o, j), Q(o, j), 1e-3f * sc(o, j / 128) * 16.0f) << o << "," << j;
  // Zeros are stored without offset.
  const auto iz = pk::awq_unpack_gemm(t.qzeros.data(), 2, 64);
  for (int g = 0; g < 2; ++g)
    for (int o = 0; o < 64; ++o) EXPECT_EQ(iz[g * 64 + o], static_cast<int>(zp(o, g)));
}
