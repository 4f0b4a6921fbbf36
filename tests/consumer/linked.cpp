// Consumer of nibble::nibble: quantize a small matrix, run gemv, compare with a plain loop.
#include <cmath>
#include <cstdio>
#include <vector>

#include <nibble/nibble.hpp>

int main() {
  const int rows = 8, cols = 256;
  std::vector<float> w(rows * cols), x(cols), y(rows), dq(rows * cols);
  for (int i = 0; i < rows * cols; ++i) w[i] = std::sin(0.37f * static_cast<float>(i));
  for (int i = 0; i < cols; ++i) x[i] = std::cos(0.11f * static_cast<float>(i));
  std::vector<unsigned char> q(nibble::row_bytes(nibble::Format::q8_0, cols) * rows);
  nibble::quantize(nibble::Format::q8_0, w.data(), rows, cols, q.data());
  nibble::dequantize(nibble::Format::q8_0, q.data(), rows, cols, dq.data());
  nibble::gemv(nibble::Context{}, nibble::Format::q8_0, q.data(), rows, cols, x.data(), y.data());
  for (int r = 0; r < rows; ++r) {
    double ref = 0;
    for (int c = 0; c < cols; ++c) ref += static_cast<double>(dq[r * cols + c]) * x[c];
    if (std::fabs(ref - y[r]) > 1e-2 * (1.0 + std::fabs(ref))) {
      std::printf("row %d: gemv %f vs %f\n", r, y[r], ref);
      return 1;
    }
  }
  std::printf("linked consumer ok (isa %s)\n", nibble::isa_name(nibble::best_isa()));
  return 0;
}
