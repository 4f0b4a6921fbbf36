// nibble: the per-ISA kernel table. One immutable instance per built ISA; src/dispatch.cpp picks
// one at run time. Functions here are unchecked hot paths: the public API in nibble.hpp validates
// shapes before calling them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nibble/core/types.hpp"

namespace nibble::kernels {

/// Capacity of the per-format table (more than the Format enumerators, which grow).
constexpr int kFormatSlots = 32;

/// Kernels of one weight format on one ISA. Any entry may be null (not provided: the caller
/// falls back to the scalar table).
struct FormatKernels {
  /// Dequantize `n` values (a multiple of the block size) from `src` to fp32 `dst`.
  void (*dequant)(const void* src, std::int64_t n, float* dst) = nullptr;
  /// Quantize `n` fp32 values (multiple of the block size) into blocks; `importance` (n weights
  /// or null). Must be byte-identical to the scalar reference.
  void (*quantize)(const float* src, std::int64_t n, void* dst, const float* importance) = nullptr;
  /// Optional activation re-layout. Null: gemm reads activation rows as they are (fp32, or
  /// blocks of the format's activation format traits(f).activation, as the activation
  /// quantizers below write them). Non-null: act_relayout turns one such row of `cols` values
  /// into the layout this table's gemm reads (a pure re-arrangement plus derived sums: no new
  /// rounding), act_bytes(cols) bytes long. Done once per call, shared by every thread.
  std::size_t (*act_bytes)(std::int64_t cols) = nullptr;
  void (*act_relayout)(const void* row, std::int64_t cols, void* dst) = nullptr;
  /// Y[j * ldy + r] = dot(W row r, activation row j) for r in [r0, r1), j in [0, n).
  /// `W` points at row 0, rows are `w_row_bytes` apart. `A` holds n activation rows (see
  /// act_relayout), `a_row_bytes` apart.
  void (*gemm)(const void* W, std::size_t w_row_bytes, std::int64_t r0, std::int64_t r1,
               std::int64_t cols, const void* A, std::size_t a_row_bytes, std::int64_t n, float* Y,
               std::int64_t ldy) = nullptr;
  /// Packed weights (nibble/packed.hpp), optional: Y[j * ldy + 16 g + i] = dot(row 16 g + i,
  /// activation row j) for the 16-row groups g in [g0, g1) of the packed matrix P (group g at
  /// P + g * 16 * row bytes). Activation rows: the activation format's blocks, re-laid out by
  /// packed_act_relayout when it is non-null (packed_act_bytes(cols) bytes each). Null: the
  /// driver unpacks each group and uses gemm.
  std::size_t (*packed_act_bytes)(std::int64_t cols) = nullptr;
  void (*packed_act_relayout)(const void* row, std::int64_t cols, void* dst) = nullptr;
  void (*gemm_packed)(const void* P, std::int64_t g0, std::int64_t g1, std::int64_t cols,
                      const void* A, std::size_t a_row_bytes, std::int64_t n, float* Y,
                      std::int64_t ldy) = nullptr;
  /// gemm_packed serves one activation row only (n = 1); for more the driver unpacks each group
  /// and uses gemm, as for a null gemm_packed.
  bool packed_gemv_only = false;
  /// Optional: the same product without rounding the fp32 activations (fp32 products of the
  /// dequantized weights), for tables whose gemm rounds them (NF4/FP4 GEMV on x86: int16), with
  /// its own activation re-layout (same contracts as gemm, act_bytes, act_relayout); chosen by
  /// Context::exact_nf4. Null: gemm is exact already.
  void (*gemm_exact)(const void* W, std::size_t w_row_bytes, std::int64_t r0, std::int64_t r1,
                     std::int64_t cols, const void* A, std::size_t a_row_bytes, std::int64_t n,
                     float* Y, std::int64_t ldy) = nullptr;
  std::size_t (*act_bytes_exact)(std::int64_t cols) = nullptr;
  void (*act_relayout_exact)(const void* row, std::int64_t cols, void* dst) = nullptr;
};

/// All kernels of one ISA.
struct KernelTable {
  Isa isa = Isa::scalar;
  FormatKernels fmt[kFormatSlots];  ///< indexed by static_cast<int>(Format)
  /// Activation quantizers (byte-identical to the scalar reference): `n` fp32 -> blocks.
  void (*quantize_act_q8_K)(const float* src, std::int64_t n, void* dst) = nullptr;
  void (*quantize_act_q8_0)(const float* src, std::int64_t n, void* dst) = nullptr;
  void (*quantize_act_q8_1)(const float* src, std::int64_t n, void* dst) = nullptr;
  /// W8A8 (SmoothQuant): Y[j * ldy + r] = w_scale[r] * a_scale[j] * sum_k W[r, k] * A[j, k] for
  /// r in [r0, r1), j in [0, n); W int8 rows x cols (row-major), A int8 n x cols, int32 sums.
  void (*w8a8_gemm)(const std::int8_t* W, const float* w_scale, std::int64_t r0, std::int64_t r1,
                    std::int64_t cols, const std::int8_t* A, const float* a_scale, std::int64_t n,
                    float* Y, std::int64_t ldy) = nullptr;
};

}  // namespace nibble::kernels
