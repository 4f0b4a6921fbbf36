// nibble: packed (row-interleaved) weights: the checked public API of nibble/packed.hpp.
#include "nibble/packed.hpp"

#include <algorithm>
#include <memory>
#include <new>

#include "checks.hpp"
#include "dispatch.hpp"
#include "packed_layout.hpp"

namespace nibble {
namespace {

// Checks shared by pack / unpack / view: a packable format and valid dims; returns the bytes of
// the matrix.
std::size_t check_packable(Format f, std::int64_t rows, std::int64_t cols, const char* fn) {
  checks::check_format(f, fn);
  if (!detail::pack_layout(f))
    detail::fail(fn, ": format ", traits(f).name, " has no packed layout (packable() is false)");
  return checks::matrix_bytes(f, rows, cols, fn);
}

// ... and the two buffers of pack / unpack: non-null, not overlapping.
void check_pack_args(Format f, const void* a, const char* an, std::int64_t rows, std::int64_t cols,
                     const void* b, const char* bn, const char* fn) {
  const std::size_t bytes = check_packable(f, rows, cols, fn);
  checks::check_ptr(a, an, bytes > 0, fn);
  checks::check_ptr(b, bn, bytes > 0, fn);
  if (bytes > 0 && b != nullptr) {
    const auto* pa = static_cast<const std::uint8_t*>(a);
    const auto* pb = static_cast<const std::uint8_t*>(b);
    if (pa < pb + bytes && pb < pa + bytes)
      detail::fail(fn, ": ", an, " and ", bn, " overlap (", bytes, " bytes each)");
  }
}

struct PermuteJob {
  const detail::PackLayout* l;
  const std::uint8_t* src;
  std::uint8_t* dst;
  std::size_t rb, bb;
  std::int64_t nb, groups, chunk;
  bool to_packed;
  std::uint8_t* scratch;  // in place (src == dst): one group's bytes per task, else null
};

void permute_task(void* arg, std::int64_t i) {
  const PermuteJob& j = *static_cast<const PermuteJob*>(arg);
  const std::int64_t g1 = std::min(j.groups, (i + 1) * j.chunk);
  for (std::int64_t g = i * j.chunk; g < g1; ++g) {
    const std::size_t off = static_cast<std::size_t>(g * kPackedGroupRows) * j.rb;
    const std::uint8_t* src = j.src + off;
    if (j.scratch != nullptr) {  // in place: the group's bytes move to this task's scratch first
      const std::size_t gbytes = static_cast<std::size_t>(kPackedGroupRows) * j.rb;
      std::uint8_t* s = j.scratch + static_cast<std::size_t>(i) * gbytes;
      std::copy(src, src + gbytes, s);
      src = s;
    }
    if (j.to_packed) {
      detail::pack_group(*j.l, j.bb, j.nb, src, j.rb, j.dst + off);
    } else {
      detail::unpack_group(*j.l, j.bb, j.nb, src, j.dst + off, j.rb);
    }
  }
}

void permute(const Context& ctx, Format f, const void* src, std::int64_t rows, std::int64_t cols,
             void* dst, bool to_packed) {
  if (rows == 0 || cols == 0) return;
  PermuteJob j{};
  j.l = detail::pack_layout(f);
  j.src = static_cast<const std::uint8_t*>(src);
  j.dst = static_cast<std::uint8_t*>(dst);
  j.bb = traits(f).block_bytes;
  j.nb = cols / traits(f).block_elems;
  j.rb = static_cast<std::size_t>(j.nb) * j.bb;
  j.groups = rows / kPackedGroupRows;
  j.to_packed = to_packed;
  const std::int64_t parts =
      std::max<std::int64_t>(1, std::min<std::int64_t>(j.groups, detail::wanted_threads(ctx)));
  j.chunk = (j.groups + parts - 1) / parts;
  const std::int64_t tasks = j.groups > 0 ? (j.groups + j.chunk - 1) / j.chunk : 0;
  // In place, each task permutes its groups one at a time through a scratch copy of one group
  // (16 rows): allocated here, before anything is written, so that a failed allocation leaves
  // the matrix as it was.
  std::unique_ptr<std::uint8_t[]> scratch;
  if (j.src == j.dst && tasks > 0) {
    scratch.reset(new std::uint8_t[static_cast<std::size_t>(tasks * kPackedGroupRows) * j.rb]);
    j.scratch = scratch.get();
  }
  if (tasks > 0) detail::parallel_run(ctx, tasks, permute_task, &j);
  const std::size_t done = static_cast<std::size_t>(j.groups * kPackedGroupRows) * j.rb;
  const std::size_t total = static_cast<std::size_t>(rows) * j.rb;
  if (total > done && j.src != j.dst)
    std::copy(j.src + done, j.src + total, j.dst + done);  // the plain tail
}

// pack_in_place / unpack_in_place: the checks of pack(), then permute() with src == dst.
void permute_in_place(const Context& ctx, Format f, void* m, const char* mn, std::int64_t rows,
                      std::int64_t cols, bool to_packed, const char* fn) {
  const std::size_t bytes = check_packable(f, rows, cols, fn);
  checks::check_ptr(m, mn, bytes > 0, fn);
  permute(ctx, f, m, rows, cols, m, to_packed);
}

}  // namespace

bool packable(Format f) {
  return checks::valid_format(f) && detail::pack_layout(f) != nullptr;
}

void pack(const Context& ctx, Format f, const void* W, std::int64_t rows, std::int64_t cols,
          void* dst) {
  check_pack_args(f, W, "W", rows, cols, dst, "dst", "pack");
  permute(ctx, f, W, rows, cols, dst, true);
}

void unpack(const Context& ctx, Format f, const void* P, std::int64_t rows, std::int64_t cols,
            void* dst) {
  check_pack_args(f, P, "P", rows, cols, dst, "dst", "unpack");
  permute(ctx, f, P, rows, cols, dst, false);
}

void pack_in_place(const Context& ctx, Format f, void* W, std::int64_t rows, std::int64_t cols) {
  permute_in_place(ctx, f, W, "W", rows, cols, true, "pack_in_place");
}

void unpack_in_place(const Context& ctx, Format f, void* P, std::int64_t rows, std::int64_t cols) {
  permute_in_place(ctx, f, P, "P", rows, cols, false, "unpack_in_place");
}

PackedWeights PackedWeights::view(Format f, const void* packed, std::int64_t rows,
                                  std::int64_t cols) {
  const std::size_t bytes = check_packable(f, rows, cols, "PackedWeights::view");
  checks::check_ptr(packed, "packed", bytes > 0, "PackedWeights::view");
  PackedWeights w;
  w.format_ = f;
  w.rows_ = rows;
  w.cols_ = cols;
  w.data_ = packed;
  w.bytes_ = bytes;
  return w;
}

PackedWeights pack(const Context& ctx, Format f, const void* W, std::int64_t rows,
                   std::int64_t cols) {
  const std::size_t bytes = check_packable(f, rows, cols, "pack");
  checks::check_ptr(W, "W", bytes > 0, "pack");
  std::shared_ptr<std::uint8_t> buf(
      new (std::align_val_t(64)) std::uint8_t[bytes > 0 ? bytes : 1],
      [](std::uint8_t* p) { ::operator delete[](p, std::align_val_t(64)); });
  pack(ctx, f, W, rows, cols, buf.get());
  PackedWeights w = PackedWeights::view(f, buf.get(), rows, cols);
  w.owner_ = std::move(buf);
  return w;
}

void gemm(const Context& ctx, const PackedWeights& W, const float* X, std::int64_t n, float* Y) {
  const char* fn = "gemm (packed)";
  if (W.rows() > 0 && W.cols() > 0 && W.data() == nullptr)
    detail::fail(fn, ": W holds no packed weights");
  if (n < 0) detail::fail(fn, ": n = ", n, " must be >= 0");
  const bool any = W.rows() > 0 && n > 0;
  checks::mul_count(n, W.cols(), "n * cols", fn);
  checks::mul_count(n, W.rows(), "n * rows", fn);
  checks::check_ptr(X, "X", any && W.cols() > 0, fn);
  checks::check_ptr(Y, "Y", any, fn);
  if (!any) return;
  checks::check_finite(X, n, W.cols(), "X", fn);
  const kernels::KernelTable& t = detail::select_table(ctx);
  if (W.cols() == 0) {
    std::fill(Y, Y + W.rows() * n, 0.0f);
    return;
  }
  detail::run_gemm_packed(t, ctx, W.format(), W.data(), W.rows(), W.cols(), X, n, Y);
}

void gemv(const Context& ctx, const PackedWeights& W, const float* x, float* y) {
  gemm(ctx, W, x, 1, y);
}

}  // namespace nibble
