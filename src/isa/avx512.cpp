// nibble: kernel instantiations for the avx512 ISA (compiled with its own flags; see CMakeLists.txt).
// Placeholder until the kernel tables land.
