// The SIMD kernels for x86-64 with AVX2 + FMA (Haswell, Zen and later).
// This translation unit alone is compiled with -mavx2 -mfma (runtime/
// CMakeLists.txt); it is entered only through avx2_kernels(), which
// kernels_for_this_cpu() hands out after checking the CPU. It includes no
// header with inline functions shared with other translation units, so no
// AVX2 code can leak into a baseline caller through the linker.
#include "kernels/simd/simd.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

namespace ferry {
namespace simd {
namespace avx2 {

#include "kernels/simd/vec_avx2.h"
#include "kernels/simd/math.inl"
#include "kernels/simd/kernels.inl"

// XNNPACK-style names: op, dtype, tile, ISA.
void f32_gemm_panel8_6x16__avx2(const GemmArgs& a, size_t m0, size_t m1, uint32_t q0, uint32_t q1) {
  gemm_panel8(a, m0, m1, q0, q1);
}
void f32_lstm_step_1x16__avx2(const StepArgs& a, uint32_t p0, uint32_t p1) { lstm_step(a, p0, p1); }
void f32_gru_step_1x24__avx2(const StepArgs& a, uint32_t p0, uint32_t p1) { gru_step(a, p0, p1); }
void f32_rnn_step_1x64__avx2(const StepArgs& a, uint32_t p0, uint32_t p1) { rnn_step(a, p0, p1); }
void f32_lstm_update_x8__avx2(const UpdateArgs& a, uint32_t p0, uint32_t p1) { lstm_update(a, p0, p1); }
void f32_gru_update_x8__avx2(const UpdateArgs& a, uint32_t p0, uint32_t p1) { gru_update(a, p0, p1); }
void f32_rnn_update_x8__avx2(const UpdateArgs& a, uint32_t p0, uint32_t p1) { rnn_update(a, p0, p1); }
void f32_vtanh_x8__avx2(float* x, size_t n) { tanh_inplace(x, n); }
void f32_vsigmoid_x8__avx2(float* x, size_t n) { sigmoid_inplace(x, n); }
void f32_vrelu_x8__avx2(float* x, size_t n) { relu_inplace(x, n); }

}  // namespace avx2

const Kernels* avx2_kernels() {
  static const Kernels table = {
      "avx2",
      {2, 3, 8},
      avx2::f32_gemm_panel8_6x16__avx2,
      avx2::f32_lstm_step_1x16__avx2,
      avx2::f32_gru_step_1x24__avx2,
      avx2::f32_rnn_step_1x64__avx2,
      avx2::f32_lstm_update_x8__avx2,
      avx2::f32_gru_update_x8__avx2,
      avx2::f32_rnn_update_x8__avx2,
      avx2::f32_vtanh_x8__avx2,
      avx2::f32_vsigmoid_x8__avx2,
      avx2::f32_vrelu_x8__avx2,
  };
  return &table;
}

}  // namespace simd
}  // namespace ferry

#else

namespace ferry {
namespace simd {
const Kernels* avx2_kernels() { return nullptr; }
}  // namespace simd
}  // namespace ferry

#endif
