// The SIMD kernels for Arm NEON: AArch64 always, ARMv7 when compiled with
// NEON (-mfpu=neon*). Same templates as avx2.cpp, on a pair of 4-lane
// registers per 8-lane vector.
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "kernels/simd/isa.h"

#if defined(__ARM_NEON) || defined(__ARM_NEON__)

#include <arm_neon.h>

#include "kernels/reference/reference.h"

#include <type_traits>

namespace ferry {
namespace kernels {
namespace neon {

#define FERRY_KERNEL_SET_NAME "f32_neon"
#include "kernels/simd/vec_neon.h"
#include "kernels/simd/math.inl"
#include "kernels/simd/kernels.inl"
#include "kernels/simd/table.inl"

}  // namespace neon

const KernelSet* f32_neon_kernel_set() { return &neon::f32_kernel_set; }

}  // namespace kernels
}  // namespace ferry

#else

namespace ferry {
namespace kernels {
const KernelSet* f32_neon_kernel_set() { return nullptr; }
}  // namespace kernels
}  // namespace ferry

#endif
