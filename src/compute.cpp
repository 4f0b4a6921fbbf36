// nibble: the Context-taking public API (quantize, dequantize, gemv, gemm, ISA queries) and the
// table-level driver that splits the work over the caller's threads.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "checks.hpp"
#include "dispatch.hpp"
#include "pool.hpp"
#include "nibble/core/error.hpp"
#include "nibble/nibble.hpp"
#include "packed_layout.hpp"

#if defined(NIBBLE_HAVE_OPENMP)
#include <omp.h>
#endif

namespace nibble {
namespace detail {

namespace {
int hardware_threads() {
#if defined(NIBBLE_HAVE_OPENMP)
  return std::max(1, omp_get_max_threads());
#else
  const unsigned h = std::thread::hardware_concurrency();
  return h == 0 ? 1 : static_cast<int>(h);
#endif
}
}  // namespace

int wanted_threads(const Context& ctx) {
  return ctx.threads > 0 ? ctx.threads : hardware_threads();
}

// Splits [0, rows) into at most `parts` contiguous chunks whose sizes are multiples of
// kRowQuantum (except the last). Returns the chunk length.
std::int64_t chunk_rows(std::int64_t rows, std::int64_t parts) {
  if (parts < 1) parts = 1;
  std::int64_t c = (rows + parts - 1) / parts;
  c = (c + kRowQuantum - 1) / kRowQuantum * kRowQuantum;
  return std::max<std::int64_t>(c, kRowQuantum);
}

std::int64_t task_count(const Context& ctx, std::int64_t rows, double work_per_row) {
  if (rows <= 0) return 0;
  const double work = work_per_row * static_cast<double>(rows);
  const std::int64_t t = wanted_threads(ctx);
  if (t <= 1 || work < kMinTaskWork) return 1;
  const double by_work = std::floor(work / kMinTaskWork);
  const std::int64_t most = t * kTasksPerThread;
  return std::max<std::int64_t>(
      t, by_work < static_cast<double>(most) ? static_cast<std::int64_t>(by_work) : most);
}

namespace {

std::size_t row_size(Format f, std::int64_t cols) {
  return static_cast<std::size_t>(cols / traits(f).block_elems) * traits(f).block_bytes;
}

// ---- gemm driver ----
struct GemmJob {
  kernels::FormatKernels k;
  const void* W;
  std::size_t w_row_bytes;
  std::int64_t rows, cols, n;
  const void* A;
  std::size_t a_row_bytes;
  float* Y;
  std::int64_t chunk;
};

// Per-thread scratch for the activation rows of one call, reused across calls: a decode step then
// neither allocates nor zero-fills (measured: 1-2 us per call, 5-10% of a GEMV over an
// L2-resident 4096-column matrix). Three slots per thread (quantized activations, their plain and
// packed re-layouts). A call that finds its slot in use (a caller's pool that runs other work on
// this thread while it waits), or that needs more than kKeepBytes, gets a buffer of its own, freed
// when it returns.
class ActScratch {
 public:
  static constexpr std::size_t kKeepBytes = std::size_t{8} << 20;
  explicit ActScratch(int slot) : slot_(slot) {}
  ActScratch(const ActScratch&) = delete;
  ActScratch& operator=(const ActScratch&) = delete;
  ~ActScratch() {
    if (held_) held_->busy = false;
  }
  std::uint8_t* get(std::size_t bytes) {
    Slot& s = slots()[slot_];
    if (!held_ && !s.busy && bytes <= kKeepBytes) {
      if (bytes > s.cap) {
        s.buf.reset(new std::uint8_t[bytes]);
        s.cap = bytes;
      }
      s.busy = true;
      held_ = &s;
      return s.buf.get();
    }
    own_.reset(new std::uint8_t[bytes]);
    return own_.get();
  }

 private:
  struct Slot {
    std::unique_ptr<std::uint8_t[]> buf;
    std::size_t cap = 0;
    bool busy = false;
  };
  static Slot* slots() {
    thread_local Slot s[3];
    return s;
  }
  int slot_;
  Slot* held_ = nullptr;
  std::unique_ptr<std::uint8_t[]> own_;
};

void gemm_task(void* arg, std::int64_t i) {
  const GemmJob& j = *static_cast<const GemmJob*>(arg);
  const std::int64_t r0 = i * j.chunk;
  const std::int64_t r1 = std::min(j.rows, r0 + j.chunk);
  if (r0 >= r1) return;
  j.k.gemm(j.W, j.w_row_bytes, r0, r1, j.cols, j.A, j.a_row_bytes, j.n, j.Y, j.rows);
}

// ---- row-wise quantize / dequantize ----
struct RowJob {
  const kernels::FormatKernels* k;
  Format f;
  const float* src;
  const void* qsrc;
  void* dst;
  float* fdst;
  const float* importance;
  std::int64_t rows, cols, chunk;
  std::size_t rb;
  /// Q8_K on a SIMD table: its activation quantizer (byte-identical to the reference); null
  /// otherwise.
  void (*act)(const float* src, std::int64_t n, void* dst) = nullptr;
};

void quantize_row_range(const RowJob& j, std::int64_t r0, std::int64_t r1) {
  auto* out = static_cast<std::uint8_t*>(j.dst);
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* x = j.src + r * j.cols;
    std::uint8_t* o = out + static_cast<std::size_t>(r) * j.rb;
    if (j.f == Format::f32) {
      std::memcpy(o, x, static_cast<std::size_t>(j.cols) * 4);
    } else if (j.f == Format::f16) {
      for (std::int64_t c = 0; c < j.cols; ++c) {
        const fp16_t h = fp32_to_fp16(x[c]);
        std::memcpy(o + 2 * c, &h, 2);
      }
    } else if (j.act) {
      j.act(x, j.cols, o);
    } else if (j.k->quantize) {
      j.k->quantize(x, j.cols, o, j.importance);
    } else {
      nibble::quantize(j.f, x, 1, j.cols, o, j.importance);  // the scalar reference codec
    }
  }
}

void quantize_task(void* arg, std::int64_t i) {
  const RowJob& j = *static_cast<const RowJob*>(arg);
  quantize_row_range(j, i * j.chunk, std::min(j.rows, (i + 1) * j.chunk));
}

void dequantize_task(void* arg, std::int64_t i) {
  const RowJob& j = *static_cast<const RowJob*>(arg);
  const std::int64_t r0 = i * j.chunk, r1 = std::min(j.rows, (i + 1) * j.chunk);
  if (r0 >= r1) return;
  const void* in = static_cast<const std::uint8_t*>(j.qsrc) + static_cast<std::size_t>(r0) * j.rb;
  if (j.k->dequant) {
    j.k->dequant(in, (r1 - r0) * j.cols, j.fdst + r0 * j.cols);
  } else {
    nibble::dequantize(j.f, in, r1 - r0, j.cols, j.fdst + r0 * j.cols);  // reference codec
  }
}

// Entry of `f` in `t`, each null member replaced by the scalar table's (gemm and its activation
// re-layout always come from the same table).
kernels::FormatKernels merged(const kernels::KernelTable& t, Format f) {
  kernels::FormatKernels k = t.fmt[static_cast<int>(f)];
  const kernels::FormatKernels& s = scalar_table().fmt[static_cast<int>(f)];
  if (!k.dequant) k.dequant = s.dequant;
  if (!k.quantize) k.quantize = s.quantize;
  if (!k.gemm) {
    k.gemm = s.gemm;
    k.act_bytes = s.act_bytes;
    k.act_relayout = s.act_relayout;
  }
  return k;
}

// Tasks [0, count) split into one contiguous range per worker. A worker runs its own range from
// the front, in order (so one thread streams adjacent rows, as with a static split), then takes
// tasks one at a time from the back of the other workers' ranges. With balanced threads this is
// the static split; when some threads read memory faster than others (many cores sharing DRAM),
// they finish the slow ones' rows instead of waiting at the end of the region.
struct alignas(64) TaskRange {
  std::atomic<std::uint64_t> front_back{0};  // next front task (low 32 bits), end (high 32 bits)
};

struct StealJob {
  void (*body)(void* arg, std::int64_t i);
  void* arg;
  std::int64_t workers;
  TaskRange* ranges;
};

bool claim(TaskRange& r, bool from_front, std::int64_t& task) {
  std::uint64_t v = r.front_back.load(std::memory_order_relaxed);
  for (;;) {
    const std::uint64_t front = v & 0xffffffffu, back = v >> 32;
    if (front >= back) return false;
    const std::uint64_t next = from_front ? v + 1 : v - (std::uint64_t{1} << 32);
    if (r.front_back.compare_exchange_weak(v, next, std::memory_order_acq_rel,
                                           std::memory_order_relaxed)) {
      task = static_cast<std::int64_t>(from_front ? front : back - 1);
      return true;
    }
  }
}

void steal_worker(void* arg, std::int64_t w) {
  const StealJob& j = *static_cast<const StealJob*>(arg);
  std::int64_t task = 0;
  while (claim(j.ranges[w], true, task)) j.body(j.arg, task);
  for (std::int64_t k = 1; k < j.workers; ++k) {
    TaskRange& victim = j.ranges[(w + k) % j.workers];
    while (claim(victim, false, task)) j.body(j.arg, task);
  }
}

}  // namespace

void parallel_run(const Context& ctx, std::int64_t count, void (*body)(void* arg, std::int64_t i),
                  void* arg) {
  if (count <= 0) return;
  const std::int64_t workers = std::min<std::int64_t>(count, wanted_threads(ctx));
  if (workers <= 1) {
    for (std::int64_t i = 0; i < count; ++i) body(arg, i);
    return;
  }
  if (count > std::int64_t{0xffffffff}) fail("parallel_run: too many tasks");
  std::vector<TaskRange> ranges(static_cast<std::size_t>(workers));
  for (std::int64_t w = 0; w < workers; ++w) {
    const std::uint64_t b = static_cast<std::uint64_t>(count * w / workers);
    const std::uint64_t e = static_cast<std::uint64_t>(count * (w + 1) / workers);
    ranges[static_cast<std::size_t>(w)].front_back.store(b | (e << 32), std::memory_order_relaxed);
  }
  StealJob job{body, arg, workers, ranges.data()};
  // Every task is run exactly once even if fewer workers start than asked for (a pool with fewer
  // threads, workers that wake late): the workers that do run take the others' ranges.
  if (ctx.parallel_for != nullptr) {
    ctx.parallel_for(ctx.pool, workers, steal_worker, &job);
    return;
  }
  // nibble's own pool (pool.hpp), one thread per hardware thread at most (more would only spin
  // against each other; the tasks of the missing workers are taken over). Busy (a concurrent call
  // from another thread, or a nested one): this thread runs every task itself.
  if (!pool_run(hardware_threads(), workers, steal_worker, &job)) steal_worker(&job, 0);
}

namespace {

// The n activation rows of X in the activation format of `f` (quantized once, shared by every
// task): A/arb point at X itself for fp32 activations, else into `buf`.
void quantize_activations(const kernels::KernelTable& t, Format f, const float* X, std::int64_t n,
                          std::int64_t cols, ActScratch& buf, const void*& A, std::size_t& arb) {
  const Format af = traits(f).activation;
  A = X;
  arb = static_cast<std::size_t>(cols) * 4;
  if (af == Format::f32) return;
  auto pick = [af](const kernels::KernelTable& tt) {
    return af == Format::q8_K   ? tt.quantize_act_q8_K
           : af == Format::q8_1 ? tt.quantize_act_q8_1
                                : tt.quantize_act_q8_0;
  };
  auto q = pick(t);
  if (!q) q = pick(scalar_table());
  if (!q) fail("gemm: no activation quantizer for ", traits(af).name);
  arb = row_size(af, cols);
  std::uint8_t* a = buf.get(arb * static_cast<std::size_t>(n));
  for (std::int64_t j = 0; j < n; ++j) q(X + j * cols, cols, a + j * arb);
  A = a;
}

// The activation rows re-laid out by `relayout` (when non-null) into `buf`.
void relayout_activations(std::size_t (*bytes)(std::int64_t),
                          void (*relayout)(const void*, std::int64_t, void*), std::int64_t n,
                          std::int64_t cols, ActScratch& buf, const void*& A, std::size_t& arb) {
  if (!relayout) return;
  const std::size_t rb = bytes(cols);
  std::uint8_t* r = buf.get(rb * static_cast<std::size_t>(n));
  for (std::int64_t j = 0; j < n; ++j)
    relayout(static_cast<const std::uint8_t*>(A) + j * arb, cols, r + j * rb);
  A = r;
  arb = rb;
}

// Context::exact_nf4: the format's exact product (NF4 / FP4: the fp32 GEMV) in place of its
// default one, where it has one. True if it switched.
bool select_exact(const Context& ctx, kernels::FormatKernels& k) {
  if (!ctx.exact_nf4 || !k.gemm_exact) return false;
  k.gemm = k.gemm_exact;
  k.act_bytes = k.act_bytes_exact;
  k.act_relayout = k.act_relayout_exact;
  return true;
}

// ---- packed weights: groups of 16 rows, then the plain tail rows ----
struct PackedJob {
  kernels::FormatKernels k;
  Format f;
  const PackLayout* layout;
  const std::uint8_t* P;
  std::size_t rb;  // plain row bytes
  std::int64_t rows, cols, n, groups, chunk, tasks;
  const void* A;  // activations for gemm_packed (or the unpack fallback's plain gemm)
  std::size_t arb;
  const void* Ap;  // activations for the plain gemm (tail rows)
  std::size_t arbp;
  float* Y;
};

void packed_task(void* arg, std::int64_t i) {
  const PackedJob& j = *static_cast<const PackedJob*>(arg);
  const std::int64_t G = kPackedGroupRows;
  if (i == j.tasks) {  // the plain tail rows
    const std::int64_t t0 = j.groups * G;
    j.k.gemm(j.P + static_cast<std::size_t>(t0) * j.rb, j.rb, 0, j.rows - t0, j.cols, j.Ap, j.arbp,
             j.n, j.Y + t0, j.rows);
    return;
  }
  const std::int64_t g0 = i * j.chunk, g1 = std::min(j.groups, g0 + j.chunk);
  if (g0 >= g1) return;
  if (j.k.gemm_packed) {
    j.k.gemm_packed(j.P, g0, g1, j.cols, j.A, j.arb, j.n, j.Y, j.rows);
    return;
  }
  std::vector<std::uint8_t> plain(static_cast<std::size_t>(G) * j.rb);
  const std::size_t bb = traits(j.f).block_bytes;
  for (std::int64_t g = g0; g < g1; ++g) {
    unpack_group(*j.layout, bb, j.cols / traits(j.f).block_elems,
                 j.P + static_cast<std::size_t>(g * G) * j.rb, plain.data(), j.rb);
    j.k.gemm(plain.data(), j.rb, 0, G, j.cols, j.A, j.arb, j.n, j.Y + g * G, j.rows);
  }
}

}  // namespace

void run_gemm(const kernels::KernelTable& t, const Context& ctx, Format f, const void* W,
              std::int64_t rows, std::int64_t cols, const float* X, std::int64_t n, float* Y) {
  if (rows == 0 || n == 0) return;
  kernels::FormatKernels k = merged(t, f);
  if (!k.gemm) fail("gemm: format ", traits(f).name, " has no matrix-product kernel");
  select_exact(ctx, k);
  ActScratch abuf(0), rbuf(1);
  const void* A = nullptr;
  std::size_t arb = 0;
  quantize_activations(t, f, X, n, cols, abuf, A, arb);
  relayout_activations(k.act_bytes, k.act_relayout, n, cols, rbuf, A, arb);
  GemmJob job{k, W, row_size(f, cols), rows, cols, n, A, arb, Y, 0};
  const std::int64_t tasks = task_count(ctx, rows, static_cast<double>(cols) * n);
  job.chunk = chunk_rows(rows, tasks);
  parallel_run(ctx, (rows + job.chunk - 1) / job.chunk, gemm_task, &job);
}

void run_gemm_packed(const kernels::KernelTable& t, const Context& ctx, Format f, const void* P,
                     std::int64_t rows, std::int64_t cols, const float* X, std::int64_t n,
                     float* Y) {
  if (rows == 0 || n == 0) return;
  const PackLayout* layout = pack_layout(f);
  if (!layout) fail("gemm: format ", traits(f).name, " has no packed layout");
  kernels::FormatKernels k = merged(t, f);
  const kernels::FormatKernels& own = t.fmt[static_cast<int>(f)];
  // A packed kernel comes with its own table's activation layout; Context::exact_nf4 asks for
  // the plain layout's exact product (run on each unpacked group).
  const bool exact = select_exact(ctx, k);
  if (!own.gemm_packed || exact || (own.packed_gemv_only && n > 1)) {
    k.gemm_packed = nullptr;
    k.packed_act_bytes = nullptr;
    k.packed_act_relayout = nullptr;
  }
  if (!k.gemm) fail("gemm: format ", traits(f).name, " has no matrix-product kernel");
  ActScratch abuf(0), rbuf(1), pbuf(2);
  const void* A0 = nullptr;
  std::size_t arb0 = 0;
  quantize_activations(t, f, X, n, cols, abuf, A0, arb0);
  PackedJob job{};
  job.k = k;
  job.f = f;
  job.layout = layout;
  job.P = static_cast<const std::uint8_t*>(P);
  job.rb = row_size(f, cols);
  job.rows = rows;
  job.cols = cols;
  job.n = n;
  job.Y = Y;
  job.groups = rows / kPackedGroupRows;
  const bool tail = rows % kPackedGroupRows != 0;
  const bool plain_needed = tail || !k.gemm_packed;
  job.Ap = A0;
  job.arbp = arb0;
  if (plain_needed)
    relayout_activations(k.act_bytes, k.act_relayout, n, cols, rbuf, job.Ap, job.arbp);
  if (k.gemm_packed) {
    job.A = A0;
    job.arb = arb0;
    relayout_activations(k.packed_act_bytes, k.packed_act_relayout, n, cols, pbuf, job.A, job.arb);
  } else {
    job.A = job.Ap;
    job.arb = job.arbp;
  }
  const std::int64_t tasks = task_count(ctx, job.groups, static_cast<double>(cols) * n * 16);
  job.chunk = std::max<std::int64_t>(
      1, (job.groups + std::max<std::int64_t>(tasks, 1) - 1) / std::max<std::int64_t>(tasks, 1));
  job.tasks = job.groups == 0 ? 0 : (job.groups + job.chunk - 1) / job.chunk;
  parallel_run(ctx, job.tasks + (tail ? 1 : 0), packed_task, &job);
}

}  // namespace detail

// ---- public API ----

Isa best_isa(const Context& ctx) {
  return detail::resolve_isa(ctx);
}

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (const detail::TableVariant& v : detail::runnable_tables()) {
    if (std::find(out.begin(), out.end(), v.isa) == out.end()) out.push_back(v.isa);
  }
  return out;
}

void quantize(const Context& ctx, Format f, const float* src, std::int64_t rows, std::int64_t cols,
              void* dst, const float* importance) {
  checks::check_quantize_args(f, src, rows, cols, dst, importance, "quantize");
  if (rows == 0 || cols == 0) return;
  const kernels::KernelTable& t = detail::select_table(ctx);
  // Formats without an importance-weighted quantizer ignore the weights.
  const bool weighted = has_importance_quantizer(f);
  kernels::FormatKernels k = detail::merged(t, f);
  detail::RowJob job{&k,
                     f,
                     src,
                     nullptr,
                     dst,
                     nullptr,
                     weighted ? importance : nullptr,
                     rows,
                     cols,
                     0,
                     detail::row_size(f, cols)};
  // Q8_K: a SIMD table's activation quantizer (byte-identical to the reference, 3-4x faster on
  // a Zen 5 core); the scalar table's is slower than the reference codec, which it keeps.
  if (f == Format::q8_K && t.quantize_act_q8_K != detail::scalar_table().quantize_act_q8_K)
    job.act = t.quantize_act_q8_K;
  const std::int64_t tasks = detail::task_count(ctx, rows, static_cast<double>(cols) * 64);
  job.chunk = detail::chunk_rows(rows, tasks);
  detail::parallel_run(ctx, (rows + job.chunk - 1) / job.chunk, detail::quantize_task, &job);
}

void dequantize(const Context& ctx, Format f, const void* src, std::int64_t rows, std::int64_t cols,
                float* dst) {
  checks::check_dequantize_args(f, src, rows, cols, dst, "dequantize");
  if (rows == 0 || cols == 0) return;
  const kernels::KernelTable& t = detail::select_table(ctx);
  kernels::FormatKernels k = detail::merged(t, f);
  detail::RowJob job{
      &k, f, nullptr, src, nullptr, dst, nullptr, rows, cols, 0, detail::row_size(f, cols)};
  const std::int64_t tasks = detail::task_count(ctx, rows, static_cast<double>(cols));
  job.chunk = detail::chunk_rows(rows, tasks);
  detail::parallel_run(ctx, (rows + job.chunk - 1) / job.chunk, detail::dequantize_task, &job);
}

void gemm(const Context& ctx, Format w, const void* W, std::int64_t rows, std::int64_t cols,
          const float* X, std::int64_t n, float* Y) {
  const char* fn = "gemm";
  checks::check_dims(w, rows, cols, fn);
  if (n < 0) detail::fail(fn, ": n = ", n, " must be >= 0");
  if (w == Format::q8_K)
    detail::fail(fn, ": format q8_K is an activation format, not a weight format");
  checks::check_implemented(w, fn);
  const bool any = rows > 0 && n > 0;
  checks::mul_count(n, cols, "n * cols", fn);
  checks::mul_count(n, rows, "n * rows", fn);
  checks::check_ptr(W, "W", any && cols > 0, fn);
  checks::check_ptr(X, "X", any && cols > 0, fn);
  checks::check_ptr(Y, "Y", any, fn);
  if (!any) return;
  checks::check_finite(X, n, cols, "X", fn);
  const kernels::KernelTable& t = detail::select_table(ctx);
  if (cols == 0) {
    std::fill(Y, Y + rows * n, 0.0f);
    return;
  }
  detail::run_gemm(t, ctx, w, W, rows, cols, X, n, Y);
}

void gemv(const Context& ctx, Format w, const void* W, std::int64_t rows, std::int64_t cols,
          const float* x, float* y) {
  gemm(ctx, w, W, rows, cols, x, 1, y);
}

}  // namespace nibble
