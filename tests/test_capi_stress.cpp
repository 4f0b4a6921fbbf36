// Thread safety of the C API: many threads call gemv, gemm and quantize at once on shared
// read-only weights, each with its own context (forced ISA, thread count, own pool or the default
// one), and every result must equal the single-threaded result for that ISA bit for bit. Runs
// under ThreadSanitizer in CI (.ci/test.sh, stage "ThreadSanitizer").
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "nibble/nibble.h"

namespace {

// A pool that runs each parallel_for on fresh threads pulling indices from an atomic counter.
void spawn_pool(void* pool, int64_t n, void (*task)(void*, int64_t), void* ctx) {
  const int workers = *static_cast<int*>(pool);
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next++; i < n; i = next++) task(ctx, i);
  };
  std::vector<std::thread> ts;
  for (int t = 1; t < workers; ++t) ts.emplace_back(work);
  work();
  for (auto& t : ts) t.join();
}

// A pool that runs everything on the calling thread, in reverse order.
void reverse_pool(void*, int64_t n, void (*task)(void*, int64_t), void* ctx) {
  for (int64_t i = n - 1; i >= 0; --i) task(ctx, i);
}

struct Shared {
  int64_t rows = 128, cols = 1024, n = 3;
  std::vector<float> wf, x, X;
  struct PerFormat {
    int format;
    std::vector<unsigned char> W;
    // Single-threaded references, per ISA.
    std::vector<std::vector<float>> y, Y;
  };
  std::vector<PerFormat> formats;
  std::vector<int> isas;
};

TEST(CApiStress, ConcurrentCallsMatchSerial) {
  Shared s;
  s.wf.resize(s.rows * s.cols);
  s.x.resize(s.cols);
  s.X.resize(s.n * s.cols);
  for (int64_t i = 0; i < s.rows * s.cols; ++i) s.wf[i] = std::sin(0.7f * static_cast<float>(i));
  for (int64_t i = 0; i < s.cols; ++i) s.x[i] = std::cos(0.3f * static_cast<float>(i));
  for (int64_t i = 0; i < s.n * s.cols; ++i) s.X[i] = std::sin(0.11f * static_cast<float>(i) + 1);
  for (int isa = 0; isa <= NIBBLE_ISA_AVXVNNI; ++isa)
    if (nibble_isa_supported(isa)) s.isas.push_back(isa);
  ASSERT_FALSE(s.isas.empty());

  for (const char* name : {"q8_0", "q4_K", "q6_K", "nf4"}) {
    Shared::PerFormat pf;
    pf.format = nibble_format_from_name(name);
    pf.W.resize(s.rows * nibble_row_bytes(pf.format, s.cols));
    ASSERT_EQ(nibble_quantize(pf.format, s.wf.data(), s.rows, s.cols, pf.W.data(), nullptr),
              NIBBLE_OK);
    for (int isa : s.isas) {
      nibble_context c;
      std::memset(&c, 0, sizeof c);
      c.force_isa = 1;
      c.isa = isa;
      c.threads = 1;
      std::vector<float> y(s.rows), Y(s.n * s.rows);
      ASSERT_EQ(nibble_gemv(&c, pf.format, pf.W.data(), s.rows, s.cols, s.x.data(), y.data()),
                NIBBLE_OK)
          << nibble_last_error();
      ASSERT_EQ(nibble_gemm(&c, pf.format, pf.W.data(), s.rows, s.cols, s.X.data(), s.n, Y.data()),
                NIBBLE_OK);
      pf.y.push_back(y);
      pf.Y.push_back(Y);
    }
    s.formats.push_back(std::move(pf));
  }

  const int kThreads = 8, kIters = 12;
  std::atomic<int> mismatches{0}, failures{0}, done_calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      int pool_workers = 1 + t % 3;
      for (int it = 0; it < kIters; ++it) {
        const int k = t * kIters + it;
        const auto& pf = s.formats[static_cast<size_t>(k) % s.formats.size()];
        const size_t ii = static_cast<size_t>(k / 3) % s.isas.size();
        nibble_context c;
        std::memset(&c, 0, sizeof c);
        c.force_isa = 1;
        c.isa = s.isas[ii];
        c.threads = 1 + k % 4;
        switch (k % 3) {
          case 0:  // nibble's default pool
            break;
          case 1:
            c.parallel_for = spawn_pool;
            c.pool = &pool_workers;
            break;
          case 2:
            c.parallel_for = reverse_pool;
            break;
        }
        std::vector<float> y(s.rows, -1.0f), Y(s.n * s.rows, -1.0f);
        if (nibble_gemv(&c, pf.format, pf.W.data(), s.rows, s.cols, s.x.data(), y.data()) !=
                NIBBLE_OK ||
            nibble_gemm(&c, pf.format, pf.W.data(), s.rows, s.cols, s.X.data(), s.n, Y.data()) !=
                NIBBLE_OK) {
          failures++;
          continue;
        }
        if (std::memcmp(y.data(), pf.y[ii].data(), y.size() * 4) != 0) mismatches++;
        if (std::memcmp(Y.data(), pf.Y[ii].data(), Y.size() * 4) != 0) mismatches++;
        // Quantize 8 rows of the shared weights concurrently; same bytes as the shared copy.
        const size_t rb = nibble_row_bytes(pf.format, s.cols);
        std::vector<unsigned char> q(8 * rb);
        const int64_t r0 = (k * 8) % s.rows;
        if (nibble_quantize_ctx(&c, pf.format, s.wf.data() + r0 * s.cols, 8, s.cols, q.data(),
                                nullptr) != NIBBLE_OK) {
          failures++;
          continue;
        }
        if (std::memcmp(q.data(), pf.W.data() + r0 * rb, q.size()) != 0) mismatches++;
        // And a failing call on this thread leaves this thread's message.
        if (nibble_row_bytes(pf.format, 33 + 2 * t) != 0 || std::strlen(nibble_last_error()) == 0)
          failures++;
        done_calls++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(done_calls.load(), kThreads * kIters);
}

}  // namespace
