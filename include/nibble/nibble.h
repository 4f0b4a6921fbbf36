/* nibble: C99 API over the checked C++ entry points of <nibble/nibble.hpp> and the GGUF reader
 * of <nibble/io/gguf.hpp>, for embedding nibble from C or from any language with a C FFI.
 *
 * Conventions
 * - Every function that can fail returns a nibble_status (NIBBLE_OK = 0). On failure nothing has
 *   been written to any output argument or buffer, and nibble_last_error() returns a message
 *   describing the failure (per thread).
 * - No C++ exception ever crosses this API.
 * - Formats are ints: the values of the C++ enum nibble::Format (0 = f32, 1 = f16, 2 = q8_0,
 *   3 = q4_K, 4 = q5_K, 5 = q6_K, 6 = q8_K, 7 = nf4, 8 = fp4; new formats are appended). Look
 *   them up by name with nibble_format_from_name() rather than hard-coding numbers.
 * - ISAs are ints: the values of nibble::Isa (NIBBLE_ISA_* below).
 * - Every function is thread-safe: many threads may call into nibble at once, sharing read-only
 *   weights and nibble_gguf handles. Output buffers must not be shared between concurrent calls.
 * - Matrices are row-major. A quantized matrix of `rows` x `cols` values is `rows` rows of
 *   nibble_row_bytes(format, cols) bytes each, exactly as GGUF stores a 2-D tensor with
 *   ne[0] = cols and ne[1] = rows (so a mapped GGUF tensor can be passed as is).
 */
#ifndef NIBBLE_NIBBLE_H
#define NIBBLE_NIBBLE_H

#include <stddef.h>
#include <stdint.h>

/* Version of this header; nibble_version() gives the library's. */
#define NIBBLE_VERSION_MAJOR 0
#define NIBBLE_VERSION_MINOR 1
#define NIBBLE_VERSION_PATCH 0

#if defined(_WIN32)
#define NIBBLE_CAPI
#elif defined(__GNUC__)
#define NIBBLE_CAPI __attribute__((visibility("default")))
#else
#define NIBBLE_CAPI
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Result of every fallible call. */
typedef enum nibble_status {
  NIBBLE_OK = 0,                     /**< success */
  NIBBLE_ERROR_INVALID_ARGUMENT = 1, /**< bad sizes, null pointers, NaN/Inf, unknown format... */
  NIBBLE_ERROR_UNSUPPORTED = 2,      /**< valid request this build/CPU cannot do (ISA, kernel) */
  NIBBLE_ERROR_IO = 3,               /**< file cannot be opened, read, or is malformed */
  NIBBLE_ERROR_OUT_OF_MEMORY = 4,    /**< an allocation failed */
  NIBBLE_ERROR_NOT_FOUND = 5,        /**< no metadata key / tensor of that name */
  NIBBLE_ERROR_TYPE = 6,             /**< metadata value exists but has another type */
  NIBBLE_ERROR_INTERNAL = 7          /**< anything else (a bug: please report it) */
} nibble_status;

/** Message of the calling thread's last failed call ("" if none failed yet). Successful calls do
 *  not clear it. The pointer stays valid until this thread's next failing nibble call. */
NIBBLE_CAPI const char* nibble_last_error(void);

/** Short name of a status ("ok", "invalid argument", ...; "unknown" for other values). */
NIBBLE_CAPI const char* nibble_status_name(nibble_status s);

/** "MAJOR.MINOR.PATCH" of the library that is linked (compare with the NIBBLE_VERSION_* macros of
 *  the header you compiled against). */
NIBBLE_CAPI const char* nibble_version(void);

/* ---- formats ---- */

/** Number of formats (valid format ints are 0 .. nibble_format_count() - 1). */
NIBBLE_CAPI int nibble_format_count(void);
/** Format int of a name ("q4_K", "q8_0", "nf4", ...; exact match first, then case-insensitive),
 *  or -1 if unknown or name is NULL. */
NIBBLE_CAPI int nibble_format_from_name(const char* name);
/** Name of a format ("q4_K"), or NULL if `format` is not a valid format int. */
NIBBLE_CAPI const char* nibble_format_name(int format);
/** Format int of a GGUF/ggml tensor type id (e.g. 12 -> q4_K), or -1 if nibble has none. */
NIBBLE_CAPI int nibble_format_from_gguf_type(uint32_t gguf_type);
/** Values per block of a format (1 for f32/f16), or 0 if `format` is invalid. */
NIBBLE_CAPI int64_t nibble_block_elems(int format);
/** Bytes of one row of `cols` values, or 0 on error (invalid format, negative cols, cols not a
 *  multiple of the block size; nibble_last_error() says which). */
NIBBLE_CAPI size_t nibble_row_bytes(int format, int64_t cols);

/* ---- ISAs ---- */

#define NIBBLE_ISA_SCALAR 0
#define NIBBLE_ISA_AVX2 1
#define NIBBLE_ISA_AVX512 2
#define NIBBLE_ISA_NEON 3
#define NIBBLE_ISA_AVXVNNI 4

/** Name of an ISA ("scalar", "avx2", ...), or NULL if unknown. */
NIBBLE_CAPI const char* nibble_isa_name(int isa);
/** 1 if this build has kernels for `isa` and this CPU/OS can run them, else 0. */
NIBBLE_CAPI int nibble_isa_supported(int isa);

/* ---- execution context ---- */

/** The caller's thread pool: run task(task_ctx, i) for every i in [0, n) (in any order, on any
 *  threads) and return when all are done. n is at most the context's thread count; the tasks
 *  share the rows among themselves, so running all n at once gives the best speed. Same
 *  signature as the C++ nibble::ParallelFor. */
typedef void (*nibble_parallel_for)(void* pool, int64_t n, void (*task)(void* task_ctx, int64_t i),
                                    void* task_ctx);

/** Execution context of the compute calls. The all-zero value (`nibble_context c = {0};`, or a
 *  NULL pointer) means: best ISA of this CPU (capped by the NIBBLE_ISA environment variable),
 *  all hardware threads through nibble's default thread pool (docs/embedding.md). */
typedef struct nibble_context {
  int force_isa; /**< 0: choose the best ISA; nonzero: use `isa` (UNSUPPORTED if it cannot run) */
  int isa;       /**< NIBBLE_ISA_* value, read only when force_isa != 0 */
  int threads;   /**< 0 = all hardware threads; else at most this many (tasks per parallel_for) */
  nibble_parallel_for parallel_for; /**< optional: your pool (NULL = nibble's default)... */
  void* pool;                       /**< ...and its handle, passed back to parallel_for */
  /** NF4/FP4 GEMV (n = 1) on x86 rounds the code book and the activations to int16 (relative
   *  error about 1e-4 of sum |w x|). Nonzero: the fp32 product of the dequantized weights
   *  instead (bitsandbytes' semantics, as nibble_gemm with n > 1). Other formats: no effect. */
  int exact_nf4;
} nibble_context;

/** ISA that compute calls under `ctx` (NULL = defaults) use, into *isa. */
NIBBLE_CAPI nibble_status nibble_best_isa(const nibble_context* ctx, int* isa);

/* ---- quantize / dequantize ---- */

/** Quantizes a row-major rows x cols fp32 matrix `src` into `dst` (rows * nibble_row_bytes(format,
 *  cols) bytes). `importance` (cols non-negative finite weights, or NULL) selects the
 *  importance-weighted (imatrix) quantizers of q4_K/q5_K/q6_K and is ignored by other formats.
 *  Output is byte-identical to ggml's reference quantizers for every ISA and thread count.
 *  Errors (nothing written): invalid format, NULL pointers, negative sizes, cols not a multiple of
 *  the block size, NaN/Inf in src, bad importance weights. */
NIBBLE_CAPI nibble_status nibble_quantize(int format, const float* src, int64_t rows, int64_t cols,
                                          void* dst, const float* importance);
/** As nibble_quantize, under an explicit context (NULL = defaults). */
NIBBLE_CAPI nibble_status nibble_quantize_ctx(const nibble_context* ctx, int format,
                                              const float* src, int64_t rows, int64_t cols,
                                              void* dst, const float* importance);

/** Dequantizes rows x cols values stored in `format` (rows * nibble_row_bytes bytes at src) to
 *  rows * cols floats at dst (identical to ggml's dequantizers). */
NIBBLE_CAPI nibble_status nibble_dequantize(int format, const void* src, int64_t rows, int64_t cols,
                                            float* dst);

/* ---- matrix products ---- */

/** y = W x. W: rows x cols in `format` (rows of nibble_row_bytes(format, cols) bytes), x: cols
 *  floats, y: rows floats. ctx may be NULL. Activations are quantized to the format's activation
 *  type (q8_0 / q8_K) as ggml does; results are bit-identical for every thread count and pool.
 *  UNSUPPORTED for formats that are not weight formats (q8_K). */
NIBBLE_CAPI nibble_status nibble_gemv(const nibble_context* ctx, int format, const void* W,
                                      int64_t rows, int64_t cols, const float* x, float* y);

/** Y = X W^T. W as in nibble_gemv; X: n x cols row-major (n activation vectors, one per row);
 *  Y: n x rows row-major (Y[j * rows + r] = dot(row r of W, row j of X)). */
NIBBLE_CAPI nibble_status nibble_gemm(const nibble_context* ctx, int format, const void* W,
                                      int64_t rows, int64_t cols, const float* X, int64_t n,
                                      float* Y);

/* ---- packed weights (nibble/packed.hpp) ---- */

/* The packed layout holds the same bytes as the plain one (rows * nibble_row_bytes(format, cols)),
 * permuted: rows in groups of 16, the 16 rows' blocks b stored together, field by field in 4-byte
 * (2 for an fp16 scalar) units of the 16 rows in turn; the rows after the last full group stay
 * plain at the end (docs/formats.md has the exact layout). A decode GEMV then reads one sequential
 * stream with no shuffles: it runs at the memory bandwidth where the plain layout is
 * compute-bound. Pack once (at load, or on disk with `nibble pack`); unpack gives back the plain
 * bytes exactly. Formats: q8_0, q4_K, q5_K, q6_K, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, iq4_nl,
 * iq4_xs, mxfp4, nf4, fp4, f16, bf16 (nibble_packable; f16 / bf16: a block is one 2-byte value, so
 * the 16 rows' values of one column are stored together). A format that is valid but not packable
 * is UNSUPPORTED. */

/** 1 if `format` has a packed layout (pack / unpack / the packed products), else 0. */
NIBBLE_CAPI int nibble_packable(int format);

/** Packs the rows x cols matrix W (plain GGUF blocks, rows * nibble_row_bytes(format, cols)
 *  bytes) into dst (the same number of bytes; must not overlap W). ctx may be NULL. */
NIBBLE_CAPI nibble_status nibble_pack(const nibble_context* ctx, int format, const void* W,
                                      int64_t rows, int64_t cols, void* dst);

/** The inverse of nibble_pack: the plain GGUF bytes of the packed matrix P into dst
 *  (byte-identical to what was packed). */
NIBBLE_CAPI nibble_status nibble_unpack(const nibble_context* ctx, int format, const void* P,
                                        int64_t rows, int64_t cols, void* dst);

/** nibble_pack without a second buffer: W is rewritten in the packed layout, through one 16-row
 *  group of scratch per thread (a model read into writable memory is packed without doubling
 *  it). Same bytes as nibble_pack into another buffer; on any error W is left unchanged. */
NIBBLE_CAPI nibble_status nibble_pack_in_place(const nibble_context* ctx, int format, void* W,
                                               int64_t rows, int64_t cols);

/** nibble_unpack without a second buffer: P is rewritten as the plain GGUF bytes. */
NIBBLE_CAPI nibble_status nibble_unpack_in_place(const nibble_context* ctx, int format, void* P,
                                                 int64_t rows, int64_t cols);

/** y = W x on packed weights P (rows x cols of `format`, packed by nibble_pack or read from a
 *  packed GGUF tensor). Same arguments and results as nibble_gemv on the plain bytes, within
 *  float rounding (the sums are the same; only the order of the float steps may differ). */
NIBBLE_CAPI nibble_status nibble_gemv_packed(const nibble_context* ctx, int format, const void* P,
                                             int64_t rows, int64_t cols, const float* x, float* y);

/** Y = X W^T on packed weights P (as nibble_gemm: X n x cols, Y n x rows, row-major). */
NIBBLE_CAPI nibble_status nibble_gemm_packed(const nibble_context* ctx, int format, const void* P,
                                             int64_t rows, int64_t cols, const float* X, int64_t n,
                                             float* Y);

/* ---- GGUF (read-only) ---- */

/** Flag in the ggml type id of a GGUF tensor stored in the packed layout (`nibble pack`): type
 *  NIBBLE_GGUF_PACKED_FLAG | 12 is a packed q4_K tensor. Never set in a ggml type id (llama.cpp
 *  refuses such files). nibble_gguf_tensor_info reports such a tensor with this `type` and
 *  format -1 (its bytes are not the plain layout nibble_gemv reads); nibble_gguf_tensor_packed
 *  gives its format. */
#define NIBBLE_GGUF_PACKED_FLAG 0x1000u

/** An opened, memory-mapped, fully validated GGUF file. Read-only: safe to share between
 *  threads. Every pointer obtained from it stays valid until nibble_gguf_close(). */
typedef struct nibble_gguf nibble_gguf;

/** One tensor of a GGUF file. */
typedef struct nibble_gguf_tensor {
  const char* name; /**< tensor name (NUL-terminated) */
  uint32_t type;    /**< ggml type id (with NIBBLE_GGUF_PACKED_FLAG for a packed tensor) */
  int format;       /**< nibble format int of `type`, or -1 (no nibble format, or packed) */
  int n_dims;       /**< 1..4 */
  int64_t shape[4]; /**< ne[0] (contiguous row length) first; unused dims are 1 */
  int64_t cols;     /**< shape[0] */
  int64_t rows;     /**< product of shape[1..] */
  uint64_t nbytes;  /**< bytes of data */
  const void* data; /**< the data, inside the read-only mapping */
} nibble_gguf_tensor;

/** Maps and parses `path` into *out (set only on success). IO if it cannot be opened or is not a
 *  valid GGUF file (the message says what and at which byte). */
NIBBLE_CAPI nibble_status nibble_gguf_open(const char* path, nibble_gguf** out);
/** Closes a file from nibble_gguf_open (NULL is allowed). */
NIBBLE_CAPI void nibble_gguf_close(nibble_gguf* file);

/** Number of metadata entries (0 if file is NULL). */
NIBBLE_CAPI int64_t nibble_gguf_metadata_count(const nibble_gguf* file);
/** Key of metadata entry `index` (file order). */
NIBBLE_CAPI nibble_status nibble_gguf_metadata_key(const nibble_gguf* file, int64_t index,
                                                   const char** key);
/** String value of `key` (NOT_FOUND, TYPE if it is not a string). */
NIBBLE_CAPI nibble_status nibble_gguf_get_string(const nibble_gguf* file, const char* key,
                                                 const char** value);
/** Integer (or bool) value of `key` (TYPE if not an integer, or a u64 above INT64_MAX). */
NIBBLE_CAPI nibble_status nibble_gguf_get_int(const nibble_gguf* file, const char* key,
                                              int64_t* value);
/** Float value of `key` (f32/f64, integers are converted; TYPE for strings and arrays). */
NIBBLE_CAPI nibble_status nibble_gguf_get_float(const nibble_gguf* file, const char* key,
                                                double* value);
/** Number of elements of array `key` (TYPE if it is not an array). */
NIBBLE_CAPI nibble_status nibble_gguf_get_array_length(const nibble_gguf* file, const char* key,
                                                       uint64_t* length);
/** Element `index` of a string array `key` (e.g. tokenizer.ggml.tokens). */
NIBBLE_CAPI nibble_status nibble_gguf_get_array_string(const nibble_gguf* file, const char* key,
                                                       uint64_t index, const char** value);

/** Number of tensors (0 if file is NULL). */
NIBBLE_CAPI int64_t nibble_gguf_tensor_count(const nibble_gguf* file);
/** Index of the tensor called `name` (NOT_FOUND if none). */
NIBBLE_CAPI nibble_status nibble_gguf_find_tensor(const nibble_gguf* file, const char* name,
                                                  int64_t* index);
/** Description and data pointer of tensor `index` (0 .. count - 1). */
NIBBLE_CAPI nibble_status nibble_gguf_tensor_info(const nibble_gguf* file, int64_t index,
                                                  nibble_gguf_tensor* info);
/** Whether tensor `index` is stored in the packed layout: its format int into *format if it is
 *  (pass its data with rows and cols to nibble_gemv_packed / nibble_gemm_packed / nibble_unpack),
 *  -1 if it is a plain tensor. */
NIBBLE_CAPI nibble_status nibble_gguf_tensor_packed(const nibble_gguf* file, int64_t index,
                                                    int* format);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NIBBLE_NIBBLE_H */
