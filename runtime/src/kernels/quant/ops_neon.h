// The low-precision primitives of lowp_kernels.inl on Arm NEON: one Panel8
// vector (8 lanes) as two 128-bit registers. Included inside an ISA's
// namespace after <arm_neon.h> and simd/vec_neon.h, by arm_neon.cpp
// (FERRY_QDOT_SDOT 0: widening multiplies, smull + sadalp, for cores without
// the dot-product extension such as Cortex-A53/A72) and arm_neondot.cpp
// (1: sdot). Every function is static inline.
//
// Integer sums are exact either way, so both give the same int32 per lane,
// hence the same floats. ARMv7 builds these with VFPv4 (a fused vfma for
// the contract's fma); AArch64 always has it.
#pragma once

#ifndef FERRY_QDOT_SDOT
#error "define FERRY_QDOT_SDOT (0 or 1) before including ops_neon.h"
#endif
#if !defined(__aarch64__) && !defined(__ARM_FEATURE_FMA)
#error "the low-precision NEON kernels need a fused multiply-add (ARMv7: -mfpu=neon-vfpv4)"
#endif

// The contract's fma (kernel_set.h), one rounding.
FERRY_VEC_INLINE Vec qfma(Vec a, Vec b, Vec c) {
  return {vfmaq_f32(c.lo, a.lo, b.lo), vfmaq_f32(c.hi, a.hi, b.hi)};
}

// -------------------------------------------------------------- f16 --

#if defined(__aarch64__)
// 8 halves -> 8 floats, exact (fcvtl; the runtime never sets FPCR.FZ16).
FERRY_VEC_INLINE Vec vload_h(const uint16_t* p) {
  const uint16x8_t h = vld1q_u16(p);
  return {vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h))), vcvt_high_f32_f16(vreinterpretq_f16_u16(h))};
}
#else
// ARMv7 NEON's vcvt.f32.f16 flushes subnormal halves to zero, so the
// conversion is done on the bits (exact, as layout::float_from_half):
// normal e, m -> exponent e + 112; Inf/NaN (e = 31) -> 255; subnormal
// m * 2^-24 by an exact integer conversion and scaling. Used for int4's
// group scales only (8 per group of 32 k): ARMv7 has no f16 set.
FERRY_VEC_INLINE float32x4_t half4_to_float(uint16x4_t h) {
  const uint32x4_t x = vmovl_u16(h);
  const uint32x4_t sign = vshlq_n_u32(vandq_u32(x, vdupq_n_u32(0x8000u)), 16);
  const uint32x4_t em = vandq_u32(x, vdupq_n_u32(0x7fffu));
  const uint32x4_t exp = vshrq_n_u32(em, 10);
  const uint32x4_t is_special = vceqq_u32(exp, vdupq_n_u32(31));
  const uint32x4_t rebias = vbslq_u32(is_special, vdupq_n_u32(224u << 23), vdupq_n_u32(112u << 23));
  const uint32x4_t normal = vaddq_u32(vshlq_n_u32(em, 13), rebias);
  const float32x4_t sub = vmulq_f32(vcvtq_f32_u32(em), vdupq_n_f32(5.9604644775390625e-08f));  // m * 2^-24
  const uint32x4_t is_sub = vceqq_u32(exp, vdupq_n_u32(0));
  const uint32x4_t mag = vbslq_u32(is_sub, vreinterpretq_u32_f32(sub), normal);
  return vreinterpretq_f32_u32(vorrq_u32(mag, sign));
}
FERRY_VEC_INLINE Vec vload_h(const uint16_t* p) {
  const uint16x8_t h = vld1q_u16(p);
  return {half4_to_float(vget_low_u16(h)), half4_to_float(vget_high_u16(h))};
}
#endif

// ------------------------------------------------------------- int8 --

FERRY_VEC_INLINE int8x16_t quad_in_every_lane(const int8_t* p) {
  int32_t v;
  memcpy(&v, p, sizeof v);
  return vreinterpretq_s8_s32(vdupq_n_s32(v));
}

// One Panel8x4 vector of one quad: units 0-3 (lo), 4-7 (hi), 4 k each.
struct QW {
  int8x16_t lo, hi;
};
FERRY_VEC_INLINE QW qw_load(const int8_t* p) { return {vld1q_s8(p), vld1q_s8(p + 16)}; }

struct QX {
  int8x16_t v;
};
FERRY_VEC_INLINE QX qx_load(const int8_t* p) { return {quad_in_every_lane(p)}; }

// Pairwise sums of two int32x4 (lanes 0+1, 2+3 of a, then of b).
FERRY_VEC_INLINE int32x4_t pair_sums(int32x4_t a, int32x4_t b) {
#if defined(__aarch64__)
  return vpaddq_s32(a, b);
#else
  return vcombine_s32(vpadd_s32(vget_low_s32(a), vget_high_s32(a)), vpadd_s32(vget_low_s32(b), vget_high_s32(b)));
#endif
}

#if FERRY_QDOT_SDOT
struct QAcc {
  int32x4_t lo, hi;
};
FERRY_VEC_INLINE QAcc qacc_zero() { return {vdupq_n_s32(0), vdupq_n_s32(0)}; }
// acc[j] += sum_i w[4j + i] * x[i]: sdot, 4 lanes per instruction.
FERRY_VEC_INLINE QAcc qacc_dot(QAcc acc, QW w, QX x) {
  return {vdotq_s32(acc.lo, w.lo, x.v), vdotq_s32(acc.hi, w.hi, x.v)};
}
FERRY_VEC_INLINE Vec qacc_float(QAcc acc) { return {vcvtq_f32_s32(acc.lo), vcvtq_f32_s32(acc.hi)}; }
#else
// Two int32 partial sums per unit (k 0+1 and k 2+3): p[0] units 0-1, ...,
// p[3] units 6-7; smull's int16 products (<= 127^2) are added pairwise into
// them by sadalp.
struct QAcc {
  int32x4_t p[4];
};
FERRY_VEC_INLINE QAcc qacc_zero() { return {{vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)}}; }
FERRY_VEC_INLINE QAcc qacc_dot(QAcc acc, QW w, QX x) {
  const int8x8_t x8 = vget_low_s8(x.v);  // the quad twice: two units' worth
  return {{vpadalq_s16(acc.p[0], vmull_s8(vget_low_s8(w.lo), x8)), vpadalq_s16(acc.p[1], vmull_s8(vget_high_s8(w.lo), x8)),
           vpadalq_s16(acc.p[2], vmull_s8(vget_low_s8(w.hi), x8)), vpadalq_s16(acc.p[3], vmull_s8(vget_high_s8(w.hi), x8))}};
}
FERRY_VEC_INLINE Vec qacc_float(QAcc acc) {
  return {vcvtq_f32_s32(pair_sums(acc.p[0], acc.p[1])), vcvtq_f32_s32(pair_sums(acc.p[2], acc.p[3]))};
}
#endif

// ------------------------------------------------------------- int4 --

// One 32-byte block, unpacked: the nibbles q + 8 (0..15, valid signed
// bytes) of its first quad (lo: low nibbles) and second quad (hi), for
// units 0-3 (bytes 0-15) and 4-7 (bytes 16-31).
struct Q4W {
  int8x16_t lo0, lo1, hi0, hi1;
};
FERRY_VEC_INLINE Q4W q4w_load(const uint8_t* p) {
  const uint8x16_t b0 = vld1q_u8(p), b1 = vld1q_u8(p + 16), mask = vdupq_n_u8(0x0f);
  return {vreinterpretq_s8_u8(vandq_u8(b0, mask)), vreinterpretq_s8_u8(vandq_u8(b1, mask)),
          vreinterpretq_s8_u8(vshrq_n_u8(b0, 4)), vreinterpretq_s8_u8(vshrq_n_u8(b1, 4))};
}

struct Q4X {
  int8x16_t v;
};
FERRY_VEC_INLINE Q4X q4x_load(const int8_t* p) { return {quad_in_every_lane(p)}; }

#if FERRY_QDOT_SDOT
struct GAcc {
  int32x4_t lo, hi;
};
FERRY_VEC_INLINE GAcc gacc_zero() { return {vdupq_n_s32(0), vdupq_n_s32(0)}; }
FERRY_VEC_INLINE GAcc gacc_block(GAcc acc, Q4W w, Q4X x0, Q4X x1) {
  return {vdotq_s32(vdotq_s32(acc.lo, w.lo0, x0.v), w.hi0, x1.v), vdotq_s32(vdotq_s32(acc.hi, w.lo1, x0.v), w.hi1, x1.v)};
}
FERRY_VEC_INLINE Vec gacc_float(GAcc acc, int32_t c) {
  const int32x4_t vc = vdupq_n_s32(c);
  return {vcvtq_f32_s32(vsubq_s32(acc.lo, vc)), vcvtq_f32_s32(vsubq_s32(acc.hi, vc))};
}
#else
// int16 sums per (unit, k % 4): at most 8 products of 15 * 127 per group
// (15240 < 2^15); s[0] units 0-1, ..., s[3] units 6-7.
struct GAcc {
  int16x8_t s[4];
};
FERRY_VEC_INLINE GAcc gacc_zero() { return {{vdupq_n_s16(0), vdupq_n_s16(0), vdupq_n_s16(0), vdupq_n_s16(0)}}; }
FERRY_VEC_INLINE GAcc gacc_block(GAcc acc, Q4W w, Q4X x0, Q4X x1) {
  const int8x8_t a = vget_low_s8(x0.v), b = vget_low_s8(x1.v);
  return {{vmlal_s8(vmlal_s8(acc.s[0], vget_low_s8(w.lo0), a), vget_low_s8(w.hi0), b),
           vmlal_s8(vmlal_s8(acc.s[1], vget_high_s8(w.lo0), a), vget_high_s8(w.hi0), b),
           vmlal_s8(vmlal_s8(acc.s[2], vget_low_s8(w.lo1), a), vget_low_s8(w.hi1), b),
           vmlal_s8(vmlal_s8(acc.s[3], vget_high_s8(w.lo1), a), vget_high_s8(w.hi1), b)}};
}
FERRY_VEC_INLINE Vec gacc_float(GAcc acc, int32_t c) {
  const int32x4_t vc = vdupq_n_s32(c);
  const int32x4_t lo = pair_sums(vpaddlq_s16(acc.s[0]), vpaddlq_s16(acc.s[1]));
  const int32x4_t hi = pair_sums(vpaddlq_s16(acc.s[2]), vpaddlq_s16(acc.s[3]));
  return {vcvtq_f32_s32(vsubq_s32(lo, vc)), vcvtq_f32_s32(vsubq_s32(hi, vc))};
}
#endif

// ----------------------------------------------- activation quantization --

// max over i < k of (bits(x[i]) & 0x7fffffff).
FERRY_VEC_INLINE uint32_t qmax_abs_bits(const float* x, uint32_t k) {
  const uint32x4_t mask = vdupq_n_u32(0x7fffffffu);
  uint32x4_t m = vdupq_n_u32(0);
  uint32_t i = 0;
  for (; i + 4 <= k; i += 4) m = vmaxq_u32(m, vandq_u32(vreinterpretq_u32_f32(vld1q_f32(x + i)), mask));
#if defined(__aarch64__)
  uint32_t best = vmaxvq_u32(m);
#else
  uint32x2_t h = vpmax_u32(vget_low_u32(m), vget_high_u32(m));
  h = vpmax_u32(h, h);
  uint32_t best = vget_lane_u32(h, 0);
#endif
  for (; i < k; ++i) {
    uint32_t b;
    memcpy(&b, x + i, sizeof b);
    b &= 0x7fffffffu;
    best = b > best ? b : best;
  }
  return best;
}

// round_to_nearest_even(v) of 4 floats, |v| <= 127.00002.
FERRY_VEC_INLINE int32x4_t round_even4(float32x4_t v) {
#if defined(__aarch64__)
  return vcvtnq_s32_f32(v);
#else
  // ARMv7 has no vcvtn: 1.5 * 2^23 + v leaves round(v) in the low mantissa
  // bits (NEON rounds to nearest even).
  const float32x4_t magic = vdupq_n_f32(12582912.0f);
  return vsubq_s32(vreinterpretq_s32_f32(vaddq_f32(v, magic)), vreinterpretq_s32_f32(magic));
#endif
}

// q[i] = round_to_nearest_even(x[i] * inv) for i < k.
FERRY_VEC_INLINE void qround(const float* x, uint32_t k, float inv, int8_t* q) {
  const float32x4_t vi = vdupq_n_f32(inv);
  uint32_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const int32x4_t a = round_even4(vmulq_f32(vld1q_f32(x + i), vi));
    const int32x4_t b = round_even4(vmulq_f32(vld1q_f32(x + i + 4), vi));
    const int16x8_t h = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
    vst1_s8(q + i, vqmovn_s16(h));
  }
  if (i < k) {
    const uint32_t n = k - i;
    const Vec v = vload_partial(x + i, n);
    const int32x4_t a = round_even4(vmulq_f32(v.lo, vi));
    const int32x4_t b = round_even4(vmulq_f32(v.hi, vi));
    int8_t t[8];
    vst1_s8(t, vqmovn_s16(vcombine_s16(vqmovn_s32(a), vqmovn_s32(b))));
    for (uint32_t j = 0; j < n; ++j) q[i + j] = t[j];
  }
}
