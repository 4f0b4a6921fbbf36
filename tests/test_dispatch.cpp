// Run-time dispatch, the Context (ISA, threads, parallel_for hook) and the Context-taking public
// API (quantize, dequantize, gemv, gemm).
//
// Checks: the ISA lists agree with the CPU features and the built tables; forcing an ISA this
// build/CPU cannot run throws nibble::Error (and writes nothing); NIBBLE_ISA is honoured (a
// child process of this binary); NIBBLE_EXPECT_BEST (set by the emulated runs in tests/cross)
// names the ISA dispatch must pick; gemm/gemv results are bit-identical for 1, 2, 3 threads and
// with custom parallel_for hooks (a serial loop, a std::thread pool, a pool whose first task
// starts last, so its rows must be taken by the others), and agree with Eigen in
// double on the dequantized weights (rtol 1e-5 of sum |w x| for fp32 activations; q8_0 is
// compared to the same computation on its quantized activations, rtol 1e-5); Context quantize
// and dequantize give the bytes/values of the Context-free reference entry points. The default
// thread pool (src/pool.cpp): its workers run tasks beside the caller, a nested call runs
// serially; many back-to-back and spaced-out calls, concurrent callers and a forked child give
// the single-thread result bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "../src/pool.hpp"
#include "kernel_test_util.hpp"
#include "nibble/core/cpu.hpp"
#include "nibble/nibble.hpp"

namespace {

using nibble::Context;
using nibble::Format;
using nibble::Isa;
namespace nt = nibble::test;

using nibble::kAllIsas;

bool has(const std::vector<Isa>& v, Isa i) {
  return std::find(v.begin(), v.end(), i) != v.end();
}

TEST(Dispatch, AvailableIsasAgreeWithCpuFeatures) {
  const std::vector<Isa> av = nibble::available_isas();
  ASSERT_FALSE(av.empty());
  EXPECT_EQ(av.front(), Isa::scalar);
  const nibble::CpuFeatures& cpu = nibble::cpu_features();
  if (has(av, Isa::avx2)) {
    EXPECT_TRUE(cpu.avx2 && cpu.fma && cpu.f16c);
  }
  if (has(av, Isa::avx512)) {
    EXPECT_TRUE(cpu.avx512f && cpu.avx512bw && cpu.avx512dq && cpu.avx512vl);
  }
  if (has(av, Isa::avxvnni)) {
    EXPECT_TRUE(cpu.avx2 && cpu.avxvnni);
  }
  if (has(av, Isa::neon)) {
    EXPECT_TRUE(cpu.neon);
  }
  // Every runnable table is built, and each Isa's table is the best variant of it.
  const std::vector<const char*> built = nibble::detail::built_table_names();
  for (const auto& v : nibble::detail::runnable_tables()) {
    EXPECT_TRUE(std::any_of(built.begin(), built.end(), [&](const char* b) {
      return std::strcmp(b, v.name) == 0;
    })) << v.name;
    EXPECT_TRUE(has(av, v.isa)) << v.name;
    if (std::strcmp(v.name, "avx512vnni") == 0) {
      EXPECT_TRUE(cpu.avx512vnni);
    }
    if (std::strcmp(v.name, "neondot") == 0) {
      EXPECT_TRUE(cpu.dotprod);
    }
  }
  // Without NIBBLE_ISA the best ISA is the last available one.
  const char* env = std::getenv("NIBBLE_ISA");
  if (env == nullptr || *env == '\0') {
    EXPECT_EQ(nibble::best_isa(), av.back());
  }
}

// Every kernel variant this CPU can run is built in, so the kernel tests (which iterate over the
// runnable variants) cover all of them. A build configured with -DNIBBLE_ISAS=... leaves some out
// on purpose (CI stages that test something other than the kernels); it says which, and passes.
TEST(Dispatch, EveryIsaThisCpuRunsIsBuilt) {
  const std::vector<const char*> cpu = nibble::detail::cpu_table_names();
  ASSERT_FALSE(cpu.empty());
  EXPECT_STREQ(cpu.front(), "scalar");
  std::string missing;
  for (const char* n : cpu) {
    bool runnable = false;
    for (const auto& v : nibble::detail::runnable_tables()) runnable |= std::strcmp(v.name, n) == 0;
    if (!runnable) missing += std::string(missing.empty() ? "" : ", ") + n;
  }
  // The reverse: every runnable variant is one the CPU runs.
  for (const auto& v : nibble::detail::runnable_tables()) {
    EXPECT_TRUE(std::any_of(cpu.begin(), cpu.end(), [&](const char* n) {
      return std::strcmp(n, v.name) == 0;
    })) << v.name;
  }
#if defined(NIBBLE_ISAS_RESTRICTED)
  if (!missing.empty())
    std::printf("this build (-DNIBBLE_ISAS) leaves out kernel variants this CPU runs: %s\n",
                missing.c_str());
#else
  EXPECT_TRUE(missing.empty()) << "kernel variants this CPU runs but the build lacks: " << missing;
#endif
}

// CpuFeatures::amd and ::family (tuning inputs: the packed GEMV's L2 prefetch, the Q8_0 and f16
// GEMVs' row grouping) agree with the vendor and family the operating system reports in
// /proc/cpuinfo. Under qemu-user (the emulated runs set NIBBLE_EXPECT_BEST) CPUID is the emulated
// model's while /proc/cpuinfo is the host's, so there is nothing to compare.
TEST(Dispatch, AmdFlagMatchesProcCpuinfo) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__linux__)
  if (std::getenv("NIBBLE_EXPECT_BEST") != nullptr) GTEST_SKIP() << "emulated CPU";
  std::ifstream in("/proc/cpuinfo");
  ASSERT_TRUE(in.is_open());
  std::string line, vendor;
  int family = -1;
  while ((vendor.empty() || family < 0) && std::getline(in, line)) {
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (line.rfind("vendor_id", 0) == 0) std::istringstream(line.substr(colon + 1)) >> vendor;
    if (line.rfind("cpu family", 0) == 0) std::istringstream(line.substr(colon + 1)) >> family;
  }
  ASSERT_FALSE(vendor.empty());
  EXPECT_EQ(nibble::cpu_features().amd, vendor == "AuthenticAMD") << vendor;
  // CpuFeatures::family (a tuning input too) is the family the kernel reports.
  ASSERT_GE(family, 0);
  EXPECT_EQ(nibble::cpu_features().family, family);
#else
  EXPECT_FALSE(nibble::cpu_features().amd);
  EXPECT_EQ(nibble::cpu_features().family, 0);
#endif
}

std::string isa_list() {
  std::string s;
  for (Isa i : nibble::available_isas())
    s += std::string(s.empty() ? "" : ",") + nibble::isa_name(i);
  return s;
}

TEST(Dispatch, ExpectedBestIsa) {
  const char* want = std::getenv("NIBBLE_EXPECT_BEST");
  if (want == nullptr || *want == '\0') GTEST_SKIP() << "NIBBLE_EXPECT_BEST not set";
  // A child started by EnvironmentVariableHonoured under an emulator runs natively: skip when it
  // does not see the parent's CPU.
  const char* parent = std::getenv("NIBBLE_PARENT_ISAS");
  if (parent != nullptr && isa_list() != parent) std::_Exit(77);  // tells the parent to skip
  if (std::string(want) == "error") {
    EXPECT_THROW(nibble::best_isa(), nibble::Error);
    return;
  }
  EXPECT_EQ(std::string(nibble::isa_name(nibble::best_isa())), want);
}

TEST(Dispatch, ForcedIsa) {
  const std::vector<Isa> av = nibble::available_isas();
  const std::int64_t rows = 4, cols = 64;
  const std::vector<float> w = nt::random_normal(rows * cols, 1);
  const std::vector<float> x = nt::random_normal(cols, 2);
  for (Isa i : kAllIsas) {
    Context ctx;
    ctx.isa = i;
    if (has(av, i)) {
      EXPECT_EQ(nibble::best_isa(ctx), i);
      EXPECT_EQ(nibble::detail::select_table(ctx).isa, i);
    } else {
      EXPECT_THROW(nibble::best_isa(ctx), nibble::Error) << nibble::isa_name(i);
      std::vector<float> y(rows, 42.0f);
      EXPECT_THROW(nibble::gemv(ctx, Format::f32, w.data(), rows, cols, x.data(), y.data()),
                   nibble::Error);
      for (float v : y) EXPECT_EQ(v, 42.0f) << "output written on a rejected call";
      std::vector<std::uint8_t> q(static_cast<std::size_t>(rows * cols / 32 * 34), 7);
      EXPECT_THROW(nibble::quantize(ctx, Format::q8_0, w.data(), rows, cols, q.data()),
                   nibble::Error);
      for (std::uint8_t b : q) EXPECT_EQ(b, 7);
    }
  }
  Context bad;
  bad.isa = static_cast<Isa>(17);
  EXPECT_THROW(nibble::best_isa(bad), nibble::Error);
}

// Runs this test binary again with `env` prepended, restricted to Dispatch.ExpectedBestIsa.
int run_child(const std::string& env) {
  char self[4096] = {0};
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return -1;
  const std::string cmd = "NIBBLE_PARENT_ISAS=" + isa_list() + " " + env + " '" +
                          std::string(self, static_cast<std::size_t>(len)) +
                          "' --gtest_filter=Dispatch.ExpectedBestIsa > /dev/null 2>&1";
  return std::system(cmd.c_str());
}

TEST(Dispatch, EnvironmentVariableHonoured) {
  const std::vector<Isa> av = nibble::available_isas();
  const int probe = run_child("NIBBLE_ISA=scalar NIBBLE_EXPECT_BEST=scalar");
  // 77: the child sees another CPU (run natively under an emulated parent); 126/127: the
  // binary cannot be executed directly (cross-built, run through qemu without binfmt).
  if (WIFEXITED(probe) &&
      (WEXITSTATUS(probe) == 77 || WEXITSTATUS(probe) == 126 || WEXITSTATUS(probe) == 127)) {
    GTEST_SKIP() << "child processes cannot run on this CPU (emulated run)";
  }
  EXPECT_EQ(probe, 0);
  EXPECT_EQ(run_child("NIBBLE_ISA=bogus NIBBLE_EXPECT_BEST=error"), 0);
  // The child really checks: a wrong expectation fails.
  EXPECT_NE(run_child("NIBBLE_ISA=scalar NIBBLE_EXPECT_BEST=neon"), 0);
  if (has(av, Isa::avx512)) {
    EXPECT_EQ(run_child("NIBBLE_ISA=avx2 NIBBLE_EXPECT_BEST=avx2"), 0);
    EXPECT_EQ(run_child("NIBBLE_ISA=avx512 NIBBLE_EXPECT_BEST=avx512"), 0);
  }
  if (has(av, Isa::avxvnni)) {
    EXPECT_EQ(run_child("NIBBLE_ISA=avxvnni NIBBLE_EXPECT_BEST=avxvnni"), 0);
  }
  if (has(av, Isa::avx2) && !has(av, Isa::avx512)) {
    // A cap above the CPU's best gives the best.
    EXPECT_EQ(run_child(std::string("NIBBLE_ISA=avx512 NIBBLE_EXPECT_BEST=") +
                        (has(av, Isa::avxvnni) ? "avxvnni" : "avx2")),
              0);
  }
  if (has(av, Isa::neon)) {
    EXPECT_EQ(run_child("NIBBLE_ISA=neon NIBBLE_EXPECT_BEST=neon"), 0);
  }
}

// ---- thread hooks ----
void serial_hook(void* pool, std::int64_t n, void (*task)(void*, std::int64_t), void* ctx) {
  ++*static_cast<int*>(pool);
  for (std::int64_t i = n - 1; i >= 0; --i) task(ctx, i);  // reverse order on purpose
}

void thread_hook(void* pool, std::int64_t n, void (*task)(void*, std::int64_t), void* ctx) {
  ++*static_cast<int*>(pool);
  std::atomic<std::int64_t> next{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&] {
      for (std::int64_t i = next++; i < n; i = next++) task(ctx, i);
    });
  }
  for (std::thread& w : workers) w.join();
}

// The output the straggler watches, and whether it was complete when task 0 started.
const std::vector<float>* g_straggler_output = nullptr;
bool g_straggler_found_all_done = false;

// One thread per task, where task 0 starts only after every other task has returned: nibble
// hands each of the n tasks a contiguous range of its row tasks, so the others must take all of
// task 0's rows (work stealing) and task 0 must then find nothing left to do.
void straggler_hook(void* pool, std::int64_t n, void (*task)(void*, std::int64_t), void* ctx) {
  ++*static_cast<int*>(pool);
  g_straggler_found_all_done = false;
  std::atomic<std::int64_t> done{0};
  std::vector<std::thread> workers;
  for (std::int64_t i = 0; i < n; ++i) {
    workers.emplace_back([&, i] {
      if (i == 0) {
        while (done.load() < n - 1) std::this_thread::yield();
        const std::vector<float>& y = *g_straggler_output;
        g_straggler_found_all_done =
            std::none_of(y.begin(), y.end(), [](float v) { return v == -1.0f; });
      }
      task(ctx, i);
      ++done;
    });
  }
  for (std::thread& w : workers) w.join();
}

struct PublicCase {
  Format f;
  std::int64_t rows, cols, n;
};

// Expected product computed in double from the reference dequantization (and, for q8_0, the
// reference activation quantizer).
nt::RefProduct expected(Format f, const std::vector<std::uint8_t>& q, std::int64_t rows,
                        std::int64_t cols, const std::vector<float>& x, std::int64_t n) {
  std::vector<float> wd(static_cast<std::size_t>(rows * cols));
  nibble::dequantize(f, q.data(), rows, cols, wd.data());
  std::vector<float> xd = x;
  if (f == Format::q8_0) {
    std::vector<nibble::BlockQ8_0> a(static_cast<std::size_t>(cols / 32));
    for (std::int64_t j = 0; j < n; ++j) {
      nibble::ref::quantize_q8_0_act(x.data() + j * cols, a.data(), cols);
      nibble::ref::dequantize_q8_0(a.data(), xd.data() + j * cols, cols);
    }
  }
  return nt::eigen_reference(wd.data(), rows, cols, xd.data(), n);
}

TEST(PublicApi, ThreadCountsAndHooksGiveIdenticalResults) {
  const PublicCase cases[] = {{Format::f32, 67, 96, 1},     {Format::f16, 50, 130, 5},
                              {Format::q8_0, 77, 256, 1},   {Format::q8_0, 100, 512, 7},
                              {Format::nf4, 65, 256, 3},    {Format::fp4, 33, 128, 1},
                              {Format::q8_0, 300, 1024, 2}, {Format::q8_0, 1024, 1024, 1}};
  for (Isa isa : nibble::available_isas()) {
    for (const PublicCase& c : cases) {
      const std::string what = std::string(nibble::isa_name(isa)) + " " + nibble::traits(c.f).name +
                               " " + std::to_string(c.rows) + "x" + std::to_string(c.cols) +
                               " n=" + std::to_string(c.n);
      const std::vector<float> w =
          nt::random_normal(static_cast<std::size_t>(c.rows * c.cols), 3, 0.1f);
      const std::vector<float> x = nt::random_normal(static_cast<std::size_t>(c.n * c.cols), 4);
      std::vector<std::uint8_t> q(nibble::row_bytes(c.f, c.cols) *
                                  static_cast<std::size_t>(c.rows));
      nibble::quantize(c.f, w.data(), c.rows, c.cols, q.data());
      Context ctx;
      ctx.isa = isa;
      ctx.threads = 1;
      std::vector<float> y1(static_cast<std::size_t>(c.n * c.rows));
      nibble::gemm(ctx, c.f, q.data(), c.rows, c.cols, x.data(), c.n, y1.data());
      // NF4/FP4 GEMV on x86 rounds to int16: its rounding bound on top (kernel_test_util.hpp).
      const bool int16 = (c.f == Format::nf4 || c.f == Format::fp4) && c.n == 1 &&
                         nt::nf4_int16_gemv(nibble::isa_name(isa));
      nt::expect_close(
          y1, expected(c.f, q, c.rows, c.cols, x, c.n), 1e-5,
          int16 ? nt::nf4_int16_bound(q.data(), c.rows, c.cols, x.data(), c.n, c.f == Format::fp4)
                : std::vector<double>(y1.size(), 0.0),
          what);
      for (int threads : {2, 3}) {
        ctx.threads = threads;
        std::vector<float> y(y1.size(), -1.0f);
        nibble::gemm(ctx, c.f, q.data(), c.rows, c.cols, x.data(), c.n, y.data());
        nt::expect_bitwise_equal(y, y1, what + " threads=" + std::to_string(threads));
      }
      for (auto hook : {&serial_hook, &thread_hook, &straggler_hook}) {
        int calls = 0;
        Context hc;
        hc.isa = isa;
        hc.threads = 3;
        hc.parallel_for = hook;
        hc.pool = &calls;
        std::vector<float> y(y1.size(), -1.0f);
        g_straggler_output = &y;
        nibble::gemm(hc, c.f, q.data(), c.rows, c.cols, x.data(), c.n, y.data());
        nt::expect_bitwise_equal(y, y1, what + " hook");
        if (hook == &straggler_hook && calls > 0) {
          EXPECT_TRUE(g_straggler_found_all_done) << what << ": task 0's rows were not taken";
        }
        if (c.rows > 16 && c.rows * c.cols * c.n >= (1 << 16)) {
          EXPECT_GE(calls, 1) << what;
        }
      }
      if (c.n == 1) {
        std::vector<float> y(y1.size(), -1.0f);
        nibble::gemv(ctx, c.f, q.data(), c.rows, c.cols, x.data(), y.data());
        nt::expect_bitwise_equal(y, y1, what + " gemv");
      }
    }
  }
}

TEST(PublicApi, ContextQuantizeAndDequantizeMatchReference) {
  const std::int64_t rows = 37, cols = 512;
  const std::vector<float> w = nt::random_normal(static_cast<std::size_t>(rows * cols), 8, 0.3f);
  for (Isa isa : nibble::available_isas()) {
    for (Format f : {Format::f32, Format::f16, Format::q8_0, Format::q8_K, Format::nf4, Format::fp4,
                     Format::q4_K, Format::q5_K, Format::q6_K}) {
      const std::string what = std::string(nibble::isa_name(isa)) + " " + nibble::traits(f).name;
      const std::size_t bytes = nibble::row_bytes(f, cols) * static_cast<std::size_t>(rows);
      std::vector<std::uint8_t> want(bytes), got(bytes, 0xCD);
      nibble::quantize(f, w.data(), rows, cols, want.data());
      for (int threads : {1, 3}) {
        Context ctx;
        ctx.isa = isa;
        ctx.threads = threads;
        nibble::quantize(ctx, f, w.data(), rows, cols, got.data());
        nt::expect_bytes_equal(got, want, what + " quantize");
        std::vector<float> dw(static_cast<std::size_t>(rows * cols)), dg(dw.size(), -1.0f);
        nibble::dequantize(f, want.data(), rows, cols, dw.data());
        nibble::dequantize(ctx, f, want.data(), rows, cols, dg.data());
        nt::expect_bitwise_equal(dg, dw, what + " dequantize");
      }
    }
  }
}

TEST(PublicApi, RejectsBadArguments) {
  Context ctx;
  std::vector<float> w(64 * 4, 0.5f), x(64, 1.0f), y(4, 3.0f);
  std::vector<std::uint8_t> q(4 * 2 * 34);
  nibble::quantize(ctx, Format::q8_0, w.data(), 4, 64, q.data());
  EXPECT_THROW(nibble::gemv(ctx, Format::q8_0, q.data(), 4, 48, x.data(), y.data()),
               nibble::Error);  // cols not a multiple of 32
  EXPECT_THROW(nibble::gemv(ctx, Format::q8_0, nullptr, 4, 64, x.data(), y.data()), nibble::Error);
  EXPECT_THROW(nibble::gemm(ctx, Format::q8_0, q.data(), 4, 64, x.data(), -1, y.data()),
               nibble::Error);
  EXPECT_THROW(nibble::gemm(ctx, Format::q8_K, q.data(), 4, 256, x.data(), 1, y.data()),
               nibble::Error);
  x[7] = std::nanf("");
  EXPECT_THROW(nibble::gemv(ctx, Format::q8_0, q.data(), 4, 64, x.data(), y.data()), nibble::Error);
  for (float v : y) EXPECT_EQ(v, 3.0f);
  w[3] = INFINITY;
  std::vector<std::uint8_t> q2(q.size(), 9);
  EXPECT_THROW(nibble::quantize(ctx, Format::q8_0, w.data(), 4, 64, q2.data()), nibble::Error);
  for (std::uint8_t b : q2) EXPECT_EQ(b, 9);
  EXPECT_THROW(nibble::dequantize(ctx, Format::nf4, q.data(), 1, 32, y.data()), nibble::Error);
  // Empty shapes are fine and write nothing.
  nibble::gemm(ctx, Format::f32, nullptr, 0, 64, nullptr, 0, nullptr);
}

// ---- the default pool (no parallel_for hook) ----

struct PoolCase {
  std::vector<std::uint8_t> q;
  std::vector<float> x, y1;
  static constexpr std::int64_t kRows = 512, kCols = 1024;
  PoolCase() {
    const std::vector<float> w = nt::random_normal(static_cast<std::size_t>(kRows * kCols), 21);
    x = nt::random_normal(static_cast<std::size_t>(kCols), 22);
    q.resize(nibble::row_bytes(Format::q4_K, kCols) * kRows);
    nibble::quantize(Format::q4_K, w.data(), kRows, kCols, q.data());
    Context one;
    one.threads = 1;
    y1.resize(kRows);
    nibble::gemv(one, Format::q4_K, q.data(), kRows, kCols, x.data(), y1.data());
  }
  // gemv on `threads` threads of the default pool; true if the result is y1 bit for bit.
  bool run(int threads) const {
    Context ctx;
    ctx.threads = threads;
    std::vector<float> y(kRows, -1.0f);
    nibble::gemv(ctx, Format::q4_K, q.data(), kRows, kCols, x.data(), y.data());
    return std::memcmp(y.data(), y1.data(), y.size() * sizeof(float)) == 0;
  }
};

TEST(DefaultPool, BackToBackAndSpacedCallsGiveTheSingleThreadResult) {
  const PoolCase c;
  int wrong = 0;
  for (int i = 0; i < 400; ++i) {
    if (!c.run(2 + i % 3)) ++wrong;
    // now and then a pause longer than the workers' spin window, so that they sleep and must
    // be woken by the next call
    if (i % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(wrong, 0);
}

TEST(DefaultPool, ConcurrentCallersGiveTheSingleThreadResult) {
  const PoolCase c;
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        if (!c.run(2 + (t + i) % 2)) ++wrong;
      }
    });
  }
  for (std::thread& th : callers) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

// Task i records that it ran; task 0 waits (up to 10 s) until every other task has started, which
// only a pool whose workers run beside the caller achieves. A nested pool_run inside a task
// refuses (the pool is busy), so the caller runs that work itself.
struct PoolProbe {
  std::int64_t n = 0;
  std::atomic<int> started{0}, ran{0};
  std::atomic<bool> nested_refused{true};
  bool waited_ok = false;
};

void probe_task(void* arg, std::int64_t i) {
  auto& p = *static_cast<PoolProbe*>(arg);
  ++p.started;
  if (i == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    while (p.started.load() < p.n &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
      std::this_thread::yield();
    p.waited_ok = p.started.load() == p.n;
  } else if (nibble::detail::pool_run(
                 8, 2, [](void*, std::int64_t) {}, nullptr)) {
    p.nested_refused = false;
  }
  ++p.ran;
}

TEST(DefaultPool, WorkersRunBesideTheCaller) {
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw < 2) GTEST_SKIP() << "one hardware thread: the pool has no workers";
  for (int rep = 0; rep < 20; ++rep) {
    PoolProbe p;
    p.n = 2;
    ASSERT_TRUE(nibble::detail::pool_run(static_cast<int>(hw), p.n, probe_task, &p));
    EXPECT_TRUE(p.waited_ok) << "rep " << rep << ": task 1 never started beside task 0";
    EXPECT_EQ(p.ran.load(), 2);
    EXPECT_TRUE(p.nested_refused.load());
  }
  EXPECT_FALSE(nibble::detail::pool_run(1, 4, probe_task, nullptr));  // one thread: no pool
}

// Task 0 throws after task 1 has started on a worker: the exception reaches the caller once the
// worker has left, and the pool takes the next job.
TEST(DefaultPool, ThrowingCallerTaskLeavesThePoolUsable) {
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw < 2) GTEST_SKIP() << "one hardware thread: the pool has no workers";
  PoolProbe p;
  p.n = 2;
  auto throwing = [](void* arg, std::int64_t i) {
    probe_task(arg, i);
    if (i == 0) throw std::runtime_error("task 0");
  };
  EXPECT_THROW(nibble::detail::pool_run(static_cast<int>(hw), 2, throwing, &p), std::runtime_error);
  EXPECT_EQ(p.ran.load(), 2);  // the worker's task had returned before the exception left
  PoolProbe q;
  q.n = 2;
  EXPECT_TRUE(nibble::detail::pool_run(static_cast<int>(hw), q.n, probe_task, &q));
  EXPECT_TRUE(q.waited_ok);
  const PoolCase c;
  EXPECT_TRUE(c.run(2));
}

TEST(DefaultPool, ForkedChildComputesTheSameResult) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not support threads started after a multi-threaded fork";
#endif
  // The emulated runs (tests/cross: qemu-user with a plugin) abort in a forked child that
  // starts threads; the native and sanitizer runs cover this test.
  if (std::getenv("NIBBLE_EXPECT_BEST") != nullptr) GTEST_SKIP() << "emulated CPU (qemu-user)";
  const PoolCase c;
  ASSERT_TRUE(c.run(2));  // the pool exists in this process now
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(60);  // a child that waits for its parent's workers would hang: fail instead
    bool ok = true;
    for (int i = 0; i < 20; ++i) ok = ok && c.run(2);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(c.run(2));
}

}  // namespace
