// nibble: Q6_K and Q8_0 on packed (row-interleaved) weights (nibble/packed.hpp), written once
// for every SIMD tag. The layout and the structure are those of q45-packed-inl.hpp: a register
// loaded at unit u of a group block holds that 4-byte unit of L = Tag::bytes / 4 rows (one per
// int32 lane), so the int8 dots run against broadcast activation dwords with no shuffles, and
// the weights stream in one sequential pass.
//
// Q6_K group block (16 x 210 bytes): for half hh and k = 0..7, units 24 hh + 3 k (ql bytes
// 4 (16 hh + k) ..), + 1 (ql bytes 4 (16 hh + 8 + k) ..) and + 2 (qh bytes 4 (8 hh + k) ..); units
// 48..51 the 16 int8 scales; then the 16 fp16 d (2 bytes per row). Value 128 hh + 32 j + l (quarter
// j, l = 4k..4k+3) has its low 4 bits in the first ql unit (j = 0, 2: low / high nibble) or the
// second (j = 1, 3), its top 2 bits at bits 2j of the qh unit; its sub-block is 8 hh + 2 j + k / 4.
// Sums start at -32 * (activation sum of the sub-block) (the level offset), are scaled by the
// signed int8 scale in int32, and go to float once per block.
//
// Q8_0 group block (16 x 34 bytes): the 16 fp16 d, then units 0..7 of the quants. Signed weights
// through S8Dot (VNNI: w + 128 against an accumulator starting at -128 * sum(a)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nibble/formats/q6_k.hpp"
#include "nibble/formats/q8_0.hpp"
#include "nibble/formats/q8_k.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/iq4-packed-inl.hpp"
#include "nibble/kernels/detail/kq23-packed-inl.hpp"
#include "nibble/kernels/detail/q32-packed-inl.hpp"
#include "nibble/kernels/detail/q45-packed-inl.hpp"
#include "nibble/kernels/detail/q6-inl.hpp"
#include "nibble/kernels/detail/rows-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"
#include "nibble/kernels/q8_0-inl.hpp"

namespace nibble::kernels {
namespace {

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

/// A register of unit u of sub-tile h of a packed group block.
template <class Tag>
inline VU32<Tag> packed_unit(const std::uint8_t* gb, int u, int h) {
  return loadu<std::uint32_t, Tag>(gb + 64 * u + h * Tag::bytes);
}

template <class Tag>
struct PackedQ6 {
  static constexpr int kL = Tag::bytes / 4, kH = 16 / kL;
  static constexpr std::size_t kGroupBlock = 16 * sizeof(BlockQ6_K);
  static constexpr int kStreams = 2;

  /// The GEMV pieces of packed_gemv (activations: plain Q8_K blocks).
  using Act = const BlockQ8_K*;
  static Act act(const std::uint8_t* A, std::int64_t) {
    return reinterpret_cast<const BlockQ8_K*>(A);
  }
  struct State {
    VF<Tag> acc[kH];
    State() {
      for (int h = 0; h < kH; ++h) acc[h] = VF<Tag>(0.0f);
    }
  };
  static std::int64_t blocks(std::int64_t cols) { return cols / 256; }
  static void store(const State& st, float* y) {
    for (int h = 0; h < kH; ++h) st.acc[h].store_unaligned(y + h * kL);
  }

  [[gnu::always_inline]] static inline void block(const std::uint8_t* gb, Act a, std::int64_t b,
                                                  State& st) {
    const VU32<Tag> m4(0x0F0F0F0Fu), m30(0x30303030u);
    const BlockQ8_K& ab = a[b];
    const auto* aq = reinterpret_cast<const std::uint8_t*>(ab.qs);
    const VF<Tag> da(ab.d);
    for (int h = 0; h < kH; ++h) {
      VI32<Tag> tot(0);
      for (int hh = 0; hh < 2; ++hh) {
        VI32<Tag> s[4][2];  // quarter j, sub-block half k / 4
        for (int j = 0; j < 4; ++j)
          for (int t = 0; t < 2; ++t) s[j][t] = VI32<Tag>(-32 * ab.bsums[8 * hh + 2 * j + t]);
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          const VU32<Tag> qa = packed_unit<Tag>(gb, 24 * hh + 3 * k, h);
          const VU32<Tag> qb = packed_unit<Tag>(gb, 24 * hh + 3 * k + 1, h);
          const VU32<Tag> qh = packed_unit<Tag>(gb, 24 * hh + 3 * k + 2, h);
          const VU32<Tag> lv[4] = {(qa & m4) | ((qh << 4) & m30), (qb & m4) | ((qh << 2) & m30),
                                   ((qa >> 4) & m4) | (qh & m30),
                                   ((qb >> 4) & m4) | ((qh >> 2) & m30)};
          for (int j = 0; j < 4; ++j)
            s[j][k / 4] = dot_u8s8<Tag>(s[j][k / 4], as<std::uint8_t>(lv[j]),
                                        bcast4<Tag>(aq + 128 * hh + 32 * j + 4 * k));
        }
        for (int j = 0; j < 4; ++j)
          for (int t = 0; t < 2; ++t) {
            const int sb = 8 * hh + 2 * j + t;
            const VI32<Tag> sc =
                (as<std::int32_t>(packed_unit<Tag>(gb, 48 + sb / 4, h)) << (24 - 8 * (sb % 4))) >>
                24;
            tot = tot + s[j][t] * sc;
          }
      }
      const VF<Tag> d = load_f16<Tag>(gb + 16 * 208 + 2 * kL * h);
      st.acc[h] = fmadd<Tag>(xsimd::to_float(tot), d * da, st.acc[h]);
    }
  }

  /// FormatKernels::gemm_packed (activations: plain Q8_K rows).
  static void gemm(const void* P, std::int64_t g0, std::int64_t g1, std::int64_t cols,
                   const void* A, std::size_t arb, std::int64_t n, float* Y, std::int64_t ldy) {
    const auto* p = static_cast<const std::uint8_t*>(P);
    const auto* a = static_cast<const std::uint8_t*>(A);
    if (n == 1) return packed_gemv<PackedQ6>(p, g0, g1, cols, a, Y);
    RowsGemm<Tag, Q6Rows>::gemm_packed(p, g0, g1, cols, a, arb, n, Y, ldy);
  }
};

template <class Tag>
struct PackedQ8_0 {
  static constexpr int kL = Tag::bytes / 4, kH = 16 / kL;
  static constexpr std::size_t kGroupBlock = 16 * sizeof(BlockQ8_0);
  static constexpr int kStreams = 2;
  using D = S8Dot<Tag>;
  using S = Q8_0Simd<Tag>;  // its activation relayout: quants, per-dword bias sums, fp32 scales

  /// The GEMV pieces of packed_gemv (activations: Q8_0Simd's relayout).
  using Act = typename S::Act;
  static Act act(const std::uint8_t* A, std::int64_t cols) { return S::act(A, cols); }
  struct State {
    VF<Tag> acc[kH];
    State() {
      for (int h = 0; h < kH; ++h) acc[h] = VF<Tag>(0.0f);
    }
  };
  static std::int64_t blocks(std::int64_t cols) { return cols / 32; }
  static void store(const State& st, float* y) {
    for (int h = 0; h < kH; ++h) st.acc[h].store_unaligned(y + h * kL);
  }

  [[gnu::always_inline]] static inline void block(const std::uint8_t* gb, const Act& a,
                                                  std::int64_t b, State& st) {
    const std::int8_t* aq = a.qs + 32 * b;
    std::int32_t bias = 0;
    for (int u = 0; u < 8; ++u) bias += a.bias[8 * b + u];
    const VF<Tag> da(a.d[b]);
    for (int h = 0; h < kH; ++h) {
      VI32<Tag> s(bias);
#pragma GCC unroll 8
      for (int u = 0; u < 8; ++u)
        s = D::dot(s, as<std::int8_t>(packed_unit<Tag>(gb + 32, u, h)), bcast4<Tag>(aq + 4 * u));
      st.acc[h] = fmadd<Tag>(xsimd::to_float(s), load_f16<Tag>(gb + 2 * kL * h) * da, st.acc[h]);
    }
  }

  static void gemm(const void* P, std::int64_t g0, std::int64_t g1, std::int64_t cols,
                   const void* A, std::size_t arb, std::int64_t n, float* Y, std::int64_t ldy) {
    const auto* p = static_cast<const std::uint8_t*>(P);
    const auto* a = static_cast<const std::uint8_t*>(A);
    if (n == 1) return packed_gemv<PackedQ8_0>(p, g0, g1, cols, a, Y);
    RowsGemm<Tag, Q8_0Rows<Tag>>::gemm_packed(p, g0, g1, cols, a, arb, n, Y, ldy);
  }
};

#endif

/// Registers the packed-layout kernels of every packable format for ISA tag Tag (the scalar
/// table has none: the driver unpacks each group there).
template <class Tag>
void register_packed(KernelTable& t) {
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
  if constexpr (Tag::bytes >= 16) {
    auto set = [&](Format f, auto gemm, auto bytes, auto relayout) {
      FormatKernels& k = entry(t, f);
      k.gemm_packed = gemm;
      k.packed_act_bytes = bytes;
      k.packed_act_relayout = relayout;
    };
    set(Format::q4_K, &PackedQ45<Tag, false>::gemm, &PackedQ45<Tag, false>::act_bytes,
        &PackedQ45<Tag, false>::relayout);
    set(Format::q5_K, &PackedQ45<Tag, true>::gemm, &PackedQ45<Tag, true>::act_bytes,
        &PackedQ45<Tag, true>::relayout);
    using NoBytes = std::size_t (*)(std::int64_t);
    using NoRelayout = void (*)(const void*, std::int64_t, void*);
    set(Format::q6_K, &PackedQ6<Tag>::gemm, NoBytes{}, NoRelayout{});
    set(Format::q8_0, &PackedQ8_0<Tag>::gemm, &Q8_0Simd<Tag>::act_bytes, &Q8_0Simd<Tag>::relayout);
    set(Format::q4_0, &PackedQ32<Tag, Format::q4_0>::gemm, &PackedQ32<Tag, Format::q4_0>::act_bytes,
        &PackedQ32<Tag, Format::q4_0>::relayout);
    set(Format::q4_1, &PackedQ32<Tag, Format::q4_1>::gemm, &PackedQ32<Tag, Format::q4_1>::act_bytes,
        &PackedQ32<Tag, Format::q4_1>::relayout);
    set(Format::q5_0, &PackedQ32<Tag, Format::q5_0>::gemm, &PackedQ32<Tag, Format::q5_0>::act_bytes,
        &PackedQ32<Tag, Format::q5_0>::relayout);
    set(Format::q5_1, &PackedQ32<Tag, Format::q5_1>::gemm, &PackedQ32<Tag, Format::q5_1>::act_bytes,
        &PackedQ32<Tag, Format::q5_1>::relayout);
    set(Format::iq4_nl, &PackedQ32<Tag, Format::iq4_nl>::gemm,
        &PackedQ32<Tag, Format::iq4_nl>::act_bytes, &PackedQ32<Tag, Format::iq4_nl>::relayout);
    set(Format::mxfp4, &PackedQ32<Tag, Format::mxfp4>::gemm,
        &PackedQ32<Tag, Format::mxfp4>::act_bytes, &PackedQ32<Tag, Format::mxfp4>::relayout);
    set(Format::q2_K, &PackedKq23<Tag, false>::gemm, &PackedKq23<Tag, false>::act_bytes,
        &PackedKq23<Tag, false>::relayout);
    set(Format::iq4_xs, &PackedIQ4XS<Tag>::gemm, &PackedIQ4XS<Tag>::act_bytes,
        &PackedIQ4XS<Tag>::relayout);
    set(Format::q3_K, &PackedKq23<Tag, true>::gemm, &PackedKq23<Tag, true>::act_bytes,
        &PackedKq23<Tag, true>::relayout);
  }
#else
  (void)t;
#endif
}

}  // namespace
}  // namespace nibble::kernels
