// nibble: the checked, Context-free public entry points row_bytes / quantize / dequantize and
// the bitsandbytes-compatible nf4::quantize / nf4::dequantize. They run the scalar reference
// codecs of nibble/formats/*, one row at a time, after validating every argument (nothing is
// written when an argument is rejected). The Context overloads live in compute.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "checks.hpp"
#include "nibble/nibble.hpp"

namespace nibble {

namespace {

// Quantizes one row of `cols` values (validated) into `out` (row_bytes(f, cols) bytes).
void quantize_row(Format f, const float* x, std::int64_t cols, void* out, const float* qw) {
  switch (f) {
    case Format::f32:
      std::memcpy(out, x, static_cast<std::size_t>(cols) * sizeof(float));
      return;
    case Format::f16: {
      auto* h = static_cast<fp16_t*>(out);
      for (std::int64_t i = 0; i < cols; ++i) h[i] = fp32_to_fp16(x[i]);
      return;
    }
    case Format::q8_0:
      ref::quantize_q8_0(x, static_cast<BlockQ8_0*>(out), cols);
      return;
    case Format::q8_K:
      ref::quantize_q8_K(x, static_cast<BlockQ8_K*>(out), cols);
      return;
    case Format::q4_K:
      if (qw)
        ref::quantize_q4_K_imatrix(x, static_cast<BlockQ4_K*>(out), cols, qw);
      else
        ref::quantize_q4_K(x, static_cast<BlockQ4_K*>(out), cols);
      return;
    case Format::q5_K:
      if (qw)
        ref::quantize_q5_K_imatrix(x, static_cast<BlockQ5_K*>(out), cols, qw);
      else
        ref::quantize_q5_K(x, static_cast<BlockQ5_K*>(out), cols);
      return;
    case Format::q6_K:
      if (qw)
        ref::quantize_q6_K_imatrix(x, static_cast<BlockQ6_K*>(out), cols, qw);
      else
        ref::quantize_q6_K(x, static_cast<BlockQ6_K*>(out), cols);
      return;
    case Format::nf4:
      ref::quantize_nf4(x, static_cast<BlockNF4*>(out), cols, false);
      return;
    case Format::fp4:
      ref::quantize_nf4(x, static_cast<BlockNF4*>(out), cols, true);
      return;
    case Format::q4_0:
      if (qw)
        ref::quantize_q4_0_imatrix(x, static_cast<BlockQ4_0*>(out), cols, qw);
      else
        ref::quantize_q4_0(x, static_cast<BlockQ4_0*>(out), cols);
      return;
    case Format::q4_1:
      if (qw)
        ref::quantize_q4_1_imatrix(x, static_cast<BlockQ4_1*>(out), cols, qw);
      else
        ref::quantize_q4_1(x, static_cast<BlockQ4_1*>(out), cols);
      return;
    case Format::q5_0:
      if (qw)
        ref::quantize_q5_0_imatrix(x, static_cast<BlockQ5_0*>(out), cols, qw);
      else
        ref::quantize_q5_0(x, static_cast<BlockQ5_0*>(out), cols);
      return;
    case Format::q5_1:
      if (qw)
        ref::quantize_q5_1_imatrix(x, static_cast<BlockQ5_1*>(out), cols, qw);
      else
        ref::quantize_q5_1(x, static_cast<BlockQ5_1*>(out), cols);
      return;
    case Format::q8_1:
      ref::quantize_q8_1(x, static_cast<BlockQ8_1*>(out), cols);
      return;
    case Format::bf16:
      ref::quantize_bf16(x, static_cast<bf16_t*>(out), cols);
      return;
    case Format::iq4_nl:
      ref::quantize_iq4_nl(x, static_cast<BlockIQ4_NL*>(out), cols, qw);
      return;
    case Format::iq4_xs:
      ref::quantize_iq4_xs(x, static_cast<BlockIQ4_XS*>(out), cols, qw);
      return;
    case Format::mxfp4:
      ref::quantize_mxfp4(x, static_cast<BlockMXFP4*>(out), cols);
      return;
    case Format::q2_K:
      if (qw)
        ref::quantize_q2_K_imatrix(x, static_cast<BlockQ2_K*>(out), cols, qw);
      else
        ref::quantize_q2_K(x, static_cast<BlockQ2_K*>(out), cols);
      return;
    case Format::q3_K:
      if (qw)
        ref::quantize_q3_K_imatrix(x, static_cast<BlockQ3_K*>(out), cols, qw);
      else
        ref::quantize_q3_K(x, static_cast<BlockQ3_K*>(out), cols);
      return;
  }
  detail::fail("quantize: format ", traits(f).name, " is not implemented yet");
}

// Dequantizes one row of `cols` values (validated) from `in`.
void dequantize_row(Format f, const void* in, std::int64_t cols, float* y) {
  switch (f) {
    case Format::f32:
      std::memcpy(y, in, static_cast<std::size_t>(cols) * sizeof(float));
      return;
    case Format::f16: {
      const auto* h = static_cast<const fp16_t*>(in);
      for (std::int64_t i = 0; i < cols; ++i) y[i] = fp16_to_fp32(h[i]);
      return;
    }
    case Format::q8_0:
      ref::dequantize_q8_0(static_cast<const BlockQ8_0*>(in), y, cols);
      return;
    case Format::q8_K:
      ref::dequantize_q8_K(static_cast<const BlockQ8_K*>(in), y, cols);
      return;
    case Format::q4_K:
      ref::dequantize_q4_K(static_cast<const BlockQ4_K*>(in), y, cols);
      return;
    case Format::q5_K:
      ref::dequantize_q5_K(static_cast<const BlockQ5_K*>(in), y, cols);
      return;
    case Format::q6_K:
      ref::dequantize_q6_K(static_cast<const BlockQ6_K*>(in), y, cols);
      return;
    case Format::nf4:
      ref::dequantize_nf4(static_cast<const BlockNF4*>(in), y, cols, false);
      return;
    case Format::fp4:
      ref::dequantize_nf4(static_cast<const BlockNF4*>(in), y, cols, true);
      return;
    case Format::q4_0:
      ref::dequantize_q4_0(static_cast<const BlockQ4_0*>(in), y, cols);
      return;
    case Format::q4_1:
      ref::dequantize_q4_1(static_cast<const BlockQ4_1*>(in), y, cols);
      return;
    case Format::q5_0:
      ref::dequantize_q5_0(static_cast<const BlockQ5_0*>(in), y, cols);
      return;
    case Format::q5_1:
      ref::dequantize_q5_1(static_cast<const BlockQ5_1*>(in), y, cols);
      return;
    case Format::q8_1:
      ref::dequantize_q8_1(static_cast<const BlockQ8_1*>(in), y, cols);
      return;
    case Format::bf16:
      ref::dequantize_bf16(static_cast<const bf16_t*>(in), y, cols);
      return;
    case Format::iq4_nl:
      ref::dequantize_iq4_nl(static_cast<const BlockIQ4_NL*>(in), y, cols);
      return;
    case Format::iq4_xs:
      ref::dequantize_iq4_xs(static_cast<const BlockIQ4_XS*>(in), y, cols);
      return;
    case Format::mxfp4:
      ref::dequantize_mxfp4(static_cast<const BlockMXFP4*>(in), y, cols);
      return;
    case Format::q2_K:
      ref::dequantize_q2_K(static_cast<const BlockQ2_K*>(in), y, cols);
      return;
    case Format::q3_K:
      ref::dequantize_q3_K(static_cast<const BlockQ3_K*>(in), y, cols);
      return;
  }
  detail::fail("dequantize: format ", traits(f).name, " is not implemented yet");
}

bool valid_nf4_blocksize(std::int64_t bs) {
  for (std::int64_t v = 32; v <= 4096; v *= 2)
    if (bs == v) return true;
  return false;
}

void check_nf4_blocksize(std::int64_t bs, const char* fn) {
  if (!valid_nf4_blocksize(bs))
    detail::fail(fn, ": blocksize = ", bs,
                 " is not one of 32, 64, 128, 256, 512, 1024, 2048, 4096");
}

}  // namespace

std::size_t row_bytes(Format f, std::int64_t cols) {
  return checks::row_bytes(f, cols, "row_bytes");
}

void quantize(Format f, const float* src, std::int64_t rows, std::int64_t cols, void* dst,
              const float* importance) {
  checks::check_quantize_args(f, src, rows, cols, dst, importance, "quantize");
  if (rows == 0 || cols == 0) return;
  const std::size_t rb = checks::row_bytes(f, cols, "quantize");
  auto* out = static_cast<std::uint8_t*>(dst);
  // Formats without an importance-weighted quantizer ignore the weights.
  const bool weighted = has_importance_quantizer(f);
  for (std::int64_t r = 0; r < rows; ++r)
    quantize_row(f, src + r * cols, cols, out + static_cast<std::size_t>(r) * rb,
                 weighted ? importance : nullptr);
}

void dequantize(Format f, const void* src, std::int64_t rows, std::int64_t cols, float* dst) {
  checks::check_dequantize_args(f, src, rows, cols, dst, "dequantize");
  if (rows == 0 || cols == 0) return;
  const std::size_t rb = checks::row_bytes(f, cols, "dequantize");
  const auto* in = static_cast<const std::uint8_t*>(src);
  for (std::int64_t r = 0; r < rows; ++r)
    dequantize_row(f, in + static_cast<std::size_t>(r) * rb, cols, dst + r * cols);
}

namespace nf4 {

Quantized quantize(const float* x, std::int64_t n, int blocksize, bool double_quant, bool fp4) {
  const char* fn = "nf4::quantize";
  if (n < 0) detail::fail(fn, ": n = ", n, " must be >= 0");
  check_nf4_blocksize(blocksize, fn);
  checks::check_ptr(x, "x", n > 0, fn);
  checks::check_finite(x, n, "x", fn);

  Quantized q;
  q.n = n;
  q.blocksize = blocksize;
  q.fp4 = fp4;
  q.double_quant = double_quant;
  const std::int64_t nblocks = n / blocksize + (n % blocksize != 0);
  q.packed.resize(static_cast<std::size_t>(n / 2 + n % 2));
  std::vector<float> absmax(static_cast<std::size_t>(nblocks));
  ref::quantize_4bit(x, n, blocksize, fp4, q.packed.data(), absmax.data());
  if (!double_quant) {
    q.absmax = std::move(absmax);
    return q;
  }
  q.offset = ref::double_quant_offset(absmax.data(), nblocks);
  q.qabsmax.resize(static_cast<std::size_t>(nblocks));
  q.nested_absmax.resize(static_cast<std::size_t>((nblocks + 255) / 256));
  ref::quantize_absmax(absmax.data(), nblocks, q.offset, q.qabsmax.data(), q.nested_absmax.data());
  return q;
}

void dequantize(const Quantized& q, float* out) {
  const char* fn = "nf4::dequantize";
  if (q.n < 0) detail::fail(fn, ": q.n = ", q.n, " must be >= 0");
  check_nf4_blocksize(q.blocksize, fn);
  const std::int64_t nblocks = q.n / q.blocksize + (q.n % q.blocksize != 0);
  const auto want_bytes = static_cast<std::size_t>(q.n / 2 + q.n % 2);
  if (q.packed.size() != want_bytes)
    detail::fail(fn, ": q.packed.size() = ", q.packed.size(), ", expected (n+1)/2 = ", want_bytes);
  if (!q.double_quant) {
    if (q.absmax.size() != static_cast<std::size_t>(nblocks))
      detail::fail(fn, ": q.absmax.size() = ", q.absmax.size(), ", expected ", nblocks, " blocks");
    checks::check_finite(q.absmax.data(), nblocks, "q.absmax", fn);
  } else {
    const auto nested = static_cast<std::size_t>((nblocks + 255) / 256);
    if (q.qabsmax.size() != static_cast<std::size_t>(nblocks))
      detail::fail(fn, ": q.qabsmax.size() = ", q.qabsmax.size(), ", expected ", nblocks,
                   " blocks");
    if (q.nested_absmax.size() != nested)
      detail::fail(fn, ": q.nested_absmax.size() = ", q.nested_absmax.size(), ", expected ",
                   nested);
    checks::check_finite(q.nested_absmax.data(), static_cast<std::int64_t>(nested),
                         "q.nested_absmax", fn);
    if (!std::isfinite(q.offset)) detail::fail(fn, ": q.offset = ", q.offset, " is not finite");
  }
  checks::check_ptr(out, "out", q.n > 0, fn);
  if (q.n == 0) return;

  if (!q.double_quant) {
    ref::dequantize_4bit(q.packed.data(), q.absmax.data(), q.n, q.blocksize, q.fp4, out);
    return;
  }
  std::vector<float> absmax(static_cast<std::size_t>(nblocks));
  ref::dequantize_absmax(q.qabsmax.data(), q.nested_absmax.data(), q.offset, nblocks,
                         absmax.data());
  ref::dequantize_4bit(q.packed.data(), absmax.data(), q.n, q.blocksize, q.fp4, out);
}

}  // namespace nf4
}  // namespace nibble
