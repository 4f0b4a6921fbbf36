// nibble (internal): run-time choice of the kernel table, and the table-level compute driver the
// public API and the tests share.
//
// Resolution rules (each resolved once per process, immutable afterwards):
//  - runnable = built into this binary AND supported by this CPU/OS (cpu_features()).
//  - Context::isa set: that ISA (Error if not runnable); it takes precedence over NIBBLE_ISA.
//  - otherwise NIBBLE_ISA (scalar|avx2|avxvnni|avx512|neon, read once) caps the choice: the best
//    runnable ISA not above it (scalar < avx2 < avxvnni < avx512, scalar < neon); an unknown value
//    is an Error.
//  - otherwise the best runnable ISA.
//  - Isa::avx512 maps to the VNNI table when the CPU has VNNI, Isa::neon to the dotprod table
//    when the CPU has dotprod.
#pragma once

#include <cstdint>
#include <vector>

#include "nibble/kernels/table.hpp"
#include "nibble/nibble.hpp"

namespace nibble::detail {

/// One kernel table compiled into this binary.
struct TableVariant {
  const char* name;  ///< "scalar", "avx2", "avxvnni", "avx512", "avx512vnni", "neon", "neondot"
  Isa isa;           ///< the Isa it implements
  const kernels::KernelTable* table;  ///< never null
};

/// Every table variant built into this binary that this CPU can run, scalar first (for tests:
/// includes avx512 without VNNI and neon without dotprod even when the better one exists).
const std::vector<TableVariant>& runnable_tables();

/// Names of every table variant built into this binary (runnable here or not).
std::vector<const char*> built_table_names();

/// Names of every table variant of this processor family that this CPU could run, built into
/// this binary or not (a build with -DNIBBLE_ISAS=... leaves some out).
std::vector<const char*> cpu_table_names();

/// The portable table (always present; the fallback for entries a SIMD table lacks).
const kernels::KernelTable& scalar_table();

/// The ISA the rules above pick for `ctx` (throws Error if ctx.isa is not runnable or NIBBLE_ISA
/// holds an unknown name).
Isa resolve_isa(const Context& ctx);

/// The table the rules above pick for `ctx`.
const kernels::KernelTable& select_table(const Context& ctx);

/// Y (n x rows) = X (n x cols fp32) times W^T, W rows x cols in format `f`, on table `t` (entries
/// it lacks come from the scalar table), activations quantized once, rows split over ctx's
/// threads. Unchecked: the caller validated the arguments.
void run_gemm(const kernels::KernelTable& t, const Context& ctx, Format f, const void* W,
              std::int64_t rows, std::int64_t cols, const float* X, std::int64_t n, float* Y);

/// run_gemm on packed weights (nibble/packed.hpp): the 16-row groups through the table's
/// gemm_packed (or, lacking one, each group unpacked and run through gemm), the tail rows
/// through gemm. Unchecked.
void run_gemm_packed(const kernels::KernelTable& t, const Context& ctx, Format f, const void* P,
                     std::int64_t rows, std::int64_t cols, const float* X, std::int64_t n,
                     float* Y);

/// Rows per task are multiples of this (keeps tiles whole, no false sharing on outputs).
constexpr std::int64_t kRowQuantum = 16;
/// Threads a parallel region of `ctx` may use (ctx.threads, or all hardware threads).
int wanted_threads(const Context& ctx);
/// Row tasks per thread of a parallel product (task_count). parallel_run gives each thread a
/// contiguous range of them and lets a thread that finishes early take tasks from the back of
/// the others' ranges, so threads that get more memory bandwidth do more of the rows. On a
/// 16-core Emerald Rapids VM, one contiguous chunk per thread left the decode step of the
/// 8-layer Q4_K_M stack at 62-72 tokens/s and 8 tasks per thread, handed out dynamically, gave
/// 87-92 (docs/kernels.md, "Many threads"); this contiguous-range-with-stealing form, against
/// one task per thread on the same kind of VM: 82 -> 107 tokens/s (packed 94 -> 123).
constexpr std::int64_t kTasksPerThread = 8;
/// Multiply-adds below which work is not split at all, and the least a task is given.
constexpr double kMinTaskWork = double{1 << 16};
/// Tasks for `rows` rows of `work_per_row` multiply-adds each under `ctx`: 1 on one thread or for
/// tiny work, else between wanted_threads(ctx) and kTasksPerThread per thread (fewer when a task
/// would get under kMinTaskWork).
std::int64_t task_count(const Context& ctx, std::int64_t rows, double work_per_row);
/// Length of the contiguous row chunks when [0, rows) is split into at most `parts` tasks
/// (a multiple of kRowQuantum).
std::int64_t chunk_rows(std::int64_t rows, std::int64_t parts);

/// Runs body(i) for i in [0, count) on min(count, wanted_threads(ctx)) workers: ctx's
/// parallel_for hook, else nibble's pool (pool.hpp; serially when it is busy). Each worker runs a
/// contiguous range of the tasks in order, then takes tasks from the back of the others' ranges
/// (see kTasksPerThread).
void parallel_run(const Context& ctx, std::int64_t count, void (*body)(void* arg, std::int64_t i),
                  void* arg);

}  // namespace nibble::detail
