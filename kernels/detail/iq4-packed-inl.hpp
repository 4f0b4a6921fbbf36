// nibble: IQ4_XS GEMV on packed (row-interleaved) weights (nibble/packed.hpp), written once for
// every SIMD tag over xsimd batches and the helpers of intrin-*.hpp.
//
// A group block holds block b of 16 rows, the whole 136-byte block in 4-byte units: unit 0 is
// d | scales_h << 16, unit 1 scales_l, unit 2 + 4 ib + k the qs bytes 16 ib + 4k .. + 3, whose low
// nibbles are the codes of values 32 ib + 4k .. + 3 and high nibbles of 32 ib + 16 + 4k ... A
// register loaded at a unit holds it for L = Tag::bytes / 4 rows, one row per int32 lane. Per qs
// unit, two code book lookups (lookup16) and two int8 dots against broadcast activation dwords of
// the plain Q8_K block (S8Dot: with VNNI the book is biased by 128 and each sub-block sum starts
// at -128 times its activation sum, prepared once per call); per sub-block the int32 sum times the
// rows' scales ls - 32; one float step per block. Without VNNI the code book values take the
// signs of the activations against their prepared magnitudes (S8Dot::madd_abs) and the int16 pair
// sums go straight through pmaddwd with ls - 32. Integer sums are exact (the scheme of
// iq4-inl.hpp).
// GEMM (n >= 4): the rows engine with tiles read straight from the packed bytes
// (IQ4XSRows::repack_packed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nibble/formats/iq4_nl.hpp"
#include "nibble/formats/q8_k.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/iq4-inl.hpp"
#include "nibble/kernels/detail/packed-driver-inl.hpp"
#include "nibble/kernels/detail/rows-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"

namespace nibble::kernels {
namespace {

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

template <class Tag>
struct PackedIQ4XS : PackedBody<Tag> {
  using D = S8Dot<Tag>;
  using State = typename PackedBody<Tag>::State;
  using PackedBody<Tag>::kH;
  using PackedBody<Tag>::unit;
  static constexpr std::size_t kGroupBlock = 16 * sizeof(BlockIQ4_XS);

  /// Without VNNI (S8Dot::kAbsAct) the products come from S8Dot::madd_abs against the
  /// activations' magnitudes, and each int16 pair sum goes through one pmaddwd against the
  /// sub-block's scale (ls - 32 in both halves): no |w| per register and no int32 multiply per
  /// sub-block. |pair| <= 2 * 128 * 127, times 32, twice per pmaddwd, 64 per block: < 2^31.
  static constexpr bool kAbs = D::kAbsAct;

  /// Per activation block: the starting value -kBias * (sum of the 32 activations) of each
  /// sub-block's sum; with kAbs, |a| of the 256 activations as unsigned bytes.
  struct PrepInit {
    std::int32_t init[8];
  };
  struct PrepAbs {
    std::int32_t init[8];
    std::uint8_t abs[256];
  };
  using Prep = std::conditional_t<kAbs, PrepAbs, PrepInit>;
  using Row = SplitRow<BlockQ8_K, Prep, 256>;
  static std::size_t act_bytes(std::int64_t cols) { return Row::act_bytes(cols); }
  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const auto* in = static_cast<const BlockQ8_K*>(src);
    Prep* p = Row::copy_plain(src, cols, dst);
    for (std::int64_t b = 0; b < cols / 256; ++b) {
      for (int ib = 0; ib < 8; ++ib)
        p[b].init[ib] = -D::kBias * (in[b].bsums[2 * ib] + in[b].bsums[2 * ib + 1]);
      if constexpr (kAbs) abs_bytes(in[b].qs, 256, p[b].abs);
    }
  }

  using Act = Q8KPrepAct<Prep>;
  static Act act(const std::uint8_t* A, std::int64_t cols) { return Act::of(A, cols); }
  static std::int64_t blocks(std::int64_t cols) { return cols / 256; }

  /// One group block (block b of the 16 rows) into the state.
  [[gnu::always_inline]] static inline void block(const std::uint8_t* gb, const Act& act,
                                                  std::int64_t b, State& st) {
    const BlockQ8_K& ab = act.a[b];
    const auto* aq = reinterpret_cast<const std::uint8_t*>(ab.qs);
    const Prep& pb = act.p[b];
    const VF<Tag> da(ab.d);
    const VI8<Tag> tbl = D::prep(table16<Tag>(ref::iq4::kValues));
    const VU32<Tag> m4(0x0F0F0F0Fu);
    for (int h = 0; h < kH; ++h) {
      const VU32<Tag> w0 = unit(gb, 0, h), w1 = unit(gb, 1, h);
      VI32<Tag> tot(0);
      static_for<8>([&](auto ic) {
        constexpr int ib = decltype(ic)::value;
        // the sub-block's 6-bit scale ls (the weight scale is ls - 32)
        auto ls = [&] {
          return as<std::int32_t>(((w1 >> (4 * ib)) & VU32<Tag>(0x0Fu)) |
                                  (((w0 >> (16 + 2 * ib)) & VU32<Tag>(3u)) << 4));
        };
        // the code book values of qs unit k: low nibbles (values 32 ib + 4k ..), high (+ 16)
        auto codes = [&](int k, VI8<Tag>& lo, VI8<Tag>& hi) {
          const VU32<Tag> q = unit(gb, 2 + 4 * ib + k, h);
          lo = lookup16<Tag>(tbl, as<std::uint8_t>(q & m4));
          hi = lookup16<Tag>(tbl, as<std::uint8_t>((q >> 4) & m4));
        };
        if constexpr (kAbs) {
          const VI32<Tag> s32 = ls() - VI32<Tag>(32);
          const VI16<Tag> sc = as<std::int16_t>((s32 & VI32<Tag>(0xFFFF)) | (s32 << 16));
          static_for<4>([&](auto kc) {
            constexpr int k = decltype(kc)::value;
            VI8<Tag> lo, hi;
            codes(k, lo, hi);
            const int j = 32 * ib + 4 * k;
            tot = madd_acc_i16<Tag>(
                tot,
                D::madd_abs(as<std::uint8_t>(bcast4<Tag>(pb.abs + j)), lo, bcast4<Tag>(aq + j)),
                sc);
            tot = madd_acc_i16<Tag>(tot,
                                    D::madd_abs(as<std::uint8_t>(bcast4<Tag>(pb.abs + j + 16)), hi,
                                                bcast4<Tag>(aq + j + 16)),
                                    sc);
            keep_order(tot);
          });
        } else {
          VI32<Tag> s(pb.init[ib]);
          static_for<4>([&](auto kc) {
            constexpr int k = decltype(kc)::value;
            VI8<Tag> lo, hi;
            codes(k, lo, hi);
            s = D::dot_prepped(s, lo, bcast4<Tag>(aq + 32 * ib + 4 * k));
            s = D::dot_prepped(s, hi, bcast4<Tag>(aq + 32 * ib + 16 + 4 * k));
            // without int8 dot instructions the sums stay chains (keep_order): GCC otherwise
            // reassociated them and spilled (AVX2: 174 -> 14 stack accesses, warm +15 %,
            // docs/kernels.md "Register pressure on 256-bit")
            if constexpr (!kInt8Dots<Tag>) keep_order(s);
          });
          tot = tot + s * (ls() - VI32<Tag>(32));
          if constexpr (!kInt8Dots<Tag>) keep_order(tot);
        }
      });
      st.acc[h] = fmadd<Tag>(xsimd::to_float(tot), h2f_lo16<Tag>(w0) * da, st.acc[h]);
    }
  }

  /// FormatKernels::gemm_packed: the GEMV per activation row below 4 rows, the rows engine
  /// from there.
  static constexpr auto gemm = packed_gemm<Tag, PackedIQ4XS, IQ4XSRows, 4>;
};

#endif

}  // namespace
}  // namespace nibble::kernels
