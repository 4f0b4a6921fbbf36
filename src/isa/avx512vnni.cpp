// nibble: kernel table for the avx512vnni ISA. Compiled with its own flags (CMakeLists.txt).
#include "nibble/kernels/all-inl.hpp"

namespace nibble::kernels {

const KernelTable& table_avx512vnni() {
  static const KernelTable table = make_table<Avx512VnniTag>();
  return table;
}

}  // namespace nibble::kernels
