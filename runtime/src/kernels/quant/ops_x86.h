// The low-precision primitives of lowp_kernels.inl on x86-64: one Panel8
// vector (8 lanes = 8 units of one gate) at a time, in a 256-bit register.
// Included inside an ISA's namespace after <immintrin.h> and
// simd/vec_avx2.h, by x86_avx2.cpp (FERRY_QDOT 0: vpmaddubsw + vpmaddwd),
// x86_avxvnni.cpp (1: VEX vpdpbusd) and x86_avx512vnni.cpp (2: EVEX
// vpdpbusd on ymm). Every function is static inline: nothing compiled with
// one ISA's flags can be linked into another's caller.
//
// Integer sums are exact whichever instruction makes them, so the three
// variants give the same int32 per lane, hence the same floats.
#pragma once

#ifndef FERRY_QDOT
#error "define FERRY_QDOT (0 AVX2, 1 AVX-VNNI, 2 AVX-512 VNNI) before including ops_x86.h"
#endif

// The contract's fma (kernel_set.h): vfmadd, one rounding.
FERRY_VEC_INLINE Vec qfma(Vec a, Vec b, Vec c) { return vfma(a, b, c); }

// -------------------------------------------------------------- f16 --

// 8 halves -> 8 floats, exact (vcvtph2ps).
FERRY_VEC_INLINE Vec vload_h(const uint16_t* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}

// ------------------------------------------------------------- int8 --

FERRY_VEC_INLINE int32_t load_quad(const int8_t* p) {
  int32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

// One Panel8x4 vector of one quad: 32 bytes, lane j = the 4 k of unit j.
struct QW {
  __m256i v;
};
FERRY_VEC_INLINE QW qw_load(const int8_t* p) { return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))}; }

// The 4 activation bytes of a quad in every lane, signed, and their
// magnitudes (|q| <= 127, so the magnitudes are valid unsigned bytes).
struct QX {
  __m256i s, a;
};
FERRY_VEC_INLINE QX qx_load(const int8_t* p) {
  const __m256i s = _mm256_set1_epi32(load_quad(p));
  return {s, _mm256_abs_epi8(s)};
}

// int32 dot products of the 8 lanes. A plain vector, not a struct: GCC
// keeps arrays of loop-carried integer-vector structs partly in memory
// (a store per iteration); the plain type stays in registers.
typedef __m256i QAcc;
FERRY_VEC_INLINE QAcc qacc_zero() { return _mm256_setzero_si256(); }

// acc[j] += sum_i w[4j + i] * x[i]. The multipliers take unsigned x signed
// bytes, so the sign of x moves onto w (vpsignb: w, -w or 0): |x| * (+-w).
// vpmaddubsw's pair sums are at most 2 * 127 * 127 = 32258 < 2^15 (no
// saturation, as neither side is ever -128); vpmaddwd by 1 widens them.
#if FERRY_QDOT >= 1
// acc[j] += sum_i u[4j + i] * s[4j + i], unsigned x signed bytes, wrapping:
// vpdpbusd, VEX (AVX-VNNI) or EVEX (AVX-512 VNNI).
FERRY_VEC_INLINE __m256i vnni_dot(__m256i acc, __m256i u, __m256i s) {
#if FERRY_QDOT == 1
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
  return _mm256_dpbusd_epi32(acc, u, s);
#endif
}
#endif

FERRY_VEC_INLINE QAcc qacc_dot(QAcc acc, QW w, QX x) {
  const __m256i ws = _mm256_sign_epi8(w.v, x.s);
#if FERRY_QDOT == 0
  const __m256i pairs = _mm256_maddubs_epi16(x.a, ws);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#else
  return vnni_dot(acc, x.a, ws);
#endif
}

// The rows of the GEMM tiles (lowp_kernels.inl, I8Tile): QRow, qrow_load,
// qacc_rowdot, qacc_wsum, qacc_rowdot_finish. With VNNI the activation quad
// goes in as unsigned bytes u = x + 128 (x ^ 0x80), so that vpdpbusd needs
// no sign moved onto every weight vector per row; the tile sums each weight
// vector's bytes once (times 1) for all its rows and takes 128 times that
// off at the end: sum u w - 128 sum w = sum x w. vpdpbusd wraps modulo 2^32
// and so do the shift and the subtraction, so the int32 is exactly
// qacc_dot's (the true sum fits: |sum x w| <= 127 * 127 * K). Without VNNI
// (FERRY_QDOT 0) the rows are qacc_dot's signed quads and there is no sum
// to take off (lowp_kernels.inl's defaults, as on Arm).
#if FERRY_QDOT >= 1
#define FERRY_QROW_VNNI 1
struct QRow {
  __m256i u;
};
FERRY_VEC_INLINE QRow qrow_load(const int8_t* p) {
  return {_mm256_xor_si256(_mm256_set1_epi32(load_quad(p)), _mm256_set1_epi8(static_cast<char>(0x80)))};
}
FERRY_VEC_INLINE QAcc qacc_rowdot(QAcc acc, QW w, QRow x) { return vnni_dot(acc, x.u, w.v); }
FERRY_VEC_INLINE QAcc qacc_wsum(QAcc acc, QW w) { return vnni_dot(acc, _mm256_set1_epi8(1), w.v); }
FERRY_VEC_INLINE QAcc qacc_rowdot_finish(QAcc acc, QAcc wsum) {
  return _mm256_sub_epi32(acc, _mm256_slli_epi32(wsum, 7));
}
#endif

// float(dot), rounded to nearest even (vcvtdq2ps in the default mode).
FERRY_VEC_INLINE Vec qacc_float(QAcc acc) { return {_mm256_cvtepi32_ps(acc)}; }

// ------------------------------------------------------------- int4 --

// One 32-byte block (8 k) of a vector, unpacked: the nibbles q + 8 (0..15)
// of its first quad (low nibbles) and of its second (high nibbles).
struct Q4W {
  __m256i lo, hi;
};
FERRY_VEC_INLINE Q4W q4w_load(const uint8_t* p) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i mask = _mm256_set1_epi8(0x0f);
  return {_mm256_and_si256(v, mask), _mm256_and_si256(_mm256_srli_epi16(v, 4), mask)};
}

// A quad of activations in every lane (signed: the nibbles are the
// unsigned side, so no sign trick is needed).
struct Q4X {
  __m256i s;
};
FERRY_VEC_INLINE Q4X q4x_load(const int8_t* p) { return {_mm256_set1_epi32(load_quad(p))}; }

// Sums of (q + 8) * x of the 8 lanes over one group. AVX2: int16 pairs,
// at most 4 blocks * 2 quads * 2 * 15 * 127 = 30480 < 2^15 per group (no
// overflow), widened once per group; VNNI: int32 directly.
typedef __m256i GAcc;
FERRY_VEC_INLINE GAcc gacc_zero() { return _mm256_setzero_si256(); }
FERRY_VEC_INLINE GAcc gacc_block(GAcc acc, Q4W w, Q4X x0, Q4X x1) {
#if FERRY_QDOT == 0
  return _mm256_add_epi16(acc, _mm256_add_epi16(_mm256_maddubs_epi16(w.lo, x0.s), _mm256_maddubs_epi16(w.hi, x1.s)));
#else
  return vnni_dot(vnni_dot(acc, w.lo, x0.s), w.hi, x1.s);
#endif
}

// float(dot_g) = float(sum (q + 8) x - c), c = 8 * sum x over the group
// (from the quantized row): exact int32, then rounded.
FERRY_VEC_INLINE Vec gacc_float(GAcc acc, int32_t c) {
#if FERRY_QDOT == 0
  const __m256i sums = _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
#else
  const __m256i sums = acc;
#endif
  return {_mm256_cvtepi32_ps(_mm256_sub_epi32(sums, _mm256_set1_epi32(c)))};
}

// ----------------------------------------------- activation quantization --

// max over i < k of (bits(x[i]) & 0x7fffffff): |x| ordered as integers,
// with Inf and NaN above every finite value.
FERRY_VEC_INLINE uint32_t qmax_abs_bits(const float* x, uint32_t k) {
  const __m256i mask = _mm256_set1_epi32(0x7fffffff);
  __m256i m = _mm256_setzero_si256();
  uint32_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    m = _mm256_max_epi32(m, _mm256_and_si256(b, mask));
  }
  __m128i h = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0x4e));
  h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0xb1));
  uint32_t best = static_cast<uint32_t>(_mm_cvtsi128_si32(h));
  for (; i < k; ++i) {
    uint32_t b;
    memcpy(&b, x + i, sizeof b);
    b &= 0x7fffffffu;
    best = b > best ? b : best;
  }
  return best;
}

// q[i] = round_to_nearest_even(x[i] * inv) for i < k (vcvtps2dq in the
// default rounding mode; |x[i] * inv| <= 127.00002, so |q| <= 127).
FERRY_VEC_INLINE void qround(const float* x, uint32_t k, float inv, int8_t* q) {
  const __m256 vi = _mm256_set1_ps(inv);
  uint32_t i = 0;
  for (; i + 32 <= k; i += 32) {
    const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), vi));
    const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), vi));
    const __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 16), vi));
    const __m256i d = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 24), vi));
    // packs work within 128-bit halves: dwords come out a0 b0 c0 d0 a1 b1 c1 d1
    // (each 4 bytes); the permutation puts them back in order.
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    const __m256i ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), ordered);
  }
  for (; i < k; i += 8) {
    const uint32_t n = k - i < 8 ? k - i : 8;
    const Vec v = vload_lanes(x + i, n);
    const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(v.v, vi));
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    int8_t t[16];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(t), _mm_packs_epi16(w, w));
    for (uint32_t j = 0; j < n; ++j) q[i + j] = t[j];
  }
}
