#include "kernels/registry.h"

#include "kernels/reference/reference.h"
#include "kernels/simd/isa.h"

#if defined(__arm__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace ferry {
namespace kernels {
namespace {

#if defined(__arm__) && defined(__linux__)
constexpr unsigned long kHwcapNeon = 1ul << 12;  // HWCAP_NEON (asm/hwcap.h)
#endif

// The SIMD ISAs, slowest first; each with the CPU check and its sets per dtype.
struct Isa {
  bool (*runs_here)();
  const KernelSet* (*set_for)(DType dtype);
};

bool avx2_runs_here() {
#if defined(__x86_64__) || defined(__i386__)
  // __builtin_cpu_supports also checks that the OS saves the YMM/ZMM
  // registers (OSXSAVE / XCR0), not just the CPUID bits.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool avx512_runs_here() {
#if defined(__x86_64__) || defined(__i386__)
  return avx2_runs_here() && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

bool neon_runs_here() {
#if defined(__arm__) && defined(__linux__)
  // ARMv7: neon.cpp is compiled with -mfpu=neon; the CPU may still lack it.
  return (getauxval(AT_HWCAP) & kHwcapNeon) != 0;
#else
  // NEON is part of AArch64 (and, on bare-metal ARMv7, the build's choice);
  // where neon.cpp was not built its set is null anyway.
  return true;
#endif
}

const KernelSet* avx2_set(DType dtype) { return dtype == DType::kF32 ? f32_avx2_kernel_set() : nullptr; }
const KernelSet* avx512_set(DType dtype) { return dtype == DType::kF32 ? f32_avx512_kernel_set() : nullptr; }
const KernelSet* neon_set(DType dtype) { return dtype == DType::kF32 ? f32_neon_kernel_set() : nullptr; }

const Isa kIsas[] = {
    {avx2_runs_here, avx2_set},
    {avx512_runs_here, avx512_set},
    {neon_runs_here, neon_set},
};

}  // namespace

const KernelSet* reference_kernel_set(DType dtype) {
  return dtype == DType::kF32 ? f32_reference_kernel_set() : nullptr;
}

size_t runnable_simd_kernel_sets(DType dtype, const KernelSet** out, size_t capacity) {
  size_t n = 0;
  for (const Isa& isa : kIsas) {
    // The CPU first: an ISA's accessor is code compiled for that ISA.
    if (n >= capacity || !isa.runs_here()) continue;
    const KernelSet* set = isa.set_for(dtype);
    if (set) out[n++] = set;
  }
  return n;
}

const KernelSet* best_simd_kernel_set(DType dtype) {
  const KernelSet* sets[sizeof(kIsas) / sizeof(kIsas[0])];
  const size_t n = runnable_simd_kernel_sets(dtype, sets, sizeof(kIsas) / sizeof(kIsas[0]));
  return n ? sets[n - 1] : nullptr;
}

}  // namespace kernels
}  // namespace ferry
