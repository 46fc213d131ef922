// The quantized kernel sets (f16, i8, i4) of this build, one accessor per
// (dtype, ISA), as simd/isa.h has for f32. The formats are
// shared/weight_layout.h's; the contract (activation quantization, the fp32
// formulas, what every entry does) is kernels/kernel_set.h's, "quantized
// sets". Each ISA's sets live in one translation unit compiled with that
// ISA's flags (runtime/CMakeLists.txt) and return null where the build does
// not target the ISA; only kernels/registry.cpp calls them, after checking
// the CPU.
//
//   reference_quant.cpp  f16/i8/i4_reference   portable C++ (null when built
//                                               with FERRY_QUANT_REFERENCE=OFF)
//   x86_avx2.cpp         f16/i8/i4_avx2        AVX2 + FMA + F16C
//   x86_avxvnni.cpp      i8/i4_avxvnni         + AVX-VNNI (VEX vpdpbusd)
//   x86_avx512vnni.cpp   i8/i4_avx512vnni      + AVX-512 F/BW/VL/VNNI
//   arm_neon.cpp         f16/i8/i4_neon        NEON (AArch64; ARMv7 with VFPv4)
//   arm_neondot.cpp      i8/i4_neondot         AArch64 + dot product (sdot)
//
// The SIMD sets are one source, lowp_kernels.inl, written over the 8-lane
// float `Vec` of simd/vec_<isa>.h and the integer primitives of
// ops_<isa>.h, compiled once per ISA; lowp_tables.inl makes the tables.
#pragma once

#include "kernels/kernel_set.h"

namespace ferry {
namespace kernels {

const KernelSet* f16_reference_kernel_set();
const KernelSet* i8_reference_kernel_set();
const KernelSet* i4_reference_kernel_set();

const KernelSet* f16_avx2_kernel_set();
const KernelSet* i8_avx2_kernel_set();
const KernelSet* i4_avx2_kernel_set();
const KernelSet* i8_avxvnni_kernel_set();
const KernelSet* i4_avxvnni_kernel_set();
const KernelSet* i8_avx512vnni_kernel_set();
const KernelSet* i4_avx512vnni_kernel_set();

const KernelSet* f16_neon_kernel_set();
const KernelSet* i8_neon_kernel_set();
const KernelSet* i4_neon_kernel_set();
const KernelSet* i8_neondot_kernel_set();
const KernelSet* i4_neondot_kernel_set();

}  // namespace kernels
}  // namespace ferry
