// nibble CLI: synthetic LLM-like weight matrices for `nibble report`.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace nibble::cli {

/// One synthetic matrix, row-major rows x cols.
struct SynthMatrix {
  std::string name;
  std::int64_t rows = 0, cols = 0;
  std::vector<float> w;
};

/// Kinds of synthetic rows: gaussian, or student-t(3) heavy tails; each row gets a log-normal
/// scale (sigma `scale_spread`) around `base`, and `outlier_cols` columns are multiplied by 10-30.
inline SynthMatrix make_llm_matrix(const std::string& name, std::int64_t rows, std::int64_t cols,
                                   bool heavy_tailed, float base, float scale_spread,
                                   int outlier_cols, std::uint64_t seed) {
  SynthMatrix m{name, rows, cols, std::vector<float>(static_cast<std::size_t>(rows * cols))};
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> gauss(0.0, 1.0);
  std::student_t_distribution<double> student(3.0);
  std::uniform_int_distribution<std::int64_t> pick_col(0, cols - 1);
  std::uniform_real_distribution<double> boost(10.0, 30.0);
  std::vector<double> col_gain(static_cast<std::size_t>(cols), 1.0);
  for (int k = 0; k < outlier_cols; ++k)
    col_gain[static_cast<std::size_t>(pick_col(rng))] = boost(rng);
  for (std::int64_t r = 0; r < rows; ++r) {
    const double row_scale = base * std::exp(scale_spread * gauss(rng));
    for (std::int64_t c = 0; c < cols; ++c) {
      const double v = heavy_tailed ? student(rng) / std::sqrt(3.0) : gauss(rng);
      m.w[static_cast<std::size_t>(r * cols + c)] =
          static_cast<float>(v * row_scale * col_gain[static_cast<std::size_t>(c)]);
    }
  }
  return m;
}

}  // namespace nibble::cli
