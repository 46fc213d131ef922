#include "kernels/registry.h"

#include "kernels/quant/quant.h"
#include "kernels/reference/reference.h"
#include "kernels/simd/isa.h"
#include "platform/cpu_features.h"

#if (defined(__arm__) || defined(__aarch64__)) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace ferry {
namespace kernels {
namespace {

#if defined(__arm__) && defined(__linux__)
constexpr unsigned long kHwcapNeon = 1ul << 12;   // HWCAP_NEON (asm/hwcap.h)
constexpr unsigned long kHwcapVfpv4 = 1ul << 16;  // HWCAP_VFPv4: vfma (the quantized sets' fused fma)
#endif
#if defined(__aarch64__) && defined(__linux__)
constexpr unsigned long kHwcapAsimdDp = 1ul << 20;  // HWCAP_ASIMDDP (asm/hwcap.h): sdot, udot
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

// The quantized x86 sets also convert halves (f16 weights, int4 group
// scales) with F16C, which every AVX2 CPU has; checked all the same.
bool avx2_f16c_runs_here() {
#if defined(__x86_64__) || defined(__i386__)
  return avx2_runs_here() && platform::x86_has_f16c();
#else
  return false;
#endif
}

bool avxvnni_runs_here() {
#if defined(__x86_64__) || defined(__i386__)
  return avx2_f16c_runs_here() && platform::x86_has_avxvnni();
#else
  return false;
#endif
}

bool avx512vnni_runs_here() {
#if defined(__x86_64__) || defined(__i386__)
  return avx2_f16c_runs_here() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// The quantized NEON sets: ARMv7 also needs VFPv4's fused multiply-add.
bool neon_quant_runs_here() {
#if defined(__arm__) && defined(__linux__)
  const unsigned long hwcap = getauxval(AT_HWCAP);
  return (hwcap & kHwcapNeon) != 0 && (hwcap & kHwcapVfpv4) != 0;
#else
  return neon_runs_here();
#endif
}

bool neondot_runs_here() {
#if defined(__aarch64__) && defined(__linux__)
  return (getauxval(AT_HWCAP) & kHwcapAsimdDp) != 0;
#elif defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
  return true;  // bare metal or another OS: the build's choice
#else
  return false;
#endif
}

const KernelSet* avx2_set(DType dtype) { return dtype == DType::kF32 ? f32_avx2_kernel_set() : nullptr; }
const KernelSet* avx512_set(DType dtype) { return dtype == DType::kF32 ? f32_avx512_kernel_set() : nullptr; }
const KernelSet* neon_set(DType dtype) { return dtype == DType::kF32 ? f32_neon_kernel_set() : nullptr; }

const KernelSet* avx2_quant_set(DType dtype) {
  switch (dtype) {
    case DType::kF16: return f16_avx2_kernel_set();
    case DType::kI8: return i8_avx2_kernel_set();
    case DType::kI4: return i4_avx2_kernel_set();
    default: return nullptr;
  }
}
const KernelSet* avxvnni_set(DType dtype) {
  return dtype == DType::kI8 ? i8_avxvnni_kernel_set() : dtype == DType::kI4 ? i4_avxvnni_kernel_set() : nullptr;
}
const KernelSet* avx512vnni_set(DType dtype) {
  return dtype == DType::kI8 ? i8_avx512vnni_kernel_set() : dtype == DType::kI4 ? i4_avx512vnni_kernel_set() : nullptr;
}
const KernelSet* neon_quant_set(DType dtype) {
  switch (dtype) {
    case DType::kF16: return f16_neon_kernel_set();
    case DType::kI8: return i8_neon_kernel_set();
    case DType::kI4: return i4_neon_kernel_set();
    default: return nullptr;
  }
}
const KernelSet* neondot_set(DType dtype) {
  return dtype == DType::kI8 ? i8_neondot_kernel_set() : dtype == DType::kI4 ? i4_neondot_kernel_set() : nullptr;
}

// Per dtype the order is slowest first: f32 avx2 < avx512; i8/i4 avx2 <
// avxvnni < avx512vnni; neon < neondot.
const Isa kIsas[] = {
    {avx2_runs_here, avx2_set},
    {avx2_f16c_runs_here, avx2_quant_set},
    {avx512_runs_here, avx512_set},
    {avxvnni_runs_here, avxvnni_set},
    {avx512vnni_runs_here, avx512vnni_set},
    {neon_runs_here, neon_set},
    {neon_quant_runs_here, neon_quant_set},
    {neondot_runs_here, neondot_set},
};

}  // namespace

const KernelSet* reference_kernel_set(DType dtype) {
  switch (dtype) {
    case DType::kF32: return f32_reference_kernel_set();
    case DType::kF16: return f16_reference_kernel_set();  // these three are null when built with
    case DType::kI8: return i8_reference_kernel_set();    // FERRY_QUANT_REFERENCE=OFF
    case DType::kI4: return i4_reference_kernel_set();
  }
  return nullptr;
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
