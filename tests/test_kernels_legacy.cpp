// Kernels of the ggml formats q4_0, q4_1, q5_0, q5_1, iq4_nl, mxfp4 (against Q8_0 / Q8_1
// activations), q2_K, q3_K, iq4_xs (against Q8_K), and q8_1 / bf16 (fp32 activations) on every
// runnable ISA table variant (KernelTest fixture of kernel_test_util.hpp):
//  - dequantizers bit-identical to the scalar reference codecs (nibble/formats/*.hpp, themselves
//    checked against ggml in test_golden_legacy.cpp);
//  - the Q8_1 activation quantizer byte-identical to nibble::ref::quantize_q8_1_act;
//  - exact integer sums: blocks with power-of-two scales and small activations, where every float
//    step of any correct kernel is exact, must give the exact value of ggml's integer formula
//    (computed here in double from the block fields by this file's own decoders) bit for bit,
//    GEMV and GEMM, on every ISA;
//  - quantized random data: GEMM/GEMV within rtol 1e-5 of that exact value (relative to the sum
//    of |terms|), and the exact value itself against Eigen in double on the library's dequantized
//    weights and activations (the decoders of this file against the reference codecs); row
//    sub-ranges give the same bits as the full range; tails: rows 1, 3, 17, n = 1, 2, 7, 64,
//    block counts that are not a multiple of a SIMD step;
//  - the public gemv/gemm with a Context on each runnable Isa, threads 1 to 3, and its argument
//    checks.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "nibble/formats/q8_1.hpp"
#include "nibble/formats/q8_k.hpp"

namespace {

using nibble::Format;
using nibble::test::KernelTest;
namespace nt = nibble::test;

constexpr double kRtol = 1e-5;
const Format kFormats[] = {Format::q4_0,  Format::q4_1, Format::q5_0,   Format::q5_1,
                           Format::q8_1,  Format::bf16, Format::iq4_nl, Format::iq4_xs,
                           Format::mxfp4, Format::q2_K, Format::q3_K};
/// The formats with integer (quantized-activation) kernels.
const Format kIntFormats[] = {Format::q4_0,  Format::q4_1,   Format::q5_0,
                              Format::q5_1,  Format::iq4_nl, Format::iq4_xs,
                              Format::mxfp4, Format::q2_K,   Format::q3_K};

std::string fname(Format f) {
  return nibble::traits(f).name;
}

std::vector<std::uint8_t> ref_quantize(Format f, const std::vector<float>& w, std::int64_t rows,
                                       std::int64_t cols) {
  std::vector<std::uint8_t> q(nibble::row_bytes(f, cols) * static_cast<std::size_t>(rows));
  nibble::quantize(f, w.data(), rows, cols, q.data());  // the scalar reference codecs
  return q;
}

std::vector<float> ref_dequant(Format f, const std::vector<std::uint8_t>& q, std::int64_t rows,
                               std::int64_t cols) {
  std::vector<float> y(static_cast<std::size_t>(rows * cols));
  nibble::dequantize(f, q.data(), rows, cols, y.data());
  return y;
}

// ---- this file's decoders (from docs/formats.md) and the exact integer formula ----

float h2f(const std::uint8_t* p) {
  nibble::fp16_t h;
  std::memcpy(&h, p, 2);
  return nibble::fp16_to_fp32(h);
}

const int kIq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int kMx[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/// Integer weights of a 32-value block: value j = d * v[j] (+ m).
void int32_block(Format f, const std::uint8_t* b, int v[32], double* d, double* m) {
  *m = 0;
  std::uint32_t qh = 0;
  const std::uint8_t* qs = nullptr;
  int off = 0;
  switch (f) {
    case Format::q4_0:
      qs = b + 2, off = 8;
      break;
    case Format::q4_1:
      qs = b + 4, *m = h2f(b + 2);
      break;
    case Format::q5_0:
      std::memcpy(&qh, b + 2, 4), qs = b + 6, off = 16;
      break;
    case Format::q5_1:
      std::memcpy(&qh, b + 4, 4), qs = b + 8, *m = h2f(b + 2);
      break;
    case Format::iq4_nl:
    case Format::mxfp4:
      qs = b + (f == Format::mxfp4 ? 1 : 2);
      break;
    default:
      ADD_FAILURE() << "not a 32-value format";
      return;
  }
  *d = f == Format::mxfp4 ? std::ldexp(1.0, int(b[0]) - 128) : h2f(b);
  for (int j = 0; j < 32; ++j) {
    int q = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
    q |= static_cast<int>((qh >> j) & 1u) << 4;
    v[j] = f == Format::iq4_nl ? kIq4[q] : f == Format::mxfp4 ? kMx[q] : q - off;
  }
}

/// ggml's integer dot of one weight row and one activation row, evaluated exactly (double), and
/// the sum of |terms| (the scale of the float rounding error).
struct Exact {
  double y = 0, mag = 0;
};

Exact exact_dot(Format f, const std::uint8_t* w, const std::uint8_t* a, std::int64_t cols) {
  Exact e;
  const Format af = nibble::traits(f).activation;
  if (af == Format::q8_0 || af == Format::q8_1) {
    const std::size_t ab = af == Format::q8_1 ? 36 : 34, aq = af == Format::q8_1 ? 4 : 2;
    const std::size_t wb = nibble::traits(f).block_bytes;
    for (std::int64_t b = 0; b < cols / 32; ++b, w += wb, a += ab) {
      int v[32];
      double d, m;
      int32_block(f, w, v, &d, &m);
      const auto* q = reinterpret_cast<const std::int8_t*>(a + aq);
      long isum = 0, iabs = 0;
      for (int j = 0; j < 32; ++j) {
        isum += long(v[j]) * q[j];
        iabs += std::labs(long(v[j]) * q[j]);
      }
      const double da = h2f(a);
      e.y += d * da * double(isum);
      e.mag += std::fabs(d * da) * double(iabs);
      if (af == Format::q8_1) {
        e.y += m * h2f(a + 2);
        e.mag += std::fabs(m * h2f(a + 2));
      }
    }
    return e;
  }
  // Q8_K activations: d (float), qs[256], bsums[16].
  for (std::int64_t b = 0; b < cols / 256; ++b, a += sizeof(nibble::BlockQ8_K)) {
    float daf;
    std::memcpy(&daf, a, 4);
    const double da = daf;
    const auto* q = reinterpret_cast<const std::int8_t*>(a + 4);
    std::int16_t bs[16];
    std::memcpy(bs, a + 260, 32);
    if (f == Format::q2_K) {
      const std::uint8_t* x = w + 84 * b;
      const double d = h2f(x + 80), dmin = h2f(x + 82);
      for (int sb = 0; sb < 16; ++sb) {
        long s = 0, sa = 0;
        for (int t = 0; t < 16; ++t) {
          const int vv = 16 * sb + t;
          const int l = (x[16 + 32 * (vv / 128) + vv % 32] >> (2 * ((vv % 128) / 32))) & 3;
          s += long(l) * q[vv];
          sa += std::labs(long(l) * q[vv]);
        }
        const int sc = x[sb] & 15, mn = x[sb] >> 4;
        e.y += d * da * sc * double(s) - dmin * da * mn * double(bs[sb]);
        e.mag += std::fabs(d * da) * sc * double(sa) + std::fabs(dmin * da * mn * bs[sb]);
      }
    } else if (f == Format::q3_K) {
      const std::uint8_t* x = w + 110 * b;
      const std::uint8_t* sc12 = x + 96;
      const double d = h2f(x + 108);
      for (int sb = 0; sb < 16; ++sb) {
        const int lo = sb < 8 ? (sc12[sb] & 15) : (sc12[sb - 8] >> 4);
        const int s6 = (lo | (((sc12[8 + sb % 4] >> (2 * (sb / 4))) & 3) << 4)) - 32;
        long s = 0, sa = 0;
        for (int t = 0; t < 16; ++t) {
          const int vv = 16 * sb + t;
          const int l = (x[32 + 32 * (vv / 128) + vv % 32] >> (2 * ((vv % 128) / 32))) & 3;
          const int h = (x[vv % 32] >> (vv / 32)) & 1;
          const int val = l - (h ? 0 : 4);
          s += long(val) * q[vv];
          sa += std::labs(long(val) * q[vv]);
        }
        e.y += d * da * s6 * double(s);
        e.mag += std::fabs(d * da * s6) * double(sa);
      }
    } else if (f == Format::iq4_xs) {
      const std::uint8_t* x = w + 136 * b;
      const double d = h2f(x);
      const int sh = x[2] | (x[3] << 8);
      for (int ib = 0; ib < 8; ++ib) {
        const int ls = ((x[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
        long s = 0, sa = 0;
        for (int j = 0; j < 32; ++j) {
          const std::uint8_t c = x[8 + 16 * ib + j % 16];
          const int val = kIq4[j < 16 ? (c & 15) : (c >> 4)];
          s += long(val) * q[32 * ib + j];
          sa += std::labs(long(val) * q[32 * ib + j]);
        }
        e.y += d * da * (ls - 32) * double(s);
        e.mag += std::fabs(d * da * (ls - 32)) * double(sa);
      }
    } else {
      ADD_FAILURE() << "no exact formula for " << fname(f);
    }
  }
  return e;
}

/// Activation rows (plain blocks of the format's activation format) as fp32 values.
std::vector<float> dequant_act(Format f, const std::vector<std::uint8_t>& a, std::int64_t n,
                               std::int64_t cols) {
  const Format af = nibble::traits(f).activation;
  std::vector<float> x(static_cast<std::size_t>(n * cols));
  if (af == Format::q8_K) {
    for (std::size_t b = 0; b < x.size() / 256; ++b) {
      nibble::BlockQ8_K blk;
      std::memcpy(&blk, a.data() + b * sizeof blk, sizeof blk);
      for (int i = 0; i < 256; ++i) x[b * 256 + i] = blk.d * static_cast<float>(blk.qs[i]);
    }
  } else {
    const std::size_t ab = af == Format::q8_1 ? 36 : 34, aq = af == Format::q8_1 ? 4 : 2;
    for (std::size_t b = 0; b < x.size() / 32; ++b) {
      const float d = h2f(a.data() + b * ab);
      for (int i = 0; i < 32; ++i)
        x[b * 32 + i] = static_cast<float>(static_cast<std::int8_t>(a[b * ab + aq + i])) * d;
    }
  }
  return x;
}

/// Expects got (n x rows, as gemm writes it) within rtol * mag of the exact formula, and, when
/// `bitwise`, equal to it.
void expect_exact(Format f, const std::vector<float>& got, const std::uint8_t* W,
                  const std::uint8_t* A, std::size_t arb, std::int64_t rows, std::int64_t cols,
                  std::int64_t n, bool bitwise, const std::string& what) {
  const std::size_t wrb = nibble::row_bytes(f, cols);
  int bad = 0;
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t r = 0; r < rows; ++r) {
      const Exact e = exact_dot(f, W + r * wrb, A + j * arb, cols);
      const float g = got[static_cast<std::size_t>(j * rows + r)];
      const bool ok = bitwise ? g == static_cast<float>(e.y) && float(e.y) == e.y
                              : std::fabs(g - e.y) <= kRtol * e.mag;
      if (!ok && ++bad <= 5)
        ADD_FAILURE() << what << ": row " << r << " col " << j << " got " << g << " exact " << e.y
                      << " (mag " << e.mag << ")";
    }
  EXPECT_EQ(bad, 0) << what;
}

// ---- random blocks whose float arithmetic is exact (power-of-two scales, small values) ----

std::uint16_t f2h(float x) {
  const nibble::fp16_t h = nibble::fp32_to_fp16(x);
  std::uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

std::vector<std::uint8_t> exact_weights(Format f, std::int64_t rows, std::int64_t cols,
                                        std::uint32_t seed) {
  std::mt19937 g(seed);
  const std::size_t bb = nibble::traits(f).block_bytes;
  const std::size_t nb = static_cast<std::size_t>(rows * cols / nibble::traits(f).block_elems);
  std::vector<std::uint8_t> w(nb * bb);
  for (auto& x : w) x = static_cast<std::uint8_t>(g());
  std::uniform_int_distribution<int> mk(-50, 50);
  for (std::size_t b = 0; b < nb; ++b) {
    std::uint8_t* p = w.data() + b * bb;
    const std::uint16_t d = f2h((g() & 1 ? -1.0f : 1.0f) / 16.0f);
    const std::uint16_t m = f2h(static_cast<float>(mk(g)) / 64.0f);
    switch (f) {
      case Format::q4_1:
      case Format::q5_1:
        std::memcpy(p + 2, &m, 2);
        [[fallthrough]];
      case Format::q4_0:
      case Format::q5_0:
      case Format::iq4_nl:
      case Format::iq4_xs:
        std::memcpy(p, &d, 2);
        break;
      case Format::mxfp4:
        p[0] = static_cast<std::uint8_t>(122 + g() % 5);  // 2^-6 .. 2^-2
        break;
      case Format::q2_K: {
        const std::uint16_t dm = f2h(1.0f / 64.0f);
        std::memcpy(p + 80, &d, 2);
        std::memcpy(p + 82, &dm, 2);
        break;
      }
      case Format::q3_K:
        std::memcpy(p + 108, &d, 2);
        break;
      default:
        ADD_FAILURE() << "no exact weights for " << fname(f);
    }
  }
  return w;
}

/// Activation blocks (plain) with scale 2^-5 and quants in [-lim, lim] (Q8_1: s exact).
std::vector<std::uint8_t> exact_acts(Format f, std::int64_t n, std::int64_t cols, int lim,
                                     std::uint32_t seed, std::size_t* arb) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> qd(-lim, lim);
  const Format af = nibble::traits(f).activation;
  *arb = nibble::row_bytes(af, cols);
  std::vector<std::uint8_t> a(*arb * static_cast<std::size_t>(n));
  if (af == Format::q8_K) {
    for (std::size_t b = 0; b < a.size() / sizeof(nibble::BlockQ8_K); ++b) {
      nibble::BlockQ8_K blk{};
      blk.d = 1.0f / 32.0f;
      for (int i = 0; i < 256; ++i) blk.qs[i] = static_cast<std::int8_t>(qd(g));
      for (int k = 0; k < 16; ++k) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += blk.qs[16 * k + i];
        blk.bsums[k] = static_cast<std::int16_t>(s);
      }
      std::memcpy(a.data() + b * sizeof blk, &blk, sizeof blk);
    }
    return a;
  }
  const std::size_t ab = af == Format::q8_1 ? 36 : 34;
  for (std::size_t b = 0; b < a.size() / ab; ++b) {
    std::uint8_t* p = a.data() + b * ab;
    const std::uint16_t d = f2h(1.0f / 32.0f);
    std::memcpy(p, &d, 2);
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = qd(g);
      sum += q;
      p[(ab == 36 ? 4 : 2) + i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
    }
    if (ab == 36) {
      const std::uint16_t s = f2h(static_cast<float>(sum) / 32.0f);  // exact: |sum| < 2048
      std::memcpy(p + 2, &s, 2);
    }
  }
  return a;
}

struct Shape {
  std::int64_t rows, cols, n;
};

std::vector<Shape> shapes_for(Format f) {
  if (nibble::traits(f).block_elems == 256)
    return {{1, 256, 1},   {3, 256, 2}, {17, 512, 3},  {16, 256, 64}, {64, 4096, 1},
            {40, 1024, 9}, {3, 768, 7}, {33, 1280, 2}, {17, 256, 64}};
  std::vector<Shape> s = {{1, 32, 1},    {3, 32, 2},    {17, 128, 3},  {33, 256, 7},
                          {16, 64, 64},  {64, 4096, 1}, {40, 1024, 9}, {5, 96, 3},
                          {17, 160, 64}, {3, 4128, 1},  {19, 224, 2}};
  if (f == Format::bf16) {
    s.push_back({5, 67, 3});  // cols not a multiple of the 32-value step
    s.push_back({7, 1, 2});
    // GEMV row groups of 4 or 8 (FloatGemv::four_streams) with a tail, and with a column tail.
    s.push_back({21, 320, 1});
    s.push_back({13, 67, 1});
  }
  return s;
}

class LegacyKernels : public KernelTest {};

TEST_P(LegacyKernels, DequantMatchesReference) {
  for (Format f : kFormats) {
    const auto& k = nt::fmt_kernels(table(), f);
    ASSERT_NE(k.dequant, nullptr) << fname(f);
    for (std::int64_t cols : {std::int64_t{256}, std::int64_t{4096}, std::int64_t{3 * 256}}) {
      const std::int64_t rows = 3;
      std::vector<float> w = nt::random_normal(static_cast<std::size_t>(rows * cols), 21, 0.05f);
      w[5] = 0.0f;
      w[6] = -0.0f;
      const auto q = ref_quantize(f, w, rows, cols);
      std::vector<float> got(w.size(), std::nanf(""));
      k.dequant(q.data(), rows * cols, got.data());
      nt::expect_bitwise_equal(got, ref_dequant(f, q, rows, cols),
                               variant_name() + " dequant " + fname(f));
    }
    if (f == Format::bf16) continue;
    // Random block bytes (every code, every scale pattern), odd block counts.
    for (std::int64_t nblk : {1, 3, 5, 16}) {
      const std::int64_t cols = nblk * nibble::traits(f).block_elems;
      std::mt19937 g(77 + static_cast<std::uint32_t>(nblk));
      std::vector<std::uint8_t> q(nibble::row_bytes(f, cols));
      for (auto& x : q) x = static_cast<std::uint8_t>(g());
      // Keep fp16 scale fields finite (random exponent bits may say Inf/NaN).
      const std::size_t bb = nibble::traits(f).block_bytes;
      for (std::size_t b = 0; b < q.size() / bb; ++b) {
        std::uint8_t* p = q.data() + b * bb;
        const std::size_t hoff = f == Format::q2_K ? 80 : f == Format::q3_K ? 108 : 0;
        const int nh =
            f == Format::mxfp4                                                                 ? 0
            : f == Format::q4_1 || f == Format::q5_1 || f == Format::q8_1 || f == Format::q2_K ? 2
                                                                                               : 1;
        for (int h = 0; h < nh; ++h) p[hoff + 2 * h + 1] &= 0x3F;
      }
      std::vector<float> got(static_cast<std::size_t>(cols), std::nanf(""));
      k.dequant(q.data(), cols, got.data());
      nt::expect_bitwise_equal(got, ref_dequant(f, q, 1, cols),
                               variant_name() + " dequant random blocks " + fname(f));
    }
  }
}

TEST_P(LegacyKernels, Q8_1ActivationQuantizer) {
  ASSERT_NE(table().quantize_act_q8_1, nullptr);
  std::vector<std::vector<float>> cases;
  cases.push_back(nt::random_normal(4096, 3));
  cases.push_back(std::vector<float>(256, 0.0f));
  std::vector<float> ties(256);
  for (int i = 0; i < 256; ++i) ties[i] = static_cast<float>(i % 64 - 32) * 0.5f;  // x.5 grid
  cases.push_back(ties);
  std::vector<float> mixed = nt::random_uniform(1024, 4, -1e-3f, 1e-3f);
  mixed[100] = 3e4f;
  mixed[333] = -7e-30f;
  cases.push_back(mixed);
  for (const auto& x : cases) {
    const std::int64_t n = static_cast<std::int64_t>(x.size());
    std::vector<std::uint8_t> got(static_cast<std::size_t>(n / 32) * 36), want(got.size());
    table().quantize_act_q8_1(x.data(), n, got.data());
    nibble::ref::quantize_q8_1_act(x.data(), reinterpret_cast<nibble::BlockQ8_1*>(want.data()), n);
    nt::expect_bytes_equal(got, want, variant_name() + " quantize_act_q8_1");
  }
}

// Power-of-two scales, small activations: every float step is exact, so GEMV and GEMM must
// return the exact integer formula bit for bit (a wrong integer sum cannot hide in rounding).
TEST_P(LegacyKernels, ExactIntegerSums) {
  for (Format f : kIntFormats) {
    const bool k256 = nibble::traits(f).block_elems == 256;
    const int lim = f == Format::iq4_xs ? 4 : 20;
    const Shape shapes[] = {{1, k256 ? 256 : 32, 1},    {3, k256 ? 512 : 96, 1},
                            {17, k256 ? 512 : 256, 1},  {5, k256 ? 256 : 160, 2},
                            {17, k256 ? 512 : 224, 7},  {33, k256 ? 256 : 256, 64},
                            {16, k256 ? 512 : 128, 64}, {4, k256 ? 256 : 480, 3}};
    int si = 0;
    for (const Shape& s : shapes) {
      const std::string what = variant_name() + " exact " + fname(f) + " " +
                               std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                               " n=" + std::to_string(s.n);
      const auto W = exact_weights(f, s.rows, s.cols, 100u + static_cast<std::uint32_t>(si));
      std::size_t arb = 0;
      const auto A = exact_acts(f, s.n, s.cols, lim, 200u + static_cast<std::uint32_t>(si), &arb);
      const auto got =
          nt::gemm_raw(table(), f, W.data(), s.rows, s.cols, A.data(), arb, s.n, 0, s.rows);
      expect_exact(f, got, W.data(), A.data(), arb, s.rows, s.cols, s.n, true, what);
      ++si;
    }
  }
}

TEST_P(LegacyKernels, GemmMatchesExactAndEigen) {
  for (Format f : kFormats) {
    ASSERT_NE(nt::fmt_kernels(table(), f).gemm, nullptr) << fname(f);
    const Format af = nibble::traits(f).activation;
    int si = 0;
    for (const Shape& s : shapes_for(f)) {
      const std::string what = variant_name() + " " + fname(f) + " " + std::to_string(s.rows) +
                               "x" + std::to_string(s.cols) + " n=" + std::to_string(s.n);
      const auto w = nt::random_normal(static_cast<std::size_t>(s.rows * s.cols),
                                       static_cast<std::uint32_t>(s.rows + 7 * s.n + si), 0.05f);
      const auto x = nt::random_normal(static_cast<std::size_t>(s.n * s.cols),
                                       static_cast<std::uint32_t>(s.cols + s.n));
      ++si;
      const auto q = ref_quantize(f, w, s.rows, s.cols);
      const auto wd = ref_dequant(f, q, s.rows, s.cols);
      std::size_t arb = 0;
      const auto a = nt::quantize_act(table(), f, x.data(), s.n, s.cols, &arb);
      const auto got =
          nt::gemm_raw(table(), f, q.data(), s.rows, s.cols, a.data(), arb, s.n, 0, s.rows);
      if (af == Format::f32) {
        const nt::RefProduct ref = nt::eigen_reference(wd.data(), s.rows, s.cols, x.data(), s.n);
        nt::expect_close(got, ref, kRtol, 0.0, what + " vs Eigen");
      } else {
        expect_exact(f, got, q.data(), a.data(), arb, s.rows, s.cols, s.n, false,
                     what + " vs exact");
        // The exact formula against Eigen on the dequantized weights and activations: equal up
        // to double rounding, except Q8_1's s = fp16(d * sum) (the min term: 2^-11 relative),
        // Q4_1 / Q5_1 / Q2_K dequantized values that are rounded sums (d * q + m), IQ4_XS's
        // rounded products d * (ls - 32) * K and Q8_K's fp32 scale times q (2^-24 relative).
        const auto xd = dequant_act(f, a, s.n, s.cols);
        const nt::RefProduct ref = nt::eigen_reference(wd.data(), s.rows, s.cols, xd.data(), s.n);
        const std::size_t wrb = nibble::row_bytes(f, s.cols);
        const double rel = af == Format::q8_1                        ? 1e-3
                           : af == Format::q8_K || f == Format::q2_K ? 1e-6
                                                                     : 1e-12;
        for (std::int64_t j = 0; j < s.n; ++j)
          for (std::int64_t r = 0; r < s.rows; ++r) {
            const Exact e = exact_dot(f, q.data() + r * wrb, a.data() + j * arb, s.cols);
            const double ey = ref.y[static_cast<std::size_t>(j * s.rows + r)];
            const double tol = rel * e.mag + 1e-30;
            ASSERT_LE(std::fabs(e.y - ey), tol) << what << " exact formula vs Eigen, r " << r;
          }
      }
      if (s.rows >= 3) {
        const std::int64_t r0 = 1, r1 = s.rows - 1;
        const auto part =
            nt::gemm_raw(table(), f, q.data(), s.rows, s.cols, a.data(), arb, s.n, r0, r1);
        for (std::int64_t j = 0; j < s.n; ++j) {
          for (std::int64_t r = 0; r < s.rows; ++r) {
            const float p = part[static_cast<std::size_t>(j * s.rows + r)];
            const float g = got[static_cast<std::size_t>(j * s.rows + r)];
            if (r >= r0 && r < r1) {
              ASSERT_EQ(std::memcmp(&p, &g, 4), 0) << what << " row range, r " << r << " j " << j;
            } else {
              ASSERT_TRUE(std::isnan(p)) << what << " wrote outside its row range, r " << r;
            }
          }
        }
      }
    }
  }
}

// The public entry points with this variant's Isa (threads 1 to 3).
TEST_P(LegacyKernels, PublicGemvGemm) {
  for (Format f : kFormats) {
    const Format af = nibble::traits(f).activation;
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{2}, std::int64_t{7}}) {
      const std::int64_t rows = 37, cols = 512;  // a multiple of every block size
      const auto w = nt::random_normal(static_cast<std::size_t>(rows * cols), 5, 0.1f);
      const auto x = nt::random_normal(static_cast<std::size_t>(n * cols), 6);
      const auto q = ref_quantize(f, w, rows, cols);
      const auto wd = ref_dequant(f, q, rows, cols);
      // Reference: the activations as the library quantizes them (scalar table, byte-identical
      // on every ISA), the exact formula; fp32-activation formats: Eigen.
      std::size_t arb = 0;
      const auto a = nt::quantize_act(nt::scalar_table(), f, x.data(), n, cols, &arb);
      const nt::RefProduct ref = nt::eigen_reference(wd.data(), rows, cols, x.data(), n);
      for (int threads : {1, 2, 3}) {
        nibble::Context ctx;
        ctx.isa = isa();
        ctx.threads = threads;
        std::vector<float> y(static_cast<std::size_t>(rows * n));
        const std::string what = variant_name() + " public " + fname(f) +
                                 " n=" + std::to_string(n) + " threads " + std::to_string(threads);
        if (n == 1) {
          nibble::gemv(ctx, f, q.data(), rows, cols, x.data(), y.data());
        } else {
          nibble::gemm(ctx, f, q.data(), rows, cols, x.data(), n, y.data());
        }
        if (af == Format::f32) {
          nt::expect_close(y, ref, kRtol, 0.0, what);
        } else {
          expect_exact(f, y, q.data(), a.data(), arb, rows, cols, n, false, what);
        }
      }
    }
  }
}

TEST_P(LegacyKernels, BadInputThrows) {
  nibble::Context ctx;
  ctx.isa = isa();
  std::vector<float> x(64, 1.0f), y(64);
  std::vector<std::uint8_t> q(4096);
  for (Format f : kFormats) {
    if (nibble::traits(f).block_elems == 1) continue;
    // cols not a multiple of the block size
    EXPECT_THROW(nibble::quantize(ctx, f, x.data(), 1, 33, q.data()), nibble::Error);
    EXPECT_THROW(nibble::dequantize(ctx, f, q.data(), 1, 48, y.data()), nibble::Error);
    EXPECT_THROW(nibble::gemv(ctx, f, q.data(), 2, 40, x.data(), y.data()), nibble::Error);
    EXPECT_THROW(nibble::gemv(ctx, f, q.data(), -1, 64, x.data(), y.data()), nibble::Error);
    EXPECT_THROW((void)nibble::row_bytes(f, 31), nibble::Error);
  }
  for (Format f : kFormats) {
    // NaN / Inf inputs, null pointers, negative importance
    std::vector<float> bad(256, 0.5f), xx(256, 1.0f), yy(256);
    bad[17] = std::nanf("");
    EXPECT_THROW(nibble::quantize(ctx, f, bad.data(), 1, 256, q.data()), nibble::Error);
    bad[17] = INFINITY;
    EXPECT_THROW(nibble::gemv(ctx, f, q.data(), 1, 256, bad.data(), yy.data()), nibble::Error);
    EXPECT_THROW(nibble::quantize(ctx, f, xx.data(), 1, 256, nullptr), nibble::Error);
    EXPECT_THROW(nibble::gemv(ctx, f, nullptr, 1, 256, xx.data(), yy.data()), nibble::Error);
    std::vector<float> imp(256, 1.0f);
    imp[3] = -1.0f;
    EXPECT_THROW(nibble::quantize(ctx, f, xx.data(), 1, 256, q.data(), imp.data()), nibble::Error);
  }
  // One past the last enumerator is not a format.
  const auto past = static_cast<Format>(static_cast<int>(nibble::kLastFormat) + 1);
  EXPECT_THROW(nibble::gemv(ctx, past, q.data(), 1, 32, x.data(), y.data()), nibble::Error);
  EXPECT_THROW(nibble::quantize(ctx, past, x.data(), 1, 32, q.data()), nibble::Error);
  EXPECT_THROW((void)nibble::row_bytes(past, 32), nibble::Error);
}

NIBBLE_INSTANTIATE_KERNEL_TEST(LegacyKernels);

// GGUF traits of the new enumerators (ggml.h type ids, ggml-common.h block sizes) and the
// activation format of each dot product (ggml-cpu's vec_dot_type; bf16 and q8_1: fp32).
TEST(LegacyTraits, MatchGgml) {
  struct T {
    Format f;
    const char* name;
    std::int64_t elems;
    std::size_t bytes;
    int id;
    Format act;
  };
  const T want[] = {{Format::q4_0, "q4_0", 32, 18, 2, Format::q8_0},
                    {Format::q4_1, "q4_1", 32, 20, 3, Format::q8_1},
                    {Format::q5_0, "q5_0", 32, 22, 6, Format::q8_0},
                    {Format::q5_1, "q5_1", 32, 24, 7, Format::q8_1},
                    {Format::q2_K, "q2_K", 256, 84, 10, Format::q8_K},
                    {Format::q3_K, "q3_K", 256, 110, 11, Format::q8_K},
                    {Format::iq4_nl, "iq4_nl", 32, 18, 20, Format::q8_0},
                    {Format::iq4_xs, "iq4_xs", 256, 136, 23, Format::q8_K},
                    {Format::mxfp4, "mxfp4", 32, 17, 39, Format::q8_0},
                    {Format::bf16, "bf16", 1, 2, 30, Format::f32},
                    {Format::q8_1, "q8_1", 32, 36, 9, Format::f32}};
  int expected_value = static_cast<int>(Format::fp4) + 1;
  for (const T& t : want) {
    EXPECT_EQ(static_cast<int>(t.f), expected_value++) << t.name;  // appended in this order
    EXPECT_STREQ(nibble::traits(t.f).name, t.name);
    EXPECT_EQ(nibble::traits(t.f).block_elems, t.elems) << t.name;
    EXPECT_EQ(nibble::traits(t.f).block_bytes, t.bytes) << t.name;
    EXPECT_EQ(nibble::traits(t.f).gguf_type, t.id) << t.name;
    EXPECT_EQ(nibble::traits(t.f).activation, t.act) << t.name;
    EXPECT_EQ(nibble::row_bytes(t.f, 4096), static_cast<std::size_t>(4096 / t.elems) * t.bytes);
  }
  EXPECT_EQ(sizeof(nibble::BlockQ4_0), 18u);
  EXPECT_EQ(sizeof(nibble::BlockQ4_1), 20u);
  EXPECT_EQ(sizeof(nibble::BlockQ5_0), 22u);
  EXPECT_EQ(sizeof(nibble::BlockQ5_1), 24u);
  EXPECT_EQ(sizeof(nibble::BlockQ8_1), 36u);
}

}  // namespace
