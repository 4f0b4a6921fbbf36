// nibble: GGUF (v2/v3) reader and v3 writer.
//
// The reader maps the file into memory and never trusts it: every count, length, dimension,
// offset and size is checked (with overflow-safe arithmetic) against the bytes that are really
// there, and anything malformed throws nibble::Error naming what is wrong and the byte offset.
// Tensors are zero-copy views into the mapping. The writer emits GGUF v3 with the metadata in
// the given order, tensor data at offsets padded to the alignment (32 unless general.alignment
// says otherwise), and zero padding after the header and after every tensor, so that a file
// written by it (or by ggml) and read back unchanged is written again byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nibble/core/error.hpp"

namespace nibble::gguf {

/// GGUF metadata value types (the numbers stored in the file).
enum class ValueType : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

/// Name of a value type ("u32", "string", ...).
const char* value_type_name(ValueType t);

/// Bytes of one scalar of type t (0 for string and array).
std::size_t value_type_size(ValueType t);

/// One metadata value: a scalar, a string, or an array (of scalars, strings or arrays).
struct Value {
  ValueType type = ValueType::u32;   ///< the value's own type
  std::uint64_t bits = 0;            ///< scalars: the little-endian bytes, zero-extended
  std::string str;                   ///< type == string
  ValueType elem = ValueType::u8;    ///< type == array: element type
  std::uint64_t count = 0;           ///< type == array: number of elements
  std::vector<std::uint8_t> raw;     ///< array of scalars: count * value_type_size(elem) bytes
  std::vector<std::string> strings;  ///< array of strings
  std::vector<Value> items;          ///< array of arrays (each item has type == array)

  /// Scalar constructors.
  static Value u8(std::uint8_t v);
  static Value i8(std::int8_t v);
  static Value u16(std::uint16_t v);
  static Value i16(std::int16_t v);
  static Value u32(std::uint32_t v);
  static Value i32(std::int32_t v);
  static Value f32(float v);
  static Value u64(std::uint64_t v);
  static Value i64(std::int64_t v);
  static Value f64(double v);
  static Value boolean(bool v);
  static Value string(std::string v);
  /// Array of strings.
  static Value string_array(std::vector<std::string> v);
  /// Array of scalars of type `elem` from `count` little-endian elements at `data`.
  static Value scalar_array(ValueType elem, const void* data, std::uint64_t count);
  /// Array of arrays.
  static Value array_of_arrays(std::vector<Value> items);

  /// True for the integer types (u8 ... i64) and bool.
  bool is_integer() const;
  /// Integer scalar as int64 (Error if not an integer scalar or a u64 above INT64_MAX).
  std::int64_t as_int() const;
  /// Integer or float scalar as double (Error otherwise).
  double as_double() const;
  /// String value (Error if not a string).
  const std::string& as_string() const;
  /// Human-readable rendering (arrays are shortened to their first `max_items` elements).
  std::string to_string(std::size_t max_items = 8) const;
};

/// One metadata entry.
struct KeyValue {
  std::string key;  ///< e.g. "general.architecture"
  Value value;      ///< its value
};

/// GGML tensor types known to the reader (ids as in ggml.h).
struct TypeInfo {
  const char* name;          ///< "f32", "q4_K", ... (nullptr: not a valid type id)
  std::int64_t block_elems;  ///< values per block
  std::size_t block_bytes;   ///< bytes per block
};

/// Facts about ggml type id `type` (name == nullptr when the id is unknown or removed). A packed
/// type (is_packed_type) of a packable format is known too: its name is the base type's with
/// ".x16" appended ("q4_K.x16"), its block size and bytes are the base type's.
TypeInfo type_info(std::uint32_t type);

/// Flag ORed into the ggml type id of a tensor stored in nibble's packed (row-interleaved) layout
/// (nibble/packed.hpp): type id kPackedTypeFlag | 12 is a q4_K tensor whose bytes are
/// nibble::pack() of its plain GGUF bytes. ggml's type ids are small dense integers (below 64;
/// forks use up to a few hundred), so no ggml type can have this bit, and llama.cpp refuses such
/// a file ("has invalid ggml type") instead of misreading it. Only the base types of packable
/// formats (nibble::packable: q8_0, q4_K, q5_K, q6_K, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, iq4_nl,
/// iq4_xs, mxfp4) are valid with the flag.
inline constexpr std::uint32_t kPackedTypeFlag = 0x1000;

/// True if ggml type id `type` carries kPackedTypeFlag.
constexpr bool is_packed_type(std::uint32_t type) {
  return (type & kPackedTypeFlag) != 0;
}

/// `type` without kPackedTypeFlag: the ggml type of the plain layout of the same bytes.
constexpr std::uint32_t base_type(std::uint32_t type) {
  return type & ~kPackedTypeFlag;
}

/// The packed type id of ggml type `type` (Error if `type` is not the ggml type of a packable
/// format, or already packed).
std::uint32_t packed_type(std::uint32_t type);

/// Number of dimensions of a tensor (GGML_MAX_DIMS).
constexpr std::size_t kMaxDims = 4;

/// One tensor of a GGUF file.
struct TensorInfo {
  std::string name;                    ///< tensor name
  std::vector<std::int64_t> shape;     ///< ne[0] (contiguous, row length) first, 1..4 dims
  std::uint32_t type = 0;              ///< ggml type id
  std::uint64_t offset = 0;            ///< offset of the data relative to the data section
  std::uint64_t nbytes = 0;            ///< bytes of data
  const std::uint8_t* data = nullptr;  ///< read: view into the mapped file; write: source bytes
  std::uint64_t type_at = 0;  ///< read: byte offset of the type id in the file (0 otherwise)

  /// Number of values (product of the shape).
  std::int64_t elements() const;
  /// Rows = elements / shape[0].
  std::int64_t rows() const;
  /// True if the tensor is stored in nibble's packed layout (is_packed_type(type)): its bytes
  /// are nibble::pack() of a rows() x shape[0] matrix of the base type's format; pass them to
  /// nibble::PackedWeights::view or nibble::unpack, not to the plain gemv.
  bool packed() const { return is_packed_type(type); }
};

/// Size in bytes of a tensor of ggml type `type` and this shape (Error if the type is unknown,
/// a dimension is negative, shape[0] is not a multiple of the block size, or it overflows).
std::uint64_t tensor_nbytes(std::uint32_t type, const std::vector<std::int64_t>& shape);

/// Default GGUF alignment (GGUF_DEFAULT_ALIGNMENT).
constexpr std::uint32_t kDefaultAlignment = 32;

/// A parsed GGUF file. Move-only; the tensors' data pointers stay valid as long as it lives.
class File {
 public:
  /// Maps `path` read-only and parses it. Throws nibble::Error on any problem.
  static File open(const std::string& path);
  /// Parses `size` bytes at `data` (not copied: they must outlive the File).
  static File parse(const void* data, std::size_t size);

  File() = default;
  File(File&&) noexcept = default;
  File& operator=(File&&) noexcept = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() = default;

  std::uint32_t version = 3;                    ///< 2 or 3
  std::uint32_t alignment = kDefaultAlignment;  ///< general.alignment or 32
  std::uint64_t data_offset = 0;                ///< absolute offset of the data section
  std::uint64_t file_size = 0;                  ///< bytes of the file
  std::vector<KeyValue> metadata;               ///< in file order
  std::vector<TensorInfo> tensors;              ///< in file order

  /// Metadata entry with this key, or nullptr.
  const KeyValue* find(const std::string& key) const;
  /// Tensor with this name, or nullptr.
  const TensorInfo* find_tensor(const std::string& name) const;

 private:
  std::shared_ptr<void> mapping_;  // keeps the mmap alive
};

/// Serialises the header, metadata and tensor infos (offsets recomputed densely with padding
/// to `alignment`; the `offset` fields of `tensors` are updated) followed by zero padding up to
/// the alignment: exactly the bytes that precede the data section.
std::vector<std::uint8_t> serialize_meta(const std::vector<KeyValue>& metadata,
                                         std::vector<TensorInfo>& tensors,
                                         std::uint32_t alignment = kDefaultAlignment);

/// Alignment that `metadata` asks for (general.alignment, checked) or 32.
std::uint32_t alignment_of(const std::vector<KeyValue>& metadata);

/// Writes a complete GGUF v3 file: metadata in order, tensors in order with their `data`
/// (nbytes each), zero padding to the alignment after the header and after every tensor.
/// Writes to `path`.tmp and renames, so a failure leaves no partial `path`.
void write_file(const std::string& path, const std::vector<KeyValue>& metadata,
                std::vector<TensorInfo> tensors);

/// Writes a complete GGUF v3 file into memory (same bytes as write_file).
std::vector<std::uint8_t> write_memory(const std::vector<KeyValue>& metadata,
                                       std::vector<TensorInfo> tensors);

}  // namespace nibble::gguf
