// nibble: the checked W8A8 (SmoothQuant) API: per-channel int8 weight quantization, per-token /
// per-tensor int8 activation quantization and the int8 x int8 products on the dispatched kernel
// table (kernels/w8a8-inl.hpp), rows split over the caller's threads.
#include "nibble/quant/w8a8.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "checks.hpp"
#include "dispatch.hpp"
#include "nibble/core/error.hpp"

namespace nibble {
namespace w8a8 {
namespace {

/// max(max |x|, 1e-5) / 127 over x[0..n).
float scale_of(const float* x, std::int64_t n) {
  float m = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return std::max(m, 1e-5f) / 127.0f;
}

/// q = round_half_even(x / d), within [-127, 127] (the clamp never changes a value: |x| / d is
/// at most 127 up to one rounding).
void quantize_row(const float* x, std::int64_t n, float d, std::int8_t* q) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = std::nearbyint(x[i] / d);
    q[i] = static_cast<std::int8_t>(std::min(127.0f, std::max(-127.0f, v)));
  }
}

void check_cols(std::int64_t cols, const char* fn) {
  if (cols < 0 || cols > kMaxCols)
    detail::fail(fn, ": cols = ", cols, " must be in [0, ", kMaxCols,
                 "] (int32 sums of int8 products)");
}

bool valid_mode(ActScale m) {
  return m == ActScale::per_token || m == ActScale::per_tensor;
}

/// Unchecked body of quantize_activations.
void quantize_acts(const float* X, std::int64_t n, std::int64_t cols, ActScale mode, std::int8_t* q,
                   float* scales) {
  if (mode == ActScale::per_tensor) {
    const float d = scale_of(X, n * cols);
    for (std::int64_t j = 0; j < n; ++j) {
      scales[j] = d;
      quantize_row(X + j * cols, cols, d, q + j * cols);
    }
    return;
  }
  for (std::int64_t j = 0; j < n; ++j) {
    scales[j] = scale_of(X + j * cols, cols);
    quantize_row(X + j * cols, cols, scales[j], q + j * cols);
  }
}

struct Job {
  decltype(kernels::KernelTable::w8a8_gemm) fn;
  const std::int8_t* W;
  const float* ws;
  std::int64_t rows, cols;
  const std::int8_t* A;
  const float* as;
  std::int64_t n;
  float* Y;
  std::int64_t chunk;
};

void task(void* arg, std::int64_t i) {
  const Job& j = *static_cast<const Job*>(arg);
  const std::int64_t r0 = i * j.chunk;
  const std::int64_t r1 = std::min(j.rows, r0 + j.chunk);
  if (r0 < r1) j.fn(j.W, j.ws, r0, r1, j.cols, j.A, j.as, j.n, j.Y, j.rows);
}

}  // namespace

Weights quantize_weights(const float* W, std::int64_t rows, std::int64_t cols) {
  const char* fn = "w8a8::quantize_weights";
  if (rows < 0) detail::fail(fn, ": rows = ", rows, " must be >= 0");
  check_cols(cols, fn);
  const std::int64_t count = checks::mul_count(rows, cols, "rows * cols", fn);
  checks::check_ptr(W, "W", count > 0, fn);
  if (count > 0) checks::check_finite(W, rows, cols, "W", fn);
  Weights out;
  out.rows = rows;
  out.cols = cols;
  out.q.resize(static_cast<std::size_t>(count));
  out.scale.resize(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    out.scale[r] = scale_of(W + r * cols, cols);
    quantize_row(W + r * cols, cols, out.scale[r], out.q.data() + r * cols);
  }
  return out;
}

void quantize_activations(const float* X, std::int64_t n, std::int64_t cols, ActScale mode,
                          std::int8_t* q, float* scales) {
  const char* fn = "w8a8::quantize_activations";
  if (n < 0) detail::fail(fn, ": n = ", n, " must be >= 0");
  check_cols(cols, fn);
  if (!valid_mode(mode))
    detail::fail(fn, ": mode = ", static_cast<int>(mode), " is not a valid w8a8::ActScale");
  const std::int64_t count = checks::mul_count(n, cols, "n * cols", fn);
  checks::check_ptr(X, "X", count > 0, fn);
  checks::check_ptr(q, "q", count > 0, fn);
  checks::check_ptr(scales, "scales", n > 0, fn);
  if (count > 0) checks::check_finite(X, n, cols, "X", fn);
  quantize_acts(X, n, cols, mode, q, scales);
}

void gemm(const Context& ctx, const Weights& w, const float* X, std::int64_t n, float* Y,
          ActScale mode) {
  const char* fn = "w8a8::gemm";
  if (w.rows < 0) detail::fail(fn, ": w.rows = ", w.rows, " must be >= 0");
  if (w.cols < 0 || w.cols > kMaxCols)
    detail::fail(fn, ": w.cols = ", w.cols, " must be in [0, ", kMaxCols, "]");
  const std::int64_t wcount = checks::mul_count(w.rows, w.cols, "w.rows * w.cols", fn);
  if (static_cast<std::int64_t>(w.q.size()) != wcount)
    detail::fail(fn, ": w.q has ", w.q.size(), " codes, expected w.rows * w.cols = ", wcount);
  if (static_cast<std::int64_t>(w.scale.size()) != w.rows)
    detail::fail(fn, ": w.scale has ", w.scale.size(), " entries, expected w.rows = ", w.rows);
  checks::check_finite(w.scale.data(), w.rows, "w.scale", fn);
  if (n < 0) detail::fail(fn, ": n = ", n, " must be >= 0");
  if (!valid_mode(mode))
    detail::fail(fn, ": mode = ", static_cast<int>(mode), " is not a valid w8a8::ActScale");
  const std::int64_t xcount = checks::mul_count(n, w.cols, "n * cols", fn);
  checks::mul_count(n, w.rows, "n * rows", fn);
  const bool any = w.rows > 0 && n > 0;
  checks::check_ptr(X, "X", any && w.cols > 0, fn);
  checks::check_ptr(Y, "Y", any, fn);
  if (!any) return;
  checks::check_finite(X, n, w.cols, "X", fn);
  const kernels::KernelTable& t = detail::select_table(ctx);  // may throw: before any output
  if (w.cols == 0) {
    std::fill(Y, Y + n * w.rows, 0.0f);
    return;
  }
  // Activations: quantized once, shared by every task.
  std::vector<std::int8_t> aq(static_cast<std::size_t>(xcount));
  std::vector<float> as(static_cast<std::size_t>(n));
  quantize_acts(X, n, w.cols, mode, aq.data(), as.data());

  Job job{t.w8a8_gemm ? t.w8a8_gemm : detail::scalar_table().w8a8_gemm,
          w.q.data(),
          w.scale.data(),
          w.rows,
          w.cols,
          aq.data(),
          as.data(),
          n,
          Y,
          0};
  if (job.fn == nullptr) detail::fail(fn, ": no W8A8 kernel in the scalar table");
  const std::int64_t tasks =
      detail::task_count(ctx, w.rows, static_cast<double>(w.cols) * static_cast<double>(n));
  const std::int64_t chunk = detail::chunk_rows(w.rows, tasks);
  job.chunk = chunk;
  detail::parallel_run(ctx, (w.rows + chunk - 1) / chunk, task, &job);
}

void gemv(const Context& ctx, const Weights& w, const float* x, float* y) {
  gemm(ctx, w, x, 1, y, ActScale::per_token);
}

}  // namespace w8a8
}  // namespace nibble
