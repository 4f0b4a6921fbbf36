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
// SIMD versions produce exactly the reference bytes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

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
      float r = std::nearbyint(x[j] * id);
      r = r < -128.f ? -128.f : (r > 127.f ? 127.f : r);
      out[2 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(r));
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
    for (int j = 0; j < 256; ++j) {
      const float r = std::nearbyint(iscale * x[j]);
      const int v = static_cast<int>(r);
      out[4 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(v < 127 ? v : 127));
    }
    q8_K_finish(out, 1 / iscale);
  }
}

// ---- x86 (AVX2 code, also used by the AVX-512 tables: a Q8_0 block is 8+8+8+8 floats) ----
#if defined(NIBBLE_K_X86)
inline __m256 abs256(__m256 v) {
  return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

inline float hmax256(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// 32 floats times `scale`, rounded half-even, saturated to int8, stored in order at `q`.
inline void round_pack32(const float* x, __m256 scale, std::uint8_t* q) {
  __m256i i[4];
  for (int k = 0; k < 4; ++k) {
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), scale),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    i[k] = _mm256_cvtps_epi32(r);
  }
  const __m256i p =
      _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
  const __m256i o = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), o);
}

inline void act_q8_0_x86(const float* x, std::int64_t n, void* dst) {
  auto* out = static_cast<std::uint8_t*>(dst);
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32, out += kQ8_0Bytes) {
    const __m256 m01 = _mm256_max_ps(abs256(_mm256_loadu_ps(x)), abs256(_mm256_loadu_ps(x + 8)));
    const __m256 m23 =
        _mm256_max_ps(abs256(_mm256_loadu_ps(x + 16)), abs256(_mm256_loadu_ps(x + 24)));
    const float amax = hmax256(_mm256_max_ps(m01, m23));
    const std::uint16_t h = static_cast<std::uint16_t>(_cvtss_sh(amax / 127.f, 0));
    std::memcpy(out, &h, 2);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    round_pack32(x, _mm256_set1_ps(id), out + 2);
  }
}

inline void act_q8_K_x86(const float* x, std::int64_t n, void* dst) {
  auto* out = static_cast<std::uint8_t*>(dst);
  for (std::int64_t b = 0; b < n / 256; ++b, x += 256, out += kQ8_KBytes) {
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 32; ++k) m = _mm256_max_ps(m, abs256(_mm256_loadu_ps(x + 8 * k)));
    float mx;
    if (q8_K_extreme(x, hmax256(m), &mx) == 0.0f) {
      q8_K_zero(out);
      continue;
    }
    const float iscale = -127.f / mx;
    const __m256 s = _mm256_set1_ps(iscale);
    for (int k = 0; k < 8; ++k) round_pack32(x + 32 * k, s, out + 4 + 32 * k);
    q8_K_finish(out, 1 / iscale);
  }
}
#endif

// ---- NEON ----
#if defined(NIBBLE_K_NEON)
// 16 floats times `scale`, rounded half-even, saturated to int8, stored at q.
inline void round_pack16_neon(const float* x, float32x4_t scale, std::uint8_t* q) {
  int32x4_t i[4];
  for (int k = 0; k < 4; ++k) i[k] = vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x + 4 * k), scale));
  const int16x8_t a = vcombine_s16(vqmovn_s32(i[0]), vqmovn_s32(i[1]));
  const int16x8_t c = vcombine_s16(vqmovn_s32(i[2]), vqmovn_s32(i[3]));
  vst1q_s8(reinterpret_cast<std::int8_t*>(q), vcombine_s8(vqmovn_s16(a), vqmovn_s16(c)));
}

inline void act_q8_0_neon(const float* x, std::int64_t n, void* dst) {
  auto* out = static_cast<std::uint8_t*>(dst);
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32, out += kQ8_0Bytes) {
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int k = 0; k < 8; ++k) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + 4 * k)));
    const float amax = vmaxvq_f32(m);
    const std::uint16_t h = float_to_half(amax / 127.f);
    std::memcpy(out, &h, 2);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    const float32x4_t s = vdupq_n_f32(id);
    round_pack16_neon(x, s, out + 2);
    round_pack16_neon(x + 16, s, out + 18);
  }
}

inline void act_q8_K_neon(const float* x, std::int64_t n, void* dst) {
  auto* out = static_cast<std::uint8_t*>(dst);
  for (std::int64_t b = 0; b < n / 256; ++b, x += 256, out += kQ8_KBytes) {
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int k = 0; k < 64; ++k) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + 4 * k)));
    float mx;
    if (q8_K_extreme(x, vmaxvq_f32(m), &mx) == 0.0f) {
      q8_K_zero(out);
      continue;
    }
    const float iscale = -127.f / mx;
    const float32x4_t s = vdupq_n_f32(iscale);
    for (int k = 0; k < 16; ++k) round_pack16_neon(x + 16 * k, s, out + 4 + 16 * k);
    q8_K_finish(out, 1 / iscale);
  }
}
#endif

template <class Tag>
void register_act(KernelTable& t) {
  constexpr Family fam = TagInfo<Tag>::family;
  if constexpr (fam == Family::scalar) {
    t.quantize_act_q8_0 = &act_q8_0_scalar;
    t.quantize_act_q8_K = &act_q8_K_scalar;
  }
#if defined(NIBBLE_K_X86)
  if constexpr (fam == Family::x86) {
    t.quantize_act_q8_0 = &act_q8_0_x86;
    t.quantize_act_q8_K = &act_q8_K_x86;
  }
#endif
#if defined(NIBBLE_K_NEON)
  if constexpr (fam == Family::neon) {
    t.quantize_act_q8_0 = &act_q8_0_neon;
    t.quantize_act_q8_K = &act_q8_K_neon;
  }
#endif
}

}  // namespace
}  // namespace nibble::kernels
