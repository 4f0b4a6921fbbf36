// nibble: the C API (include/nibble/nibble.h) over the checked C++ entry points. Every function
// catches everything: no exception crosses the C boundary. Arguments the C layer owns (format and
// ISA ints, handles, output pointers) are checked here; the rest by the C++ entry points, which
// validate before writing, so a failing call writes nothing.
#include "nibble/nibble.h"

#include <cctype>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "nibble/io/gguf.hpp"
#include "nibble/nibble.hpp"
#include "nibble/packed.hpp"

namespace {

using nibble::Format;
using nibble::Isa;

static_assert(NIBBLE_ISA_SCALAR == static_cast<int>(Isa::scalar), "ISA ints are nibble::Isa");
static_assert(NIBBLE_ISA_AVX2 == static_cast<int>(Isa::avx2), "ISA ints are nibble::Isa");
static_assert(NIBBLE_ISA_AVX512 == static_cast<int>(Isa::avx512), "ISA ints are nibble::Isa");
static_assert(NIBBLE_ISA_NEON == static_cast<int>(Isa::neon), "ISA ints are nibble::Isa");
static_assert(NIBBLE_ISA_AVXVNNI == static_cast<int>(Isa::avxvnni), "ISA ints are nibble::Isa");
static_assert(NIBBLE_GGUF_PACKED_FLAG == nibble::gguf::kPackedTypeFlag,
              "the C flag is nibble::gguf::kPackedTypeFlag");
static_assert(std::is_same<nibble_parallel_for, nibble::ParallelFor>::value,
              "nibble_parallel_for must match nibble::ParallelFor");

#define NIBBLE_STR2(x) #x
#define NIBBLE_STR(x) NIBBLE_STR2(x)

thread_local std::string t_last_error;

// An error whose class the C layer decided.
struct CError {
  nibble_status status;
  std::string message;
};

[[noreturn]] void raise(nibble_status s, std::string msg) {
  throw CError{s, std::move(msg)};
}

nibble_status record(nibble_status s, const char* msg) noexcept {
  try {
    t_last_error = msg;
  } catch (...) {
    t_last_error.clear();  // out of memory for the message itself: leave it empty
  }
  return s;
}

// Runs f; maps exceptions to a status and the thread's last-error message. nibble::Error thrown by
// the C++ layer gets the class `error_class`, unless `classify` (message -> status) says otherwise.
template <class F>
nibble_status guarded(const char* fn, nibble_status error_class, F&& f,
                      nibble_status (*classify)(const char*) = nullptr) noexcept {
  try {
    f();
    return NIBBLE_OK;
  } catch (const CError& e) {
    return record(e.status, (std::string("nibble: ") + fn + ": " + e.message).c_str());
  } catch (const nibble::Error& e) {
    const nibble_status s = classify ? classify(e.what()) : error_class;
    return record(s == NIBBLE_OK ? error_class : s, e.what());
  } catch (const std::bad_alloc&) {
    return record(NIBBLE_ERROR_OUT_OF_MEMORY,
                  (std::string("nibble: ") + fn + ": out of memory").c_str());
  } catch (const std::exception& e) {
    return record(NIBBLE_ERROR_INTERNAL,
                  (std::string("nibble: ") + fn + ": internal error: " + e.what()).c_str());
  } catch (...) {
    return record(NIBBLE_ERROR_INTERNAL, "nibble: internal error (unknown exception)");
  }
}

// Number of formats: the enum is dense and traits() names every value, so count up to the first
// value traits() does not know (new formats appended to the enum are picked up automatically).
int format_count() {
  static const int n = [] {
    int i = 0;
    while (i < 1024 && traits(static_cast<Format>(i)).block_bytes != 0) ++i;
    return i;
  }();
  return n;
}

bool valid_format(int f) {
  return f >= 0 && f < format_count();
}

Format to_format(int f) {
  if (!valid_format(f))
    raise(NIBBLE_ERROR_INVALID_ARGUMENT, "format = " + std::to_string(f) +
                                             " is not a nibble format (valid: 0.." +
                                             std::to_string(format_count() - 1) + ")");
  return static_cast<Format>(f);
}

bool valid_isa(int i) {
  for (Isa v : nibble::kAllIsas)
    if (static_cast<int>(v) == i) return true;
  return false;
}

bool isa_runnable(Isa i) {
  for (Isa v : nibble::available_isas())
    if (v == i) return true;
  return false;
}

nibble::Context to_context(const nibble_context* c) {
  nibble::Context ctx;
  if (c == nullptr) return ctx;
  if (c->force_isa != 0) {
    if (!valid_isa(c->isa))
      raise(NIBBLE_ERROR_INVALID_ARGUMENT,
            "ctx->isa = " + std::to_string(c->isa) + " is not a nibble ISA");
    const Isa i = static_cast<Isa>(c->isa);
    if (!isa_runnable(i))
      raise(NIBBLE_ERROR_UNSUPPORTED, std::string("ctx->isa = ") + nibble::isa_name(i) +
                                          " is not built into this library or not supported by "
                                          "this CPU/OS");
    ctx.isa = i;
  }
  if (c->threads < 0)
    raise(NIBBLE_ERROR_INVALID_ARGUMENT,
          "ctx->threads = " + std::to_string(c->threads) + " must be >= 0");
  ctx.threads = c->threads;
  ctx.parallel_for = c->parallel_for;
  ctx.pool = c->pool;
  ctx.exact_nf4 = c->exact_nf4 != 0;
  return ctx;
}

// The C++ compute layer reports a format without a matrix-product kernel with these phrases.
nibble_status classify_compute(const char* msg) {
  if (std::strstr(msg, "no matrix-product kernel") != nullptr ||
      std::strstr(msg, "not a weight format") != nullptr ||
      std::strstr(msg, "no activation quantizer") != nullptr ||
      std::strstr(msg, "no packed layout") != nullptr)
    return NIBBLE_ERROR_UNSUPPORTED;
  return NIBBLE_ERROR_INVALID_ARGUMENT;
}

void need(const void* p, const char* what) {
  if (p == nullptr) raise(NIBBLE_ERROR_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

bool iequal(const char* a, const char* b) {
  for (; *a != '\0' && *b != '\0'; ++a, ++b)
    if (std::tolower(static_cast<unsigned char>(*a)) !=
        std::tolower(static_cast<unsigned char>(*b)))
      return false;
  return *a == *b;
}

}  // namespace

struct nibble_gguf {
  nibble::gguf::File file;
};

namespace {

const nibble::gguf::Value& lookup(const nibble_gguf* g, const char* key) {
  need(g, "file");
  need(key, "key");
  const nibble::gguf::KeyValue* kv = g->file.find(key);
  if (kv == nullptr) raise(NIBBLE_ERROR_NOT_FOUND, std::string("no metadata key \"") + key + "\"");
  return kv->value;
}

[[noreturn]] void wrong_type(const char* key, const nibble::gguf::Value& v, const char* want) {
  raise(NIBBLE_ERROR_TYPE, std::string("metadata \"") + key + "\" is " +
                               nibble::gguf::value_type_name(v.type) + ", not " + want);
}

}  // namespace

extern "C" {

const char* nibble_last_error(void) {
  return t_last_error.c_str();
}

const char* nibble_status_name(nibble_status s) {
  switch (s) {
    case NIBBLE_OK:
      return "ok";
    case NIBBLE_ERROR_INVALID_ARGUMENT:
      return "invalid argument";
    case NIBBLE_ERROR_UNSUPPORTED:
      return "unsupported";
    case NIBBLE_ERROR_IO:
      return "i/o error";
    case NIBBLE_ERROR_OUT_OF_MEMORY:
      return "out of memory";
    case NIBBLE_ERROR_NOT_FOUND:
      return "not found";
    case NIBBLE_ERROR_TYPE:
      return "wrong type";
    case NIBBLE_ERROR_INTERNAL:
      return "internal error";
  }
  return "unknown";
}

const char* nibble_version(void) {
#if defined(NIBBLE_LIBRARY_VERSION)
  return NIBBLE_LIBRARY_VERSION;
#else
  return NIBBLE_STR(NIBBLE_VERSION_MAJOR) "." NIBBLE_STR(NIBBLE_VERSION_MINOR) "." NIBBLE_STR(
      NIBBLE_VERSION_PATCH);
#endif
}

int nibble_format_count(void) {
  return format_count();
}

int nibble_format_from_name(const char* name) {
  if (name == nullptr) return -1;
  for (int i = 0; i < format_count(); ++i)
    if (std::strcmp(traits(static_cast<Format>(i)).name, name) == 0) return i;
  for (int i = 0; i < format_count(); ++i)
    if (iequal(traits(static_cast<Format>(i)).name, name)) return i;
  return -1;
}

const char* nibble_format_name(int format) {
  return valid_format(format) ? traits(static_cast<Format>(format)).name : nullptr;
}

int nibble_format_from_gguf_type(uint32_t gguf_type) {
  for (int i = 0; i < format_count(); ++i)
    if (traits(static_cast<Format>(i)).gguf_type >= 0 &&
        static_cast<uint32_t>(traits(static_cast<Format>(i)).gguf_type) == gguf_type)
      return i;
  return -1;
}

int64_t nibble_block_elems(int format) {
  return valid_format(format) ? traits(static_cast<Format>(format)).block_elems : 0;
}

size_t nibble_row_bytes(int format, int64_t cols) {
  size_t out = 0;
  guarded("nibble_row_bytes", NIBBLE_ERROR_INVALID_ARGUMENT,
          [&] { out = nibble::row_bytes(to_format(format), cols); });
  return out;
}

const char* nibble_isa_name(int isa) {
  return valid_isa(isa) ? nibble::isa_name(static_cast<Isa>(isa)) : nullptr;
}

int nibble_isa_supported(int isa) {
  if (!valid_isa(isa)) return 0;
  try {
    return isa_runnable(static_cast<Isa>(isa)) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

nibble_status nibble_best_isa(const nibble_context* ctx, int* isa) {
  return guarded("nibble_best_isa", NIBBLE_ERROR_UNSUPPORTED, [&] {
    need(isa, "isa");
    const Isa i = nibble::best_isa(to_context(ctx));
    *isa = static_cast<int>(i);
  });
}

nibble_status nibble_quantize_ctx(const nibble_context* ctx, int format, const float* src,
                                  int64_t rows, int64_t cols, void* dst, const float* importance) {
  return guarded("nibble_quantize", NIBBLE_ERROR_INVALID_ARGUMENT, [&] {
    const Format f = to_format(format);
    const nibble::Context c = to_context(ctx);
    nibble::quantize(c, f, src, rows, cols, dst, importance);
  });
}

nibble_status nibble_quantize(int format, const float* src, int64_t rows, int64_t cols, void* dst,
                              const float* importance) {
  return nibble_quantize_ctx(nullptr, format, src, rows, cols, dst, importance);
}

nibble_status nibble_dequantize(int format, const void* src, int64_t rows, int64_t cols,
                                float* dst) {
  return guarded("nibble_dequantize", NIBBLE_ERROR_INVALID_ARGUMENT,
                 [&] { nibble::dequantize(to_format(format), src, rows, cols, dst); });
}

nibble_status nibble_gemv(const nibble_context* ctx, int format, const void* W, int64_t rows,
                          int64_t cols, const float* x, float* y) {
  return guarded(
      "nibble_gemv", NIBBLE_ERROR_INVALID_ARGUMENT,
      [&] {
        const Format f = to_format(format);
        const nibble::Context c = to_context(ctx);
        nibble::gemv(c, f, W, rows, cols, x, y);
      },
      classify_compute);
}

nibble_status nibble_gemm(const nibble_context* ctx, int format, const void* W, int64_t rows,
                          int64_t cols, const float* X, int64_t n, float* Y) {
  return guarded(
      "nibble_gemm", NIBBLE_ERROR_INVALID_ARGUMENT,
      [&] {
        const Format f = to_format(format);
        const nibble::Context c = to_context(ctx);
        nibble::gemm(c, f, W, rows, cols, X, n, Y);
      },
      classify_compute);
}

int nibble_packable(int format) {
  try {
    return valid_format(format) && nibble::packable(static_cast<Format>(format)) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

nibble_status nibble_pack(const nibble_context* ctx, int format, const void* W, int64_t rows,
                          int64_t cols, void* dst) {
  return guarded(
      "nibble_pack", NIBBLE_ERROR_INVALID_ARGUMENT,
      [&] {
        const Format f = to_format(format);
        const nibble::Context c = to_context(ctx);
        nibble::pack(c, f, W, rows, cols, dst);
      },
      classify_compute);
}

nibble_status nibble_unpack(const nibble_context* ctx, int format, const void* P, int64_t rows,
                            int64_t cols, void* dst) {
  return guarded(
      "nibble_unpack", NIBBLE_ERROR_INVALID_ARGUMENT,
      [&] {
        const Format f = to_format(format);
        const nibble::Context c = to_context(ctx);
        nibble::unpack(c, f, P, rows, cols, dst);
      },
      classify_compute);
}

nibble_status nibble_pack_in_place(const nibble_context* ctx, int format, void* W, int64_t rows,
                                   int64_t cols) {
  return guarded(
      "nibble_pack_in_place", NIBBLE_ERROR_INVALID_ARGUMENT,
      [&] {
        const Format f = to_format(format);
        const nibble::Context c = to_context(ctx);
        nibble::pack_in_place(c, f, W, rows, cols);
      },
      classify_compute);
}

nibble_status nibble_unpack_in_place(const nibble_context* ctx, int format, void* P, int64_t rows,
                                     int64_t cols) {
  return guarded(
      "nibble_unpack_in_place", NIBBLE_ERROR_INVALID_ARGUMENT,
      [&] {
        const Format f = to_format(format);
        const nibble::Context c = to_context(ctx);
        nibble::unpack_in_place(c, f, P, rows, cols);
      },
      classify_compute);
}

nibble_status nibble_gemm_packed(const nibble_context* ctx, int format, const void* P, int64_t rows,
                                 int64_t cols, const float* X, int64_t n, float* Y) {
  return guarded(
      "nibble_gemm_packed", NIBBLE_ERROR_INVALID_ARGUMENT,
      [&] {
        const Format f = to_format(format);
        const nibble::Context c = to_context(ctx);
        const nibble::PackedWeights w = nibble::PackedWeights::view(f, P, rows, cols);
        nibble::gemm(c, w, X, n, Y);
      },
      classify_compute);
}

nibble_status nibble_gemv_packed(const nibble_context* ctx, int format, const void* P, int64_t rows,
                                 int64_t cols, const float* x, float* y) {
  return guarded(
      "nibble_gemv_packed", NIBBLE_ERROR_INVALID_ARGUMENT,
      [&] {
        const Format f = to_format(format);
        const nibble::Context c = to_context(ctx);
        const nibble::PackedWeights w = nibble::PackedWeights::view(f, P, rows, cols);
        nibble::gemv(c, w, x, y);
      },
      classify_compute);
}

nibble_status nibble_gguf_open(const char* path, nibble_gguf** out) {
  return guarded("nibble_gguf_open", NIBBLE_ERROR_IO, [&] {
    need(path, "path");
    need(out, "out");
    auto* g = new nibble_gguf{nibble::gguf::File::open(path)};
    *out = g;
  });
}

void nibble_gguf_close(nibble_gguf* file) {
  delete file;
}

int64_t nibble_gguf_metadata_count(const nibble_gguf* file) {
  return file ? static_cast<int64_t>(file->file.metadata.size()) : 0;
}

nibble_status nibble_gguf_metadata_key(const nibble_gguf* file, int64_t index, const char** key) {
  return guarded("nibble_gguf_metadata_key", NIBBLE_ERROR_INVALID_ARGUMENT, [&] {
    need(file, "file");
    need(key, "key");
    if (index < 0 || index >= nibble_gguf_metadata_count(file))
      raise(NIBBLE_ERROR_INVALID_ARGUMENT,
            "index = " + std::to_string(index) + " is out of range [0, " +
                std::to_string(nibble_gguf_metadata_count(file)) + ")");
    *key = file->file.metadata[static_cast<size_t>(index)].key.c_str();
  });
}

nibble_status nibble_gguf_get_string(const nibble_gguf* file, const char* key, const char** value) {
  return guarded("nibble_gguf_get_string", NIBBLE_ERROR_INVALID_ARGUMENT, [&] {
    need(value, "value");
    const auto& v = lookup(file, key);
    if (v.type != nibble::gguf::ValueType::string) wrong_type(key, v, "a string");
    *value = v.str.c_str();
  });
}

nibble_status nibble_gguf_get_int(const nibble_gguf* file, const char* key, int64_t* value) {
  return guarded("nibble_gguf_get_int", NIBBLE_ERROR_TYPE, [&] {
    need(value, "value");
    const auto& v = lookup(file, key);
    if (!v.is_integer()) wrong_type(key, v, "an integer");
    *value = v.as_int();  // throws (-> TYPE) for a u64 above INT64_MAX
  });
}

nibble_status nibble_gguf_get_float(const nibble_gguf* file, const char* key, double* value) {
  return guarded("nibble_gguf_get_float", NIBBLE_ERROR_TYPE, [&] {
    need(value, "value");
    const auto& v = lookup(file, key);
    if (v.type == nibble::gguf::ValueType::string || v.type == nibble::gguf::ValueType::array)
      wrong_type(key, v, "a number");
    *value = v.as_double();
  });
}

nibble_status nibble_gguf_get_array_length(const nibble_gguf* file, const char* key,
                                           uint64_t* length) {
  return guarded("nibble_gguf_get_array_length", NIBBLE_ERROR_INVALID_ARGUMENT, [&] {
    need(length, "length");
    const auto& v = lookup(file, key);
    if (v.type != nibble::gguf::ValueType::array) wrong_type(key, v, "an array");
    *length = v.count;
  });
}

nibble_status nibble_gguf_get_array_string(const nibble_gguf* file, const char* key, uint64_t index,
                                           const char** value) {
  return guarded("nibble_gguf_get_array_string", NIBBLE_ERROR_INVALID_ARGUMENT, [&] {
    need(value, "value");
    const auto& v = lookup(file, key);
    if (v.type != nibble::gguf::ValueType::array || v.elem != nibble::gguf::ValueType::string)
      wrong_type(key, v, "an array of strings");
    if (index >= v.strings.size())
      raise(NIBBLE_ERROR_INVALID_ARGUMENT, "index = " + std::to_string(index) +
                                               " is out of range [0, " +
                                               std::to_string(v.strings.size()) + ")");
    *value = v.strings[static_cast<size_t>(index)].c_str();
  });
}

int64_t nibble_gguf_tensor_count(const nibble_gguf* file) {
  return file ? static_cast<int64_t>(file->file.tensors.size()) : 0;
}

nibble_status nibble_gguf_find_tensor(const nibble_gguf* file, const char* name, int64_t* index) {
  return guarded("nibble_gguf_find_tensor", NIBBLE_ERROR_INVALID_ARGUMENT, [&] {
    need(file, "file");
    need(name, "name");
    need(index, "index");
    const auto& ts = file->file.tensors;
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i].name == name) {
        *index = static_cast<int64_t>(i);
        return;
      }
    raise(NIBBLE_ERROR_NOT_FOUND, std::string("no tensor \"") + name + "\"");
  });
}

nibble_status nibble_gguf_tensor_info(const nibble_gguf* file, int64_t index,
                                      nibble_gguf_tensor* info) {
  return guarded("nibble_gguf_tensor_info", NIBBLE_ERROR_INVALID_ARGUMENT, [&] {
    need(file, "file");
    need(info, "info");
    if (index < 0 || index >= nibble_gguf_tensor_count(file))
      raise(NIBBLE_ERROR_INVALID_ARGUMENT,
            "index = " + std::to_string(index) + " is out of range [0, " +
                std::to_string(nibble_gguf_tensor_count(file)) + ")");
    const nibble::gguf::TensorInfo& t = file->file.tensors[static_cast<size_t>(index)];
    nibble_gguf_tensor r;
    r.name = t.name.c_str();
    r.type = t.type;
    r.format = t.packed() ? -1 : nibble_format_from_gguf_type(t.type);
    r.n_dims = static_cast<int>(t.shape.size());
    for (int d = 0; d < 4; ++d) r.shape[d] = d < r.n_dims ? t.shape[static_cast<size_t>(d)] : 1;
    r.cols = r.shape[0];
    r.rows = t.rows();
    r.nbytes = t.nbytes;
    r.data = t.data;
    *info = r;
  });
}

nibble_status nibble_gguf_tensor_packed(const nibble_gguf* file, int64_t index, int* format) {
  return guarded("nibble_gguf_tensor_packed", NIBBLE_ERROR_INVALID_ARGUMENT, [&] {
    need(file, "file");
    need(format, "format");
    if (index < 0 || index >= nibble_gguf_tensor_count(file))
      raise(NIBBLE_ERROR_INVALID_ARGUMENT,
            "index = " + std::to_string(index) + " is out of range [0, " +
                std::to_string(nibble_gguf_tensor_count(file)) + ")");
    const nibble::gguf::TensorInfo& t = file->file.tensors[static_cast<size_t>(index)];
    *format = t.packed() ? nibble_format_from_gguf_type(nibble::gguf::base_type(t.type)) : -1;
  });
}

}  // extern "C"
