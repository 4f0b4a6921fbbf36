// nibble: the memory read loops that nibble-bench's membw rows and `nibble bench MODEL` use as the
// decode roofline. An array of 64-bit words is summed in one of kNumReadPatterns patterns: NS
// sequential streams read in lockstep (stream s: words [s n / NS, (s + 1) n / NS), 128 bytes per
// stream per step), each optionally prefetching its lines 3 KiB ahead into L1 and 16 KiB ahead
// into L2, as the packed GEMV driver does (kernels/detail/packed-driver-inl.hpp). The callers
// measure every pattern and keep the fastest.
//
// Why several patterns: one plain stream, the only read loop until the 2026-12-02 session, does not
// reach what a core can read on every machine. On a 2-core Sapphire Rapids-class VM (Intel, family
// 6; 9-10 GB/s as one stream) four prefetched streams read up to 15.8 GB/s, and the q4_0.x16 /
// q8_0.x16 GEMVs (four prefetched streams) read 1.5x the one-stream sweep; on a Zen 5 VM two
// prefetched streams read 1.1-1.3x one stream (docs/benchmarks.md, "The roofline"). On a Zen 4 VM
// (2026-12-04, fifth session) the prefetches cost instead: 7 alternated rounds, medians, GB/s, one
// thread: 1 stream 24.5, 2 / 4 streams with L1 prefetch 23.1 / 23.5, with L1+L2 22.3 / 22.4, 2 / 4
// streams without prefetch 25.7 / 25.6 (8: 24.3); hence the two plain multi-stream patterns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace nibble::membw {

/// Four 64-bit lanes (GCC / Clang vector extension): the compiler picks the widest adds the
/// caller's target allows.
typedef std::uint64_t U64x4 __attribute__((vector_size(32)));

/// Sums n words (n a multiple of 16) as NS prefetched streams (see the file comment) with four
/// independent vector accumulators, so the loop is bound by loads, not by the add latency. Integer
/// adds: nothing may be dropped or reordered, and no -ffast-math is needed. Always inlined, so
/// that it is compiled for its caller's target (nibble-bench clones its caller per ISA).
template <int NS, bool L1, bool L2>
[[gnu::always_inline]] inline std::uint64_t sum_words(const std::uint64_t* p, std::size_t n) {
  U64x4 a0 = {0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0;
  auto add16 = [&](const std::uint64_t* q) {
    U64x4 x0, x1, x2, x3;
    std::memcpy(&x0, q, 32);
    std::memcpy(&x1, q + 4, 32);
    std::memcpy(&x2, q + 8, 32);
    std::memcpy(&x3, q + 12, 32);
    a0 += x0;
    a1 += x1;
    a2 += x2;
    a3 += x3;
  };
  const std::size_t part = n / NS / 16 * 16;
  for (std::size_t i = 0; i < part; i += 16) {
    for (int s = 0; s < NS; ++s) {
      const std::uint64_t* q = p + static_cast<std::size_t>(s) * part + i;
      // Plain statements, not a lambda: GCC 12 deletes a lambda that holds only prefetches.
      if (L1) {
        __builtin_prefetch(q + 3072 / 8, 0, 3);
        __builtin_prefetch(q + 3072 / 8 + 8, 0, 3);
      }
      if (L2) {
        __builtin_prefetch(q + 16384 / 8, 0, 2);
        __builtin_prefetch(q + 16384 / 8 + 8, 0, 2);
      }
      add16(q);
    }
  }
  for (std::size_t i = part * NS; i < n; i += 16) add16(p + i);  // the streams' tail
  const U64x4 s = (a0 + a1) + (a2 + a3);
  return s[0] + s[1] + s[2] + s[3];
}

/// The read patterns, in the order sum_pattern numbers them.
inline constexpr const char* kReadPatternNames[] = {
    "1 stream",
    "2 streams, L1 prefetch",
    "2 streams, L1+L2 prefetch",
    "4 streams, L1 prefetch",
    "4 streams, L1+L2 prefetch",
    "2 streams",
    "4 streams",
};
inline constexpr int kNumReadPatterns =
    static_cast<int>(sizeof(kReadPatternNames) / sizeof(kReadPatternNames[0]));

/// Sums n words (n a multiple of 16) with read pattern k in [0, kNumReadPatterns). Always inlined
/// (see sum_words).
[[gnu::always_inline]] inline std::uint64_t sum_pattern(int k, const std::uint64_t* p,
                                                        std::size_t n) {
  switch (k) {
    case 1:
      return sum_words<2, true, false>(p, n);
    case 2:
      return sum_words<2, true, true>(p, n);
    case 3:
      return sum_words<4, true, false>(p, n);
    case 4:
      return sum_words<4, true, true>(p, n);
    case 5:
      return sum_words<2, false, false>(p, n);
    case 6:
      return sum_words<4, false, false>(p, n);
    default:
      return sum_words<1, false, false>(p, n);
  }
}

}  // namespace nibble::membw
