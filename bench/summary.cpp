// nibble-bench: the --summary ratio table (see summary.hpp).
#include "summary.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <tuple>

namespace nibble_bench {
namespace {

// A benchmark name split into its fields: kernel/format/impl/shape[/n:N]/threads:T[/cache].
struct Key {
  std::string kernel, format, impl, shape, cache;
  int n = -1, threads = 1;
};

Key parse(const std::string& name) {
  Key k;
  std::vector<std::string> plain;
  std::stringstream ss(name);
  std::string tok;
  while (std::getline(ss, tok, '/')) {
    if (tok.rfind("n:", 0) == 0) {
      k.n = std::atoi(tok.c_str() + 2);
    } else if (tok.rfind("threads:", 0) == 0) {
      k.threads = std::atoi(tok.c_str() + 8);
    } else if (tok == "real_time") {
    } else {
      plain.push_back(tok);
    }
  }
  if (plain.size() > 0) k.kernel = plain[0];
  if (plain.size() > 1) k.format = plain[1];
  if (plain.size() > 2) k.impl = plain[2];
  if (plain.size() > 3) k.shape = plain[3];
  if (plain.size() > 4) k.cache = plain[4];
  return k;
}

Measured from_run(const benchmark::BenchmarkReporter::Run& r) {
  Measured m;
  const double iters = r.iterations > 0 ? static_cast<double>(r.iterations) : 1.0;
  m.seconds = r.real_accumulated_time / iters;
  auto it = r.counters.find("bytes_per_second");
  if (it != r.counters.end()) m.bytes_per_second = it->second.value;
  it = r.counters.find("FLOP/s");
  if (it != r.counters.end()) m.flops = it->second.value;
  it = r.counters.find("x_membw");
  if (it != r.counters.end()) m.x_membw = it->second.value;
  return m;
}

// A cold row's weight bytes/s over the memory read bandwidth: its own paired sweeps (x_membw)
// when it has them, else the run's membw row at its thread count; 0 when neither is known.
double membw_ratio(const Measured& m, const std::map<int, double>& roof, int threads) {
  if (m.x_membw > 0) return m.x_membw;
  const auto it = roof.find(threads);
  return it != roof.end() && it->second > 0 ? m.bytes_per_second / it->second : 0.0;
}

std::string strip_time_suffix(std::string s) {
  const std::string suffix = "/real_time";
  if (s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0)
    s.resize(s.size() - suffix.size());
  return s;
}

}  // namespace

bool SummaryReporter::ReportContext(const Context& context) {
  return display_->ReportContext(context);
}

void SummaryReporter::ReportRuns(const std::vector<Run>& report) {
  display_->ReportRuns(report);
  for (const Run& r : report) {
    if (r.error_occurred) continue;
    const std::string base = strip_time_suffix(r.run_name.str());
    if (r.run_type == Run::RT_Aggregate) {
      // Aggregates hold the statistic of the accumulated times over the repetitions' common
      // iteration count, so from_run's division applies to them too.
      if (r.aggregate_name == "median") medians_[base] = from_run(r);
    } else {
      runs_[base].push_back(from_run(r));
    }
  }
}

void SummaryReporter::Finalize() {
  display_->Finalize();
}

void SummaryReporter::print_table(std::FILE* out) const {
  // Collapse repetitions: the median aggregate when reported, else the median iteration run.
  std::map<std::string, Measured> best;
  for (const auto& [name, v] : runs_) {
    std::vector<Measured> s = v;
    std::sort(s.begin(), s.end(),
              [](const Measured& a, const Measured& b) { return a.seconds < b.seconds; });
    best[name] = s[s.size() / 2];
  }
  for (const auto& [name, m] : medians_) best[name] = m;

  std::map<int, double> roof;  // threads -> membw bytes/s
  std::map<std::tuple<std::string, std::string, int, int, std::string>, double> time_of;
  // (format/impl, shape, n, threads, kernel) -> seconds
  for (const auto& [name, m] : best) {
    const Key k = parse(name);
    if (k.kernel == "membw") roof[k.threads] = m.bytes_per_second;
    time_of[{k.format + "/" + k.impl, k.shape, k.n, k.threads, k.kernel}] = m.seconds;
  }
  auto lookup = [&](const std::string& fi, const Key& k) -> double {
    auto it = time_of.find({fi, k.shape, k.n, k.threads, k.kernel});
    return it == time_of.end() ? 0.0 : it->second;
  };

  std::fprintf(out,
               "\nnibble-bench summary (ratios from this run; xBLAS/xEigen/xScalar = their time / "
               "this time, >1 means faster;\n%%roof = weight bytes/s / memory read bytes/s at the "
               "same thread count, cold decode only, against\nthe row's own read sweeps of its "
               "weights just before and after it (x_membw) when present)\n");
  for (const auto& [t, bw] : roof) {
    std::fprintf(out, "memory read roofline, %d thread(s): %.1f GB/s\n", t, bw / 1e9);
  }
  std::fprintf(out, "%-5s %-11s %4s %3s %-7s %-9s %11s %8s %9s %7s %7s %6s %8s\n", "kern", "shape",
               "n", "thr", "format", "impl", "time_us", "wGB/s", "GFLOP/s", "xBLAS", "xEigen",
               "%roof", "xScalar");
  std::vector<std::pair<Key, Measured>> rows;
  for (const auto& [name, m] : best) {
    Key k = parse(name);
    const bool warm_gemv = k.cache == "warm_l2" || k.cache == "warm_l3";
    if ((k.kernel == "gemv" || k.kernel == "gemm") && !warm_gemv) rows.emplace_back(k, m);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first.shape, a.first.n, a.first.threads) <
           std::tie(b.first.shape, b.first.n, b.first.threads);
  });
  auto ratio = [](double num, double den, char* buf, std::size_t len) {
    if (num > 0 && den > 0) {
      std::snprintf(buf, len, "%.2f", num / den);
    } else {
      std::snprintf(buf, len, "-");
    }
  };
  for (const auto& [k, m] : rows) {
    char xb[32], xe[32], xr[32], xs[32];
    ratio(lookup("f32/openblas", k), m.seconds, xb, sizeof xb);
    ratio(lookup("f32/eigen", k), m.seconds, xe, sizeof xe);
    const double xm = k.n == 1 ? membw_ratio(m, roof, k.threads) : 0.0;
    if (xm > 0) {
      std::snprintf(xr, sizeof xr, "%.0f%%", 100.0 * xm);
    } else {
      std::snprintf(xr, sizeof xr, "-");
    }
    const bool is_nibble = k.impl != "openblas" && k.impl != "eigen" && k.impl != "scalar";
    ratio(is_nibble ? lookup(k.format + "/scalar", k) : 0.0, m.seconds, xs, sizeof xs);
    std::fprintf(out, "%-5s %-11s %4d %3d %-7s %-9s %11.1f %8.2f %9.1f %7s %7s %6s %8s\n",
                 k.kernel.c_str(), k.shape.c_str(), k.n, k.threads, k.format.c_str(),
                 k.impl.c_str(), m.seconds * 1e6, m.bytes_per_second / 1e9, m.flops / 1e9, xb, xe,
                 xr, xs);
  }
  print_ceiling(out, best, roof);
  print_decode(out, best, roof);
}

void SummaryReporter::print_ceiling(std::FILE* out, const std::map<std::string, Measured>& best,
                                    const std::map<int, double>& roof) const {
  // (format, impl, threads) -> cold 4096x4096 / warm L2 / warm L3 weight bytes per second
  struct Row {
    double cold = 0, x = 0, l2 = 0, l3 = 0;  // x: cold / memory read bandwidth
    std::string l2_shape, l3_shape;
  };
  std::map<std::tuple<std::string, std::string, int>, Row> rows;
  for (const auto& [name, m] : best) {
    const Key k = parse(name);
    if (k.kernel != "gemv" || k.n != 1) continue;
    Row& r = rows[{k.format, k.impl, k.threads}];
    if (k.cache == "cold" && k.shape == "4096x4096") {
      r.cold = m.bytes_per_second;
      r.x = membw_ratio(m, roof, k.threads);
    }
    if (k.cache == "warm_l2") {
      r.l2 = m.bytes_per_second;
      r.l2_shape = k.shape;
    }
    if (k.cache == "warm_l3") {
      r.l3 = m.bytes_per_second;
      r.l3_shape = k.shape;
    }
  }
  bool any = false;
  for (const auto& kv : rows) any = any || kv.second.l2 > 0 || kv.second.l3 > 0;
  if (!any) return;
  std::fprintf(
      out,
      "\nGEMV compute ceiling (weight GB/s; cold = 4096x4096 streamed from DRAM, "
      "cold/membw = cold / memory read GB/s\nat the same thread count (the row's paired sweeps, "
      "x_membw); warm L2 / L3 = "
      "one cache-resident copy: what the kernel does when memory is not the limit)\n");
  std::fprintf(out, "%-7s %-9s %3s %9s %10s %9s %-10s %9s %-10s\n", "format", "impl", "thr", "cold",
               "cold/membw", "warm L2", "(shape)", "warm L3", "(shape)");
  auto gbs = [](double v, char* buf, std::size_t len) {
    if (v > 0) {
      std::snprintf(buf, len, "%.2f", v / 1e9);
    } else {
      std::snprintf(buf, len, "-");
    }
  };
  for (const auto& [key, r] : rows) {
    char c[32], cr[32], l2[32], l3[32];
    gbs(r.cold, c, sizeof c);
    gbs(r.l2, l2, sizeof l2);
    gbs(r.l3, l3, sizeof l3);
    if (r.x > 0) {
      std::snprintf(cr, sizeof cr, "%.2f", r.x);
    } else {
      std::snprintf(cr, sizeof cr, "-");
    }
    std::fprintf(out, "%-7s %-9s %3d %9s %10s %9s %-10s %9s %-10s\n", std::get<0>(key).c_str(),
                 std::get<1>(key).c_str(), std::get<2>(key), c, cr, l2,
                 r.l2_shape.empty() ? "" : r.l2_shape.c_str(), l3,
                 r.l3_shape.empty() ? "" : r.l3_shape.c_str());
  }
}

void SummaryReporter::print_decode(std::FILE* out, const std::map<std::string, Measured>& best,
                                   const std::map<int, double>& roof) const {
  bool header = false;
  for (const auto& [name, m] : best) {
    const Key k = parse(name);
    if (k.kernel != "decode") continue;
    if (!header) {
      std::fprintf(out,
                   "\nmodel decode step (one token: a GEMV through every linear layer, weights in "
                   "DRAM; %%membw = weight bytes/s\n/ memory read bytes/s at the same thread "
                   "count, from the row's paired sweeps of its weights)\n%-16s %-12s %-8s %3s %10s "
                   "%9s %8s %7s\n",
                   "model", "stack", "isa", "thr", "ms/token", "tokens/s", "wGB/s", "%membw");
      header = true;
    }
    const double xm = membw_ratio(m, roof, k.threads);
    char pr[32];
    if (xm > 0) {
      std::snprintf(pr, sizeof pr, "%.0f%%", 100.0 * xm);
    } else {
      std::snprintf(pr, sizeof pr, "-");
    }
    std::fprintf(out, "%-16s %-12s %-8s %3d %10.3f %9.2f %8.2f %7s\n", k.format.c_str(),
                 k.shape.c_str(), k.impl.c_str(), k.threads, m.seconds * 1e3,
                 m.seconds > 0 ? 1.0 / m.seconds : 0.0, m.bytes_per_second / 1e9, pr);
  }
}

}  // namespace nibble_bench
