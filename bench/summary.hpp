// nibble-bench: the --summary mode. A reporter that forwards every run to the normal display
// reporter and keeps the results, then prints a table of ratios computed from this same run:
// nibble vs fp32 OpenBLAS / Eigen (time), vs the memory-bandwidth roofline (weight GB/s), and vs
// the scalar path (time).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nibble_bench {

/// One measured benchmark (the median when repetitions were run).
struct Measured {
  double seconds = 0;           ///< real time per iteration
  double bytes_per_second = 0;  ///< weight (or array) bytes per second
  double flops = 0;             ///< FLOP/s (0 when not a product)
  double x_membw = 0;           ///< cold rows: bytes/s over the paired bandwidth sweeps (0: none)
};

class SummaryReporter : public benchmark::BenchmarkReporter {
 public:
  explicit SummaryReporter(std::unique_ptr<benchmark::BenchmarkReporter> display)
      : display_(std::move(display)) {}
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& report) override;
  void Finalize() override;

  /// Prints the ratio table of everything recorded so far.
  void print_table(std::FILE* out) const;

 private:
  // GEMV cold vs warm L2/L3 (the compute ceiling) per format, ISA and thread count.
  void print_ceiling(std::FILE* out, const std::map<std::string, Measured>& best,
                     const std::map<int, double>& roof) const;
  // Model decode step rows: ms/token, tokens/s, weight GB/s and % of the membw row.
  void print_decode(std::FILE* out, const std::map<std::string, Measured>& best,
                    const std::map<int, double>& roof) const;
  std::unique_ptr<benchmark::BenchmarkReporter> display_;
  std::map<std::string, std::vector<Measured>> runs_;  // per base name: iteration runs
  std::map<std::string, Measured> medians_;            // per base name: median aggregates
};

}  // namespace nibble_bench
