// nibble: kernel instantiations for the neon ISA (compiled with its own flags; see CMakeLists.txt).
// Placeholder until the kernel tables land.
