// nibble: kernel table for the avx512 ISA. Compiled with its own flags (CMakeLists.txt).
#include "nibble/kernels/all-inl.hpp"

namespace nibble::kernels {

const KernelTable& table_avx512() {
  static const KernelTable table = make_table<Avx512Tag>();
  return table;
}

}  // namespace nibble::kernels
