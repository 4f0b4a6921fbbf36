// nibble (internal): the kernel tables the per-ISA TUs define. Which exist depends on the build
// (NIBBLE_BUILT_<ISA> definitions from CMakeLists.txt).
#pragma once

#include "nibble/kernels/table.hpp"

namespace nibble::kernels {
const KernelTable& table_scalar();
#if defined(NIBBLE_BUILT_AVX2)
const KernelTable& table_avx2();
#endif
#if defined(NIBBLE_BUILT_AVXVNNI)
const KernelTable& table_avxvnni();
#endif
#if defined(NIBBLE_BUILT_AVX512)
const KernelTable& table_avx512();
#endif
#if defined(NIBBLE_BUILT_AVX512VNNI)
const KernelTable& table_avx512vnni();
#endif
#if defined(NIBBLE_BUILT_NEON)
const KernelTable& table_neon();
#endif
#if defined(NIBBLE_BUILT_NEONDOT)
const KernelTable& table_neondot();
#endif
}  // namespace nibble::kernels
