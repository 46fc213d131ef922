// Picks the SIMD table for this CPU at session init (never from a static
// initializer, which static firmware links drop).
#include "kernels/simd/simd.h"

#if defined(__arm__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace ferry {
namespace simd {

#if defined(__arm__) && defined(__linux__)
constexpr unsigned long kHwcapNeon = 1ul << 12;  // HWCAP_NEON (asm/hwcap.h)
#endif

const Kernels* kernels_for_this_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  // Cheap (libgcc reads CPUID once); called at session init only.
  // __builtin_cpu_supports also checks that the OS saves the YMM registers
  // (OSXSAVE / XCR0), not just the CPUID bits.
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return nullptr;
  if (__builtin_cpu_supports("avx512f") && avx512_kernels()) return avx512_kernels();
  return avx2_kernels();
#elif defined(__arm__) && defined(__linux__)
  // ARMv7: neon.cpp is compiled with -mfpu=neon; the CPU may still lack it.
  return (getauxval(AT_HWCAP) & kHwcapNeon) ? neon_kernels() : nullptr;
#else
  // NEON is part of AArch64 (and, on bare-metal ARMv7, the build's choice).
  return neon_kernels();
#endif
}

}  // namespace simd
}  // namespace ferry
