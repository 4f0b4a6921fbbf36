// nibble: NF4 / FP4 kernels (BlockNF4: fp32 absmax + 32 bytes, 64 values, element 2i in the
// high nibble of byte i). Weight value = codebook[code] * absmax, exactly the reference
// dequantization; the GEMM is the float-activation GEMM of f32-inl.hpp with a decoder that
// looks the 16-entry code book up in registers (vpermps on AVX-512, two vpermps + blend on
// AVX2, tbl on NEON) and multiplies by the block's absmax.
#pragma once

#include "nibble/formats/nf4.hpp"
#include "nibble/kernels/f32-inl.hpp"

namespace nibble::kernels {
namespace {

constexpr std::size_t kNf4Bytes = 36;

template <bool Fp4>
inline const float* nf4_book() {
  return Fp4 ? ref::fp4_codebook : ref::nf4_codebook;
}

template <bool Fp4>
struct Nf4Value {
  static float value(const std::uint8_t* row, std::int64_t k) {
    const std::uint8_t* blk = row + static_cast<std::size_t>(k / 64) * kNf4Bytes;
    const int i = static_cast<int>(k % 64);
    const std::uint8_t byte = blk[4 + i / 2];
    const int code = (i & 1) ? (byte & 0x0F) : (byte >> 4);
    return nf4_book<Fp4>()[code] * ld_f32(blk);
  }
};

template <class FV, bool Fp4>
struct Nf4Src : Nf4Value<Fp4> {
  static constexpr int kStep = 32;  // half a block: 16 bytes of codes
  static constexpr int kVec = 2 * FV::kPer16;
  static std::size_t bytes(std::int64_t k) {
    return static_cast<std::size_t>(k / 64) * kNf4Bytes + static_cast<std::size_t>(k % 64) / 2;
  }
  static void decode(const std::uint8_t* row, std::int64_t k, typename FV::V out[]) {
    // The code book stays in registers when the compiler hoists it out of the k loop (it is
    // a constant); otherwise it is one to four L1 loads.
    const typename FV::Book book = FV::book(nf4_book<Fp4>());
    const std::uint8_t* blk = row + static_cast<std::size_t>(k / 64) * kNf4Bytes;
    const typename FV::V amax = FV::set1(ld_f32(blk));
    FV::lookup32(book, blk + 4 + (k % 64) / 2, out);
    for (int v = 0; v < kVec; ++v) out[v] = FV::mul(out[v], amax);
  }
};

/// Register tiles for the 4-bit formats (each decoded step holds kVec vectors per row).
template <class Tag>
struct Nf4TileShape {
  static constexpr bool wide = TagInfo<Tag>::wide;
  static constexpr int R = wide ? 4 : 2;
  static constexpr int C = wide ? 4 : (TagInfo<Tag>::family == Family::neon ? 4 : 2);
  static constexpr int R1 = wide ? 4 : 2;
};

template <bool Fp4>
void nf4_dequant_scalar(const void* src, std::int64_t n, float* dst) {
  const auto* p = static_cast<const std::uint8_t*>(src);
  const float* cb = nf4_book<Fp4>();
  for (std::int64_t b = 0; b < n / 64; ++b, p += kNf4Bytes, dst += 64) {
    const float amax = ld_f32(p);
    for (int i = 0; i < 32; ++i) {
      dst[2 * i] = cb[p[4 + i] >> 4] * amax;
      dst[2 * i + 1] = cb[p[4 + i] & 0x0F] * amax;
    }
  }
}

template <class Tag, bool Fp4>
void nf4_dequant_simd(const void* src, std::int64_t n, float* dst) {
  using FV = typename FloatVec<Tag>::type;
  using S = Nf4Src<FV, Fp4>;
  const auto* p = static_cast<const std::uint8_t*>(src);
  for (std::int64_t b = 0; b < n / 64; ++b, p += kNf4Bytes) {
    for (int k = 0; k < 64; k += S::kStep) {
      typename FV::V v[S::kVec];
      S::decode(p, k, v);
      std::memcpy(dst + b * 64 + k, v, sizeof v);
    }
  }
}

template <class Tag, bool Fp4>
void register_4bit(KernelTable& t) {
  FormatKernels& k = entry(t, Fp4 ? Format::fp4 : Format::nf4);
  if constexpr (TagInfo<Tag>::family == Family::scalar) {
    k.dequant = &nf4_dequant_scalar<Fp4>;
    k.gemm = &float_gemm_scalar<Nf4Value<Fp4>>;
  } else {
    k.dequant = &nf4_dequant_simd<Tag, Fp4>;
    k.gemm = &float_gemm<Tag, Nf4Src<typename FloatVec<Tag>::type, Fp4>, Nf4TileShape<Tag>>;
  }
}

template <class Tag>
void register_nf4(KernelTable& t) {
  register_4bit<Tag, false>(t);
  register_4bit<Tag, true>(t);
}

}  // namespace
}  // namespace nibble::kernels
