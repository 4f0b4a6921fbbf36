// libFuzzer target: the importance-matrix reader (legacy binary and GGUF formats). Any input
// must either parse or throw nibble::Error.
#include <cstddef>
#include <cstdint>

#include "nibble/core/error.hpp"
#include "nibble/io/imatrix.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const nibble::Imatrix m = nibble::parse_imatrix(data, size);
    volatile float sink = 0;
    for (const auto& kv : m.entries) {
      for (float v : kv.second) sink = sink + v;
    }
  } catch (const nibble::Error&) {
  }
  return 0;
}
