// nibble: row-interleaved ("packed") weights for fast decode.
//
// The packed layout holds exactly the bytes of the GGUF layout, permuted. Rows are taken in
// groups of kPackedGroupRows (16). For each full group and each block column b, the 16 blocks
// b of the group's rows are stored together (16 * block_bytes bytes), field by field: the block
// is cut into fields, each field into units (4 bytes; 2 for an fp16 scalar, 1 for MXFP4's
// exponent byte), and unit u of a field of row i of the group lands at
//   16 * (bytes of the fields stored before it) + (16 * u + i) * unit_bytes
// within the group's block. The fields, in storage order:
//   q4_K, q5_K, q2_K, iq4_xs  the whole block (144, 176, 84, 136 bytes)
//   q3_K        bytes 0..107 (hmask, qs, scales); then d (2-byte unit)
//   q6_K        for each half hh = 0, 1 and k = 0..7: ql bytes 4 (16 hh + k) .. + 3, ql bytes
//               4 (16 hh + 8 + k) .. + 3, qh bytes 4 (8 hh + k) .. + 3; then the 16 scales; then
//               d (2-byte unit)
//   q8_0        d (2-byte unit); then the 32 quants
//   q4_0, iq4_nl  d (2-byte unit); then the 16 quant bytes
//   q4_1        d and m (one 4-byte unit); then the 16 quant bytes
//   q5_0        d (2-byte unit); then qh (4 bytes); then the 16 quant bytes
//   q5_1        d and m (one 4-byte unit); then qh; then the 16 quant bytes
//   mxfp4       e (1-byte unit); then the 16 quant bytes
//   nf4, fp4    the whole 36-byte block (fp32 absmax, then the 32 code bytes)
//   f16, bf16   the block is one value: one 2-byte unit (column c of the 16 rows, 32 bytes)
// (the order in which the kernels read them). The rows after the last full group keep
// the plain GGUF layout, at the end. So a packed matrix has rows * row_bytes(f, cols) bytes, like
// the plain one; it can be written to disk and mapped as it is, and unpack() gives back the GGUF
// bytes exactly.
//
// Why: a decode (GEMV) kernel then reads one sequential stream, and every SIMD register of
// weights holds the same 4 bytes of 16 (AVX-512), 8 (AVX2) or 4 (NEON) rows, so one int8 dot
// instruction with a broadcast activation serves all of them with no unpacking shuffles. On a
// machine with fast memory the plain layout's decode is compute-bound; this one streams at the
// memory bandwidth (docs/kernels.md, docs/benchmarks.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "nibble/nibble.hpp"

namespace nibble {

/// Rows per group of the packed layout.
inline constexpr std::int64_t kPackedGroupRows = 16;

/// True if format `f` has a packed layout (pack / unpack / the packed gemv and gemm).
bool packable(Format f);

/// Packs a rows x cols matrix of format `f` (plain GGUF row-major blocks at W, rows *
/// row_bytes(f, cols) bytes) into dst (the same number of bytes; must not overlap W). Throws
/// (writing nothing) if f is not packable, on null pointers, negative sizes or cols not a
/// multiple of the block size. Threads as ctx says.
void pack(const Context& ctx, Format f, const void* W, std::int64_t rows, std::int64_t cols,
          void* dst);

/// The inverse of pack(): the plain GGUF bytes of a packed matrix (byte-identical to what was
/// packed). Same checks as pack().
void unpack(const Context& ctx, Format f, const void* P, std::int64_t rows, std::int64_t cols,
            void* dst);

/// pack() without a second buffer: the plain matrix at W (rows * row_bytes(f, cols) bytes) is
/// rewritten in the packed layout. It needs one 16-row group of scratch per thread instead of a
/// second copy of the matrix, so weights loaded into writable memory (read into a buffer, or a
/// MAP_PRIVATE mapping) are packed at load without doubling the memory they take. Same checks
/// as pack() (throws before writing anything, also when the scratch cannot be allocated); the
/// bytes equal what pack() writes into a separate buffer. Use the result through
/// PackedWeights::view.
void pack_in_place(const Context& ctx, Format f, void* W, std::int64_t rows, std::int64_t cols);

/// unpack() without a second buffer: the packed matrix at P is rewritten as the plain GGUF bytes
/// it was packed from. As pack_in_place.
void unpack_in_place(const Context& ctx, Format f, void* P, std::int64_t rows, std::int64_t cols);

/// A packed matrix: its format, shape and bytes, owned (from pack()) or borrowed (view(), for
/// example a mapped file). Copies share the owned buffer; the bytes are never modified.
class PackedWeights {
 public:
  PackedWeights() = default;
  /// Borrows `packed` (rows * row_bytes(f, cols) bytes in the packed layout; the caller keeps
  /// it alive and unchanged while this object or a copy is used). Checks f, the sizes and the
  /// pointer.
  static PackedWeights view(Format f, const void* packed, std::int64_t rows, std::int64_t cols);

  Format format() const { return format_; }
  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  /// The packed bytes (nullptr for a default-constructed object).
  const void* data() const { return data_; }
  /// rows * row_bytes(format, cols).
  std::size_t bytes() const { return bytes_; }
  /// True if this object (or the object it was copied from) owns its bytes.
  bool owns() const { return owner_ != nullptr; }

 private:
  friend PackedWeights pack(const Context&, Format, const void*, std::int64_t, std::int64_t);
  Format format_ = Format::q4_K;
  std::int64_t rows_ = 0, cols_ = 0;
  const void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::shared_ptr<const std::uint8_t> owner_;
};

/// Packs W (plain GGUF blocks, rows x cols of format f) into a new owned buffer.
PackedWeights pack(const Context& ctx, Format f, const void* W, std::int64_t rows,
                   std::int64_t cols);

/// y = W x on packed weights (rows floats of y, cols of x). The same arithmetic as the plain
/// gemv of the same ISA up to the order of the float steps: results agree with it and with the
/// dequantized product within the tolerance stated in docs/kernels.md.
void gemv(const Context& ctx, const PackedWeights& W, const float* x, float* y);

/// Y = X W^T on packed weights; X: n x cols row-major; Y: n x rows row-major.
void gemm(const Context& ctx, const PackedWeights& W, const float* X, std::int64_t n, float* Y);

}  // namespace nibble
