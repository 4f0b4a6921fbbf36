// Consumer of nibble::headers only: the fp16 conversion and a reference codec, no library.
#include <cstdio>
#include <vector>

#include <nibble/core/fp16.hpp>
#include <nibble/formats/q8_0.hpp>

int main() {
  if (nibble::fp32_to_fp16(1.0f) != 0x3C00 || nibble::fp16_to_fp32(0xC000) != -2.0f) return 1;
  std::vector<float> x(32), y(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16) / 4.0f;
  nibble::BlockQ8_0 b;
  nibble::ref::quantize_q8_0(x.data(), &b, 32);
  nibble::ref::dequantize_q8_0(&b, y.data(), 32);
  for (int i = 0; i < 32; ++i)
    if (y[i] - x[i] > 0.05f || x[i] - y[i] > 0.05f) return 1;
  std::printf("header-only consumer ok\n");
  return 0;
}
