// nibble: kernel table for the neon ISA. Compiled with its own flags (CMakeLists.txt).
#include "nibble/kernels/all-inl.hpp"

namespace nibble::kernels {

const KernelTable& table_neon() {
  static const KernelTable table = make_table<NeonTag>();
  return table;
}

}  // namespace nibble::kernels
