// The SIMD kernel sets compiled into this build, one accessor per (dtype,
// ISA). Each lives in its own translation unit, compiled with that ISA's
// flags, and returns null where the build does not target the ISA. Only
// kernels/registry.cpp calls them, after checking the CPU can run the set.
#pragma once

#include "kernels/kernel_set.h"

namespace ferry {
namespace kernels {

const KernelSet* f32_avx2_kernel_set();    // avx2.cpp
const KernelSet* f32_avx512_kernel_set();  // avx512.cpp: f32_avx2 with AVX-512 GEMM and LSTM step
const KernelSet* f32_neon_kernel_set();    // neon.cpp

}  // namespace kernels
}  // namespace ferry
