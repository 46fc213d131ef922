// i8_neondot, i4_neondot: the NEON low-precision kernels with the integer
// products on sdot (the Armv8.2 dot-product extension: Cortex-A55/A76 and
// later, Apple M1, Neoverse; ops_neon.h, FERRY_QDOT_SDOT 1). Same integer
// sums, hence the same bits as i8_neon / i4_neon. AArch64 only; this file
// alone is compiled with +dotprod and is chosen only where the kernel
// reports HWCAP_ASIMDDP (kernels/registry.cpp).
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "kernels/quant/quant.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)

#include <arm_neon.h>
#include <string.h>

#include "kernels/reference/reference.h"

namespace ferry {
namespace kernels {

namespace neon {
#include "kernels/simd/entry_points.inl"
}  // namespace neon

namespace quant_neondot {

#define FERRY_QDOT_SDOT 1
#define FERRY_LOWP_HAS_F16 0
#define FERRY_LOWP_ISA "neondot"
#define FERRY_LOWP_F32 neon
#include "kernels/simd/vec_neon.h"
#include "kernels/simd/math.inl"
#include "kernels/quant/ops_neon.h"
#include "kernels/quant/lowp_kernels.inl"
#include "kernels/quant/lowp_tables.inl"

}  // namespace quant_neondot

const KernelSet* i8_neondot_kernel_set() { return &quant_neondot::i8_kernel_set; }
const KernelSet* i4_neondot_kernel_set() { return &quant_neondot::i4_kernel_set; }

}  // namespace kernels
}  // namespace ferry

#else

namespace ferry {
namespace kernels {
const KernelSet* i8_neondot_kernel_set() { return nullptr; }
const KernelSet* i4_neondot_kernel_set() { return nullptr; }
}  // namespace kernels
}  // namespace ferry

#endif
