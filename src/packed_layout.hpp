// nibble (internal): the packed (row-interleaved) layout of each packable format, and the
// permutation between it and the plain GGUF layout for one 16-row group (nibble/packed.hpp).
//
// Plain inline functions: include this header only from translation units compiled WITHOUT ISA
// flags (never from src/isa/*.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

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
  // The 32-value formats: the scale field(s), then qh (Q5), then the 16 quant bytes.
  static const PackLayout q4_0{2, {{0, 2, 2}, {2, 16, 4}}};             // d | qs
  static const PackLayout q4_1{2, {{0, 4, 4}, {4, 16, 4}}};             // d and m | qs
  static const PackLayout q5_0{3, {{0, 2, 2}, {2, 4, 4}, {6, 16, 4}}};  // d | qh | qs
  static const PackLayout q5_1{3, {{0, 4, 4}, {4, 4, 4}, {8, 16, 4}}};  // d and m | qh | qs
  static const PackLayout mxfp4{2, {{0, 1, 1}, {1, 16, 4}}};            // e | qs
  static const PackLayout q2_K{1, {{0, 84, 4}}};                        // the whole block
  static const PackLayout q3_K{2, {{0, 108, 4}, {108, 2, 2}}};          // all but d | d
  static const PackLayout iq4_xs{1, {{0, 136, 4}}};                     // the whole block
  static const PackLayout nf4{2, {{0, 4, 4}, {4, 32, 4}}};              // absmax | codes
  static const PackLayout f16{1, {{0, 2, 2}}};  // f16, bf16: one value per block
  switch (f) {
    case Format::q4_K:
      return &q4_K;
    case Format::q5_K:
      return &q5_K;
    case Format::q6_K:
      return &q6_K;
    case Format::q8_0:
      return &q8_0;
    case Format::q4_0:
    case Format::iq4_nl:  // the same block structure: fp16 d, 16 bytes of nibbles
      return &q4_0;
    case Format::q4_1:
      return &q4_1;
    case Format::q5_0:
      return &q5_0;
    case Format::q5_1:
      return &q5_1;
    case Format::mxfp4:
      return &mxfp4;
    case Format::q2_K:
      return &q2_K;
    case Format::q3_K:
      return &q3_K;
    case Format::iq4_xs:
      return &iq4_xs;
    case Format::nf4:
    case Format::fp4:  // the same block: fp32 absmax, 32 code bytes
      return &nf4;
    case Format::f16:
    case Format::bf16:  // a block of one 2-byte value: column c of the 16 rows together
      return &f16;
    default:
      return nullptr;
  }
}

/// Copies `units` units of `unit` bytes (1, 2 or 4) between 16 rows and their interleaved form:
/// interleaved unit u of row i is at dst / src + (16 u + i) * unit; row i's units are at
/// rows[i]. `to_packed` selects the direction. The interleaved side is walked in order (one
/// sequential stream of stores when packing).
template <int kUnit>
inline void interleave16(const std::uint8_t* const* rows_in, std::uint8_t* const* rows_out,
                         std::uint8_t* packed_out, const std::uint8_t* packed_in, int units) {
  using U = std::conditional_t<kUnit == 4, std::uint32_t,
                               std::conditional_t<kUnit == 2, std::uint16_t, std::uint8_t>>;
  for (int u = 0; u < units; ++u) {
    for (int i = 0; i < 16; ++i) {
      U v;
      if (packed_out) {
        std::memcpy(&v, rows_in[i] + u * kUnit, kUnit);
        std::memcpy(packed_out + (16 * u + i) * kUnit, &v, kUnit);
      } else {
        std::memcpy(&v, packed_in + (16 * u + i) * kUnit, kUnit);
        std::memcpy(rows_out[i] + u * kUnit, &v, kUnit);
      }
    }
  }
}

/// permute_group for a block of one 2-byte unit (f16, bf16): the group is the transpose of 16
/// rows of nb values, done in tiles of 16 columns (each row's 32 bytes of a tile read or
/// written at once, the tile's 512 packed bytes in order). One thread, 4096 x 4096 f16 on a Zen 4
/// core (3 runs): pack 4.4-4.8 GB/s, unpack 4.2 (q4_K 5.4-6.6 / 5.0-5.8 in the same process);
/// permute_group's per-block field loop moved 1.5 GB/s (a /tmp harness, -O3).
inline void transpose16_u16(std::uint8_t* rows, std::size_t row_bytes, std::uint8_t* packed,
                            std::int64_t nb, bool to_packed) {
  constexpr int kG = static_cast<int>(kPackedGroupRows);
  const std::int64_t tiles = nb / kG;
  std::uint16_t t[kG][kG], o[kG][kG];  // t[row][column], o[column][row]
  if (to_packed) {
    for (std::int64_t k = 0; k < tiles; ++k) {
      const std::uint8_t* r = rows + static_cast<std::size_t>(k) * 2 * kG;
      for (int i = 0; i < kG; ++i) std::memcpy(t[i], r + i * row_bytes, sizeof t[i]);
      for (int c = 0; c < kG; ++c)
        for (int i = 0; i < kG; ++i) o[c][i] = t[i][c];
      std::memcpy(packed + static_cast<std::size_t>(k) * sizeof o, o, sizeof o);
    }
  } else {
    for (std::int64_t k = 0; k < tiles; ++k) {
      std::uint8_t* r = rows + static_cast<std::size_t>(k) * 2 * kG;
      std::memcpy(o, packed + static_cast<std::size_t>(k) * sizeof o, sizeof o);
      for (int i = 0; i < kG; ++i)
        for (int c = 0; c < kG; ++c) t[i][c] = o[c][i];
      for (int i = 0; i < kG; ++i) std::memcpy(r + i * row_bytes, t[i], sizeof t[i]);
    }
  }
  // the last columns one at a time: units of the 16 rows, as permute_group moves them
  std::uint8_t* r[kG];
  for (int i = 0; i < kG; ++i)
    r[i] = rows + i * row_bytes + static_cast<std::size_t>(tiles) * 2 * kG;
  std::uint8_t* g = packed + static_cast<std::size_t>(tiles) * sizeof o;
  interleave16<2>(r, r, to_packed ? g : nullptr, g, static_cast<int>(nb - tiles * kG));
}

/// Packs one group (to_packed) or unpacks it: the 16 plain rows at `rows` (row_bytes apart, nb
/// blocks of block_bytes each) and the packed group at `packed` (16 * nb * block_bytes bytes).
inline void permute_group(const PackLayout& l, std::size_t block_bytes, std::int64_t nb,
                          std::uint8_t* rows, std::size_t row_bytes, std::uint8_t* packed,
                          bool to_packed) {
  constexpr int kG = static_cast<int>(kPackedGroupRows);
  if (l.nfields == 1 && block_bytes == 2 && l.field[0].unit == 2)
    return transpose16_u16(rows, row_bytes, packed, nb, to_packed);
  for (std::int64_t b = 0; b < nb; ++b) {
    std::uint8_t* g = packed + static_cast<std::size_t>(b) * kG * block_bytes;
    for (int f = 0; f < l.nfields; ++f) {
      const PackField& fd = l.field[f];
      std::uint8_t* r[kG];
      for (int i = 0; i < kG; ++i) r[i] = rows + i * row_bytes + b * block_bytes + fd.offset;
      const int units = fd.bytes / fd.unit;
      if (fd.unit == 4) {
        interleave16<4>(r, r, to_packed ? g : nullptr, g, units);
      } else if (fd.unit == 2) {
        interleave16<2>(r, r, to_packed ? g : nullptr, g, units);
      } else {
        interleave16<1>(r, r, to_packed ? g : nullptr, g, units);
      }
      g += static_cast<std::size_t>(kG) * fd.bytes;
    }
  }
}

/// Packs one group: the 16 plain rows at `rows` into `out` (16 * nb * block_bytes bytes).
inline void pack_group(const PackLayout& l, std::size_t block_bytes, std::int64_t nb,
                       const std::uint8_t* rows, std::size_t row_bytes, std::uint8_t* out) {
  permute_group(l, block_bytes, nb, const_cast<std::uint8_t*>(rows), row_bytes, out, true);
}

/// The inverse of pack_group: the 16 plain rows of the packed group at `in` into `rows`.
inline void unpack_group(const PackLayout& l, std::size_t block_bytes, std::int64_t nb,
                         const std::uint8_t* in, std::uint8_t* rows, std::size_t row_bytes) {
  permute_group(l, block_bytes, nb, rows, row_bytes, const_cast<std::uint8_t*>(in), false);
}

}  // namespace nibble::detail
