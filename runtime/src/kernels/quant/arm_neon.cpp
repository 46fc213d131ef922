// f16_neon, i8_neon, i4_neon: the low-precision sets for Arm NEON without
// the dot-product extension (Cortex-A53/A72, Raspberry Pi 3/4): integer
// products with widening multiplies (smull + sadalp, ops_neon.h,
// FERRY_QDOT_SDOT 0). AArch64 always; ARMv7 when this file is built with
// NEON and VFPv4 (-mfpu=neon-vfpv4: the contract's fused fma), checked at run
// time by kernels/registry.cpp. f16 is AArch64 only: ARMv7 NEON flushes
// subnormal halves to zero, which the f16 contract (exact conversion)
// does not allow, so there f16 runs on f16_reference.
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "kernels/quant/quant.h"

#if (defined(__ARM_NEON) || defined(__ARM_NEON__)) && (defined(__aarch64__) || defined(__ARM_FEATURE_FMA))

#include <arm_neon.h>
#include <string.h>

#include "kernels/reference/reference.h"

namespace ferry {
namespace kernels {

// The f32 set's entry points (simd/neon.cpp): updates and element-wise ops.
namespace neon {
#include "kernels/simd/entry_points.inl"
}  // namespace neon

namespace quant_neon {

#define FERRY_QDOT_SDOT 0
#if defined(__aarch64__)
#define FERRY_LOWP_HAS_F16 1
#else
#define FERRY_LOWP_HAS_F16 0
#endif
#define FERRY_LOWP_ISA "neon"
#define FERRY_LOWP_F32 neon
#include "kernels/simd/vec_neon.h"
#include "kernels/simd/math.inl"
#include "kernels/quant/ops_neon.h"
#include "kernels/quant/lowp_kernels.inl"
#include "kernels/quant/lowp_tables.inl"

}  // namespace quant_neon

#if FERRY_LOWP_HAS_F16
const KernelSet* f16_neon_kernel_set() { return &quant_neon::f16_kernel_set; }
#else
const KernelSet* f16_neon_kernel_set() { return nullptr; }
#endif
const KernelSet* i8_neon_kernel_set() { return &quant_neon::i8_kernel_set; }
const KernelSet* i4_neon_kernel_set() { return &quant_neon::i4_kernel_set; }

}  // namespace kernels
}  // namespace ferry

#else

namespace ferry {
namespace kernels {
const KernelSet* f16_neon_kernel_set() { return nullptr; }
const KernelSet* i8_neon_kernel_set() { return nullptr; }
const KernelSet* i4_neon_kernel_set() { return nullptr; }
}  // namespace kernels
}  // namespace ferry

#endif
