// nibble (internal): the packed (row-interleaved) layout of each packable format, and the
// permutation between it and the plain GGUF layout for one 16-row group (nibble/packed.hpp).
//
// Plain inline functions: include this header only from translation units compiled WITHOUT ISA
// flags (never from src/isa/*.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nibble/core/types.hpp"
#include "nibble/packed.hpp"

namespace nibble::detail {

/// One field of a block: `bytes` bytes at `offset` in the plain block, interleaved across the
/// 16 rows in units of `unit` bytes.
struct PackField {
  int offset, bytes, unit;
};

/// The fields of a packable format's block in packed storage order (they cover the block
/// exactly once): field f occupies 16 * bytes bytes of the group block, after the fields before
/// it. The order is the order in which the packed kernels read the units, so that a GEMV reads
/// one sequential stream.
struct PackLayout {
  int nfields = 0;
  PackField field[64] = {};
};

namespace packed_detail {
/// Q6_K in the order its kernel reads: for each half hh and k = 0..7, ql unit 16 hh + k, ql unit
/// 16 hh + 8 + k and qh unit 8 hh + k; then the 16 scales, then d.
inline PackLayout q6_K_layout() {
  PackLayout l;
  for (int hh = 0; hh < 2; ++hh)
    for (int k = 0; k < 8; ++k) {
      l.field[l.nfields++] = {4 * (16 * hh + k), 4, 4};
      l.field[l.nfields++] = {4 * (16 * hh + 8 + k), 4, 4};
      l.field[l.nfields++] = {128 + 4 * (8 * hh + k), 4, 4};
    }
  l.field[l.nfields++] = {192, 16, 4};
  l.field[l.nfields++] = {208, 2, 2};
  return l;
}
}  // namespace packed_detail

/// The layout of `f`, or nullptr if `f` is not packable.
inline const PackLayout* pack_layout(Format f) {
  static const PackLayout q4_K{1, {{0, 144, 4}}};
  static const PackLayout q5_K{1, {{0, 176, 4}}};
  static const PackLayout q6_K = packed_detail::q6_K_layout();
  static const PackLayout q8_0{2, {{0, 2, 2}, {2, 32, 4}}};  // d | qs
  switch (f) {
    case Format::q4_K:
      return &q4_K;
    case Format::q5_K:
      return &q5_K;
    case Format::q6_K:
      return &q6_K;
    case Format::q8_0:
      return &q8_0;
    default:
      return nullptr;
  }
}

/// Packs one group: the 16 plain rows at `rows` (row_bytes apart, nb blocks of block_bytes each)
/// into `out` (16 * nb * block_bytes bytes).
inline void pack_group(const PackLayout& l, std::size_t block_bytes, std::int64_t nb,
                       const std::uint8_t* rows, std::size_t row_bytes, std::uint8_t* out) {
  constexpr int kG = static_cast<int>(kPackedGroupRows);
  for (std::int64_t b = 0; b < nb; ++b) {
    std::uint8_t* fo = out + static_cast<std::size_t>(b) * kG * block_bytes;
    for (int f = 0; f < l.nfields; ++f) {
      const PackField& fd = l.field[f];
      const int units = fd.bytes / fd.unit;
      for (int i = 0; i < kG; ++i) {
        const std::uint8_t* in = rows + i * row_bytes + b * block_bytes + fd.offset;
        for (int u = 0; u < units; ++u)
          std::memcpy(fo + (kG * u + i) * fd.unit, in + u * fd.unit, fd.unit);
      }
      fo += static_cast<std::size_t>(kG) * fd.bytes;
    }
  }
}

/// The inverse of pack_group: the 16 plain rows of the packed group at `in` into `rows`.
inline void unpack_group(const PackLayout& l, std::size_t block_bytes, std::int64_t nb,
                         const std::uint8_t* in, std::uint8_t* rows, std::size_t row_bytes) {
  constexpr int kG = static_cast<int>(kPackedGroupRows);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::uint8_t* fi = in + static_cast<std::size_t>(b) * kG * block_bytes;
    for (int f = 0; f < l.nfields; ++f) {
      const PackField& fd = l.field[f];
      const int units = fd.bytes / fd.unit;
      for (int i = 0; i < kG; ++i) {
        std::uint8_t* o = rows + i * row_bytes + b * block_bytes + fd.offset;
        for (int u = 0; u < units; ++u)
          std::memcpy(o + u * fd.unit, fi + (kG * u + i) * fd.unit, fd.unit);
      }
      fi += static_cast<std::size_t>(kG) * fd.bytes;
    }
  }
}

}  // namespace nibble::detail
