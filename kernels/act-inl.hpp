// nibble: activation quantizers (fp32 rows -> Q8_K / Q8_0 blocks) on every ISA, byte-identical
// to the scalar references nibble::ref::quantize_q8_K and nibble::ref::quantize_q8_0_act
// (nibble/formats/q8_k.hpp, q8_0.hpp). Inputs are finite (the public API checks); `n` is a
// multiple of the block size.
//
// Q8_0 (ggml CPU-backend variant): amax = max |x|, stored d = fp16(amax / 127),
//   id = 127 / amax (0 for an all-zero block), q = round-half-even(x * id) saturated to int8.
// Q8_K: mx = the first value of largest |x|; all-zero block -> zeros; iscale = -127 / mx,
//   q = min(127, round-half-even(iscale * x)), d = 1 / iscale, bsums = sums of 16 quants.
// Only max/compare, one float multiply and round-to-nearest-even per value are involved, so the
// SIMD versions produce exactly the reference bytes. A block whose max |x| is so small that id /
// iscale overflows to inf is handled on its own (Q8_0: quants -128, Q8_K: q8_K_overflow), since
// the ISAs convert inf and NaN to integers differently.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "nibble/formats/kquant_common.hpp"
#include "nibble/kernels/arch.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/table.hpp"

namespace nibble::kernels {
namespace {

constexpr std::size_t kQ8_0Bytes = 34;
constexpr std::size_t kQ8_KBytes = 292;

// ---- scalar ----
inline void act_q8_0_scalar(const float* x, std::int64_t n, void* dst) {
  auto* out = static_cast<std::uint8_t*>(dst);
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32, out += kQ8_0Bytes) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float a = std::fabs(x[j]);
      amax = amax > a ? amax : a;
    }
    const std::uint16_t h = float_to_half(amax / 127.f);
    std::memcpy(out, &h, 2);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    for (int j = 0; j < 32; ++j) {
      // As the reference (cvtps2dq then a saturating pack): an inf or NaN product (id
      // overflows when max |x| is below ~2.7e-37) becomes INT_MIN, then -128.
      int v = ref::cvt_trunc_i32(std::nearbyint(x[j] * id));
      v = v < -128 ? -128 : (v > 127 ? 127 : v);
      out[2 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(v));
    }
  }
}

// Finds the first value of largest magnitude in x[0..256); returns amax (0 for all zeros).
inline float q8_K_extreme(const float* x, float amax, float* mx) {
  *mx = 0.0f;
  if (amax == 0.0f) return 0.0f;
  for (int j = 0; j < 256; ++j) {
    if (std::fabs(x[j]) == amax) {
      *mx = x[j];
      break;
    }
  }
  return amax;
}

// Writes d, bsums from the already stored quants; `qs` points at the block's 256 quants.
inline void q8_K_finish(std::uint8_t* block, float d) {
  std::memcpy(block, &d, 4);
  const auto* qs = reinterpret_cast<const std::int8_t*>(block + 4);
  for (int k = 0; k < 16; ++k) {
    int s = 0;
    for (int t = 0; t < 16; ++t) s += qs[16 * k + t];
    const auto s16 = static_cast<std::int16_t>(s);
    std::memcpy(block + 260 + 2 * k, &s16, 2);
  }
}

inline void q8_K_zero(std::uint8_t* block) {
  std::memset(block, 0, kQ8_KBytes);
}

// A block whose largest magnitude is so small that iscale = -127 / mx overflows to +-inf: the
// reference's rounding (a float-to-int bit trick) turns every inf * x and 0 * inf into 0, so it
// stores zero quants and sums and d = 1 / iscale (a signed zero).
inline void q8_K_overflow(std::uint8_t* block, float iscale) {
  std::memset(block, 0, kQ8_KBytes);
  const float d = 1 / iscale;
  std::memcpy(block, &d, 4);
}

inline void act_q8_K_scalar(const float* x, std::int64_t n, void* dst) {
  auto* out = static_cast<std::uint8_t*>(dst);
  for (std::int64_t b = 0; b < n / 256; ++b, x += 256, out += kQ8_KBytes) {
    float amax = 0.0f;
    for (int j = 0; j < 256; ++j) {
      const float a = std::fabs(x[j]);
      amax = amax > a ? amax : a;
    }
    float mx;
    if (q8_K_extreme(x, amax, &mx) == 0.0f) {
      q8_K_zero(out);
      continue;
    }
    const float iscale = -127.f / mx;
    if (!std::isfinite(iscale)) {
      q8_K_overflow(out, iscale);
      continue;
    }
    for (int j = 0; j < 256; ++j) {
      const float r = std::nearbyint(iscale * x[j]);
      const int v = static_cast<int>(r);
      out[4 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(v < 127 ? v : 127));
    }
    q8_K_finish(out, 1 / iscale);
  }
}

// ---- SIMD, written once over the ISA tag ----
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

/// The activation quantizers run on the ISA's own tag, except 32-byte vectors on AVX-512 (Ymm: a
/// 32-value block is then four registers, which one narrow_i32_i8 turns into its 32 bytes).
template <class Tag>
struct ActSimd {
  using T = Ymm<Tag>;
  using F = VF<T>;
  static constexpr int kL = T::bytes / 4;  ///< floats per register
  static constexpr int kN = 4 * kL;        ///< values per narrow_i32_i8 (x86 32, NEON 16)

  /// max |x[i]| over n values (n a multiple of 2 kL): two independent chains, so the loop is
  /// not bound by the latency of one max per register (exact: max is order-independent).
  static float amax(const float* x, int n) {
    F m(0.0f), m2(0.0f);
    for (int k = 0; k < n; k += 2 * kL) {
      m = xsimd::max(m, xsimd::abs(F::load_unaligned(x + k)));
      m2 = xsimd::max(m2, xsimd::abs(F::load_unaligned(x + k + kL)));
    }
    m = xsimd::max(m, m2);
    alignas(64) float l[kL];
    m.store_aligned(l);
    float r = l[0];
    for (int i = 1; i < kL; ++i) r = r > l[i] ? r : l[i];
    return r;
  }

  /// n values (a multiple of kN) times `scale`, rounded half-even, saturated to int8, stored in
  /// order at q. With `bsums` (Q8_K), also the sum of each 16 consecutive quants, taken from the
  /// int32 values before the narrowing (equal to the stored bytes' sums: Q8_K's values are
  /// within [-127, 127], where the saturation changes nothing).
  static void round_pack(const float* x, int n, float scale, std::uint8_t* q,
                         std::int16_t* bsums = nullptr) {
    const F s(scale);
    constexpr int kPer = 16 / kL;  // registers per 16 quants (x86 2, NEON 4)
    for (int k = 0; k < n; k += kN) {
      VI32<T> v[4];
      for (int i = 0; i < 4; ++i) v[i] = round_i32<T>(F::load_unaligned(x + k + i * kL) * s);
      narrow_i32_i8<T>(v).store_unaligned(reinterpret_cast<std::int8_t*>(q + k));
      if (bsums) {
        for (int g = 0; g < 4 / kPer; ++g) {
          VI32<T> t = v[g * kPer];
          for (int i = 1; i < kPer; ++i) t = t + v[g * kPer + i];
          bsums[(k + 16 * g) / 16] = static_cast<std::int16_t>(xsimd::hadd(t));
        }
      }
    }
  }

  /// The first value of x[0..256) whose magnitude is `am` (> 0, the block's max |x|).
  static float first_extreme(const float* x, float am) {
    const F a(am);
    for (int k = 0; k < 256; k += kL) {
      if (xsimd::any(xsimd::abs(F::load_unaligned(x + k)) == a)) {
        for (int i = 0; i < kL; ++i)
          if (std::fabs(x[k + i]) == am) return x[k + i];
      }
    }
    return 0.0f;  // not reached: am is the magnitude of one of the values
  }

  static void q8_0(const float* x, std::int64_t n, void* dst) {
    auto* out = static_cast<std::uint8_t*>(dst);
    for (std::int64_t b = 0; b < n / 32; ++b, x += 32, out += kQ8_0Bytes) {
      const float am = amax(x, 32);
      const std::uint16_t h = float_to_half(am / 127.f);
      std::memcpy(out, &h, 2);
      const float id = am != 0.0f ? 127.f / am : 0.0f;
      if (!std::isfinite(id)) {
        // max |x| below ~2.7e-37: every product is inf or NaN, which the reference (x86's
        // conversion) turns into INT_MIN and saturates to -128; NEON's conversion would not.
        std::memset(out + 2, 0x80, 32);
        continue;
      }
      round_pack(x, 32, id, out + 2);
    }
  }

  static void q8_K(const float* x, std::int64_t n, void* dst) {
    auto* out = static_cast<std::uint8_t*>(dst);
    for (std::int64_t b = 0; b < n / 256; ++b, x += 256, out += kQ8_KBytes) {
      const float am = amax(x, 256);
      if (am == 0.0f) {
        q8_K_zero(out);
        continue;
      }
      const float iscale = -127.f / first_extreme(x, am);
      if (!std::isfinite(iscale)) {  // max |x| below ~3.7e-37: see q8_K_overflow
        q8_K_overflow(out, iscale);
        continue;
      }
      std::int16_t bs[16];
      round_pack(x, 256, iscale, out + 4, bs);
      const float d = 1 / iscale;
      std::memcpy(out, &d, 4);
      std::memcpy(out + 260, bs, sizeof bs);
    }
  }
};
#endif

template <class Tag>
void register_act(KernelTable& t) {
  constexpr Family fam = TagInfo<Tag>::family;
  if constexpr (fam == Family::scalar) {
    t.quantize_act_q8_0 = &act_q8_0_scalar;
    t.quantize_act_q8_K = &act_q8_K_scalar;
  }
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
  if constexpr (fam != Family::scalar) {
    t.quantize_act_q8_0 = &ActSimd<Tag>::q8_0;
    t.quantize_act_q8_K = &ActSimd<Tag>::q8_K;
  }
#endif
}

}  // namespace
}  // namespace nibble::kernels
