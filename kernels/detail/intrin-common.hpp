// nibble: helpers shared by the kernel bodies of every ISA. Everything is in an anonymous
// namespace: each per-ISA TU gets its own copy, compiled with its own flags (ODR safety; see
// arch.hpp). Kernel code must call these, not the inline functions of nibble/core or
// nibble/formats, from SIMD TUs.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "nibble/core/cpu.hpp"
#include "nibble/kernels/arch.hpp"
#include "nibble/kernels/detail/simd.hpp"
#include "nibble/kernels/table.hpp"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define NIBBLE_K_X86 1
#include <immintrin.h>
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define NIBBLE_K_NEON 1
#include <arm_neon.h>
#endif

/// For small helpers of hot loops that GCC's inliner may leave out of line when the caller is
/// large (an out-of-line helper spills every vector around the call).
#define NIBBLE_K_INLINE inline NIBBLE_LAMBDA_INLINE

namespace nibble::kernels {
namespace {

/// True for the tags whose 32-byte vectors have the AVX-512 BW/VL instructions (Avx512YmmTag).
template <class Tag, class = void>
struct HasEvex : std::false_type {};
template <class Tag>
struct HasEvex<Tag, std::void_t<decltype(Tag::evex)>> : std::bool_constant<Tag::evex> {};

/// Family of an ISA tag, for `if constexpr` inside kernel templates.
enum class Family { scalar, x86, neon };
template <class Tag>
struct TagInfo {
  static constexpr Family family = Family::scalar;
  static constexpr bool wide = false;  // 512-bit float vectors
  static constexpr bool vnni = false;
  static constexpr bool dot = false;
};
#if defined(NIBBLE_K_X86)
template <>
struct TagInfo<Avx2Tag> {
  static constexpr Family family = Family::x86;
  static constexpr bool wide = false, vnni = false, dot = false;
};
#if defined(__AVXVNNI__)
template <>
struct TagInfo<AvxVnniTag> {
  static constexpr Family family = Family::x86;
  static constexpr bool wide = false, vnni = false, dot = false;
};
#endif
#endif
#if defined(NIBBLE_K_X86) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512DQ__) && defined(__AVX512VL__)
#define NIBBLE_K_AVX512 1
template <>
struct TagInfo<Avx512Tag> {
  static constexpr Family family = Family::x86;
  static constexpr bool wide = true, vnni = false, dot = false;
};
#if defined(__AVX512VNNI__)
#define NIBBLE_K_AVX512VNNI 1
template <>
struct TagInfo<Avx512VnniTag> {
  static constexpr Family family = Family::x86;
  static constexpr bool wide = true, vnni = true, dot = false;
};
#endif
template <class Base>
struct TagInfo<Avx512YmmTag<Base>> {
  static constexpr Family family = Family::x86;
  static constexpr bool wide = false, vnni = Base::vnni, dot = false;
};
#endif
#if defined(NIBBLE_K_NEON)
template <>
struct TagInfo<NeonTag> {
  static constexpr Family family = Family::neon;
  static constexpr bool wide = false, vnni = false, dot = false;
};
#if defined(__ARM_FEATURE_DOTPROD)
#define NIBBLE_K_NEONDOT 1
template <>
struct TagInfo<NeonDotTag> {
  static constexpr Family family = Family::neon;
  static constexpr bool wide = false, vnni = false, dot = true;
};
#endif
#endif

/// The 32-byte view of a 64-byte AVX-512 tag (Avx512YmmTag: ymm registers with the AVX-512 BW /
/// VL / VNNI instructions), for bodies that run faster on ymm registers there (the activation
/// quantizers, the NF4 / FP4 int16 GEMV, the q8_0 GEMV); any other tag itself.
template <class Tag, bool Wide = (Tag::bytes == 64)>
struct YmmOf {
  using type = Tag;
};
#if defined(NIBBLE_K_AVX512)
template <class Tag>
struct YmmOf<Tag, true> {
  using type = Avx512YmmTag<Tag>;
};
#endif
template <class Tag>
using Ymm = typename YmmOf<Tag>::type;

}  // namespace
}  // namespace nibble::kernels

namespace nibble::kernels {
namespace {

/// Calls K::template run<rr, cc>(args...) for run-time rr in [1, R], cc in [1, C] (register
/// tiles of every size up to R x C are compiled; the tail tiles of a matrix use the smaller ones).
template <class K, int R, int C, class... Args>
inline void tile_dispatch_c(int cc, Args... a) {
  if (cc == C) {
    K::template run<R, C>(a...);
  } else if constexpr (C > 1) {
    tile_dispatch_c<K, R, C - 1>(cc, a...);
  }
}
template <class K, int R, int C, class... Args>
inline void tile_dispatch(int rr, int cc, Args... a) {
  if (rr == R) {
    tile_dispatch_c<K, R, C>(cc, a...);
  } else if constexpr (R > 1) {
    tile_dispatch<K, R - 1, C>(rr, cc, a...);
  }
}

/// p itself, through an empty asm statement that the compiler must assume changes it, so that a
/// value read through the result is a load and never a constant folded from the pointee (the
/// masks of the packed Q3_K step as broadcast loads: PackedKq23::konst).
template <class T>
[[gnu::always_inline]] inline const T* opaque_ptr(const T* p) {
  __asm__("" : "+r"(p));
  return p;
}

/// Whether gemv_groups reads a thread's rows as R far-apart streams (kRowStreams): on every x86
/// core unless the tests' override (detail::set_vendor_tuning_override) is 0, elsewhere only
/// when it is 1 (bodies may still opt out: Q8_0 and f16 on AMD's family-25 cores,
/// amd_family25_tuning). On a 2-core Sapphire Rapids-class VM one core reads 4 sequential streams
/// prefetched 3 KiB ahead into L1 at 12-16 GB/s and R adjacent rows (one region, R interleaved
/// positions) with the group-ahead L2 prefetch at 7-11; a standalone loop of the plain Q4_K row
/// shape (2304-byte rows, 4 rows per group, one body step of 192 bytes per row, 5 alternated
/// rounds, 1 thread) read 7.4 -> 10.4 GB/s, 6192-byte rows 6.7 -> 9.9, 16 KiB (f32) rows 6.7 ->
/// 9.6, 2 rows 7.1 -> 8.4, 8 rows 7.2 -> 10.4; the GEMVs in nibble-bench 1.1-2.1x. On a Zen 5
/// core (35 GB/s from DRAM on one core), where the adjacent groups had been kept, nibble-bench
/// 4096 x 4096 cold, 3-4 alternated rounds, AVX-512: q4_K 1.41 / 1.25 (1 / 2 threads), q8_0
/// 1.33 / 1.42, q3_K 2.09 / 2.18, q2_K 1.59 / 1.93, the plain Q4_K_M decode step 1.34 / 1.26
/// (docs/kernels.md, "Row streams for the plain layouts", "Row streams on Zen 5 too").
inline bool gemv_row_streams() {
#if defined(__x86_64__) || defined(__i386__)
  return detail::vendor_tuning_override() != 0;
#else
  return detail::vendor_tuning_override() == 1;
#endif
}

/// Whether to take the choices measured on AMD's family-25 cores (Zen 3 / Zen 4): on such a core
/// under the CPU's own tuning (no test override), or on any CPU under the tests' override 2. There
/// the Q8_0 and f16 GEMVs read adjacent row groups instead of row streams (Q8_0Simd::gemm,
/// FloatGemv::four_streams; docs/kernels.md, "Zen 4: the row streams, adjacent groups for Q8_0
/// and f16") and the Q6_K GEMV one row at a time on the 256-bit body without software prefetch
/// (Q6Simd::gemm; docs/kernels.md, "Zen 4: Q6_K one row at a time on the 256-bit body"), as do
/// the float formats' GEMVs of short rows (FloatGemv::one_row_x_family25).
inline bool amd_family25_tuning() {
  static const bool zen34 = cpu_features().amd && cpu_features().family == 25;
  const int o = detail::vendor_tuning_override();
  return o == 2 || (zen34 && o < 0);
}

/// Rows per run when n rows are read as RS far-apart row streams (gemv_row_streams), or 0 when
/// they are not: RS == 1, another vendor's tuning, or fewer than 8 rows per run. The first
/// RS * runs rows then go as groups of RS rows, group i holding row i of every run.
template <int RS>
inline std::int64_t row_stream_runs(std::int64_t n) {
  constexpr std::int64_t kMinStreamRows = 8;
  const std::int64_t q = n / RS;
  return RS > 1 && q >= kMinStreamRows && gemv_row_streams() ? q : 0;
}

/// K::kFamily25NoStreamPrefetch, false when the body does not declare it: whether gemv_groups'
/// row streams go without software prefetch on AMD's family-25 cores (far = 0 instead of
/// kRowStreams: the hardware prefetchers alone). Zen 4, 4096 x 4096, cold, 1 thread, 3 rounds of
/// alternated clean builds, medians of per-round ratios: AVX-512 q4_K 1.20, q5_K 1.23, q4_0 1.23,
/// q4_1 1.21, iq4_nl 1.07; AVX2 q5_K 1.12, q4_0 1.07, q4_1 1.08: those declare it. q4_K on AVX2
/// lost (0.88; its body has an L1 prefetch of its own besides), q5_0 on AVX-512 too (0.94); q2_K,
/// q3_K, q5_1, iq4_xs, mxfp4 and bf16 read level (0.94-1.07) and keep theirs (docs/kernels.md,
/// "Zen 4: plain row streams without software prefetch"). Only for rows of at most
/// kFamily25NoPrefetchRow bytes: at 4096 x 11008 (6.2 KiB Q4_K rows, an activation row larger
/// than L1) q4_K read 0.95 and q5_K 0.88 without it on AVX-512, q4_0 / q4_1 / iq4_nl level.
inline constexpr std::size_t kFamily25NoPrefetchRow = 4096;
template <class K, class = void>
struct Family25NoStreamPrefetch : std::false_type {};
template <class K>
struct Family25NoStreamPrefetch<K, std::void_t<decltype(K::kFamily25NoStreamPrefetch)>>
    : std::bool_constant<K::kFamily25NoStreamPrefetch> {};

/// GEMV over rows [r0, r1) in groups of rows: K::template run<G, 1>(rows, stride, a, arb,
/// args..., y, 1, far) computes G rows stride bytes apart into y[0..G).
///
/// Under row streams (row_stream_runs<RS>, RS rows per group: a format whose adjacent groups are
/// small passes a larger RS) the rows are cut into RS equal runs of q rows and group i holds row
/// i of each run (stride q * wrb): each run is read front to back as one sequential stream, and
/// `far` is kRowStreams (each row prefetches its own lines a little ahead into L1), or 0 (no
/// software prefetch) for the bodies of Family25NoStreamPrefetch on AMD's family-25 cores.
///
/// Otherwise a group is R adjacent rows and `far` is the byte distance to a group ahead (0 near
/// the end) so that the kernel can prefetch that group's rows into L2 while it computes this one:
/// the rows of a thread then form one continuous DRAM stream (measured: without it, cold GEMV
/// reads at 0.8 of the bandwidth; with it, at the bandwidth). The group ahead is the next one,
/// or the first at least kFarMin bytes away when groups are smaller (q2_K: 4 rows of 4096
/// columns are 5.25 KiB; Zen 5, AVX-512, 4096 x 4096, alternated runs: 1 thread 18-20 -> 30-33
/// GB/s, 2 threads 31-36 -> 39-49; 8 and 16 KiB measured alike).
///
/// Either way the last rows that do not fill a group use smaller groups, so every row goes
/// through the same body in both schemes (the bodies' results do not depend on a row's place in
/// its group or on the group size).
template <class K, int R, int RS = R, class... Args>
inline void gemv_groups(const std::uint8_t* w, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                        float* y, const std::uint8_t* a, std::size_t arb, Args... args) {
  if (const std::int64_t q = row_stream_runs<RS>(r1 - r0)) {
    const std::size_t stride = static_cast<std::size_t>(q) * wrb;
    const std::size_t fr =
        Family25NoStreamPrefetch<K>::value && wrb <= kFamily25NoPrefetchRow && amd_family25_tuning()
            ? 0
            : kRowStreams;
    for (std::int64_t i = 0; i < q; ++i) {
      float t[RS];
      K::template run<RS, 1>(w + static_cast<std::size_t>(r0 + i) * wrb, stride, a, arb, args..., t,
                             1, fr);
      for (int k = 0; k < RS; ++k) y[r0 + i + k * q] = t[k];
    }
    const std::int64_t r = r0 + RS * q;
    if (r < r1) {
      tile_dispatch<K, RS, 1>(static_cast<int>(r1 - r), 1, w + static_cast<std::size_t>(r) * wrb,
                              wrb, a, arb, args..., y + r, std::int64_t{1});
    }
    return;
  }
  constexpr std::size_t kFarMin = 8192;
  const std::size_t gb = R * wrb;
  const std::int64_t ahead = gb >= kFarMin ? 1 : static_cast<std::int64_t>((kFarMin + gb - 1) / gb);
  std::int64_t r = r0;
  for (; r + R <= r1; r += R) {
    K::template run<R, 1>(w + static_cast<std::size_t>(r) * wrb, wrb, a, arb, args..., y + r, 1,
                          r + (ahead + 1) * R <= r1 ? ahead * gb : 0);
  }
  if (r < r1) {
    tile_dispatch<K, R, 1>(static_cast<int>(r1 - r), 1, w + static_cast<std::size_t>(r) * wrb, wrb,
                           a, arb, args..., y + r, std::int64_t{1});
  }
}

/// Layout of a re-laid-out activation row (FormatKernels::act_relayout) of the GEMV bodies that
/// keep the plain activation blocks for the GEMM engines: the row's cols / kValues blocks of type
/// Plain as they are, then one Prep of derived data per block at a 64-byte aligned offset.
template <class Plain, class Prep, int kValues>
struct SplitRow {
  static std::size_t prep_offset(std::int64_t cols) {
    return (static_cast<std::size_t>(cols / kValues) * sizeof(Plain) + 63) / 64 * 64;
  }
  static std::size_t act_bytes(std::int64_t cols) {
    return prep_offset(cols) + static_cast<std::size_t>(cols / kValues) * sizeof(Prep);
  }
  /// Copies the plain blocks of `src` to `dst` and returns where dst's Prep blocks start.
  static Prep* copy_plain(const void* src, std::int64_t cols, void* dst) {
    std::memcpy(dst, src, static_cast<std::size_t>(cols / kValues) * sizeof(Plain));
    return reinterpret_cast<Prep*>(static_cast<std::uint8_t*>(dst) + prep_offset(cols));
  }
  static const Prep* prep(const std::uint8_t* row, std::int64_t cols) {
    return reinterpret_cast<const Prep*>(row + prep_offset(cols));
  }
};

/// Walks the output of a row-range GEMM in cache blocks and register tiles:
/// for each block of kRowBlock weight rows, for each block of kColBlock activation rows, tiles
/// of R x C (n == 1: R1 x 1). tile(r, c, rr, cc) computes Y for rows r.., activation rows c...
/// The blocking never changes which operations produce one output value.
template <int R, int C, int R1, class Tile>
inline void walk_tiles(std::int64_t r0, std::int64_t r1, std::int64_t n, Tile&& tile) {
  constexpr std::int64_t kRowBlock = 64, kColBlock = 64;
  if (n == 1) {
    for (std::int64_t r = r0; r < r1; r += R1) {
      tile(r, std::int64_t{0}, static_cast<int>(r1 - r < R1 ? r1 - r : R1), 1);
    }
    return;
  }
  for (std::int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const std::int64_t re = rb + kRowBlock < r1 ? rb + kRowBlock : r1;
    for (std::int64_t cb = 0; cb < n; cb += kColBlock) {
      const std::int64_t ce = cb + kColBlock < n ? cb + kColBlock : n;
      for (std::int64_t r = rb; r < re; r += R) {
        const int rr = static_cast<int>(re - r < R ? re - r : R);
        for (std::int64_t c = cb; c < ce; c += C) {
          tile(r, c, rr, static_cast<int>(ce - c < C ? ce - c : C));
        }
      }
    }
  }
}

}  // namespace
}  // namespace nibble::kernels
