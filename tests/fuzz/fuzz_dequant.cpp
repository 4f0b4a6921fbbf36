// libFuzzer target: one block decoder, chosen at compile time with -DNIBBLE_FUZZ_FORMAT=<Format
// enumerator> (q8_0, q4_K, q5_K, q6_K, q8_K, nf4, fp4, and the decoders of q4_0, q4_1, q5_0,
// q5_1, q8_1, q2_K, q3_K, iq4_nl, iq4_xs, mxfp4, bf16). The input is taken as whole blocks
// (any bytes are a valid block); the public dispatched nibble::dequantize on every ISA this CPU
// runs must match the header-only reference decoder bit for bit (NaN matches any NaN).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "nibble/nibble.hpp"

#ifndef NIBBLE_FUZZ_FORMAT
#define NIBBLE_FUZZ_FORMAT q8_0
#endif

namespace {

constexpr nibble::Format kFormat = nibble::Format::NIBBLE_FUZZ_FORMAT;

void reference(const std::uint8_t* blocks, std::int64_t n, float* y) {
  using namespace nibble;
  using namespace nibble::ref;
  switch (kFormat) {
    case Format::q8_0:
      dequantize_q8_0(reinterpret_cast<const BlockQ8_0*>(blocks), y, n);
      break;
    case Format::q4_K:
      dequantize_q4_K(reinterpret_cast<const BlockQ4_K*>(blocks), y, n);
      break;
    case Format::q5_K:
      dequantize_q5_K(reinterpret_cast<const BlockQ5_K*>(blocks), y, n);
      break;
    case Format::q6_K:
      dequantize_q6_K(reinterpret_cast<const BlockQ6_K*>(blocks), y, n);
      break;
    case Format::q8_K:
      dequantize_q8_K(reinterpret_cast<const BlockQ8_K*>(blocks), y, n);
      break;
    case Format::nf4:
      dequantize_nf4(reinterpret_cast<const BlockNF4*>(blocks), y, n, false);
      break;
    case Format::fp4:
      dequantize_nf4(reinterpret_cast<const BlockNF4*>(blocks), y, n, true);
      break;
    case Format::q4_0:
      dequantize_q4_0(reinterpret_cast<const BlockQ4_0*>(blocks), y, n);
      break;
    case Format::q4_1:
      dequantize_q4_1(reinterpret_cast<const BlockQ4_1*>(blocks), y, n);
      break;
    case Format::q5_0:
      dequantize_q5_0(reinterpret_cast<const BlockQ5_0*>(blocks), y, n);
      break;
    case Format::q5_1:
      dequantize_q5_1(reinterpret_cast<const BlockQ5_1*>(blocks), y, n);
      break;
    case Format::q8_1:
      dequantize_q8_1(reinterpret_cast<const BlockQ8_1*>(blocks), y, n);
      break;
    case Format::iq4_nl:
      dequantize_iq4_nl(reinterpret_cast<const BlockIQ4_NL*>(blocks), y, n);
      break;
    case Format::iq4_xs:
      dequantize_iq4_xs(reinterpret_cast<const BlockIQ4_XS*>(blocks), y, n);
      break;
    case Format::mxfp4:
      dequantize_mxfp4(reinterpret_cast<const BlockMXFP4*>(blocks), y, n);
      break;
    case Format::q2_K:
      dequantize_q2_K(reinterpret_cast<const BlockQ2_K*>(blocks), y, n);
      break;
    case Format::q3_K:
      dequantize_q3_K(reinterpret_cast<const BlockQ3_K*>(blocks), y, n);
      break;
    case Format::bf16:
      dequantize_bf16(reinterpret_cast<const bf16_t*>(blocks), y, n);
      break;
    default:
      std::abort();
  }
}

bool same(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  std::uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const nibble::FormatTraits tr = nibble::traits(kFormat);
  const std::size_t nblocks = size / tr.block_bytes;
  if (nblocks == 0 || nblocks > 4096) return 0;
  // Copy into an aligned buffer of whole blocks (the structs need their natural alignment).
  std::vector<std::uint64_t> buf((nblocks * tr.block_bytes + 7) / 8);
  std::memcpy(buf.data(), data, nblocks * tr.block_bytes);
  const auto* blocks = reinterpret_cast<const std::uint8_t*>(buf.data());
  const std::int64_t n = static_cast<std::int64_t>(nblocks) * tr.block_elems;
  std::vector<float> ref(static_cast<std::size_t>(n)), got(static_cast<std::size_t>(n));
  reference(blocks, n, ref.data());
  // One row of n values, and (when possible) several rows of one block each.
  try {
    for (nibble::Isa isa : nibble::available_isas()) {
      nibble::Context ctx;
      ctx.isa = isa;
      ctx.threads = 1;
      std::fill(got.begin(), got.end(), 0.0f);
      nibble::dequantize(ctx, kFormat, blocks, 1, n, got.data());
      for (std::int64_t i = 0; i < n; ++i) {
        if (!same(ref[static_cast<std::size_t>(i)], got[static_cast<std::size_t>(i)])) std::abort();
      }
      std::fill(got.begin(), got.end(), 0.0f);
      nibble::dequantize(ctx, kFormat, blocks, static_cast<std::int64_t>(nblocks), tr.block_elems,
                         got.data());
      for (std::int64_t i = 0; i < n; ++i) {
        if (!same(ref[static_cast<std::size_t>(i)], got[static_cast<std::size_t>(i)])) std::abort();
      }
    }
  } catch (const nibble::Error&) {
    // A format the public API does not decode in this build: nothing to compare.
  }
  return 0;
}
