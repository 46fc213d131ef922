// Which kernel sets exist for a weight dtype, and which this CPU can run.
// The only place that knows the ISAs: backend/cpu/kernel_select.cpp asks it
// once per session init (never per call; nothing registers itself from a
// static initializer, which static firmware links drop).
#pragma once

#include <stddef.h>

#include "kernels/kernel_set.h"

namespace ferry {
namespace kernels {

// The reference set for `dtype` (null if none: the dtype cannot run).
const KernelSet* reference_kernel_set(DType dtype);

// The fastest SIMD set for `dtype` that this CPU can run, or null (no SIMD
// set built for this architecture, or the CPU lacks the ISA: an x86-64
// without AVX2+FMA). Cheap: the CPU is probed once per process by libgcc.
const KernelSet* best_simd_kernel_set(DType dtype);

// Every SIMD set for `dtype` this build has and this CPU can run, slowest
// ISA first (the kernel-set test runs each against the reference, AVX2 too
// on an AVX-512 machine). Returns how many were written to `out`.
size_t runnable_simd_kernel_sets(DType dtype, const KernelSet** out, size_t capacity);

}  // namespace kernels
}  // namespace ferry
