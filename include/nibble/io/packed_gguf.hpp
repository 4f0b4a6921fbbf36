// nibble: GGUF files with packed tensors (`nibble pack` / `nibble unpack`).
//
// A tensor stored in nibble's packed layout (nibble/packed.hpp) keeps its name, shape, offset and
// size; only its type id changes to gguf::kPackedTypeFlag | the ggml type, and its bytes are
// nibble::pack() of the rows() x shape[0] matrix of the plain bytes. Such a file is mapped as it is
// (gguf::File::open) and its packed tensors go to nibble::PackedWeights::view without a copy.
//
// pack_gguf converts every tensor that
//   - has a packable format (nibble::packable: q8_0, q4_K, q5_K, q6_K, q4_0, q4_1, q5_0, q5_1,
//     q2_K, q3_K, iq4_nl, iq4_xs, mxfp4) and is not packed yet,
//   - has at least kPackedGroupRows (16) rows (rows() = the product of shape[1..]), and
//   - is 2-D (trailing dimensions of 1 allowed), or has shape[1] a multiple of 16, so that every
//     2-D slice (an expert of a stacked MoE tensor) is a packed matrix on its own;
// unpack_gguf converts every packed tensor back. Everything else is copied byte for byte: the
// header and metadata (only the 4-byte type ids of the converted tensors change), the other
// tensors, the padding, the alignment and the order. So unpack_gguf(pack_gguf(F)) is F byte for
// byte, and pack_gguf(unpack_gguf(P)) is P when P came from pack_gguf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "nibble/io/gguf.hpp"
#include "nibble/nibble.hpp"

namespace nibble {

/// Progress of pack_gguf / unpack_gguf, sent after each tensor.
struct PackGgufProgress {
  std::size_t index = 0;          ///< tensors done (1-based)
  std::size_t count = 0;          ///< tensors in the file
  std::string name;               ///< tensor just done
  std::uint32_t type = 0;         ///< its type id in the output
  bool converted = false;         ///< packed / unpacked (false: copied)
  std::uint64_t bytes_done = 0;   ///< tensor bytes written so far
  std::uint64_t bytes_total = 0;  ///< tensor bytes in the file
  double seconds = 0;             ///< elapsed time
};

/// Called after every tensor.
using PackGgufCallback = std::function<void(const PackGgufProgress&)>;

/// Result of pack_gguf / unpack_gguf.
struct PackGgufSummary {
  int converted = 0;                  ///< tensors packed (unpacked)
  int copied = 0;                     ///< tensors copied unchanged
  std::uint64_t converted_bytes = 0;  ///< bytes of the converted tensors
  std::uint64_t tensor_bytes = 0;     ///< bytes of all tensors
  std::uint64_t file_bytes = 0;       ///< size of the input (= the output)
  double seconds = 0;                 ///< wall time
};

/// True if pack_gguf packs tensor `t` of a file (see the file comment).
bool pack_gguf_selects(const gguf::TensorInfo& t);

/// Bytes converted per step by default (the working memory is two such buffers).
inline constexpr std::size_t kPackGgufChunkBytes = std::size_t{32} << 20;

/// Writes `out_path`: the GGUF file `in_path` with its packable tensors in the packed layout
/// (see the file comment). Threads as ctx says; tensors are converted in steps of whole 16-row
/// groups of about `chunk_bytes` (at least one group), each written while the next is converted.
/// Writes `out_path`.tmp and renames it at the end (no output on failure; `out_path` may be
/// `in_path`). Throws nibble::Error when the input cannot be read or is malformed, the output
/// cannot be written, or a tensor to convert shares bytes with another tensor.
PackGgufSummary pack_gguf(const std::string& in_path, const std::string& out_path,
                          const Context& ctx = {}, const PackGgufCallback& progress = {},
                          std::size_t chunk_bytes = kPackGgufChunkBytes);

/// The inverse of pack_gguf: writes `out_path`, the file `in_path` with every packed tensor in
/// the plain GGUF layout of its base type. Same checks and output rules as pack_gguf.
PackGgufSummary unpack_gguf(const std::string& in_path, const std::string& out_path,
                            const Context& ctx = {}, const PackGgufCallback& progress = {},
                            std::size_t chunk_bytes = kPackGgufChunkBytes);

}  // namespace nibble
