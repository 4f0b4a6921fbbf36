// nibble: f16 / bf16 GEMV on packed (row-interleaved) weights (nibble/packed.hpp), written once
// for every SIMD tag over xsimd batches and the helpers of intrin-*.hpp.
//
// The packed "block" of these formats is one value: group block c (32 bytes) holds column c of
// the 16 rows, row i at bytes 2i, 2i + 1. So the 2 L bytes at 2 L h are column c of the L = Tag::
// bytes / 4 rows of sub-tile h, and one conversion (exact, as the plain kernels') and one fma
// against the broadcast activation x[c] serve all of them: a thread reads one sequential stream
// (packed_gemv_streams) where the plain layout reads several far-apart rows. Each row sums its
// products in column order in one fp32 lane (the plain kernels sum in 8-32 partial sums): the
// results agree with them within the GEMV tolerance (docs/kernels.md, "Tolerances").
// GEMM (n > 1): the driver unpacks each group and runs the plain GEMM (packed_gemv_only).
#pragma once

#include <cstddef>
#include <cstdint>

#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/packed-driver-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"

namespace nibble::kernels {
namespace {

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

/// The packed f16 (BF16 = false) or bf16 (BF16 = true) GEMV body of packed_gemv.
template <class Tag, bool BF16>
struct PackedFloat16 : PackedBody<Tag> {
  using B = PackedBody<Tag>;
  using State = typename B::State;
  using B::kH;
  using B::kL;
  static constexpr std::size_t kGroupBlock = 16 * 2;  ///< one column of the 16 rows
  static constexpr bool kInlineStep = true;           ///< see InlineStep
  /// No L1 prefetch on AMD family 25 on 32-byte vectors either (packed_prefetch_l1): f16.x16 on
  /// AVX2 1.16-1.26x and bf16.x16 1.09-1.14x without it (Zen 4, 1 thread, docs/kernels.md,
  /// "Packed f16 / bf16").
  static constexpr bool kFamily25NoL1Prefetch = true;

  /// The activations: the fp32 row as given (no relayout).
  struct Act {
    const float* x;
  };
  static constexpr std::size_t (*act_bytes)(std::int64_t) = nullptr;
  static constexpr void (*relayout)(const void*, std::int64_t, void*) = nullptr;
  static Act act(const std::uint8_t* A, std::int64_t) {
    return {reinterpret_cast<const float*>(A)};
  }
  static std::int64_t blocks(std::int64_t cols) { return cols; }

  /// Column b of the 16 rows into the state.
  [[gnu::always_inline]] static inline void block(const std::uint8_t* gb, const Act& act,
                                                  std::int64_t b, State& st) {
    const VF<Tag> xb(act.x[b]);
    for (int h = 0; h < kH; ++h) {
      const std::uint8_t* p = gb + 2 * kL * h;
      const VF<Tag> w = BF16 ? load_bf16<Tag>(p) : load_f16<Tag>(p);
      st.acc[h] = fmadd<Tag>(w, xb, st.acc[h]);
    }
  }
};

#endif

}  // namespace
}  // namespace nibble::kernels
