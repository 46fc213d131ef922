// The SIMD kernels for x86-64 with AVX2 + FMA (Haswell, Zen and later).
// This translation unit alone is compiled with -mavx2 -mfma (runtime/
// CMakeLists.txt); it is entered only through f32_avx2_kernel_set(), which
// kernels/registry.cpp hands out after checking the CPU. It includes no
// header with inline functions shared with other translation units, so no
// AVX2 code can leak into a baseline caller through the linker.
#include "kernels/simd/isa.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

#include "kernels/reference/reference.h"

#include <type_traits>

namespace ferry {
namespace kernels {
namespace avx2 {

#define FERRY_KERNEL_SET_NAME "f32_avx2"
#include "kernels/simd/vec_avx2.h"
#include "kernels/simd/math.inl"
#include "kernels/simd/kernels.inl"
#include "kernels/simd/table.inl"

}  // namespace avx2

const KernelSet* f32_avx2_kernel_set() { return &avx2::f32_kernel_set; }

}  // namespace kernels
}  // namespace ferry

#else

namespace ferry {
namespace kernels {
const KernelSet* f32_avx2_kernel_set() { return nullptr; }
}  // namespace kernels
}  // namespace ferry

#endif
