// i8_avx512vnni, i4_avx512vnni: the low-precision kernels with the integer
// products on AVX-512 VNNI's vpdpbusd (Ice Lake, Sapphire Rapids, Zen 4 and
// later). Everything is lowp_kernels.inl on 256-bit vectors, EVEX-encoded
// (AVX-512 VL: 32 registers; ops_x86.h, FERRY_QDOT 2), except the int8
// LSTM step, the streaming hot path, which is 512-bit here: one zmm holds
// two gates of a panel (an LSTM panel row is 128 bytes per quad: 2 zmm),
// 4 panels at a time (8 accumulators), 3 instructions per 64 bytes of
// weights (load, masked negate for the sign trick -- AVX-512 has no
// vpsignb --, vpdpbusd). Same integer sums and the same fp32 operations in
// the same order, hence the same bits as i8_avx2 / i4_avx2. Compiled alone
// with AVX-512 F/BW/VL/VNNI; chosen only after the CPU check in
// kernels/registry.cpp. (Not run on the machine it was written on, which
// has no AVX-512: the kernel-set tests check it against i8_avx2 bit for bit
// wherever it runs.)
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "kernels/quant/quant.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <string.h>

#include "kernels/reference/reference.h"
#include "kernels/simd/isa.h"

namespace ferry {
namespace kernels {

namespace avx2 {
#include "kernels/simd/entry_points.inl"
}  // namespace avx2

namespace quant_avx512vnni {

#define FERRY_QDOT 2
#define FERRY_LOWP_HAS_F16 0
#define FERRY_LOWP_ISA "avx512vnni"
#define FERRY_LOWP_F32 avx2
// 32 registers: the int4 steps keep two panels' group sums and chains.
#define FERRY_LOWP_I4_LSTM 2
#define FERRY_LOWP_I4_GRU 2
#define FERRY_LOWP_I4_RNN 8
#include "kernels/simd/vec_avx2.h"
#include "kernels/simd/math.inl"
#include "kernels/quant/ops_x86.h"
#include "kernels/quant/lowp_kernels.inl"

// ------------------------------------------- int8 LSTM step, 512-bit --

// The 256-bit halves of a zmm. Zero-masked extracts (and converts below)
// rather than the casts and plain forms, whose GCC 12 definitions read an
// "undefined" register that its own -Wuninitialized then reports.
FERRY_VEC_INLINE Vec lo_half(__m512 v) {
  return {_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(v), 0))};
}
FERRY_VEC_INLINE Vec hi_half(__m512 v) {
  return {_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(v), 1))};
}

// y[i][h] (gates 2h, 2h+1 of panel p + i: 16 lanes, panel order) continued
// by W's product with one quantized row: the i8 formula of kernel_set.h,
// fma(w_scale * a_scale, float(dot), y), on 16 lanes at once.
template <int NP>
FERRY_VEC_INLINE void i8_lstm_product_x16(__m512 (&y)[NP][2], const Weight& w, const int8_t* q, float scale,
                                          uint32_t p) {
  const uint32_t quads = static_cast<uint32_t>(layout::k4_of(w.cols) / layout::kQuad);
  const size_t panel = layout::panel8x4_panel_bytes(4, w.cols);
  const int8_t* wi[NP];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) wi[i] = w.i8() + (p + i) * panel;
  __m512i acc[NP][2];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_si512();
  const __m512i zero = _mm512_setzero_si512();
  for (uint32_t c = 0; c < quads; ++c) {
    const __m512i xs = _mm512_set1_epi32(load_quad(q + 4 * c));
    const __m512i xa = _mm512_abs_epi8(xs);
    const __mmask64 negative = _mm512_movepi8_mask(xs);  // bytes whose activation is < 0
#pragma GCC unroll 8
    for (int i = 0; i < NP; ++i) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m512i wv = _mm512_loadu_si512(wi[i] + 64 * h);
        // |x| * (w with x's sign): w negated where x < 0 (x == 0: |x| = 0).
        acc[i][h] = _mm512_dpbusd_epi32(acc[i][h], xa, _mm512_mask_sub_epi8(wv, negative, zero, wv));
      }
      wi[i] += 128;
    }
  }
  __m512i sums[NP][2];  // through memory: see i8_product in lowp_kernels.inl
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) sums[i][0] = acc[i][0], sums[i][1] = acc[i][1];
  __asm__ volatile("" : : "r"(sums) : "memory");
  const __m512 s = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512 ws = _mm512_mul_ps(_mm512_loadu_ps(w.scales + (size_t{p} + i) * 32 + 16 * h), s);
      y[i][h] = _mm512_fmadd_ps(ws, _mm512_maskz_cvtepi32_ps(0xffff, sums[i][h]), y[i][h]);
    }
}

template <int NP>
static void i8_lstm_panels_x16(const StepArgs& s, uint32_t p) {
  const float* init = s.pre ? s.pre : s.bias ? s.bias->f32() : nullptr;
  __m512 y[NP][2];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) y[i][h] = init ? _mm512_loadu_ps(init + (size_t{p} + i) * 32 + 16 * h) : _mm512_setzero_ps();
  if (!s.pre && s.w_ih) i8_lstm_product_x16<NP>(y, *s.w_ih, s.qx, s.x_scale, p);
  i8_lstm_product_x16<NP>(y, *s.w_hh, s.qh, s.h_scale, p);
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) {
    lstm_finish(lo_half(y[i][0]), hi_half(y[i][0]), lo_half(y[i][1]), hi_half(y[i][1]), s.c, s.h_new, p + i, s.hidden);
  }
}

// Four panels at a time, the rest on the 256-bit kernels.
static void i8_lstm_step_x16(const StepArgs& s, uint32_t p0, uint32_t p1) {
  uint32_t p = p0;
  for (; p + 4 <= p1; p += 4) i8_lstm_panels_x16<4>(s, p);
  if (p < p1) lstm_steps<I8Product, 2>(s, p, p1);
}

// ------------------------------------------------ int8 GEMM, 512 bits --
//
// Vectors q and q + 1 of a matrix with an even gate count (q even) are two
// gates of one panel and lie side by side: 64 bytes per quad, one zmm, and
// their 16 output columns [8q, 8q + 16) are contiguous in a panel-order row,
// as are their scales and bias. Tiles of MR rows x NZ such pairs, in
// I8Tile's unsigned-activation form (ops_x86.h, qu_load): the same int32
// sums and the same single fma per output, so the bits are I8Tile's (and the
// contract's); only the width differs. Other matrices (odd G: GRU, Linear)
// and a leftover vector take I8Tile.

FERRY_VEC_INLINE __mmask16 first_lanes(uint32_t n) { return static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1); }

FERRY_VEC_INLINE __m512 gemm_init16(const GemmArgs& g, size_t m, uint32_t col) {
  if (g.c_init) {
    const float* p = g.c_init + m * g.ldc + col;
    return col + 16 <= g.n_store ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(first_lanes(g.n_store - col), p);
  }
  if (g.bias) return _mm512_loadu_ps(g.bias->f32() + col);
  return _mm512_setzero_ps();
}

FERRY_VEC_INLINE void gemm_store16(const GemmArgs& g, size_t m, uint32_t col, __m512 v) {
  float* c = g.c + m * g.ldc + col;
  if (col + 16 <= g.n_store) {
    _mm512_storeu_ps(c, v);
  } else if (col < g.n_store) {
    _mm512_mask_storeu_ps(c, first_lanes(g.n_store - col), v);
  }
}

// A tile for gemm_rows (lowp_kernels.inl): MR rows x NZ pairs.
struct I8PairTile {
  static constexpr int kRows = 6;
  template <int MR, int NZ>
  static void run(const GemmArgs& g, size_t m0, uint32_t q0);
};

template <int MR, int NZ>
void I8PairTile::run(const GemmArgs& g, size_t m0, uint32_t q0) {
  const Weight& w = *g.w;
  const uint32_t quads = static_cast<uint32_t>(layout::k4_of(w.cols) / layout::kQuad);
  const size_t ldw = layout::panel8x4_quad_stride(w.gates);
  const int8_t* wv[NZ];
#pragma GCC unroll 4
  for (int z = 0; z < NZ; ++z)
    wv[z] = w.i8() + layout::panel8x4_vector_index(w.gates, w.cols, q0 + 2 * static_cast<uint32_t>(z));
  const int8_t* a[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) a[m] = g.qa + (m0 + m) * g.ldqa;
  __m512i acc[MR][NZ], wsum[NZ];
#pragma GCC unroll 4
  for (int z = 0; z < NZ; ++z) wsum[z] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) acc[m][z] = _mm512_setzero_si512();
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (uint32_t c = 0; c < quads; ++c) {
    __m512i wq[NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) {
      wq[z] = _mm512_loadu_si512(wv[z]);
      wv[z] += ldw;
      wsum[z] = _mm512_dpbusd_epi32(wsum[z], ones, wq[z]);
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m512i u = _mm512_xor_si512(_mm512_set1_epi32(load_quad(a[m] + 4 * c)), flip);
#pragma GCC unroll 4
      for (int z = 0; z < NZ; ++z) acc[m][z] = _mm512_dpbusd_epi32(acc[m][z], u, wq[z]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    const __m512 s = _mm512_set1_ps(g.a_scales[m0 + m]);
#pragma GCC unroll 4
    for (int z = 0; z < NZ; ++z) {
      const uint32_t col = (q0 + 2 * static_cast<uint32_t>(z)) * 8;
      // The maskz forms: GCC 12 warns that the plain ones' _mm512_undefined
      // operand is uninitialized.
      const __m512i dot = _mm512_sub_epi32(acc[m][z], _mm512_maskz_slli_epi32(0xffff, wsum[z], 7));
      const __m512 ws = _mm512_mul_ps(_mm512_loadu_ps(w.scales + col), s);
      gemm_store16(g, m0 + m, col,
                   _mm512_fmadd_ps(ws, _mm512_maskz_cvtepi32_ps(0xffff, dot), gemm_init16(g, m0 + m, col)));
    }
  }
}

static void i8_gemm_x16(const GemmArgs& g, size_t m0, size_t m1, uint32_t q0, uint32_t q1) {
  if (g.w->gates % 2 != 0 || q0 % 2 != 0) {
    i8_gemm(g, m0, m1, q0, q1);
    return;
  }
  // Rows inside, pairs outside (gemm_rows): a pair group's weights stay in
  // L1 while the rows pass.
  uint32_t q = q0;
  for (; q + 4 <= q1; q += 4) gemm_rows<I8PairTile, 2>(g, m0, m1, q);
  for (; q + 2 <= q1; q += 2) gemm_rows<I8PairTile, 1>(g, m0, m1, q);
  if (q < q1) i8_gemm(g, m0, m1, q, q1);
}

#define FERRY_LOWP_I8_GEMM i8_gemm_x16
// The batched update on 16 lanes (simd/avx512.cpp; the same bits), for
// every dtype of this file: a quarter of W3 int8's time on 8 lanes.
#define FERRY_LOWP_LSTM_UPDATE lstm_update_avx512
#define FERRY_LOWP_I8_LSTM 4
#define FERRY_LOWP_I8_LSTM_STEP i8_lstm_step_x16
#include "kernels/quant/lowp_tables.inl"

}  // namespace quant_avx512vnni

const KernelSet* i8_avx512vnni_kernel_set() { return &quant_avx512vnni::i8_kernel_set; }
const KernelSet* i4_avx512vnni_kernel_set() { return &quant_avx512vnni::i4_kernel_set; }

}  // namespace kernels
}  // namespace ferry

#else

namespace ferry {
namespace kernels {
const KernelSet* i8_avx512vnni_kernel_set() { return nullptr; }
const KernelSet* i4_avx512vnni_kernel_set() { return nullptr; }
}  // namespace kernels
}  // namespace ferry

#endif
