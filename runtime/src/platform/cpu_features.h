// x86 CPU features that not every compiler's __builtin_cpu_supports names
// (clang 14 knows neither "f16c" nor "avxvnni"), read from CPUID directly.
// The callers check AVX2 first with __builtin_cpu_supports, which also
// checks that the OS saves the YMM registers; these add the CPUID bit only.
//   F16C      CPUID.(EAX=1):ECX bit 29
//   AVX-VNNI  CPUID.(EAX=7, ECX=1):EAX bit 4
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace ferry {
namespace platform {

inline bool x86_has_f16c() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  return (c & (1u << 29)) != 0;
#else
  return false;
#endif
}

inline bool x86_has_avxvnni() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  if (a < 1) return false;  // no sub-leaf 1
  __cpuid_count(7, 1, a, b, c, d);
  return (a & (1u << 4)) != 0;
#else
  return false;
#endif
}

}  // namespace platform
}  // namespace ferry
