// f16_avx2, i8_avx2, i4_avx2: the low-precision sets for x86-64 with AVX2,
// FMA and F16C (Haswell, Zen and later; every AVX2 CPU has F16C). This
// translation unit alone is compiled with those flags (runtime/
// CMakeLists.txt) and entered only through its accessors, which
// kernels/registry.cpp calls after checking the CPU. Integer products with
// vpmaddubsw + vpmaddwd (ops_x86.h, FERRY_QDOT 0).
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "kernels/quant/quant.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <string.h>

#include "kernels/reference/reference.h"

namespace ferry {
namespace kernels {

// The f32 set's entry points (simd/avx2.cpp): updates and element-wise ops.
namespace avx2 {
#include "kernels/simd/entry_points.inl"
}  // namespace avx2

namespace quant_avx2 {

#define FERRY_QDOT 0
#define FERRY_LOWP_HAS_F16 1
#define FERRY_LOWP_ISA "avx2"
#define FERRY_LOWP_F32 avx2
#include "kernels/simd/vec_avx2.h"
#include "kernels/simd/math.inl"
#include "kernels/quant/ops_x86.h"
#include "kernels/quant/lowp_kernels.inl"
#include "kernels/quant/lowp_tables.inl"

}  // namespace quant_avx2

const KernelSet* f16_avx2_kernel_set() { return &quant_avx2::f16_kernel_set; }
const KernelSet* i8_avx2_kernel_set() { return &quant_avx2::i8_kernel_set; }
const KernelSet* i4_avx2_kernel_set() { return &quant_avx2::i4_kernel_set; }

}  // namespace kernels
}  // namespace ferry

#else

namespace ferry {
namespace kernels {
const KernelSet* f16_avx2_kernel_set() { return nullptr; }
const KernelSet* i8_avx2_kernel_set() { return nullptr; }
const KernelSet* i4_avx2_kernel_set() { return nullptr; }
}  // namespace kernels
}  // namespace ferry

#endif
