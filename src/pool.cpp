// nibble: the default thread pool (pool.hpp).
//
// Why not OpenMP: a `#pragma omp parallel` region costs about 3 us on a 2-core Zen 5 VM (libgomp,
// any wait policy) where a hand-off between two spinning threads takes under 1 us, and a decode
// step makes hundreds of GEMV calls, many on small matrices (docs/kernels.md, "The default thread
// pool").
//
// One job at a time: the caller stores (task, arg) and publishes the job's generation and task
// count in `gen_`; a worker whose index is below the count and that sees the new generation joins
// the job by incrementing the count in `join_` (only while that word still carries the job's
// generation and is not closed), runs task(arg, its index) and leaves. When the caller's own task
// returns (every task has then been claimed, steal_worker), it closes the job and waits for the
// workers that joined; the others find the job closed and skip it. A task that throws on a worker
// ends the program (as in an OpenMP region); on the caller, the job is closed and waited for
// before the exception leaves.
#include "pool.hpp"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace nibble::detail {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// How long an idle worker spins for the next job before it sleeps. Back-to-back GEMV calls
// arrive within microseconds; a longer window would only take CPU time from other threads.
constexpr auto kSpinWindow = std::chrono::microseconds(100);

class Pool {
 public:
  explicit Pool(int workers) {
    threads_.reserve(static_cast<std::size_t>(workers));
    for (int w = 1; w <= workers; ++w) threads_.emplace_back([this, w] { work(w); });
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_.store(true, std::memory_order_seq_cst);
      gen_.fetch_add(kGenOne, std::memory_order_seq_cst);
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  int workers() const { return static_cast<int>(threads_.size()); }

  bool run(std::int64_t n, void (*task)(void*, std::int64_t), void* arg) {
    if (busy_.exchange(true, std::memory_order_acquire)) return false;
    task_ = task;
    arg_ = arg;
    const std::uint64_t g = (gen_.load(std::memory_order_relaxed) >> 16) + 1;
    const std::uint64_t tasks = static_cast<std::uint64_t>(n < 0xffff ? n : 0xffff);
    join_.store(g << 32, std::memory_order_relaxed);         // generation g, open, nobody joined
    gen_.store(g << 16 | tasks, std::memory_order_seq_cst);  // publishes the job (release)
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lk(mu_);
      cv_.notify_all();
    }
    // Close the job, then wait for the workers that joined it (also when task 0 throws: they
    // may still be reading the caller's job).
    struct Close {
      Pool* p;
      ~Close() {
        p->join_.fetch_or(kClosed, std::memory_order_acq_rel);
        while ((p->join_.load(std::memory_order_acquire) & kCount) != 0) cpu_relax();
        p->busy_.store(false, std::memory_order_release);
      }
    } close{this};
    task(arg, 0);
    return true;
  }

 private:
  static constexpr std::uint64_t kClosed = std::uint64_t{1} << 31;
  static constexpr std::uint64_t kCount = kClosed - 1;
  static constexpr std::uint64_t kGenOne = std::uint64_t{1} << 16;  // gen_: generation << 16 | n

  // Waits until gen_ differs from `seen` (spinning for kSpinWindow, then sleeping).
  std::uint64_t wait_next(std::uint64_t seen) {
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned i = 1;; ++i) {
      const std::uint64_t g = gen_.load(std::memory_order_acquire);
      if (g != seen) return g;
      cpu_relax();
      if (i % 256 == 0 && std::chrono::steady_clock::now() - t0 > kSpinWindow) break;
    }
    std::unique_lock<std::mutex> lk(mu_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    std::uint64_t g;
    while ((g = gen_.load(std::memory_order_seq_cst)) == seen) cv_.wait(lk);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    return g;
  }

  void work(int w) {
    std::uint64_t seen = 0;
    for (;;) {
      const std::uint64_t word = wait_next(seen);
      seen = word;
      if (stop_.load(std::memory_order_acquire)) return;
      if (static_cast<std::uint64_t>(w) >= (word & 0xffff)) continue;  // not needed: stay out
      const std::uint64_t g = word >> 16;
      // Join job g unless it is closed or already replaced by a later one.
      std::uint64_t v = join_.load(std::memory_order_acquire);
      bool joined = false;
      while ((v >> 32) == (g & 0xffffffffu) && (v & kClosed) == 0) {
        if (join_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
          joined = true;
          break;
        }
      }
      if (!joined) continue;
      task_(arg_, w);
      join_.fetch_sub(1, std::memory_order_release);
    }
  }

  std::vector<std::thread> threads_;
  std::atomic<bool> busy_{false};
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> gen_{0};
  // Bits 32..63: the generation of the current job (its low 32 bits); bit 31: closed;
  // bits 0..30: workers inside it.
  std::atomic<std::uint64_t> join_{0};
  std::atomic<int> sleepers_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  void (*task_)(void*, std::int64_t) = nullptr;
  void* arg_ = nullptr;
};

std::mutex g_make;
std::atomic<Pool*> g_ready{nullptr};  // the made pool: every call after the first reads only this
std::atomic<bool> g_forked{false};

// The pool, its workers joined at exit (or library unload). g_ready is cleared first, so a call
// made later in the exit sequence (a static destructor) makes a new pool instead of using a freed
// one.
struct PoolHolder {
  std::unique_ptr<Pool> pool;
  ~PoolHolder() {
    g_ready.store(nullptr, std::memory_order_release);
    pool.reset();
  }
} g_pool;

// In a forked child the pool's workers do not exist (only the forking thread is copied): the
// child starts a new pool and never touches the old object (leaked, its thread handles unjoined).
void on_fork_child() {
  g_forked.store(true, std::memory_order_relaxed);
}

Pool* pool_for(int size) {
  if (!g_forked.load(std::memory_order_relaxed)) {
    if (Pool* p = g_ready.load(std::memory_order_acquire)) return p;
  }
  std::lock_guard<std::mutex> lk(g_make);
  if (g_forked.exchange(false, std::memory_order_relaxed)) (void)g_pool.pool.release();
  if (!g_pool.pool) {
    static const bool registered = pthread_atfork(nullptr, nullptr, on_fork_child) == 0;
    (void)registered;
    g_pool.pool = std::make_unique<Pool>(size - 1);
    g_ready.store(g_pool.pool.get(), std::memory_order_release);
  }
  return g_pool.pool.get();
}

}  // namespace

bool pool_run(int size, std::int64_t n, void (*task)(void* arg, std::int64_t i), void* arg) {
  if (size < 2 || n < 2) return false;
  static thread_local bool inside = false;  // a call from inside a task runs serially
  if (inside) return false;
  Pool* p = pool_for(size);
  if (p->workers() < 1) return false;
  struct Inside {
    bool& flag;
    explicit Inside(bool& f) : flag(f) { flag = true; }
    ~Inside() { flag = false; }
  } mark(inside);
  return p->run(n, task, arg);
}

}  // namespace nibble::detail
