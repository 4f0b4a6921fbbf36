// nibble: kernel table for the avxvnni ISA (AVX2 + the VEX-encoded 256-bit vpdpbusd). Compiled
// with its own flags (CMakeLists.txt).
#include "nibble/kernels/all-inl.hpp"

namespace nibble::kernels {

const KernelTable& table_avxvnni() {
  static const KernelTable table = make_table<AvxVnniTag>();
  return table;
}

}  // namespace nibble::kernels
