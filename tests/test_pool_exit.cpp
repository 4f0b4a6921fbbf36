// nibble: a multi-threaded call from a static destructor that runs after the default pool's own
// (src/pool.cpp) has been destroyed must make a new pool, not use the freed one. The object below
// is constructed before the library's pool holder (this file comes first on the link line), so it
// is destroyed after it. A failure shows as a crash at exit, or as an AddressSanitizer report in
// the sanitizer build (where the freed pool was caught before the fix), or as abort() below.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "nibble/nibble.hpp"

namespace {

// One 256 x 4096 f32 product on `threads` threads (the pool splits it on two).
std::vector<float> product(int threads) {
  const int rows = 256, cols = 4096;
  std::vector<float> w(static_cast<std::size_t>(rows) * cols), x(cols), y(rows);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) - 3.0f;
  for (int j = 0; j < cols; ++j) x[static_cast<std::size_t>(j)] = static_cast<float>(j % 5) * 0.25f;
  nibble::Context c;
  c.threads = threads;
  nibble::gemm(c, nibble::Format::f32, w.data(), rows, cols, x.data(), 1, y.data());
  return y;
}

struct LateCaller {
  ~LateCaller() {
    const std::vector<float> one = product(1), two = product(2);
    if (std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) != 0) {
      std::fprintf(stderr, "test_pool_exit: the product at exit differs on two threads\n");
      std::abort();
    }
  }
} g_late_caller;

}  // namespace

// Makes the default pool (when there are two hardware threads) before the exit sequence.
TEST(DefaultPool, CallsFromStaticDestructorsAfterThePoolsOwn) {
  EXPECT_EQ(product(2), product(1));
}
