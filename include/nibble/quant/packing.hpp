// nibble: on-disk int32 packings of GPTQ v1 checkpoints (AutoGPTQ/GPTQModel "gptq") and AutoAWQ
// "GEMM" checkpoints. Specification: reference/ALGORITHMS.md 2.6 and 3.7. Header-only.
//
// GPTQ: qweight [K/32*bits, N] packs input rows, the lowest input index in the least significant
// bits; every 32 inputs form one little-endian stream of `bits` words (this is the plain
// per-word order for 2/4/8 bits and the 96-bit stream for 3 bits). qzeros [n_groups, N/32*bits]
// packs (zero - 1) the same way along the output axis. AWQ GEMM: qweight [K, N/8], nibble i of
// word c holds output 8c + ORDER[i], ORDER = {0, 2, 4, 6, 1, 3, 5, 7}; zeros without offset.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include <Eigen/Dense>

#include "nibble/core/error.hpp"
#include "nibble/core/fp16.hpp"
#include "nibble/quant/gptq.hpp"
#include "nibble/quant/rtn.hpp"

namespace nibble {
namespace packing {

/// AutoAWQ GEMM interleave: nibble i of a word holds output column 8c + kAwqOrder[i].
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
/// Inverse of kAwqOrder: output column 8c + m lives in nibble kAwqReverse[m].
constexpr int kAwqReverse[8] = {0, 4, 1, 5, 2, 6, 3, 7};

namespace detail {
// Packs 32 codes (stride `in_stride`) into `bits` words (stride `out_stride`) as one
// little-endian bit stream: code k occupies stream bits [k*bits, (k+1)*bits).
inline void pack32(const std::int32_t* in, std::int64_t in_stride, int bits, std::int32_t* out,
                   std::int64_t out_stride) {
  std::uint32_t w[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int k = 0; k < 32; ++k) {
    const std::uint32_t v = static_cast<std::uint32_t>(in[k * in_stride]);
    const int pos = k * bits, word = pos / 32, off = pos % 32;
    w[word] |= v << off;
    if (off + bits > 32) w[word + 1] |= v >> (32 - off);
  }
  for (int i = 0; i < bits; ++i) out[i * out_stride] = static_cast<std::int32_t>(w[i]);
}
// Inverse of pack32.
inline void unpack32(const std::int32_t* in, std::int64_t in_stride, int bits, std::int32_t* out,
                     std::int64_t out_stride) {
  std::uint32_t w[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < bits; ++i) w[i] = static_cast<std::uint32_t>(in[i * in_stride]);
  const std::uint32_t mask = (1u << bits) - 1u;
  for (int k = 0; k < 32; ++k) {
    const int pos = k * bits, word = pos / 32, off = pos % 32;
    std::uint32_t v = w[word] >> off;
    if (off + bits > 32) v |= w[word + 1] << (32 - off);
    out[k * out_stride] = static_cast<std::int32_t>(v & mask);
  }
}
inline void check_codes(const std::int32_t* codes, std::int64_t n, int bits, const char* what) {
  const std::int32_t maxq = (1 << bits) - 1;
  for (std::int64_t i = 0; i < n; ++i)
    if (codes[i] < 0 || codes[i] > maxq)
      nibble::detail::fail(what, "[", i, "] = ", codes[i], " is outside [0, ", maxq, "]");
}
inline void check_dims(std::int64_t a, std::int64_t b, const char* an, const char* bn) {
  if (a <= 0 || b <= 0) nibble::detail::fail(an, " = ", a, " and ", bn, " = ", b, " must be > 0");
}
}  // namespace detail

/// Packs a K x N row-major matrix of codes (each in [0, 2^bits)) along K into (K/32*bits) x N
/// int32 words (GPTQ qweight layout). Throws unless bits in {2,3,4,8}, K % 32 == 0, codes in range.
inline std::vector<std::int32_t> pack_rows(const std::int32_t* codes, std::int64_t K,
                                           std::int64_t N, int bits) {
  rtn::check_bits(bits);
  detail::check_dims(K, N, "K", "N");
  if (K % 32 != 0) nibble::detail::fail("pack_rows: K = ", K, " is not a multiple of 32");
  detail::check_codes(codes, K * N, bits, "codes");
  std::vector<std::int32_t> out(static_cast<std::size_t>(K / 32 * bits * N));
  for (std::int64_t b = 0; b < K / 32; ++b)
    for (std::int64_t n = 0; n < N; ++n)
      detail::pack32(codes + b * 32 * N + n, N, bits, out.data() + b * bits * N + n, N);
  return out;
}

/// Inverse of pack_rows: (K/32*bits) x N words -> K x N codes.
inline std::vector<std::int32_t> unpack_rows(const std::int32_t* packed, std::int64_t K,
                                             std::int64_t N, int bits) {
  rtn::check_bits(bits);
  detail::check_dims(K, N, "K", "N");
  if (K % 32 != 0) nibble::detail::fail("unpack_rows: K = ", K, " is not a multiple of 32");
  std::vector<std::int32_t> out(static_cast<std::size_t>(K * N));
  for (std::int64_t b = 0; b < K / 32; ++b)
    for (std::int64_t n = 0; n < N; ++n)
      detail::unpack32(packed + b * bits * N + n, N, bits, out.data() + b * 32 * N + n, N);
  return out;
}

/// Packs an R x N row-major matrix of codes along N into R x (N/32*bits) words (GPTQ qzeros
/// layout). Throws unless bits in {2,3,4,8}, N % 32 == 0, codes in range.
inline std::vector<std::int32_t> pack_cols(const std::int32_t* codes, std::int64_t R,
                                           std::int64_t N, int bits) {
  rtn::check_bits(bits);
  detail::check_dims(R, N, "R", "N");
  if (N % 32 != 0) nibble::detail::fail("pack_cols: N = ", N, " is not a multiple of 32");
  detail::check_codes(codes, R * N, bits, "codes");
  const std::int64_t W = N / 32 * bits;
  std::vector<std::int32_t> out(static_cast<std::size_t>(R * W));
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t b = 0; b < N / 32; ++b)
      detail::pack32(codes + r * N + b * 32, 1, bits, out.data() + r * W + b * bits, 1);
  return out;
}

/// Inverse of pack_cols: R x (N/32*bits) words -> R x N codes.
inline std::vector<std::int32_t> unpack_cols(const std::int32_t* packed, std::int64_t R,
                                             std::int64_t N, int bits) {
  rtn::check_bits(bits);
  detail::check_dims(R, N, "R", "N");
  if (N % 32 != 0) nibble::detail::fail("unpack_cols: N = ", N, " is not a multiple of 32");
  const std::int64_t W = N / 32 * bits;
  std::vector<std::int32_t> out(static_cast<std::size_t>(R * N));
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t b = 0; b < N / 32; ++b)
      detail::unpack32(packed + r * W + b * bits, 1, bits, out.data() + r * N + b * 32, 1);
  return out;
}

/// A GPTQ v1 checkpoint of one linear (K = in features, N = out features).
struct GptqTensors {
  int bits = 4;
  std::int64_t K = 0, N = 0, n_groups = 0;
  std::vector<std::int32_t> qweight;  ///< (K/32*bits) x N
  std::vector<std::int32_t> qzeros;   ///< n_groups x (N/32*bits), fields hold zero - 1
  std::vector<fp16_t> scales;         ///< n_groups x N
  std::vector<std::int32_t> g_idx;    ///< K
};

/// Packs a GPTQ result (Q out x in, scale/zero out x n_groups, g_idx) as a v1 checkpoint:
/// scales stored as fp16; iw[j, o] = round((Q[o,j] + zero*scale) / scale_fp16) clamped to
/// [0, maxq] (GPTQModel's clamp); qzeros fields = zero - 1 (an asym zero of 0 is stored as the
/// all-ones field maxq, i.e. -1 masked to the field, instead of AutoGPTQ's corrupting OR; such a
/// zero does not survive the round trip). Throws on shape mismatch or K, N not multiples of 32.
inline GptqTensors gptq_pack(const gptq::Result& r, int bits) {
  rtn::check_bits(bits);
  const std::int64_t N = r.Q.rows(), K = r.Q.cols(), G = r.scale.cols();
  if (r.scale.rows() != N || r.zero.rows() != N || r.zero.cols() != G ||
      static_cast<std::int64_t>(r.g_idx.size()) != K || G < 1)
    nibble::detail::fail("gptq_pack: inconsistent result shapes (Q ", N, "x", K, ", scale ",
                         r.scale.rows(), "x", G, ", g_idx ", r.g_idx.size(), ")");
  const float maxq = rtn::max_q(bits);
  GptqTensors t;
  t.bits = bits;
  t.K = K;
  t.N = N;
  t.n_groups = G;
  t.g_idx = r.g_idx;
  t.scales.resize(static_cast<std::size_t>(G * N));
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t o = 0; o < N; ++o) t.scales[g * N + o] = fp32_to_fp16(r.scale(o, g));
  std::vector<std::int32_t> iw(static_cast<std::size_t>(K * N));
  for (std::int64_t j = 0; j < K; ++j) {
    const std::int32_t g = r.g_idx[j];
    if (g < 0 || g >= G) nibble::detail::fail("gptq_pack: g_idx[", j, "] = ", g, " out of range");
    for (std::int64_t o = 0; o < N; ++o) {
      const float sz = r.zero(o, g) * r.scale(o, g);
      float v = std::nearbyint((r.Q(o, j) + sz) / fp16_to_fp32(t.scales[g * N + o]));
      v = std::min(std::max(v, 0.0f), maxq);
      iw[j * N + o] = static_cast<std::int32_t>(v);
    }
  }
  t.qweight = pack_rows(iw.data(), K, N, bits);
  std::vector<std::int32_t> z(static_cast<std::size_t>(G * N));
  const std::int32_t mask = (1 << bits) - 1;
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t o = 0; o < N; ++o)
      z[g * N + o] = (static_cast<std::int32_t>(r.zero(o, g)) - 1) & mask;
  t.qzeros = pack_cols(z.data(), G, N, bits);
  return t;
}

/// Dequantizes a GPTQ v1 checkpoint: W[o, j] = scales[g, o] * (iw[j, o] - (iz[g, o] + 1)),
/// g = g_idx[j]. Returns out x in.
inline Eigen::MatrixXf gptq_dequantize(const GptqTensors& t) {
  const auto iw = unpack_rows(t.qweight.data(), t.K, t.N, t.bits);
  const auto iz = unpack_cols(t.qzeros.data(), t.n_groups, t.N, t.bits);
  Eigen::MatrixXf W(t.N, t.K);
  for (std::int64_t j = 0; j < t.K; ++j) {
    const std::int64_t g = t.g_idx[j];
    for (std::int64_t o = 0; o < t.N; ++o)
      W(o, j) = fp16_to_fp32(t.scales[g * t.N + o]) *
                static_cast<float>(iw[j * t.N + o] - (iz[g * t.N + o] + 1));
  }
  return W;
}

/// Packs an R x N row-major matrix of 4-bit codes along N with the AutoAWQ GEMM interleave into
/// R x (N/8) words. Throws unless N % 8 == 0 and codes are in [0, 15].
inline std::vector<std::int32_t> awq_pack_gemm(const std::int32_t* codes, std::int64_t R,
                                               std::int64_t N) {
  detail::check_dims(R, N, "R", "N");
  if (N % 8 != 0) nibble::detail::fail("awq_pack_gemm: N = ", N, " is not a multiple of 8");
  detail::check_codes(codes, R * N, 4, "codes");
  std::vector<std::int32_t> out(static_cast<std::size_t>(R * N / 8));
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t c = 0; c < N / 8; ++c) {
      std::uint32_t w = 0;
      for (int i = 0; i < 8; ++i)
        w |= static_cast<std::uint32_t>(codes[r * N + 8 * c + kAwqOrder[i]]) << (4 * i);
      out[r * (N / 8) + c] = static_cast<std::int32_t>(w);
    }
  return out;
}

/// Inverse of awq_pack_gemm: R x (N/8) words -> R x N codes.
inline std::vector<std::int32_t> awq_unpack_gemm(const std::int32_t* packed, std::int64_t R,
                                                 std::int64_t N) {
  detail::check_dims(R, N, "R", "N");
  if (N % 8 != 0) nibble::detail::fail("awq_unpack_gemm: N = ", N, " is not a multiple of 8");
  std::vector<std::int32_t> out(static_cast<std::size_t>(R * N));
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t c = 0; c < N / 8; ++c) {
      const std::uint32_t w = static_cast<std::uint32_t>(packed[r * (N / 8) + c]);
      for (int i = 0; i < 8; ++i)
        out[r * N + 8 * c + kAwqOrder[i]] = static_cast<std::int32_t>((w >> (4 * i)) & 15u);
    }
  return out;
}

/// An AutoAWQ GEMM checkpoint of one linear (K = in, N = out, 4-bit).
struct AwqTensors {
  std::int64_t K = 0, N = 0, group_size = 0;
  std::vector<std::int32_t> qweight;  ///< K x N/8
  std::vector<std::int32_t> qzeros;   ///< K/gs x N/8 (true zeros)
  std::vector<fp16_t> scales;         ///< K/gs x N
};

/// Packs AWQ-quantized weights (Wq: out x in dequantized values on the grid given by scale/zero,
/// out x K/gs, e.g. from rtn::awq_rtn on clip(W*s)) as an AutoAWQ GEMM checkpoint:
/// iw[j, o] = round((Wq[o,j] + zero*scale) / scale_fp16), g = j / gs, clamped to [0, 15].
/// Throws on shape mismatch, a group size not dividing K, N % 8 != 0.
inline AwqTensors awq_pack(const Eigen::MatrixXf& Wq, const Eigen::MatrixXf& scale,
                           const Eigen::MatrixXf& zero, int group_size) {
  const std::int64_t N = Wq.rows(), K = Wq.cols();
  const std::int64_t gs = rtn::effective_group(group_size, K, "awq_pack: group_size");
  const std::int64_t G = K / gs;
  if (scale.rows() != N || scale.cols() != G || zero.rows() != N || zero.cols() != G)
    nibble::detail::fail("awq_pack: scale/zero are ", scale.rows(), "x", scale.cols(), "/",
                         zero.rows(), "x", zero.cols(), ", expected ", N, "x", G);
  AwqTensors t;
  t.K = K;
  t.N = N;
  t.group_size = gs;
  t.scales.resize(static_cast<std::size_t>(G * N));
  std::vector<std::int32_t> z(static_cast<std::size_t>(G * N)), iw(static_cast<std::size_t>(K * N));
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t o = 0; o < N; ++o) {
      t.scales[g * N + o] = fp32_to_fp16(scale(o, g));
      z[g * N + o] = static_cast<std::int32_t>(zero(o, g));
    }
  for (std::int64_t j = 0; j < K; ++j)
    for (std::int64_t o = 0; o < N; ++o) {
      const std::int64_t g = j / gs;
      float v =
          std::nearbyint((Wq(o, j) + zero(o, g) * scale(o, g)) / fp16_to_fp32(t.scales[g * N + o]));
      iw[j * N + o] = static_cast<std::int32_t>(std::min(std::max(v, 0.0f), 15.0f));
    }
  t.qweight = awq_pack_gemm(iw.data(), K, N);
  t.qzeros = awq_pack_gemm(z.data(), G, N);
  return t;
}

/// Dequantizes an AutoAWQ GEMM checkpoint: W[o, j] = (iw[j,o] - iz[g,o]) * scales[g,o]. out x in.
inline Eigen::MatrixXf awq_dequantize(const AwqTensors& t) {
  const std::int64_t G = t.K / t.group_size;
  const auto iw = awq_unpack_gemm(t.qweight.data(), t.K, t.N);
  const auto iz = awq_unpack_gemm(t.qzeros.data(), G, t.N);
  Eigen::MatrixXf W(t.N, t.K);
  for (std::int64_t j = 0; j < t.K; ++j) {
    const std::int64_t g = j / t.group_size;
    for (std::int64_t o = 0; o < t.N; ++o)
      W(o, j) = static_cast<float>(iw[j * t.N + o] - iz[g * t.N + o]) *
                fp16_to_fp32(t.scales[g * t.N + o]);
  }
  return W;
}

}  // namespace packing
}  // namespace nibble
