// nibble: the Q8_1 activation quantizer (fp32 rows -> Q8_1 blocks, the activations of the Q4_1 /
// Q5_1 products) on every ISA, byte-identical to the scalar reference
// nibble::ref::quantize_q8_1_act (nibble/formats/q8_1.hpp): the Q8_0 activation quantizer of
// act-inl.hpp (d = fp16(amax / 127), q = round-half-even(x * 127 / amax)) plus
// s = fp16(amax / 127 * float(sum q)). Inputs are finite; `n` is a multiple of 32.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "nibble/kernels/act-inl.hpp"

namespace nibble::kernels {
namespace {

constexpr std::size_t kQ8_1Bytes = 36;

/// Stores d and s of a Q8_1 block whose quants (bytes 4..35) are already written.
inline void q8_1_header(std::uint8_t* blk, float amax) {
  const float d = amax / 127.f;
  const std::uint16_t h = float_to_half(d);
  std::memcpy(blk, &h, 2);
  int sum = 0;
  for (int j = 0; j < 32; ++j) sum += static_cast<std::int8_t>(blk[4 + j]);
  const std::uint16_t s = float_to_half(d * static_cast<float>(sum));
  std::memcpy(blk + 2, &s, 2);
}

inline void act_q8_1_scalar(const float* x, std::int64_t n, void* dst) {
  auto* out = static_cast<std::uint8_t*>(dst);
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32, out += kQ8_1Bytes) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float a = std::fabs(x[j]);
      amax = amax > a ? amax : a;
    }
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    for (int j = 0; j < 32; ++j) {
      float r = std::nearbyint(x[j] * id);
      r = r < -128.f ? -128.f : (r > 127.f ? 127.f : r);
      out[4 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(r));
    }
    q8_1_header(out, amax);
  }
}

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
/// The SIMD tags' Q8_1 quantizer: act-inl.hpp's ActSimd helpers, then the header.
template <class Tag>
void act_q8_1_simd(const float* x, std::int64_t n, void* dst) {
  using S = ActSimd<Tag>;
  auto* out = static_cast<std::uint8_t*>(dst);
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32, out += kQ8_1Bytes) {
    const float amax = S::amax(x, 32);
    S::round_pack(x, 32, amax != 0.0f ? 127.f / amax : 0.0f, out + 4);
    q8_1_header(out, amax);
  }
}
#endif

template <class Tag>
void register_act_q8_1(KernelTable& t) {
  constexpr Family fam = TagInfo<Tag>::family;
  if constexpr (fam == Family::scalar) t.quantize_act_q8_1 = &act_q8_1_scalar;
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
  if constexpr (fam != Family::scalar) t.quantize_act_q8_1 = &act_q8_1_simd<Tag>;
#endif
}

}  // namespace
}  // namespace nibble::kernels
