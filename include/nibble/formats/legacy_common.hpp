// nibble: helpers shared by the ggml "legacy" 32-value block formats (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_1): the C float -> small-integer conversions ggml's reference quantizers rely on, the
// per-row sigma^2 used by their importance-weighted variants, and the weighted symmetric scale
// search (ggml's make_qx_quants with caller weights) used by the Q4_0/Q5_0 importance path.
//
// Plain float32 arithmetic in ggml's operation order; bit-identical with -ffp-contract=off.
#pragma once

#include "nibble/core/config.hpp"
#include <cmath>
#include <cstdint>

#include "nibble/formats/kquant_common.hpp"

namespace nibble::ref {
namespace legacy {

/// Values per block of every legacy format.
constexpr int kQK = 32;

/// `(int8_t)v` as the x86-64 compilers that built ggml emit it: truncate to int32
/// (cvttss2si; INT_MIN for NaN / out of range) and keep the low byte.
NIBBLE_INLINE int trunc_i8(float v) {
  return static_cast<std::int8_t>(static_cast<std::uint8_t>(cvt_trunc_i32(v) & 0xFF));
}

/// `(uint8_t)v` the same way: int32 truncation, low byte.
NIBBLE_INLINE int trunc_u8(float v) {
  return static_cast<std::uint8_t>(cvt_trunc_i32(v) & 0xFF);
}

/// sigma^2 = sum(x^2) / n over the whole row (float, value order), the term ggml adds to x^2
/// inside the importance weights qw * sqrt(sigma^2 + x^2).
NIBBLE_INLINE float row_sigma2(const float* x, std::int64_t n) {
  float s = 0;
  for (std::int64_t j = 0; j < n; ++j) s += x[j] * x[j];
  return s / static_cast<float>(n);
}

/// Importance weights of one 32-value block: w[j] = qw[j] * sqrt(sigma2 + x[j]^2).
NIBBLE_INLINE void block_weights(const float* x, const float* qw, float sigma2, float* w) {
  for (int j = 0; j < kQK; ++j) w[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

/// Weighted symmetric scale search over `n` values: levels l in [-nmax, nmax-1] stored as
/// L = l + nmax, value = scale * l. Starts from iscale = -nmax / (value of largest magnitude),
/// takes the weighted least-squares scale, then tries the 18 inverse scales
/// -(nmax + 0.1*is) / max (is = -9..9, is != 0) and keeps the one maximizing sumlx^2 / suml2.
/// Returns the scale (0 and all L = 0 when max |x| < 1e-15). ggml's make_qx_quants with
/// rmse_type 1 and explicit weights `w`.
NIBBLE_INLINE float search_symmetric_scale(int n, int nmax, const float* x, std::uint8_t* L,
                                           const float* w) {
  float amax = 0;
  float vmax = 0;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) {
      amax = a;
      vmax = x[i];
    }
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  auto level = [nmax](float v) {
    const int l = nearest_int(v);
    return l < -nmax ? -nmax : (l > nmax - 1 ? nmax - 1 : l);
  };
  auto sums = [&](float inv, float& sumlx, float& suml2) {
    sumlx = 0;
    suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(level(inv * x[i]));
      sumlx += w[i] * x[i] * l;
      suml2 += w[i] * l * l;
    }
  };
  auto store = [&](float inv) {
    for (int i = 0; i < n; ++i) L[i] = static_cast<std::uint8_t>(nmax + level(inv * x[i]));
  };
  float iscale = static_cast<float>(-nmax) / vmax;
  float sumlx, suml2;
  sums(iscale, sumlx, suml2);
  store(iscale);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / vmax;
    sums(iscale, sumlx, suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      store(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

/// Throws unless `qw` is non-null (importance-weighted quantizers).
NIBBLE_INLINE void check_weights(const char* fn, const float* qw, std::int64_t n) {
  if (!qw && n > 0)
    nibble::detail::fail(fn, ": qw is null, expected n = ", n, " importance values");
}

}  // namespace legacy
}  // namespace nibble::ref
