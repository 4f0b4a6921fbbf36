// nibble: the format and ISA enums and the per-format traits table.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nibble {

/// Storage formats. f32/f16 are plain rows; q* are GGUF/ggml block formats; nf4/fp4 are
/// bitsandbytes 4-bit (blocksize 64, fp32 absmax per block, see nibble/formats/nf4.hpp).
/// The ggml formats q4_0..q5_1, q2_K, q3_K, iq4_nl, iq4_xs, mxfp4, bf16 and q8_1 (the
/// activation format ggml pairs with q4_1/q5_1) follow. New values are appended (the integer
/// values are ABI).
enum class Format {
  f32,
  f16,
  q8_0,
  q4_K,
  q5_K,
  q6_K,
  q8_K,
  nf4,
  fp4,
  q4_0,
  q4_1,
  q5_0,
  q5_1,
  q2_K,
  q3_K,
  iq4_nl,
  iq4_xs,
  mxfp4,
  bf16,
  q8_1,
};

/// The last Format enumerator (for range checks and iteration).
inline constexpr Format kLastFormat = Format::q8_1;

/// Instruction sets nibble has kernels for. avxvnni is AVX2 plus the 256-bit VEX-encoded
/// vpdpbusd (AVX-VNNI: Intel client CPUs since Alder Lake, AMD Zen 4/5); avx512 uses AVX-512
/// VNNI where the CPU has it; neon uses the dotprod extension where the CPU has it. New values are
/// appended (the integer values are part of the C API).
enum class Isa { scalar, avx2, avx512, neon, avxvnni };

/// Every Isa value, in increasing order of preference within a processor family.
inline constexpr Isa kAllIsas[] = {Isa::scalar, Isa::avx2, Isa::avxvnni, Isa::avx512, Isa::neon};

/// Static facts about a format.
struct FormatTraits {
  const char* name;          ///< lower-case name used by the CLI and Python ("q4_K")
  std::int64_t block_elems;  ///< values per block (1 for f32/f16)
  std::size_t block_bytes;   ///< bytes per block
  int gguf_type;             ///< ggml_type id in GGUF files (-1: none)
  Format activation;         ///< format the activations are quantized to for the dot product
};

/// Traits of `f` (a constexpr table lookup).
constexpr FormatTraits traits(Format f) {
  switch (f) {
    case Format::f32:
      return {"f32", 1, 4, 0, Format::f32};
    case Format::f16:
      return {"f16", 1, 2, 1, Format::f32};
    case Format::q8_0:
      return {"q8_0", 32, 34, 8, Format::q8_0};
    case Format::q4_K:
      return {"q4_K", 256, 144, 12, Format::q8_K};
    case Format::q5_K:
      return {"q5_K", 256, 176, 13, Format::q8_K};
    case Format::q6_K:
      return {"q6_K", 256, 210, 14, Format::q8_K};
    case Format::q8_K:
      return {"q8_K", 256, 292, 15, Format::q8_K};
    case Format::nf4:
      return {"nf4", 64, 36, -1, Format::f32};  // 32 packed bytes + fp32 absmax
    case Format::fp4:
      return {"fp4", 64, 36, -1, Format::f32};
    case Format::q4_0:
      return {"q4_0", 32, 18, 2, Format::q8_0};
    case Format::q4_1:
      return {"q4_1", 32, 20, 3, Format::q8_1};
    case Format::q5_0:
      return {"q5_0", 32, 22, 6, Format::q8_0};
    case Format::q5_1:
      return {"q5_1", 32, 24, 7, Format::q8_1};
    case Format::q2_K:
      return {"q2_K", 256, 84, 10, Format::q8_K};
    case Format::q3_K:
      return {"q3_K", 256, 110, 11, Format::q8_K};
    case Format::iq4_nl:
      return {"iq4_nl", 32, 18, 20, Format::q8_0};
    case Format::iq4_xs:
      return {"iq4_xs", 256, 136, 23, Format::q8_K};
    case Format::mxfp4:
      return {"mxfp4", 32, 17, 39, Format::q8_0};
    case Format::bf16:
      return {"bf16", 1, 2, 30, Format::f32};
    case Format::q8_1:
      return {"q8_1", 32, 36, 9, Format::f32};
  }
  return {"?", 1, 0, -1, Format::f32};
}

/// True when nibble has a codec for `f` (every enumerator today). A format added with its GGUF
/// traits only returns false here; quantize / dequantize / gemv / gemm on it throw
/// nibble::Error ("... not implemented").
constexpr bool format_implemented(Format f) {
  return static_cast<int>(f) >= 0 && static_cast<int>(f) <= static_cast<int>(kLastFormat);
}

/// True when quantize() uses the importance weights for `f` (ggml's quant_weights path); the
/// other formats ignore them.
constexpr bool has_importance_quantizer(Format f) {
  return f == Format::q4_K || f == Format::q5_K || f == Format::q6_K || f == Format::q4_0 ||
         f == Format::q4_1 || f == Format::q5_0 || f == Format::q5_1 || f == Format::iq4_nl ||
         f == Format::iq4_xs || f == Format::q2_K || f == Format::q3_K;
}

/// Name of an ISA ("scalar", "avx2", "avxvnni", "avx512", "neon").
constexpr const char* isa_name(Isa i) {
  switch (i) {
    case Isa::scalar:
      return "scalar";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
    case Isa::neon:
      return "neon";
    case Isa::avxvnni:
      return "avxvnni";
  }
  return "?";
}

}  // namespace nibble
