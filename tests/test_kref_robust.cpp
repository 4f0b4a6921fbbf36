// Robustness tests of the Q8_0 / Q8_K / Q4_K / Q5_K reference codecs: many random rows at
// magnitudes from 1e-30 to 1e30, zero sub-blocks, constants and exact rounding ties must not
// crash, must be deterministic and must dequantize within stated error bounds; the GPTQ grid
// helpers must reproduce the whole-row quantizers; dots must match a double-precision dot of
// the dequantized values; bad sizes must throw.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "nibble/formats/q4_k.hpp"
#include "nibble/formats/q5_k.hpp"
#include "nibble/formats/q8_0.hpp"
#include "nibble/formats/q8_k.hpp"

namespace {

using namespace nibble;

// One random 256-value block of kind `kind` at magnitude `scale`.
void make_block(std::mt19937& rng, int kind, float scale, float* x) {
  std::normal_distribution<float> g(0.f, 1.f);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::student_t_distribution<float> t(3.f);
  for (int i = 0; i < 256; ++i) {
    switch (kind) {
      case 0:
        x[i] = scale * g(rng);
        break;
      case 1:
        x[i] = scale * u(rng);
        break;
      case 2:
        x[i] = scale * t(rng);
        break;
      case 3:
        x[i] = scale * std::fabs(g(rng));
        break;  // all non-negative
      case 4:
        x[i] = -scale * std::fabs(g(rng));
        break;  // all non-positive
      case 5:
        x[i] = (i / 32) % 2 ? 0.f : scale * g(rng);
        break;  // zero sub-blocks
      case 6:
        x[i] = scale * 0.75f;
        break;  // constant
      case 7:
        x[i] = i == 77 ? scale * 40.f : scale * 0.01f * g(rng);
        break;  // one outlier
      default:
        x[i] = scale * static_cast<float>(static_cast<int>(u(rng) * 8)) * 0.5f;  // ties
    }
  }
}

constexpr int kKinds = 9;
const float kScales[] = {1e-30f, 1e-20f, 1e-6f, 1e-3f, 0.02f, 1.f, 7.f, 1e3f, 1e20f, 1e30f};

bool fp16_normal_range(float d) {
  return d >= 6.2e-5f && d <= 6.5e4f;
}

TEST(KrefRobust, Q8_0_RandomRows) {
  std::mt19937 rng(11);
  std::vector<float> x(256), y(256);
  std::vector<BlockQ8_0> b(8), b2(8);
  for (float s : kScales) {
    for (int kind = 0; kind < kKinds; ++kind) {
      for (int rep = 0; rep < 20; ++rep) {
        make_block(rng, kind, s, x.data());
        ref::quantize_q8_0(x.data(), b.data(), 256);
        ref::quantize_q8_0(x.data(), b2.data(), 256);
        ASSERT_EQ(std::memcmp(b.data(), b2.data(), 8 * sizeof(BlockQ8_0)), 0);
        ref::dequantize_q8_0(b.data(), y.data(), 256);
        double se = 0, sx = 0;
        for (int k = 0; k < 8; ++k) {
          float amax = 0;
          for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * k + i]));
          const float d = amax / 127;
          if (amax == 0) {
            for (int i = 0; i < 32; ++i) EXPECT_EQ(y[32 * k + i], 0.f);
          } else if (fp16_normal_range(d)) {
            // half a step, plus the fp16 rounding of d (2^-11 relative) times |q| <= 127
            const double bound = amax * (0.5 / 127 + 1.0 / 2048) * 1.001;
            for (int i = 0; i < 32; ++i) {
              const double e = std::fabs(double(y[32 * k + i]) - x[32 * k + i]);
              ASSERT_LE(e, bound) << "scale " << s << " kind " << kind << " i " << 32 * k + i;
              se += e * e;
              sx += double(x[32 * k + i]) * x[32 * k + i];
            }
          } else if (d > 6.5e4f) {
            EXPECT_EQ(b[k].d & 0x7FFF, 0x7C00) << "fp16 overflow stores inf, as ggml";
          } else {
            for (int i = 0; i < 32; ++i)  // tiny: d underflows, error stays below amax
              ASSERT_LE(std::fabs(double(y[32 * k + i]) - x[32 * k + i]), 1.01 * amax + 1e-7);
          }
        }
        if (sx > 0 && (kind <= 1 || kind == 3 || kind == 4)) {  // no heavy tails / outliers
          EXPECT_LT(std::sqrt(se / sx), 0.01) << "relative RMSE, scale " << s;
        }
      }
    }
  }
}

TEST(KrefRobust, Q8_0_TiesReferenceAwayFromZeroActivationEven) {
  // amax = 127 gives d = 1 and id = 1 in both quantizers, so x*id = x exactly.
  std::vector<float> x(32, 0.f);
  x[0] = 127.f;
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 0.5f;
  x[4] = -0.5f;
  x[5] = 4.5f;
  BlockQ8_0 r, a;
  ref::quantize_q8_0(x.data(), &r, 32);
  ref::quantize_q8_0_act(x.data(), &a, 32);
  EXPECT_EQ(fp16_to_fp32(r.d), 1.f);
  EXPECT_EQ(fp16_to_fp32(a.d), 1.f);
  const int want_ref[6] = {127, 3, -4, 1, -1, 5};
  const int want_act[6] = {127, 2, -4, 0, 0, 4};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(r.qs[i], want_ref[i]) << i;
    EXPECT_EQ(a.qs[i], want_act[i]) << i;
  }
}

TEST(KrefRobust, Q8_K_RandomRowsAndTies) {
  std::mt19937 rng(12);
  std::vector<float> x(256), y(256);
  BlockQ8_K b;
  for (float s : kScales) {
    for (int kind = 0; kind < kKinds; ++kind) {
      for (int rep = 0; rep < 20; ++rep) {
        make_block(rng, kind, s, x.data());
        ref::quantize_q8_K(x.data(), &b, 256);
        ref::dequantize_q8_K(&b, y.data(), 256);
        float amax = 0;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        for (int k = 0; k < 16; ++k) {
          int sum = 0;
          for (int i = 0; i < 16; ++i) sum += b.qs[16 * k + i];
          ASSERT_EQ(sum, b.bsums[k]);
        }
        const double bound = 0.5 * amax / 127 * (1 + 1e-5);
        for (int i = 0; i < 256; ++i)
          ASSERT_LE(std::fabs(double(y[i]) - x[i]), bound) << "scale " << s << " kind " << kind;
      }
    }
  }
  // Ties: max = -127 gives iscale = 1; round-half-even.
  std::vector<float> t(256, 0.f);
  t[0] = -127.f;
  t[1] = 2.5f;
  t[2] = 3.5f;
  t[3] = -0.5f;
  ref::quantize_q8_K(t.data(), &b, 256);
  EXPECT_EQ(b.d, 1.f);
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], 2);
  EXPECT_EQ(b.qs[2], 4);
  EXPECT_EQ(b.qs[3], 0);
}

// Per-block K-quant error checks: within the fp16 range the error of every value is bounded
// by a fraction of its 256-value block's range (empirical ggml behaviour: < 1/8 for Q4_K,
// < 1/16 for Q5_K; a broken codec is off by the whole range); outside it, no crash, and
// tiny blocks (d underflows) stay within their magnitude.
template <class Block, class Quant, class Dequant>
void kquant_random_rows(Quant quant, Dequant dequant, bool imatrix, double frac, double rel_rmse,
                        int seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> wdist(0.1f, 3.f);
  std::vector<float> x(256), y(256), qw(256);
  Block b, b2;
  for (float s : kScales) {
    for (int kind = 0; kind < kKinds; ++kind) {
      for (int rep = 0; rep < 12; ++rep) {
        make_block(rng, kind, s, x.data());
        for (float& w : qw) w = wdist(rng);
        quant(x.data(), &b, imatrix ? qw.data() : nullptr);
        quant(x.data(), &b2, imatrix ? qw.data() : nullptr);
        ASSERT_EQ(std::memcmp(&b, &b2, sizeof(Block)), 0);
        dequant(&b, y.data());
        const float lo = std::min(0.f, *std::min_element(x.begin(), x.end()));
        const float hi = *std::max_element(x.begin(), x.end());
        const double range = double(hi) - lo;
        const float amax = std::max(std::fabs(lo), std::fabs(hi));
        if (range / 945 >= 6.2e-5 && range / 945 <= 6.0e4 && kind != 7) {
          double se = 0, sx = 0;
          for (int i = 0; i < 256; ++i) {
            const double e = std::fabs(double(y[i]) - x[i]);
            ASSERT_LE(e, frac * range) << "scale " << s << " kind " << kind << " i " << i;
            se += e * e;
            sx += double(x[i]) * x[i];
          }
          if (kind <= 2) {
            EXPECT_LT(std::sqrt(se / sx), rel_rmse) << "scale " << s;
          }
        } else if (amax < 1e-5f) {
          for (int i = 0; i < 256; ++i)
            ASSERT_LE(std::fabs(double(y[i]) - x[i]), 2.0 * amax + 1e-5) << "scale " << s;
        } else if (kind == 7 && s == 1.f) {
          // outlier block: the outlier itself is reproduced within 1/8 of the range
          EXPECT_LE(std::fabs(double(y[77]) - x[77]), 0.125 * range);
        }
      }
    }
  }
}

TEST(KrefRobust, Q4_K_RandomRows) {
  kquant_random_rows<BlockQ4_K>(
      [](const float* x, BlockQ4_K* b, const float* w) {
        w ? ref::quantize_q4_K_imatrix(x, b, 256, w) : ref::quantize_q4_K(x, b, 256);
      },
      [](const BlockQ4_K* b, float* y) { ref::dequantize_q4_K(b, y, 256); }, false, 0.125, 0.12,
      21);
}
TEST(KrefRobust, Q4_K_Imatrix_RandomRows) {
  kquant_random_rows<BlockQ4_K>(
      [](const float* x, BlockQ4_K* b, const float* w) {
        w ? ref::quantize_q4_K_imatrix(x, b, 256, w) : ref::quantize_q4_K(x, b, 256);
      },
      [](const BlockQ4_K* b, float* y) { ref::dequantize_q4_K(b, y, 256); }, true, 0.125, 0.12, 22);
}
TEST(KrefRobust, Q5_K_RandomRows) {
  kquant_random_rows<BlockQ5_K>(
      [](const float* x, BlockQ5_K* b, const float* w) {
        w ? ref::quantize_q5_K_imatrix(x, b, 256, w) : ref::quantize_q5_K(x, b, 256);
      },
      [](const BlockQ5_K* b, float* y) { ref::dequantize_q5_K(b, y, 256); }, false, 0.0625, 0.06,
      23);
}
TEST(KrefRobust, Q5_K_Imatrix_RandomRows) {
  kquant_random_rows<BlockQ5_K>(
      [](const float* x, BlockQ5_K* b, const float* w) {
        w ? ref::quantize_q5_K_imatrix(x, b, 256, w) : ref::quantize_q5_K(x, b, 256);
      },
      [](const BlockQ5_K* b, float* y) { ref::dequantize_q5_K(b, y, 256); }, true, 0.0625, 0.06,
      24);
}

TEST(KrefRobust, GridHelpersReproduceQuantizers) {
  std::mt19937 rng(31);
  std::vector<float> x(256), y(256), qw(256);
  std::uniform_real_distribution<float> wdist(0.1f, 3.f);
  for (int rep = 0; rep < 200; ++rep) {
    make_block(rng, rep % kKinds, 1.f, x.data());
    for (float& w : qw) w = wdist(rng);
    const float* wp = rep % 2 ? qw.data() : nullptr;
    BlockQ4_K a4, b4;
    BlockQ5_K a5, b5;
    ref::q4_K_choose_scales(x.data(), wp, &a4);
    ref::q5_K_choose_scales(x.data(), wp, &a5);
    wp ? ref::quantize_q4_K_imatrix(x.data(), &b4, 256, wp)
       : ref::quantize_q4_K(x.data(), &b4, 256);
    wp ? ref::quantize_q5_K_imatrix(x.data(), &b5, 256, wp)
       : ref::quantize_q5_K(x.data(), &b5, 256);
    ASSERT_EQ(std::memcmp(&a4, &b4, sizeof a4), 0);
    ASSERT_EQ(std::memcmp(&a5, &b5, sizeof a5), 0);
    // Re-rounding every value on the chosen grid reproduces the stored levels (sub-blocks with
    // a zero scale keep the search levels in ggml, so they are skipped).
    BlockQ4_K c4 = a4;
    BlockQ5_K c5 = a5;
    ref::dequantize_q4_K(&a4, y.data(), 256);
    for (int i = 0; i < 256; ++i) {
      float s, m;
      ref::q4_K_grid(a4, i / 32, &s, &m);
      EXPECT_EQ(y[i], s * float(ref::q4_K_get_q(a4, i)) - m);
      if (s != 0) ref::q4_K_set_q(c4, i, ref::kquant_round(x[i], s, m, 15));
      ref::q5_K_grid(a5, i / 32, &s, &m);
      if (s != 0) ref::q5_K_set_q(c5, i, ref::kquant_round(x[i], s, m, 31));
    }
    ASSERT_EQ(std::memcmp(&a4, &c4, sizeof a4), 0) << rep;
    ASSERT_EQ(std::memcmp(&a5, &c5, sizeof a5), 0) << rep;
    ref::dequantize_q5_K(&a5, y.data(), 256);
    for (int i = 0; i < 256; ++i) {
      float s, m;
      ref::q5_K_grid(a5, i / 32, &s, &m);
      EXPECT_EQ(y[i], s * float(ref::q5_K_get_q(a5, i)) - m);
    }
  }
  // get/set round trip on every position and level
  BlockQ5_K z{};
  for (int i = 0; i < 256; ++i) ref::q5_K_set_q(z, i, (i * 7) % 32);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(ref::q5_K_get_q(z, i), (i * 7) % 32);
  BlockQ4_K z4{};
  for (int i = 0; i < 256; ++i) ref::q4_K_set_q(z4, i, (i * 5) % 16);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(ref::q4_K_get_q(z4, i), (i * 5) % 16);
  // 6-bit pack/unpack round trip
  std::uint8_t ls[8], lm[8], packed[12];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::uint8_t((j * 29 + 5) % 64);
    lm[j] = std::uint8_t((j * 43 + 17) % 64);
  }
  ref::pack_scale_min_k4(ls, lm, packed);
  for (int j = 0; j < 8; ++j) {
    std::uint8_t sc, m;
    ref::get_scale_min_k4(j, packed, &sc, &m);
    EXPECT_EQ(sc, ls[j]);
    EXPECT_EQ(m, lm[j]);
  }
}

// Random blocks (all byte patterns of the quants, sane fp16 scales) against a double dot of
// the dequantized values: |dot - exact| <= 1e-5 * sum |products| (float accumulation).
TEST(KrefRobust, DotsMatchDequantizedDouble) {
  std::mt19937 rng(41);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> dd(-2.f, 2.f);
  const int nb = 4, n = 256 * nb;
  std::vector<float> fw(n), fa(n);
  auto check = [&](float got, const char* what) {
    double s = 0, as = 0;
    for (int i = 0; i < n; ++i) {
      s += double(fw[i]) * fa[i];
      as += std::fabs(double(fw[i]) * fa[i]);
    }
    ASSERT_LE(std::fabs(got - s), 1e-5 * as + 1e-30) << what;
  };
  for (int rep = 0; rep < 200; ++rep) {
    std::vector<BlockQ4_K> w4(nb);
    std::vector<BlockQ5_K> w5(nb);
    std::vector<BlockQ8_K> a(nb);
    for (int b = 0; b < nb; ++b) {
      auto* p4 = reinterpret_cast<std::uint8_t*>(&w4[b]);
      auto* p5 = reinterpret_cast<std::uint8_t*>(&w5[b]);
      for (std::size_t k = 0; k < sizeof(BlockQ4_K); ++k) p4[k] = std::uint8_t(byte(rng));
      for (std::size_t k = 0; k < sizeof(BlockQ5_K); ++k) p5[k] = std::uint8_t(byte(rng));
      w4[b].d = fp32_to_fp16(dd(rng));
      w4[b].dmin = fp32_to_fp16(dd(rng));
      w5[b].d = fp32_to_fp16(dd(rng));
      w5[b].dmin = fp32_to_fp16(dd(rng));
      a[b].d = dd(rng);
      for (int i = 0; i < 256; ++i) a[b].qs[i] = std::int8_t(byte(rng) - 128);  // incl. -128
      for (int k = 0; k < 16; ++k) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += a[b].qs[16 * k + i];
        a[b].bsums[k] = std::int16_t(s);
      }
    }
    ref::dequantize_q8_K(a.data(), fa.data(), n);
    ref::dequantize_q4_K(w4.data(), fw.data(), n);
    check(ref::dot_q4_K_q8_K(n, w4.data(), a.data()), "q4_K");
    ref::dequantize_q5_K(w5.data(), fw.data(), n);
    check(ref::dot_q5_K_q8_K(n, w5.data(), a.data()), "q5_K");

    std::vector<BlockQ8_0> x0(n / 32), y0(n / 32);
    for (int b = 0; b < n / 32; ++b) {
      x0[b].d = fp32_to_fp16(dd(rng));
      y0[b].d = fp32_to_fp16(dd(rng));
      for (int i = 0; i < 32; ++i) {
        x0[b].qs[i] = std::int8_t(byte(rng) - 128);
        y0[b].qs[i] = std::int8_t(byte(rng) - 128);
      }
    }
    ref::dequantize_q8_0(x0.data(), fw.data(), n);
    ref::dequantize_q8_0(y0.data(), fa.data(), n);
    check(ref::dot_q8_0_q8_0(n, x0.data(), y0.data()), "q8_0");
  }
}

TEST(KrefRobust, BadSizesThrow) {
  std::vector<float> x(512, 1.f);
  std::vector<BlockQ4_K> b4(2);
  std::vector<BlockQ5_K> b5(2);
  std::vector<BlockQ8_0> b0(16);
  std::vector<BlockQ8_K> bk(2);
  EXPECT_THROW(ref::quantize_q8_0(x.data(), b0.data(), 33), Error);
  EXPECT_THROW(ref::quantize_q8_0_act(x.data(), b0.data(), -32), Error);
  EXPECT_THROW(ref::quantize_q8_K(x.data(), bk.data(), 100), Error);
  EXPECT_THROW(ref::quantize_q4_K(x.data(), b4.data(), 300), Error);
  EXPECT_THROW(ref::quantize_q5_K(x.data(), b5.data(), 128), Error);
  EXPECT_THROW(ref::quantize_q4_K_imatrix(x.data(), b4.data(), 256, nullptr), Error);
  EXPECT_THROW(ref::dot_q4_K_q8_K(255, b4.data(), bk.data()), Error);
  EXPECT_NO_THROW(ref::quantize_q4_K(x.data(), b4.data(), 0));
}

}  // namespace
