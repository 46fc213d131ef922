// 8-lane float vector on AVX2 + FMA: one __m256. Included only by avx2.cpp
// and avx512.cpp, which are compiled with (at least) -mavx2 -mfma;
// everything here is inline in that translation unit's namespace.
#pragma once

// (avx2.cpp includes <immintrin.h> before this header.)

#define FERRY_VEC_INLINE static inline __attribute__((always_inline))

struct Vec {
  __m256 v;
};

FERRY_VEC_INLINE Vec vzero() { return {_mm256_setzero_ps()}; }
FERRY_VEC_INLINE Vec vset1(float x) { return {_mm256_set1_ps(x)}; }
FERRY_VEC_INLINE Vec vbroadcast(const float* p) { return {_mm256_broadcast_ss(p)}; }
FERRY_VEC_INLINE Vec vload(const float* p) { return {_mm256_loadu_ps(p)}; }
FERRY_VEC_INLINE void vstore(float* p, Vec a) { _mm256_storeu_ps(p, a.v); }
// a * b + c, fused (one rounding).
FERRY_VEC_INLINE Vec vfma(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
FERRY_VEC_INLINE Vec vadd(Vec a, Vec b) { return {_mm256_add_ps(a.v, b.v)}; }
FERRY_VEC_INLINE Vec vsub(Vec a, Vec b) { return {_mm256_sub_ps(a.v, b.v)}; }
FERRY_VEC_INLINE Vec vmul(Vec a, Vec b) { return {_mm256_mul_ps(a.v, b.v)}; }
// max(a, b) as x86 computes it: b when either is NaN. Callers put the
// constant first so that a NaN input comes out as NaN (and -0 from 0, -0).
FERRY_VEC_INLINE Vec vmax(Vec a, Vec b) { return {_mm256_max_ps(a.v, b.v)}; }
// min(a, b), likewise b when either is NaN.
FERRY_VEC_INLINE Vec vmin(Vec a, Vec b) { return {_mm256_min_ps(a.v, b.v)}; }
FERRY_VEC_INLINE Vec vneg(Vec x) { return {_mm256_xor_ps(x.v, _mm256_set1_ps(-0.0f))}; }
// 2^n from the low bits of a float that holds (magic + n + 127) (see
// vsigmoid in math.inl).
FERRY_VEC_INLINE Vec vexp2_from_magic(Vec nb) {
  return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(nb.v), 23))};
}
// 1 / d for normal d below 2^126, to ~2^-22 relative: estimate + one Newton
// step.
FERRY_VEC_INLINE Vec vrecip(Vec d) {
  const __m256 r = _mm256_rcp_ps(d.v);
  const __m256 e = _mm256_fnmadd_ps(d.v, r, _mm256_set1_ps(1.0f));  // 1 - d*r
  return {_mm256_fmadd_ps(e, r, r)};
}
// Lanes where x > 0 (false for NaN) take a, the others b.
FERRY_VEC_INLINE Vec vselect_positive(Vec x, Vec a, Vec b) {
  const __m256 positive = _mm256_cmp_ps(x.v, _mm256_setzero_ps(), _CMP_GT_OQ);
  return {_mm256_blendv_ps(b.v, a.v, positive)};
}
