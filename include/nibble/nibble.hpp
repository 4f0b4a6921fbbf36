// nibble: public API. Checked entry points: every function here validates its arguments and
// throws nibble::Error (naming the argument) before touching any output buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "nibble/core/error.hpp"
#include "nibble/core/fp16.hpp"
#include "nibble/core/types.hpp"
#include "nibble/formats/bf16.hpp"
#include "nibble/formats/iq4_nl.hpp"
#include "nibble/formats/mxfp4.hpp"
#include "nibble/formats/nf4.hpp"
#include "nibble/formats/q2_k.hpp"
#include "nibble/formats/q3_k.hpp"
#include "nibble/formats/q4_0.hpp"
#include "nibble/formats/q4_1.hpp"
#include "nibble/formats/q4_k.hpp"
#include "nibble/formats/q5_0.hpp"
#include "nibble/formats/q5_1.hpp"
#include "nibble/formats/q5_k.hpp"
#include "nibble/formats/q6_k.hpp"
#include "nibble/formats/q8_0.hpp"
#include "nibble/formats/q8_1.hpp"
#include "nibble/formats/q8_k.hpp"

namespace nibble {

/// The caller's thread pool: run task(ctx, i) for every i in [0, n), return when all are done.
/// n is at most the Context's thread count; the tasks share the work among themselves (each
/// takes over rows the others have not reached), so any order or degree of concurrency gives the
/// same result, and running them all at once gives the best speed.
using ParallelFor = void (*)(void* pool, std::int64_t n, void (*task)(void* ctx, std::int64_t i),
                             void* ctx);

/// Execution context of the compute entry points. A default-constructed Context uses the best
/// ISA of this CPU (restricted by the NIBBLE_ISA environment variable when set) and all hardware
/// threads through nibble's own pool (docs/embedding.md, "Threads").
struct Context {
  std::optional<Isa> isa;              ///< force one ISA (Error if this CPU or build lacks it)
  int threads = 0;                     ///< 0 = all hardware threads
  ParallelFor parallel_for = nullptr;  ///< optional: the embedding runtime's pool ...
  void* pool = nullptr;                ///< ... and its handle
  /// NF4/FP4 GEMV (n = 1) on x86 rounds the code book and the activations to int16 (relative
  /// error about 1e-4 against the exact product, docs/kernels.md). true: the fp32 product of the
  /// dequantized weights instead (bitsandbytes' semantics; about 2x slower). Other formats and ISAs
  /// are unaffected.
  bool exact_nf4 = false;
};

/// Bytes of one row of `cols` values in format `f`. Throws if cols is negative or not a
/// multiple of the format's block size.
std::size_t row_bytes(Format f, std::int64_t cols);

/// Quantizes a row-major rows x cols fp32 matrix into `dst` (rows * row_bytes(f, cols) bytes).
/// `importance` (cols non-negative finite weights, or nullptr) selects the importance-weighted
/// (imatrix) quantizers for q2_K..q6_K/q4_0/q4_1/q5_0/q5_1/iq4_nl/iq4_xs
/// (has_importance_quantizer) and
/// is ignored by the other formats. Formats
/// with format_implemented(f) false throw. The output is byte-identical to what ggml_quantize_chunk
/// stores (ggml's reference quantizers; for iq4_nl ggml's quantize_iq4_nl, whose 15-candidate
/// search differs from quantize_row_iq4_nl_ref, which is nibble::ref::quantize_iq4_nl_ref) and
/// independent of ISA and thread count. Throws (writing nothing) on null pointers, negative sizes,
/// cols not a multiple of the block size, NaN/Inf in src, or negative/non-finite importance
/// weights. Format::q8_K is allowed.
void quantize(Format f, const float* src, std::int64_t rows, std::int64_t cols, void* dst,
              const float* importance = nullptr);
/// As above, with an explicit Context (ISA, threads).
void quantize(const Context& ctx, Format f, const float* src, std::int64_t rows, std::int64_t cols,
              void* dst, const float* importance = nullptr);

/// Dequantizes rows x cols values stored in format `f` to fp32 (identical to ggml's dequantizers).
void dequantize(Format f, const void* src, std::int64_t rows, std::int64_t cols, float* dst);
/// As above, with an explicit Context.
void dequantize(const Context& ctx, Format f, const void* src, std::int64_t rows, std::int64_t cols,
                float* dst);

/// Best ISA available under `ctx` (built AND supported by this CPU/OS AND allowed by ctx.isa
/// and NIBBLE_ISA). Throws if ctx.isa names an ISA this build or CPU cannot run.
Isa best_isa(const Context& ctx = {});

/// ISAs this binary was built with and this CPU/OS can run, best last.
std::vector<Isa> available_isas();

/// y = W x. W: rows x cols in format `w` (row-major blocks), x: cols floats, y: rows floats.
void gemv(const Context& ctx, Format w, const void* W, std::int64_t rows, std::int64_t cols,
          const float* x, float* y);

/// Y = X W^T. W as in gemv; X: n x cols row-major; Y: n x rows row-major.
void gemm(const Context& ctx, Format w, const void* W, std::int64_t rows, std::int64_t cols,
          const float* X, std::int64_t n, float* Y);

namespace nf4 {

/// A bitsandbytes-compatible 4-bit tensor (field names follow bitsandbytes' QuantState).
struct Quantized {
  std::vector<std::uint8_t> packed;   ///< (n+1)/2 bytes, element 2i in the high nibble of byte i
  std::vector<float> absmax;          ///< fp32 absmax per block (empty when double_quant)
  std::vector<std::uint8_t> qabsmax;  ///< 8-bit codes of absmax - offset (double_quant only)
  std::vector<float> nested_absmax;   ///< absmax of each 256-block of (absmax - offset)
  float offset = 0.0f;                ///< mean of the absmax values (double_quant only)
  int blocksize = 64;                 ///< 64, 128, ..., 4096
  std::int64_t n = 0;                 ///< number of values
  bool fp4 = false;                   ///< FP4 code book instead of NF4
  bool double_quant = false;          ///< absmax stored as qabsmax + nested_absmax + offset
};

/// Quantizes n fp32 values exactly as bitsandbytes' quantize_4bit (quant_type "nf4" or "fp4",
/// compress_statistics = double_quant, nested blocksize 256, exact nearest dynamic-map code).
Quantized quantize(const float* x, std::int64_t n, int blocksize = 64, bool double_quant = false,
                   bool fp4 = false);

/// Dequantizes to n fp32 values (bitsandbytes' dequantize_4bit).
void dequantize(const Quantized& q, float* out);

}  // namespace nf4

}  // namespace nibble

#include "nibble/packed.hpp"  // packed (row-interleaved) weights: pack, unpack, gemv, gemm
