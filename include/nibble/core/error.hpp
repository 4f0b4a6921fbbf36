// nibble: the one exception type of the library.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace nibble {

/// Thrown by every checked entry point of nibble on bad input (wrong sizes, null pointers,
/// non-finite values, malformed files, unsupported ISA requests). The message names the
/// argument, the value seen and what was expected.
struct Error : std::runtime_error {
  explicit Error(const std::string& what) : std::runtime_error("nibble: " + what) {}
};

namespace detail {
/// Builds an Error message from any streamable pieces: fail("cols = ", c, " is not ...").
template <class... Args>
[[noreturn]] inline void fail(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  throw Error(os.str());
}
}  // namespace detail

}  // namespace nibble
