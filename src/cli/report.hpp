// nibble CLI: the `report` subcommand.
#pragma once

#include <cstdint>

namespace nibble::cli {

/// Shape of the synthetic layer of the calibration part of the report.
struct CalibOptions {
  std::int64_t out = 512, in = 1024, tokens = 2048;
  std::uint64_t seed = 1;
};

/// Prints the calibration table (RTN, imatrix K-quants, GPTQ, AWQ, SmoothQuant).
void report_calibration(const CalibOptions& o);

/// `nibble report [options]`: argc/argv are the arguments after "report". Returns the exit code.
int cmd_report(int argc, char** argv);
}  // namespace nibble::cli
