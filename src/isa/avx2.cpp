// nibble: kernel table for the avx2 ISA. Compiled with its own flags (CMakeLists.txt).
#include "nibble/kernels/all-inl.hpp"

namespace nibble::kernels {

const KernelTable& table_avx2() {
  static const KernelTable table = make_table<Avx2Tag>();
  return table;
}

}  // namespace nibble::kernels
