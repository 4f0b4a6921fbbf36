// nibble: NF4 / FP4 on packed (row-interleaved) weights (nibble/packed.hpp), x86 (AVX2, AVX-VNNI,
// AVX-512), written once over the ISA tag.
//
// Group block (16 x 36 bytes): the 16 rows' fp32 absmax, then code units 0..7: unit u holds code
// bytes 4u..4u+3 of the 16 rows (4 bytes per row), i.e. elements 8u..8u+7 of each row's block
// (byte j: element 8u + 2j in the high nibble, 8u + 2j + 1 in the low one). A register loaded at
// unit u holds one row per int32 lane (AVX-512: all 16 rows; 32-byte tags: 8), so the code-book
// lookups and the int16 dot products serve every row at once against activation pairs that are
// the same in every lane (broadcasts): no shuffles, no horizontal sums per row.
//
// The integer scheme of the plain GEMV (Nf4IntGemv, nf4-inl.hpp): the code book as int16
// (Nf4I16Book, round(value * kScale)), the activations rounded to int16 in a re-laid-out copy,
// products summed exactly in int32, then one float step per block. Here the activation scale is
// per block (d = largest |x| of the block / 8191), because the int32 sums are longer: four
// independent accumulators per register each take 16 products of |entry| <= 8191 by |x_q| <=
// 8191, and two of them are added before the conversion to float: 32 * 8191^2 < 2^31, exact.
// Per unit:
//   AVX-512 (vpermw, 16-bit lanes index the book held twice in a 32-entry table, so bit 4 of an
//     index is ignored): the unit register shifted by 0, 4, 8 and 12 bits gives, in the two
//     16-bit halves of each lane, the entries of elements (8u + 1, 8u + 5), (8u, 8u + 4),
//     (8u + 3, 8u + 7), (8u + 2, 8u + 6); one vpdpwssd each against that broadcast pair.
//   AVX2 / AVX-VNNI (pshufb on the entries' low and high bytes, unpacked to 16 bits): the low
//     nibbles give, per row, int32 lanes for bytes (0, 1) and (2, 3): elements (8u + 1, 8u + 3)
//     and (8u + 5, 8u + 7); the high nibbles (8u, 8u + 2) and (8u + 4, 8u + 6); unpacklo holds
//     rows 0, 1 (4, 5), unpackhi rows 2, 3 (6, 7); one pmaddwd (vpdpwssd) each against a
//     broadcast quadruple. Per block, phaddd puts each row's two lanes together, in row order.
// Error: the rounding of the book entries (<= 0.5 / kScale of the absmax) and of the activations
// (<= 0.5 / 8191 of the block's largest |x|) and fp32 accumulation (tests/test_packed.cpp
// bounds it).
//
// GEMM (n > 1): no packed GEMM (set_packed marks the table entry packed_gemv_only), so the driver
// (src/compute.cpp) unpacks each group and runs the plain layout's float GEMM: prefill costs what
// it costs on the plain layout.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/packed-driver-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"
#include "nibble/kernels/nf4-inl.hpp"

namespace nibble::kernels {
namespace {

#if defined(NIBBLE_K_X86)

template <class Tag, bool Fp4>
struct PackedNf4 : PackedBody<Tag> {
  using B = PackedBody<Tag>;
  using State = typename B::State;
  using B::kH;
  using Book = Nf4I16Book<Fp4>;
  using Table = Table16I16<Tag>;
  static constexpr bool kWords = Table::kWords;
  static constexpr std::size_t kGroupBlock = 16 * kNf4Bytes;
  static constexpr bool kInlineStep = true;  ///< see InlineStep
  static constexpr float kActMax = 8191.0f;

  /// Element (0..7 within a unit) of the int16 activation at position j of a unit's 8.
  static constexpr int order(int j) {
    constexpr int kVperm[8] = {1, 5, 0, 4, 3, 7, 2, 6};  // pairs for shifts 0, 4, 8, 12
    constexpr int kBytes[8] = {1, 3, 5, 7, 0, 2, 4, 6};  // quadruples: low, high nibbles
    return kWords ? kVperm[j] : kBytes[j];
  }

  /// Activations: the int16 values of every block in order(), then one fp32 d per block.
  static std::size_t d_offset(std::int64_t cols) { return static_cast<std::size_t>(cols) * 2; }
  static std::size_t act_bytes(std::int64_t cols) {
    return d_offset(cols) + static_cast<std::size_t>(cols / 64) * 4;
  }
  /// Per block: d = amax / 8191 and x_q = nearbyint(x / d); a block with a non-finite value gets
  /// d = NaN (every row's result is NaN; the public API rejects such activations), an all-zero
  /// block d = 0.
  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const auto* x = static_cast<const float*>(src);
    auto* o = static_cast<std::uint8_t*>(dst);
    auto* q = reinterpret_cast<std::int16_t*>(o);
    auto* d = reinterpret_cast<float*>(o + d_offset(cols));
    for (std::int64_t b = 0; b < cols / 64; ++b, x += 64, q += 64) {
      float amax = 0.0f;
      bool finite = true;
      for (int i = 0; i < 64; ++i) {
        const float a = std::fabs(x[i]);
        finite = finite && a <= std::numeric_limits<float>::max();
        amax = std::max(amax, a);
      }
      if (!finite || amax == 0.0f) {
        d[b] = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
        std::memset(q, 0, 64 * sizeof(std::int16_t));
        continue;
      }
      d[b] = amax / kActMax;
      // Below 2^-100 the reciprocal could overflow: scale x by 2^100 first (exact).
      const float pre = amax < 0x1p-100f ? 0x1p100f : 1.0f;
      const float id = kActMax / (amax * pre);
      for (int u = 0; u < 8; ++u)
        for (int j = 0; j < 8; ++j)
          q[8 * u + j] = static_cast<std::int16_t>(std::nearbyint(x[8 * u + order(j)] * pre * id));
    }
  }

  struct Act {
    const std::int16_t* q;
    const float* d;
    Table tab;
  };
  static Act act(const std::uint8_t* A, std::int64_t cols) {
    return {reinterpret_cast<const std::int16_t*>(A),
            reinterpret_cast<const float*>(A + d_offset(cols)), Table(Book::kTable.v)};
  }
  static std::int64_t blocks(std::int64_t cols) { return cols / 64; }

  /// Four int16 activations at p, repeated in every 64-bit lane.
  static VI16<Tag> bcast8(const std::int16_t* p) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return as<std::int16_t>(VU64<Tag>(v));
  }

  /// One group block (block b of the 16 rows) into the state.
  [[gnu::always_inline]] static inline void block(const std::uint8_t* gb, const Act& a,
                                                  std::int64_t b, State& st) {
    const std::int16_t* xq = a.q + 64 * b;
    const VF<Tag> d(a.d[b]);
    const std::uint8_t* units = gb + PackedGroup::kUnitRow;  // after the 16 absmax
    for (int h = 0; h < kH; ++h) {
      VI32<Tag> s[4];
      for (int k = 0; k < 4; ++k) s[k] = VI32<Tag>(0);
      static_for<8>([&](auto uc) {
        constexpr int u = decltype(uc)::value;
        const VU32<Tag> v = B::unit(units, u, h);
        const std::int16_t* xu = xq + 8 * u;
        if constexpr (kWords) {
          static_for<4>([&](auto kc) {
            constexpr int k = decltype(kc)::value;
            const VI16<Tag> w = a.tab.lookup(as<std::uint16_t>(v >> (4 * k)));
            s[k] = madd_acc_i16<Tag>(s[k], w, as<std::int16_t>(bcast4<Tag>(xu + 2 * k)));
          });
        } else {
          VU8<Tag> lo, hi;
          split_nibbles<Tag>(as<std::uint8_t>(v), lo, hi);
          VI16<Tag> w[4];
          a.tab.lookup_bytes(lo, w[0], w[1]);
          a.tab.lookup_bytes(hi, w[2], w[3]);
          const VI16<Tag> xl = bcast8(xu), xh = bcast8(xu + 4);
          s[0] = madd_acc_i16<Tag>(s[0], w[0], xl);
          s[1] = madd_acc_i16<Tag>(s[1], w[1], xl);
          s[2] = madd_acc_i16<Tag>(s[2], w[2], xh);
          s[3] = madd_acc_i16<Tag>(s[3], w[3], xh);
          // AVX2: the four sums stay chains (keep_order; otherwise GCC adds the 32 products
          // up as a tree, keeping them live: 221 -> 76 stack accesses, warm +5 %); with VNNI
          // (vpdpwssd) it measured alike
          if constexpr (!Tag::vnni)
            for (int k = 0; k < 4; ++k) keep_order(s[k]);
        }
      });
      VF<Tag> f;
      if constexpr (kWords) {
        f = xsimd::to_float(s[0] + s[1]) + xsimd::to_float(s[2] + s[3]);
      } else {
        f = xsimd::to_float(hadd_pairs_i32<Tag>(s[0], s[1])) +
            xsimd::to_float(hadd_pairs_i32<Tag>(s[2], s[3]));
      }
      const VF<Tag> amax = VF<Tag>::load_unaligned(reinterpret_cast<const float*>(gb) + h * B::kL);
      st.acc[h] = fmadd<Tag>(f, amax * d, st.acc[h]);
    }
  }

  static void store(const State& st, float* y) {
    for (int h = 0; h < kH; ++h) (st.acc[h] / VF<Tag>(Book::kScale)).store_unaligned(y + h * B::kL);
  }
};

#endif

}  // namespace
}  // namespace nibble::kernels
