// The SIMD kernels for Arm NEON: AArch64 always, ARMv7 when compiled with
// NEON (-mfpu=neon*). Same templates as avx2.cpp, on a pair of 4-lane
// registers per 8-lane vector.
#include "kernels/simd/simd.h"

#if defined(__ARM_NEON) || defined(__ARM_NEON__)

#include <arm_neon.h>

namespace ferry {
namespace simd {
namespace neon {

#include "kernels/simd/vec_neon.h"
#include "kernels/simd/math.inl"
#include "kernels/simd/kernels.inl"

void f32_gemm_panel8_6x16__neon(const GemmArgs& a, size_t m0, size_t m1, uint32_t q0, uint32_t q1) {
  gemm_panel8(a, m0, m1, q0, q1);
}
void f32_lstm_step_1x16__neon(const StepArgs& a, uint32_t p0, uint32_t p1) { lstm_step(a, p0, p1); }
void f32_gru_step_1x24__neon(const StepArgs& a, uint32_t p0, uint32_t p1) { gru_step(a, p0, p1); }
void f32_rnn_step_1x64__neon(const StepArgs& a, uint32_t p0, uint32_t p1) { rnn_step(a, p0, p1); }
void f32_lstm_update_x8__neon(const UpdateArgs& a, uint32_t p0, uint32_t p1) { lstm_update(a, p0, p1); }
void f32_gru_update_x8__neon(const UpdateArgs& a, uint32_t p0, uint32_t p1) { gru_update(a, p0, p1); }
void f32_rnn_update_x8__neon(const UpdateArgs& a, uint32_t p0, uint32_t p1) { rnn_update(a, p0, p1); }
void f32_vtanh_x8__neon(float* x, size_t n) { tanh_inplace(x, n); }
void f32_vsigmoid_x8__neon(float* x, size_t n) { sigmoid_inplace(x, n); }
void f32_vrelu_x8__neon(float* x, size_t n) { relu_inplace(x, n); }

}  // namespace neon

const Kernels* neon_kernels() {
  static const Kernels table = {
      "neon",
      {2, 3, 8},
      neon::f32_gemm_panel8_6x16__neon,
      neon::f32_lstm_step_1x16__neon,
      neon::f32_gru_step_1x24__neon,
      neon::f32_rnn_step_1x64__neon,
      neon::f32_lstm_update_x8__neon,
      neon::f32_gru_update_x8__neon,
      neon::f32_rnn_update_x8__neon,
      neon::f32_vtanh_x8__neon,
      neon::f32_vsigmoid_x8__neon,
      neon::f32_vrelu_x8__neon,
  };
  return &table;
}

}  // namespace simd
}  // namespace ferry

#else

namespace ferry {
namespace simd {
const Kernels* neon_kernels() { return nullptr; }
}  // namespace simd
}  // namespace ferry

#endif
