// 16-lane float vector on AVX-512F: one __m512, with the operations that
// activations.inl needs (the nonlinearities), each lane the same operation
// as vec_avx2.h's: avx512.cpp runs the LSTM updates of two panel vectors at
// once with it (Intel cores with two 512-bit FMA pipes do a zmm operation
// in the time of a ymm one). Included only by avx512.cpp, inside a
// namespace of its own (so that its Vec and vec_avx2.h's do not meet).
#pragma once

// (avx512.cpp includes <immintrin.h> and vec_avx2.h, which defines
// FERRY_VEC_INLINE, before this header.)

struct Vec {
  __m512 v;
};

FERRY_VEC_INLINE Vec vzero() { return {_mm512_setzero_ps()}; }
FERRY_VEC_INLINE Vec vset1(float x) { return {_mm512_set1_ps(x)}; }
FERRY_VEC_INLINE Vec vfma(Vec a, Vec b, Vec c) {
  return {_mm512_fmadd_ps(a.v, b.v, c.v)};
}
FERRY_VEC_INLINE Vec vsub(Vec a, Vec b) { return {_mm512_sub_ps(a.v, b.v)}; }
FERRY_VEC_INLINE Vec vmul(Vec a, Vec b) { return {_mm512_mul_ps(a.v, b.v)}; }
// max / min as x86 computes them (b when either is NaN), as vec_avx2.h's.
FERRY_VEC_INLINE Vec vmax(Vec a, Vec b) { return {_mm512_max_ps(a.v, b.v)}; }
FERRY_VEC_INLINE Vec vmin(Vec a, Vec b) { return {_mm512_min_ps(a.v, b.v)}; }
FERRY_VEC_INLINE Vec vexp2_from_magic(Vec nb) {
  return {
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(nb.v), 23))};
}
// vec_avx2.h's 1 / d: the estimate is the 256-bit rcpps on each half (the
// 512-bit rcp14 is a different, finer estimate: other bits), then the same
// Newton step.
FERRY_VEC_INLINE Vec vrecip(Vec d) {
  const __m256 lo = _mm256_rcp_ps(_mm512_castps512_ps256(d.v));
  const __m256 hi = _mm256_rcp_ps(
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d.v), 1)));
  const __m512 r = _mm512_castpd_ps(_mm512_insertf64x4(
      _mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
  const __m512 e = _mm512_fnmadd_ps(d.v, r, _mm512_set1_ps(1.0f)); // 1 - d*r
  return {_mm512_fmadd_ps(e, r, r)};
}
