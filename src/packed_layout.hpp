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

/// One field of a block: `bytes` bytes at `offset`, interleaved in units of `unit` bytes.
struct PackField {
  int offset, bytes, unit;
};

/// The fields of a packable format's block, in storage order (they tile the block).
struct PackLayout {
  int nfields = 0;
  PackField field[3] = {};
};

/// The layout of `f`, or nullptr if `f` is not packable.
inline const PackLayout* pack_layout(Format f) {
  static const PackLayout q4_K{1, {{0, 144, 4}}};
  static const PackLayout q5_K{1, {{0, 176, 4}}};
  switch (f) {
    case Format::q4_K:
      return &q4_K;
    case Format::q5_K:
      return &q5_K;
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
    std::uint8_t* o = out + static_cast<std::size_t>(b) * kG * block_bytes;
    for (int f = 0; f < l.nfields; ++f) {
      const PackField& fd = l.field[f];
      std::uint8_t* fo = o + static_cast<std::size_t>(kG) * fd.offset;
      const int units = fd.bytes / fd.unit;
      for (int i = 0; i < kG; ++i) {
        const std::uint8_t* in = rows + i * row_bytes + b * block_bytes + fd.offset;
        for (int u = 0; u < units; ++u)
          std::memcpy(fo + (kG * u + i) * fd.unit, in + u * fd.unit, fd.unit);
      }
    }
  }
}

/// The inverse of pack_group: the 16 plain rows of the packed group at `in` into `rows`.
inline void unpack_group(const PackLayout& l, std::size_t block_bytes, std::int64_t nb,
                         const std::uint8_t* in, std::uint8_t* rows, std::size_t row_bytes) {
  constexpr int kG = static_cast<int>(kPackedGroupRows);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::uint8_t* g = in + static_cast<std::size_t>(b) * kG * block_bytes;
    for (int f = 0; f < l.nfields; ++f) {
      const PackField& fd = l.field[f];
      const std::uint8_t* fi = g + static_cast<std::size_t>(kG) * fd.offset;
      const int units = fd.bytes / fd.unit;
      for (int i = 0; i < kG; ++i) {
        std::uint8_t* o = rows + i * row_bytes + b * block_bytes + fd.offset;
        for (int u = 0; u < units; ++u)
          std::memcpy(o + u * fd.unit, fi + (kG * u + i) * fd.unit, fd.unit);
      }
    }
  }
}

}  // namespace nibble::detail
