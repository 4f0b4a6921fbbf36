// Test alias of the synthetic LLM-like layer generator (include/nibble/quant/synthetic.hpp).
#pragma once

#include "nibble/quant/synthetic.hpp"

namespace nibble_test = nibble::synthetic;
