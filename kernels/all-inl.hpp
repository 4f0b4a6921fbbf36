// nibble: every kernel body; fill_table<Tag>() builds the table of one ISA. Included by each
// per-ISA TU (src/isa/*.cpp), which is compiled with that ISA's flags.
#pragma once

#include "nibble/kernels/act-inl.hpp"
#include "nibble/kernels/act_q8_1-inl.hpp"
#include "nibble/kernels/f16-inl.hpp"
#include "nibble/kernels/f32-inl.hpp"
#include "nibble/kernels/legacy-inl.hpp"
#include "nibble/kernels/detail/packed-inl.hpp"
#include "nibble/kernels/nf4-inl.hpp"
#include "nibble/kernels/q4_k-inl.hpp"
#include "nibble/kernels/q5_k-inl.hpp"
#include "nibble/kernels/q6_k-inl.hpp"
#include "nibble/kernels/q8_0-inl.hpp"
#include "nibble/kernels/quantize-inl.hpp"
#include "nibble/kernels/w8a8-inl.hpp"

namespace nibble::kernels {
namespace {

template <class Tag>
KernelTable make_table() {
  KernelTable t;
  t.isa = Tag::isa;
  register_act<Tag>(t);
  register_act_q8_1<Tag>(t);
  register_f32<Tag>(t);
  register_f16<Tag>(t);
  register_q8_0<Tag>(t);
  register_nf4<Tag>(t);
  register_q4_k<Tag>(t);
  register_q5_k<Tag>(t);
  register_q6_k<Tag>(t);
  register_legacy<Tag>(t);
  register_quantizers<Tag>(t);
  register_w8a8<Tag>(t);
  register_packed<Tag>(t);
  return t;
}

}  // namespace
}  // namespace nibble::kernels
