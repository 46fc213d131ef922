// Which kernel sets exist for a weight dtype, and which this CPU can run.
// The only place that knows the ISAs: backend/cpu/kernel_select.cpp asks it
// once per session init (never per call; nothing registers itself from a
// static initializer, which static firmware links drop).
#pragma once

#include <stddef.h>

#include "kernels/kernel_set.h"

namespace ferry {
namespace kernels {

// The reference set for `dtype` (null if none: the dtype cannot run). The
// quantized ones (f16, i8, i4) are null in a build with
// FERRY_QUANT_REFERENCE=OFF.
const KernelSet* reference_kernel_set(DType dtype);

// The ISA cap: FERRY_MAX_ISA in the environment, read once per process (the
// first time the registry is asked), caps the SIMD ISAs every call below
// may return, as if the CPU had no later one; the sets of other
// architectures are not affected. Values, per family slowest first:
//   x86   avx2 (AVX2 + FMA, + F16C for the quantized sets), avxvnni,
//         avx512 (AVX-512F), avx512vnni
//   Arm   neon, neondot
//   none  no SIMD set at all (every layer on the reference)
// Unset or empty: no cap. Any other value is ignored (no cap; `unknown` says
// so). For measuring one ISA's kernels on a machine that has a later one
// (FERRY_MAX_ISA=avx2 on an AVX-512 machine runs the sets an AVX2-only CPU
// would) and for tests; a deployment leaves it unset. Only hosted builds
// (Linux, macOS) read it.
struct IsaCap {
  bool active = false;   // a cap is in force
  bool none = false;     // FERRY_MAX_ISA=none: no SIMD set
  bool unknown = false;  // a value that names no level: ignored
  uint8_t family = 0;    // of the named ISA (registry.cpp: IsaFamily)
  uint8_t level = 0;     // its level within the family
};

// The cap a value of FERRY_MAX_ISA sets (null or empty: none).
IsaCap parse_isa_cap(const char* value);

// The cap in force in this process.
IsaCap simd_isa_cap();

// The SIMD sets for `dtype` this build has, this CPU runs and `cap` allows,
// slowest ISA first (runnable_simd_kernel_sets with a given cap: tests).
size_t simd_kernel_sets_under(const IsaCap& cap, DType dtype, const KernelSet** out, size_t capacity);

// The fastest SIMD set for `dtype` that this CPU can run, or null (no SIMD
// set built for this architecture, or the CPU lacks the ISA: an x86-64
// without AVX2+FMA, or without F16C for the quantized sets; an ARMv7 without
// VFPv4 for the quantized sets; or the cap allows none). Cheap: the CPU is
// probed once per process by libgcc or read from the auxiliary vector.
const KernelSet* best_simd_kernel_set(DType dtype);

// Every SIMD set for `dtype` this build has and this CPU can run, slowest
// ISA first (the kernel-set test runs each against the reference, AVX2 too
// on an AVX-512 machine). Returns how many were written to `out`. This and
// best_simd_kernel_set see only the sets the process's cap allows.
size_t runnable_simd_kernel_sets(DType dtype, const KernelSet** out, size_t capacity);

}  // namespace kernels
}  // namespace ferry
