// nibble: Q4_K kernels (dequant, gemm against Q8_K activations), templated on an ISA tag from
// arch.hpp. The bodies live in detail/kquant-inl.hpp (shared with Q5_K).
// Included only by the per-ISA TUs in src/isa/, inside an anonymous namespace (see arch.hpp).
#pragma once

#include "nibble/kernels/arch.hpp"
#include "nibble/kernels/detail/kquant-inl.hpp"
#include "nibble/kernels/table.hpp"

namespace nibble::kernels {
namespace {

/// Fills t.fmt[q4_K]: dequant (bit-identical on every ISA) and gemm.
template <class Tag>
void register_q4_k(KernelTable& t) {
  kq::register_q45<Tag, false>(t.fmt[static_cast<int>(Format::q4_K)]);
}

}  // namespace
}  // namespace nibble::kernels
