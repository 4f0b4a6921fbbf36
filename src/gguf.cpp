// nibble: GGUF reader (v2/v3, memory-mapped, fully bounds-checked) and v3 writer.
#include "nibble/io/gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <unordered_set>

#include "nibble/packed.hpp"

namespace nibble::gguf {

using detail::fail;

namespace {

constexpr std::uint32_t kMagic = 0x46554747u;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 16;

// ---- types ----

struct TypeRow {
  std::uint32_t id;
  TypeInfo info;
};

// ggml_type ids, block sizes and block bytes (ids 4, 5 and 31..33, 36..38 were removed).
const TypeRow kTypes[] = {
    {0, {"f32", 1, 4}},         {1, {"f16", 1, 2}},         {2, {"q4_0", 32, 18}},
    {3, {"q4_1", 32, 20}},      {6, {"q5_0", 32, 22}},      {7, {"q5_1", 32, 24}},
    {8, {"q8_0", 32, 34}},      {9, {"q8_1", 32, 36}},      {10, {"q2_K", 256, 84}},
    {11, {"q3_K", 256, 110}},   {12, {"q4_K", 256, 144}},   {13, {"q5_K", 256, 176}},
    {14, {"q6_K", 256, 210}},   {15, {"q8_K", 256, 292}},   {16, {"iq2_xxs", 256, 66}},
    {17, {"iq2_xs", 256, 74}},  {18, {"iq3_xxs", 256, 98}}, {19, {"iq1_s", 256, 50}},
    {20, {"iq4_nl", 32, 18}},   {21, {"iq3_s", 256, 110}},  {22, {"iq2_s", 256, 82}},
    {23, {"iq4_xs", 256, 136}}, {24, {"i8", 1, 1}},         {25, {"i16", 1, 2}},
    {26, {"i32", 1, 4}},        {27, {"i64", 1, 8}},        {28, {"f64", 1, 8}},
    {29, {"iq1_m", 256, 56}},   {30, {"bf16", 1, 2}},       {34, {"tq1_0", 256, 54}},
    {35, {"tq2_0", 256, 66}},   {39, {"mxfp4", 32, 17}},
};

bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return true;
  *out = a * b;
  return false;
}

bool add_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  if (b > std::numeric_limits<std::uint64_t>::max() - a) return true;
  *out = a + b;
  return false;
}

// Round x up to a multiple of `align` (a power of two); false on overflow.
bool pad_to(std::uint64_t x, std::uint64_t align, std::uint64_t* out) {
  std::uint64_t t;
  if (add_overflows(x, align - 1, &t)) return false;
  *out = t & ~(align - 1);
  return true;
}

// ---- bounds-checked cursor over the file bytes ----

class Cursor {
 public:
  Cursor(const std::uint8_t* p, std::uint64_t n) : p_(p), n_(n) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t left() const { return n_ - pos_; }

  void need(std::uint64_t bytes, const char* what) const {
    if (bytes > left()) {
      fail("gguf: truncated file: ", what, " needs ", bytes, " bytes at byte offset ", pos_,
           " but only ", left(), " remain (file size ", n_, ")");
    }
  }
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const std::uint8_t* take(std::uint64_t bytes, const char* what) {
    need(bytes, what);
    const std::uint8_t* r = p_ + pos_;
    pos_ += bytes;
    return r;
  }
  std::string str(const char* what) {
    const std::uint64_t at = pos_;
    const std::uint64_t len = get<std::uint64_t>(what);
    if (len > left()) {
      fail("gguf: ", what, " at byte offset ", at, " has length ", len, " but only ", left(),
           " bytes remain (file size ", n_, ")");
    }
    const std::uint8_t* s = take(len, what);
    return std::string(reinterpret_cast<const char*>(s), static_cast<std::size_t>(len));
  }

 private:
  const std::uint8_t* p_;
  std::uint64_t n_;
  std::uint64_t pos_ = 0;
};

// Smallest number of bytes one value of type t can occupy in the file.
std::uint64_t min_bytes(ValueType t) {
  switch (t) {
    case ValueType::string:
      return 8;
    case ValueType::array:
      return 12;
    default:
      return value_type_size(t);
  }
}

bool valid_value_type(std::uint32_t t) {
  return t <= 12;
}

Value read_value(Cursor& c, ValueType type, int depth);

Value read_array(Cursor& c, int depth) {
  const std::uint64_t at = c.pos();
  if (depth >= kMaxArrayDepth) {
    fail("gguf: arrays nested deeper than ", kMaxArrayDepth, " at byte offset ", at);
  }
  const std::uint32_t et = c.get<std::uint32_t>("array element type");
  if (!valid_value_type(et)) {
    fail("gguf: invalid array element type ", et, " at byte offset ", at);
  }
  const std::uint64_t count_at = c.pos();
  const std::uint64_t count = c.get<std::uint64_t>("array length");
  Value v;
  v.type = ValueType::array;
  v.elem = static_cast<ValueType>(et);
  v.count = count;
  std::uint64_t need;
  if (mul_overflows(count, min_bytes(v.elem), &need) || need > c.left()) {
    fail("gguf: array of ", count, " ", value_type_name(v.elem), " at byte offset ", count_at,
         " does not fit in the ", c.left(), " remaining bytes");
  }
  if (v.elem == ValueType::string) {
    v.strings.reserve(static_cast<std::size_t>(count));
    for (std::uint64_t i = 0; i < count; ++i) v.strings.push_back(c.str("array string"));
  } else if (v.elem == ValueType::array) {
    v.items.reserve(static_cast<std::size_t>(count));
    for (std::uint64_t i = 0; i < count; ++i) v.items.push_back(read_array(c, depth + 1));
  } else {
    const std::uint8_t* p = c.take(need, "array data");
    v.raw.assign(p, p + need);
  }
  return v;
}

Value read_value(Cursor& c, ValueType type, int depth) {
  if (type == ValueType::array) return read_array(c, depth);
  Value v;
  v.type = type;
  if (type == ValueType::string) {
    v.str = c.str("string value");
    return v;
  }
  const std::size_t sz = value_type_size(type);
  const std::uint8_t* p = c.take(sz, "scalar value");
  std::memcpy(&v.bits, p, sz);
  return v;
}

// ---- writer helpers ----

class Out {
 public:
  std::vector<std::uint8_t> b;
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    put<std::uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

void write_value(Out& o, const Value& v);

void write_array_body(Out& o, const Value& v) {
  o.put<std::uint32_t>(static_cast<std::uint32_t>(v.elem));
  if (v.elem == ValueType::string) {
    if (v.strings.size() != v.count) fail("gguf: string array count mismatch");
    o.put<std::uint64_t>(v.count);
    for (const auto& s : v.strings) o.str(s);
  } else if (v.elem == ValueType::array) {
    if (v.items.size() != v.count) fail("gguf: nested array count mismatch");
    o.put<std::uint64_t>(v.count);
    for (const auto& it : v.items) {
      if (it.type != ValueType::array) fail("gguf: nested array item is not an array");
      write_array_body(o, it);
    }
  } else {
    if (v.raw.size() != v.count * value_type_size(v.elem)) {
      fail("gguf: scalar array of ", v.count, " ", value_type_name(v.elem), " holds ", v.raw.size(),
           " bytes");
    }
    o.put<std::uint64_t>(v.count);
    o.b.insert(o.b.end(), v.raw.begin(), v.raw.end());
  }
}

void write_value(Out& o, const Value& v) {
  if (!valid_value_type(static_cast<std::uint32_t>(v.type))) fail("gguf: invalid value type");
  o.put<std::uint32_t>(static_cast<std::uint32_t>(v.type));
  if (v.type == ValueType::array) {
    write_array_body(o, v);
  } else if (v.type == ValueType::string) {
    o.str(v.str);
  } else {
    const std::size_t sz = value_type_size(v.type);
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v.bits);
    o.b.insert(o.b.end(), p, p + sz);  // little-endian host
  }
}

struct Mapping {
  void* addr = nullptr;
  std::size_t size = 0;
  ~Mapping() {
    if (addr) munmap(addr, size);
  }
};

}  // namespace

// ---- public helpers ----

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::u8:
      return "u8";
    case ValueType::i8:
      return "i8";
    case ValueType::u16:
      return "u16";
    case ValueType::i16:
      return "i16";
    case ValueType::u32:
      return "u32";
    case ValueType::i32:
      return "i32";
    case ValueType::f32:
      return "f32";
    case ValueType::boolean:
      return "bool";
    case ValueType::string:
      return "string";
    case ValueType::array:
      return "array";
    case ValueType::u64:
      return "u64";
    case ValueType::i64:
      return "i64";
    case ValueType::f64:
      return "f64";
  }
  return "?";
}

std::size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::boolean:
      return 1;
    case ValueType::u16:
    case ValueType::i16:
      return 2;
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::f32:
      return 4;
    case ValueType::u64:
    case ValueType::i64:
    case ValueType::f64:
      return 8;
    case ValueType::string:
    case ValueType::array:
      return 0;
  }
  return 0;
}

namespace {

TypeInfo plain_type_info(std::uint32_t type) {
  for (const auto& r : kTypes) {
    if (r.id == type) return r.info;
  }
  return {nullptr, 0, 0};
}

// The packed types: kPackedTypeFlag | the ggml type of each packable format, named "BASE.x16".
struct PackedRow {
  std::uint32_t id;
  std::string name;
  TypeInfo base;
};

const std::vector<PackedRow>& packed_rows() {
  static const std::vector<PackedRow> rows = [] {
    std::vector<PackedRow> v;
    for (int k = 0; k <= static_cast<int>(kLastFormat); ++k) {
      const Format f = static_cast<Format>(k);
      if (!packable(f) || traits(f).gguf_type < 0) continue;
      const auto base = static_cast<std::uint32_t>(traits(f).gguf_type);
      const TypeInfo bi = plain_type_info(base);
      if (!bi.name || is_packed_type(base)) continue;
      v.push_back({kPackedTypeFlag | base, std::string(bi.name) + ".x16", bi});
    }
    return v;
  }();
  return rows;
}

// "q8_0, q4_K, ...": the base types that are valid with kPackedTypeFlag.
std::string packable_type_names() {
  std::string s;
  for (const PackedRow& r : packed_rows()) s += (s.empty() ? "" : ", ") + std::string(r.base.name);
  return s;
}

}  // namespace

TypeInfo type_info(std::uint32_t type) {
  if (!is_packed_type(type)) return plain_type_info(type);
  for (const PackedRow& r : packed_rows()) {
    if (r.id == type) return {r.name.c_str(), r.base.block_elems, r.base.block_bytes};
  }
  return {nullptr, 0, 0};
}

std::uint32_t packed_type(std::uint32_t type) {
  if (is_packed_type(type)) fail("gguf: type id ", type, " is already a packed type");
  for (const PackedRow& r : packed_rows()) {
    if (r.id == (kPackedTypeFlag | type)) return r.id;
  }
  const TypeInfo ti = plain_type_info(type);
  fail("gguf: ggml type ", ti.name ? ti.name : std::to_string(type).c_str(),
       " has no packed layout (packable types: ", packable_type_names(), ")");
}

std::uint64_t tensor_nbytes(std::uint32_t type, const std::vector<std::int64_t>& shape) {
  const TypeInfo ti = type_info(type);
  if (!ti.name) fail("gguf: unknown tensor type id ", type);
  if (shape.empty() || shape.size() > kMaxDims) {
    fail("gguf: tensor has ", shape.size(), " dimensions (expected 1..", kMaxDims, ")");
  }
  std::uint64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) fail("gguf: dimension ", i, " is negative (", shape[i], ")");
    if (mul_overflows(n, static_cast<std::uint64_t>(shape[i]), &n) ||
        n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      fail("gguf: element count overflows int64");
    }
  }
  if (shape[0] % ti.block_elems != 0) {
    fail("gguf: row length ", shape[0], " is not a multiple of the block size ", ti.block_elems,
         " of type ", ti.name);
  }
  std::uint64_t bytes;
  if (mul_overflows(n / static_cast<std::uint64_t>(ti.block_elems), ti.block_bytes, &bytes)) {
    fail("gguf: tensor byte size overflows");
  }
  return bytes;
}

std::int64_t TensorInfo::elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::int64_t TensorInfo::rows() const {
  return shape.empty() || shape[0] == 0 ? 0 : elements() / shape[0];
}

// ---- Value ----

namespace {
template <class T>
Value scalar(ValueType t, T v) {
  Value r;
  r.type = t;
  std::memcpy(&r.bits, &v, sizeof(T));
  return r;
}
}  // namespace

Value Value::u8(std::uint8_t v) {
  return scalar(ValueType::u8, v);
}
Value Value::i8(std::int8_t v) {
  return scalar(ValueType::i8, v);
}
Value Value::u16(std::uint16_t v) {
  return scalar(ValueType::u16, v);
}
Value Value::i16(std::int16_t v) {
  return scalar(ValueType::i16, v);
}
Value Value::u32(std::uint32_t v) {
  return scalar(ValueType::u32, v);
}
Value Value::i32(std::int32_t v) {
  return scalar(ValueType::i32, v);
}
Value Value::f32(float v) {
  return scalar(ValueType::f32, v);
}
Value Value::u64(std::uint64_t v) {
  return scalar(ValueType::u64, v);
}
Value Value::i64(std::int64_t v) {
  return scalar(ValueType::i64, v);
}
Value Value::f64(double v) {
  return scalar(ValueType::f64, v);
}
Value Value::boolean(bool v) {
  return scalar(ValueType::boolean, std::uint8_t(v ? 1 : 0));
}
Value Value::string(std::string v) {
  Value r;
  r.type = ValueType::string;
  r.str = std::move(v);
  return r;
}
Value Value::string_array(std::vector<std::string> v) {
  Value r;
  r.type = ValueType::array;
  r.elem = ValueType::string;
  r.count = v.size();
  r.strings = std::move(v);
  return r;
}
Value Value::scalar_array(ValueType elem, const void* data, std::uint64_t count) {
  const std::size_t sz = value_type_size(elem);
  if (sz == 0) fail("gguf: scalar_array: element type ", value_type_name(elem), " is not a scalar");
  Value r;
  r.type = ValueType::array;
  r.elem = elem;
  r.count = count;
  const auto* p = static_cast<const std::uint8_t*>(data);
  r.raw.assign(p, p + count * sz);
  return r;
}
Value Value::array_of_arrays(std::vector<Value> items) {
  Value r;
  r.type = ValueType::array;
  r.elem = ValueType::array;
  r.count = items.size();
  r.items = std::move(items);
  return r;
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::u16:
    case ValueType::i16:
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::u64:
    case ValueType::i64:
    case ValueType::boolean:
      return true;
    default:
      return false;
  }
}

std::int64_t Value::as_int() const {
  switch (type) {
    case ValueType::u8:
    case ValueType::u16:
    case ValueType::u32:
    case ValueType::boolean:
      return static_cast<std::int64_t>(bits);
    case ValueType::i8:
      return static_cast<std::int8_t>(bits);
    case ValueType::i16:
      return static_cast<std::int16_t>(bits);
    case ValueType::i32:
      return static_cast<std::int32_t>(bits);
    case ValueType::i64:
      return static_cast<std::int64_t>(bits);
    case ValueType::u64:
      if (bits > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        fail("gguf: u64 value ", bits, " does not fit in int64");
      }
      return static_cast<std::int64_t>(bits);
    default:
      fail("gguf: value of type ", value_type_name(type), " is not an integer");
  }
}

double Value::as_double() const {
  if (type == ValueType::f32) {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  if (type == ValueType::f64) {
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  if (type == ValueType::u64) return static_cast<double>(bits);
  return static_cast<double>(as_int());
}

const std::string& Value::as_string() const {
  if (type != ValueType::string)
    fail("gguf: value of type ", value_type_name(type), " is not a string");
  return str;
}

std::string Value::to_string(std::size_t max_items) const {
  std::ostringstream os;
  if (type == ValueType::string) {
    os << '"' << str << '"';
  } else if (type == ValueType::array) {
    os << value_type_name(elem) << "[" << count << "] [";
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(count, max_items));
    for (std::size_t i = 0; i < n; ++i) {
      if (i) os << ", ";
      if (elem == ValueType::string) {
        os << '"' << strings[i] << '"';
      } else if (elem == ValueType::array) {
        os << items[i].to_string(max_items);
      } else {
        Value s;
        s.type = elem;
        const std::size_t sz = value_type_size(elem);
        std::memcpy(&s.bits, raw.data() + i * sz, sz);
        os << s.to_string();
      }
    }
    if (count > n) os << ", ...";
    os << "]";
  } else if (type == ValueType::f32 || type == ValueType::f64) {
    os << as_double();
  } else if (type == ValueType::boolean) {
    os << (bits ? "true" : "false");
  } else if (type == ValueType::u64) {
    os << bits;
  } else {
    os << as_int();
  }
  return os.str();
}

// ---- File ----

const KeyValue* File::find(const std::string& key) const {
  for (const auto& kv : metadata) {
    if (kv.key == key) return &kv;
  }
  return nullptr;
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

File File::parse(const void* data, std::size_t size) {
  const auto* base = static_cast<const std::uint8_t*>(data);
  if (!base && size) fail("gguf: data is null");
  Cursor c(base, size);
  File f;
  f.file_size = size;

  const std::uint32_t magic = c.get<std::uint32_t>("magic");
  if (magic != kMagic) {
    fail("gguf: bad magic 0x", std::hex, magic, std::dec, " at byte offset 0 (expected \"GGUF\")");
  }
  f.version = c.get<std::uint32_t>("version");
  if (f.version != 2 && f.version != 3) {
    fail("gguf: unsupported version ", f.version, " at byte offset 4 (expected 2 or 3)");
  }
  const std::uint64_t n_tensors = c.get<std::uint64_t>("tensor count");
  const std::uint64_t n_kv = c.get<std::uint64_t>("metadata count");
  {
    std::uint64_t need;
    // Each metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes, each tensor info
    // at least 8 + 4 + 8 + 4 + 8 bytes.
    if (mul_overflows(n_kv, 13, &need) || need > c.left()) {
      fail("gguf: metadata count ", n_kv, " at byte offset 16 cannot fit in a file of ", size,
           " bytes");
    }
    if (mul_overflows(n_tensors, 32, &need) || need > c.left()) {
      fail("gguf: tensor count ", n_tensors, " at byte offset 8 cannot fit in a file of ", size,
           " bytes");
    }
  }

  std::unordered_set<std::string> keys;
  f.metadata.reserve(static_cast<std::size_t>(n_kv));
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    const std::uint64_t at = c.pos();
    KeyValue kv;
    kv.key = c.str("metadata key");
    if (!keys.insert(kv.key).second) {
      fail("gguf: duplicate metadata key \"", kv.key, "\" at byte offset ", at);
    }
    const std::uint64_t tat = c.pos();
    const std::uint32_t t = c.get<std::uint32_t>("metadata value type");
    if (!valid_value_type(t)) {
      fail("gguf: metadata key \"", kv.key, "\" has invalid value type ", t, " at byte offset ",
           tat);
    }
    kv.value = read_value(c, static_cast<ValueType>(t), 0);
    if (kv.key == "general.alignment") {
      if (kv.value.type != ValueType::u32 || kv.value.bits == 0 ||
          (kv.value.bits & (kv.value.bits - 1)) != 0) {
        fail("gguf: general.alignment at byte offset ", tat, " must be a u32 power of two, got ",
             kv.value.to_string(), " (", value_type_name(kv.value.type), ")");
      }
      f.alignment = static_cast<std::uint32_t>(kv.value.bits);
    }
    f.metadata.push_back(std::move(kv));
  }

  std::unordered_set<std::string> names;
  f.tensors.reserve(static_cast<std::size_t>(n_tensors));
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    const std::uint64_t at = c.pos();
    TensorInfo t;
    t.name = c.str("tensor name");
    if (!names.insert(t.name).second) {
      fail("gguf: duplicate tensor name \"", t.name, "\" at byte offset ", at);
    }
    const std::uint64_t dat = c.pos();
    const std::uint32_t n_dims = c.get<std::uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims) {
      fail("gguf: tensor \"", t.name, "\" has ", n_dims, " dimensions at byte offset ", dat,
           " (expected 1..", kMaxDims, ")");
    }
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const std::uint64_t eat = c.pos();
      const std::int64_t ne = c.get<std::int64_t>("tensor dimension");
      if (ne < 0) {
        fail("gguf: tensor \"", t.name, "\" dimension ", d, " is ", ne, " at byte offset ", eat);
      }
      t.shape.push_back(ne);
    }
    const std::uint64_t tat = c.pos();
    t.type = c.get<std::uint32_t>("tensor type");
    t.type_at = tat;
    if (!type_info(t.type).name) {
      if (is_packed_type(t.type)) {
        const char* bn = plain_type_info(base_type(t.type)).name;
        fail("gguf: tensor \"", t.name, "\" has type id ", t.type, " at byte offset ", tat,
             ": the packed flag 0x", std::hex, kPackedTypeFlag, std::dec, " with ",
             bn ? "type " : "unknown type id ", bn ? bn : std::to_string(base_type(t.type)).c_str(),
             ", which has no packed layout (packable types: ", packable_type_names(), ")");
      }
      fail("gguf: tensor \"", t.name, "\" has unknown type id ", t.type, " at byte offset ", tat);
    }
    try {
      t.nbytes = tensor_nbytes(t.type, t.shape);
    } catch (const Error& e) {
      fail("gguf: tensor \"", t.name, "\" (info at byte offset ", at, "): ", e.what());
    }
    const std::uint64_t oat = c.pos();
    t.offset = c.get<std::uint64_t>("tensor offset");
    if (t.offset % f.alignment != 0) {
      fail("gguf: tensor \"", t.name, "\" offset ", t.offset, " at byte offset ", oat,
           " is not a multiple of the alignment ", f.alignment);
    }
    f.tensors.push_back(std::move(t));
  }

  if (!pad_to(c.pos(), f.alignment, &f.data_offset)) fail("gguf: data offset overflows");
  if (f.data_offset > size) {
    if (!f.tensors.empty()) {
      fail("gguf: data section starts at byte offset ", f.data_offset,
           " past the end of the file (", size, " bytes)");
    }
  }
  for (auto& t : f.tensors) {
    std::uint64_t begin, end;
    if (add_overflows(f.data_offset, t.offset, &begin) || add_overflows(begin, t.nbytes, &end) ||
        end > size) {
      fail("gguf: tensor \"", t.name, "\" data [data section + ", t.offset, ", +", t.nbytes,
           " bytes) extends past the end of the file (", size,
           " bytes, data section at byte offset ", f.data_offset, ")");
    }
    t.data = base + begin;
  }
  return f;
}

File File::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("gguf: cannot open \"", path, "\": ", std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("gguf: cannot stat \"", path, "\": ", std::strerror(e));
  }
  auto m = std::make_shared<Mapping>();
  m->size = static_cast<std::size_t>(st.st_size);
  if (m->size > 0) {
    void* a = mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (a == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      fail("gguf: cannot map \"", path, "\": ", std::strerror(e));
    }
    m->addr = a;
  }
  ::close(fd);
  static const std::uint8_t empty = 0;
  const void* p = m->addr ? m->addr : &empty;
  File f;
  try {
    f = parse(p, m->size);
  } catch (const Error& e) {
    fail("\"", path, "\": ", e.what());
  }
  f.mapping_ = std::static_pointer_cast<void>(m);
  return f;
}

// ---- writer ----

std::uint32_t alignment_of(const std::vector<KeyValue>& metadata) {
  for (const auto& kv : metadata) {
    if (kv.key != "general.alignment") continue;
    if (kv.value.type != ValueType::u32 || kv.value.bits == 0 ||
        (kv.value.bits & (kv.value.bits - 1)) != 0) {
      fail("gguf: general.alignment must be a u32 power of two, got ", kv.value.to_string());
    }
    return static_cast<std::uint32_t>(kv.value.bits);
  }
  return kDefaultAlignment;
}

std::vector<std::uint8_t> serialize_meta(const std::vector<KeyValue>& metadata,
                                         std::vector<TensorInfo>& tensors,
                                         std::uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    fail("gguf: alignment ", alignment, " is not a power of two");
  }
  Out o;
  o.put<std::uint32_t>(kMagic);
  o.put<std::uint32_t>(3);
  o.put<std::uint64_t>(tensors.size());
  o.put<std::uint64_t>(metadata.size());
  for (const auto& kv : metadata) {
    o.str(kv.key);
    write_value(o, kv.value);
  }
  std::uint64_t offset = 0;
  for (auto& t : tensors) {
    const std::uint64_t nb = tensor_nbytes(t.type, t.shape);
    if (t.nbytes != nb) {
      fail("gguf: tensor \"", t.name, "\" has nbytes ", t.nbytes, ", its type and shape need ", nb);
    }
    t.offset = offset;
    o.str(t.name);
    o.put<std::uint32_t>(static_cast<std::uint32_t>(t.shape.size()));
    for (auto d : t.shape) o.put<std::int64_t>(d);
    o.put<std::uint32_t>(t.type);
    o.put<std::uint64_t>(t.offset);
    std::uint64_t padded;
    if (!pad_to(nb, alignment, &padded) || add_overflows(offset, padded, &offset)) {
      fail("gguf: data section size overflows");
    }
  }
  while (o.b.size() % alignment) o.b.push_back(0);
  return std::move(o.b);
}

std::vector<std::uint8_t> write_memory(const std::vector<KeyValue>& metadata,
                                       std::vector<TensorInfo> tensors) {
  const std::uint32_t align = alignment_of(metadata);
  std::vector<std::uint8_t> out = serialize_meta(metadata, tensors, align);
  for (const auto& t : tensors) {
    if (t.nbytes && !t.data) fail("gguf: tensor \"", t.name, "\" has no data");
    out.insert(out.end(), t.data, t.data + t.nbytes);
    while (out.size() % align) out.push_back(0);
  }
  return out;
}

void write_file(const std::string& path, const std::vector<KeyValue>& metadata,
                std::vector<TensorInfo> tensors) {
  const std::uint32_t align = alignment_of(metadata);
  const std::vector<std::uint8_t> meta = serialize_meta(metadata, tensors, align);
  for (const auto& t : tensors) {
    if (t.nbytes && !t.data) fail("gguf: tensor \"", t.name, "\" has no data");
  }
  const std::string tmp = path + ".tmp";
  std::FILE* fp = std::fopen(tmp.c_str(), "wb");
  if (!fp) fail("gguf: cannot create \"", tmp, "\": ", std::strerror(errno));
  bool ok = std::fwrite(meta.data(), 1, meta.size(), fp) == meta.size();
  static const std::uint8_t zeros[256] = {};
  for (const auto& t : tensors) {
    if (!ok) break;
    ok = std::fwrite(t.data, 1, t.nbytes, fp) == t.nbytes;
    std::size_t pad = (align - t.nbytes % align) % align;
    while (ok && pad > 0) {
      const std::size_t n = pad < sizeof(zeros) ? pad : sizeof(zeros);
      ok = std::fwrite(zeros, 1, n, fp) == n;
      pad -= n;
    }
  }
  ok = (std::fclose(fp) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    fail("gguf: writing \"", path, "\" failed: ", std::strerror(e));
  }
}

}  // namespace nibble::gguf
