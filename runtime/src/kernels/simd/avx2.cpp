// The SIMD kernels for x86-64 with AVX2 + FMA (Haswell, Zen and later): the
// shared kernels (kernels.inl) and the batched LSTM and GRU steps written
// for 16 vector registers (batch_step.inl).
// This translation unit alone is compiled with -mavx2 -mfma (runtime/
// CMakeLists.txt); it is entered only through f32_avx2_kernel_set(), which
// kernels/registry.cpp hands out after checking the CPU. It includes no
// header with inline functions shared with other translation units, so no
// AVX2 code can leak into a baseline caller through the linker.
#include "common/build_flags.h"  // first: the flags the numbers depend on
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
#include "kernels/simd/batch_step.inl"
#define FERRY_SET_LSTM_BATCH_STEP lstm_batch_step
#define FERRY_SET_GRU_BATCH_STEP gru_batch_step
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
