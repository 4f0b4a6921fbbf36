// nibble: the default thread pool of the compute entry points (parallel_run without a
// Context::parallel_for hook).
#pragma once

#include <cstdint>

namespace nibble::detail {

/// Runs task(arg, i) for i in [0, n): i = 0 on the calling thread, the others on the workers of
/// a process-wide pool (created on first use with `size` - 1 workers; a call uses at most that
/// many, whatever its n). Returns once every task that was started has returned. Workers that do
/// not wake before the caller's own task returns are not waited for and run nothing, so task(arg,
/// i) must be written as parallel_run's workers are: each may run or not, any of them completes the
/// work of the others (see steal_worker in compute.cpp).
///
/// Returns false, running nothing, when the pool is in use (another thread's call, or a call
/// from inside a task): the caller then runs the work itself. After a call, the workers spin
/// briefly waiting for the next one (decode calls come back to back), then sleep.
bool pool_run(int size, std::int64_t n, void (*task)(void* arg, std::int64_t i), void* arg);

}  // namespace nibble::detail
