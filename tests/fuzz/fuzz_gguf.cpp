// libFuzzer target: the GGUF reader. Any input must either parse or throw nibble::Error; a
// parsed file must have every tensor inside the input, and writing it back and re-reading must
// reproduce the same bytes (the writer's output is a fixed point).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "nibble/core/error.hpp"
#include "nibble/io/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace g = nibble::gguf;
  g::File f;
  try {
    f = g::File::parse(data, size);
  } catch (const nibble::Error&) {
    return 0;
  }
  volatile std::uint8_t sink = 0;
  for (const auto& t : f.tensors) {
    if (t.data < data || t.nbytes > size || t.data + t.nbytes > data + size) std::abort();
    for (std::uint64_t i = 0; i < t.nbytes; i += 61) sink = sink ^ t.data[i];
    if (t.nbytes) sink = sink ^ t.data[t.nbytes - 1];
  }
  for (const auto& kv : f.metadata) (void)kv.value.to_string();
  // Keep the work bounded: re-serialise only modest files.
  if (size <= (1u << 20)) {
    const std::vector<std::uint8_t> a = g::write_memory(f.metadata, f.tensors);
    const g::File f2 = g::File::parse(a.data(), a.size());  // must not throw
    const std::vector<std::uint8_t> b = g::write_memory(f2.metadata, f2.tensors);
    if (a != b) std::abort();
  }
  return 0;
}
