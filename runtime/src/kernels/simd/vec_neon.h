// 8-lane float vector on NEON: two float32x4_t. Included only by neon.cpp.
// AArch64 has a fused multiply-add (vfmaq_f32); ARMv7 NEON does not (vmlaq_f32
// rounds twice), which keeps every kernel's result consistent within one
// build, as the numeric contract in kernels/kernel_set.h asks.
#pragma once

// (neon.cpp includes <arm_neon.h> before this header.)

#define FERRY_VEC_INLINE static inline __attribute__((always_inline))

struct Vec {
  float32x4_t lo, hi;
};

#if defined(__aarch64__)
FERRY_VEC_INLINE float32x4_t fma4(float32x4_t a, float32x4_t b, float32x4_t c) { return vfmaq_f32(c, a, b); }
#else
FERRY_VEC_INLINE float32x4_t fma4(float32x4_t a, float32x4_t b, float32x4_t c) { return vmlaq_f32(c, a, b); }
#endif

FERRY_VEC_INLINE Vec vzero() { return {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
FERRY_VEC_INLINE Vec vset1(float x) { return {vdupq_n_f32(x), vdupq_n_f32(x)}; }
FERRY_VEC_INLINE Vec vbroadcast(const float* p) {
  const float32x4_t v = vld1q_dup_f32(p);
  return {v, v};
}
FERRY_VEC_INLINE Vec vload(const float* p) { return {vld1q_f32(p), vld1q_f32(p + 4)}; }
FERRY_VEC_INLINE void vstore(float* p, Vec a) {
  vst1q_f32(p, a.lo);
  vst1q_f32(p + 4, a.hi);
}
FERRY_VEC_INLINE Vec vfma(Vec a, Vec b, Vec c) { return {fma4(a.lo, b.lo, c.lo), fma4(a.hi, b.hi, c.hi)}; }
FERRY_VEC_INLINE Vec vadd(Vec a, Vec b) { return {vaddq_f32(a.lo, b.lo), vaddq_f32(a.hi, b.hi)}; }
FERRY_VEC_INLINE Vec vsub(Vec a, Vec b) { return {vsubq_f32(a.lo, b.lo), vsubq_f32(a.hi, b.hi)}; }
FERRY_VEC_INLINE Vec vmul(Vec a, Vec b) { return {vmulq_f32(a.lo, b.lo), vmulq_f32(a.hi, b.hi)}; }
// NEON's max returns NaN when either operand is NaN.
FERRY_VEC_INLINE Vec vmax(Vec a, Vec b) { return {vmaxq_f32(a.lo, b.lo), vmaxq_f32(a.hi, b.hi)}; }
FERRY_VEC_INLINE Vec vmin(Vec a, Vec b) { return {vminq_f32(a.lo, b.lo), vminq_f32(a.hi, b.hi)}; }
FERRY_VEC_INLINE Vec vneg(Vec x) { return {vnegq_f32(x.lo), vnegq_f32(x.hi)}; }
FERRY_VEC_INLINE Vec vexp2_from_magic(Vec nb) {
  return {vreinterpretq_f32_s32(vshlq_n_s32(vreinterpretq_s32_f32(nb.lo), 23)),
          vreinterpretq_f32_s32(vshlq_n_s32(vreinterpretq_s32_f32(nb.hi), 23))};
}
// 1 / d for normal d below 2^126: estimate (8 bits) + two Newton steps
// (~2^-22).
FERRY_VEC_INLINE float32x4_t recip4(float32x4_t d) {
  float32x4_t r = vrecpeq_f32(d);
  r = vmulq_f32(r, vrecpsq_f32(d, r));
  return vmulq_f32(r, vrecpsq_f32(d, r));
}
FERRY_VEC_INLINE Vec vrecip(Vec d) { return {recip4(d.lo), recip4(d.hi)}; }
// Lanes where x > 0 (false for NaN) take a, the others b.
FERRY_VEC_INLINE Vec vselect_positive(Vec x, Vec a, Vec b) {
  const float32x4_t zero = vdupq_n_f32(0.0f);
  return {vbslq_f32(vcgtq_f32(x.lo, zero), a.lo, b.lo), vbslq_f32(vcgtq_f32(x.hi, zero), a.hi, b.hi)};
}
