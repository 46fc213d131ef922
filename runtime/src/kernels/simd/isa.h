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

// avx512.cpp: the batched LSTM update (KernelSet::update[0]) two panels of a
// row a zmm, bit for bit the AVX2 set's; the int8 AVX-512 VNNI set's update
// (x86_avx512vnni.cpp, compiled with the same flags). Only where
// f32_avx512_kernel_set() is non-null.
void lstm_update_avx512(const UpdateArgs& u, uint32_t p0, uint32_t p1);

}  // namespace kernels
}  // namespace ferry
