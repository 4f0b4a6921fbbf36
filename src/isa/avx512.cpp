// nibble: kernel table for the avx512 ISA. Compiled with its own flags (CMakeLists.txt).
// GCC 12 reports false -Wuninitialized / -Wmaybe-uninitialized warnings inside its own
// avx512fintrin.h (the _mm512_undefined_* pass-through operands, GCC bug 105593); the pragma
// must precede the first include of <immintrin.h>.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "nibble/kernels/all-inl.hpp"

namespace nibble::kernels {

const KernelTable& table_avx512() {
  static const KernelTable table = make_table<Avx512Tag>();
  return table;
}

}  // namespace nibble::kernels
