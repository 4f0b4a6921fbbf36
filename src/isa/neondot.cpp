// nibble: kernel table for the neondot ISA. Compiled with its own flags (CMakeLists.txt).
#include "nibble/kernels/all-inl.hpp"

namespace nibble::kernels {

const KernelTable& table_neondot() {
  static const KernelTable table = make_table<NeonDotTag>();
  return table;
}

}  // namespace nibble::kernels
