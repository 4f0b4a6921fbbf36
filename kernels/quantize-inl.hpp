// nibble: quantize kernels, templated on an ISA tag from arch.hpp (placeholder: nothing registered yet).
// Included only by the per-ISA TUs in src/isa/, inside an anonymous namespace (see arch.hpp).
#pragma once

#include "nibble/kernels/arch.hpp"
#include "nibble/kernels/table.hpp"

namespace nibble::kernels {
namespace {

template <class Tag>
void register_quantizers(KernelTable& /*t*/) {}

}  // namespace
}  // namespace nibble::kernels
