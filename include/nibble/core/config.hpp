// nibble: build configuration macros shared by every header.
#pragma once

// NIBBLE_INLINE marks the non-template inline functions of nibble's headers (fp16 conversion,
// reference codecs). In the per-ISA kernel translation units (compiled with -mavx2/-mavx512*/
// dotprod flags, which define NIBBLE_ISA_TU) they get internal linkage, so the linker can never
// pick a copy compiled with wider instructions for a caller in portable code (the classic ODR
// trap of per-file ISA flags). Everywhere else they are ordinary inline functions.
#if defined(NIBBLE_ISA_TU)
#define NIBBLE_INLINE static inline
#else
#define NIBBLE_INLINE inline
#endif
