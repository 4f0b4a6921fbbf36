// nibble: kernel table for the scalar ISA. Compiled with its own flags (CMakeLists.txt).
#include "nibble/kernels/all-inl.hpp"

namespace nibble::kernels {

const KernelTable& table_scalar() {
  static const KernelTable table = make_table<ScalarTag>();
  return table;
}

}  // namespace nibble::kernels
