// AVX-512 where it pays: the batched Panel8 GEMM (compute-bound: input
// projections of a chunk of steps, recurrent products of a batch) and the
// fused single-sample LSTM step (bound by how fast weights come from L2: one
// 64-byte load per cache line instead of two 32-byte ones; its update, and
// the batched step's, on 16 lanes), and the fused single-sample GRU step
// ([r z] a zmm chain; its 96-byte panel rows read two at a time as three
// aligned zmm; the update on 16 lanes). The other updates, element-wise
// ops and RNN steps stay AVX2, and so does the GRU step inside step_project
// (its chains share the loop with a projection tile's). Compiled alone with
// -mavx512f; entered only through f32_avx512_kernel_set() after CPU
// detection (kernels/registry.cpp).
//
// One zmm holds two adjacent Panel8 vectors: gates g and g+1 of one panel are
// contiguous in a panel row (and in a panel-order output row) when g is even
// and g+1 < G: the LSTM's 4 gates = 2 zmm per panel row. Each lane is still
// the FMA chain of kernels/kernel_set.h (init, then k ascending), and the
// nonlinearities are the AVX2 code's operations, on the 256-bit halves or,
// in the batched step's update, on 16 lanes of two rows (activations.inl
// over vec_avx512.h), so every result is bit for bit the AVX2 set's. The set is f32_avx2's table with those two
// entries (and the LSTM step group) replaced, plus a batched LSTM step in
// one kernel (batch_step: the GEMM's tile over W_ih x and W_hh h, then the
// update on its registers), which the backend runs for a chunk of one step
// (B >= 64, W3), and one-sample LSTM and GRU steps that compute a share of
// the next chunk's input projection in their k loop (step_project: W2).
// Its batched GRU step is the AVX2 set's (batch_step.inl), which beats the
// GEMM + update here.
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "kernels/simd/isa.h"
#include "kernels/reference/reference.h"

#include <type_traits>

#if defined(__x86_64__) && defined(__AVX512F__)

// GCC 12's _mm512_extractf64x4_pd starts from _mm256_undefined_pd(), which
// -Wuninitialized reports once inlined (a false positive of the header, GCC
// bug 105593), and -Wmaybe-uninitialized where the fused batched step inlines
// it: silenced for the intrinsics header only (Clang has no such group).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace ferry {
namespace kernels {

// The AVX2 set's entry points (avx2.cpp), which this set shares.
namespace avx2 {
#include "kernels/simd/entry_points.inl"
}  // namespace avx2

namespace avx512 {

// The 8-lane vector helpers and state-update math, compiled here too (the
// same source as avx2.cpp's, so the same operations in the same order).
#include "kernels/simd/vec_avx2.h"
#include "kernels/simd/math.inl"

// The nonlinearities again on 16 lanes (the same operations lane by lane):
// wide::vsigmoid, wide::vtanh.
namespace wide {
#include "kernels/simd/vec_avx512.h"
#include "kernels/simd/activations.inl"
}  // namespace wide

namespace {

// acc[m][z] += A row m times the weight's zmm z (its vectors q0 + 2z and
// q0 + 2z + 1, q0 even), k ascending: the inner loop of every tile here.
template <int MR, int NZ>
FERRY_VEC_INLINE void accumulate_rows(__m512 (&acc)[MR][NZ], const Weight& weight, const float* rows, size_t ld,
                                      size_t m0, uint32_t q0) {
  const uint32_t gates = weight.gates;
  const size_t kk = weight.cols, ldw = layout::panel8_column_stride(gates);
  const float* wz[NZ];
#pragma GCC unroll 8
  for (int z = 0; z < NZ; ++z) wz[z] = weight.f32() + layout::panel8_vector_index(gates, kk, q0 + 2 * static_cast<uint32_t>(z));
  const float* a[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) a[m] = rows + (m0 + m) * ld;
  for (size_t k = 0; k < kk; ++k) {
    __m512 w[NZ];
#pragma GCC unroll 8
    for (int z = 0; z < NZ; ++z) {
      w[z] = _mm512_loadu_ps(wz[z]);
      wz[z] += ldw;
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m512 x = _mm512_set1_ps(a[m][k]);
#pragma GCC unroll 8
      for (int z = 0; z < NZ; ++z) acc[m][z] = _mm512_fmadd_ps(x, w[z], acc[m][z]);
    }
  }
}

// f(std::integral_constant<int, MR>()) for MR = rows (1 to 8; nothing for 0).
template <typename F>
FERRY_VEC_INLINE void with_rows(size_t rows, F&& f) {
  switch (rows) {
    case 8: f(std::integral_constant<int, 8>()); break;
    case 7: f(std::integral_constant<int, 7>()); break;
    case 6: f(std::integral_constant<int, 6>()); break;
    case 5: f(std::integral_constant<int, 5>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    case 3: f(std::integral_constant<int, 3>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 1: f(std::integral_constant<int, 1>()); break;
    default: break;
  }
}

// Rows [m0, m1) in tiles of 8, then one tile of the rest:
// f(std::integral_constant<int, MR>(), first row) per tile.
template <typename F>
FERRY_VEC_INLINE void row_tiles(size_t m0, size_t m1, F&& f) {
  size_t m = m0;
  for (; m + 8 <= m1; m += 8) f(std::integral_constant<int, 8>(), m);
  with_rows(m1 - m, [&](auto mr) { f(mr, m); });
}

// MR rows x NZ zmm (2*NZ vectors starting at the even vector q0).
template <int MR, int NZ>
void tile(const GemmArgs& g, size_t m0, uint32_t q0) {
  __m512 acc[MR][NZ];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int z = 0; z < NZ; ++z) {
      const size_t col = (size_t{q0} + 2 * static_cast<uint32_t>(z)) * 8;
      if (g.c_init) {
        acc[m][z] = _mm512_loadu_ps(g.c_init + (m0 + m) * g.ldc + col);
      } else if (g.bias) {
        acc[m][z] = _mm512_loadu_ps(g.bias->f32() + col);
      } else {
        acc[m][z] = _mm512_setzero_ps();
      }
    }
  }
  accumulate_rows<MR, NZ>(acc, *g.w, g.a, g.lda, m0, q0);
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    float* c = g.c + (m0 + m) * g.ldc;
#pragma GCC unroll 8
    for (int z = 0; z < NZ; ++z) _mm512_storeu_ps(c + (size_t{q0} + 2 * static_cast<uint32_t>(z)) * 8, acc[m][z]);
  }
}

template <int NZ>
void sweep_rows(const GemmArgs& g, size_t m0, size_t m1, uint32_t q) {
  row_tiles(m0, m1, [&](auto mr, size_t m) { tile<decltype(mr)::value, NZ>(g, m, q); });
}

template <int MR>
uint32_t sweep_vectors(const GemmArgs& g, size_t m0, uint32_t q, uint32_t q1) {
  constexpr int kWide = MR == 1 ? 6 : MR == 2 ? 4 : 3;  // zmm per tile: 6 to 12 accumulators
  for (; q + 2 * kWide <= q1; q += 2 * kWide) tile<MR, kWide>(g, m0, q);
  for (; q + 2 <= q1; q += 2) tile<MR, 1>(g, m0, q);
  return q;
}

// Three gates (the GRU): MR rows x one panel row (24 lanes: r, z, n), r and
// z in a zmm, n in a ymm (a zmm over n would take the next k's r), so every
// lane is used: per k, MR zmm and MR ymm FMAs from 2 + MR loads. The ymm
// accumulators and the broadcast (which the zmm FMA reads whole and the ymm
// FMA by its lower half) live in ymm0-15, the only ones AVX-512F lets a ymm
// operation name. Each lane is the chain of the AVX2 gemm (init, k
// ascending): the same bits.
template <int MR>
void tile_gates3(const GemmArgs& g, size_t m0, uint32_t pp) {
  const size_t col = size_t{pp} * 24;
  __m512 rz[MR];
  __m256 n[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    if (g.c_init) {
      rz[m] = _mm512_loadu_ps(g.c_init + (m0 + m) * g.ldc + col);
      n[m] = _mm256_loadu_ps(g.c_init + (m0 + m) * g.ldc + col + 16);
    } else if (g.bias) {
      rz[m] = _mm512_loadu_ps(g.bias->f32() + col);
      n[m] = _mm256_loadu_ps(g.bias->f32() + col + 16);
    } else {
      rz[m] = _mm512_setzero_ps();
      n[m] = _mm256_setzero_ps();
    }
  }
  const size_t kk = g.w->cols;
  const float* wp = g.w->f32() + pp * layout::panel8_panel_elements(3, static_cast<uint32_t>(kk));
  const float* a[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) a[m] = g.a + (m0 + m) * g.lda;
  for (size_t k = 0; k < kk; ++k) {
    const __m512 w_rz = _mm512_loadu_ps(wp);
    const __m256 w_n = _mm256_loadu_ps(wp + 16);
    wp += 24;
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m512 x = _mm512_set1_ps(a[m][k]);
      rz[m] = _mm512_fmadd_ps(x, w_rz, rz[m]);
      n[m] = _mm256_fmadd_ps(_mm512_castps512_ps256(x), w_n, n[m]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    float* c = g.c + (m0 + m) * g.ldc + col;
    _mm512_storeu_ps(c, rz[m]);
    _mm256_storeu_ps(c + 16, n[m]);
  }
}

// From 4 rows to 8 (ferry bench, GRU(64, 256), T 64, 3 alternations, this
// tile against the AVX2 code's 6 x 2 and 4 x 2 tiles: B 4 1.35-1.41 against
// 1.45-1.49 ms, B 8 2.70-2.82 against 3.13-3.15, B 6 a tie, 2.02-2.15
// against 1.99-2.04). Above 8 the AVX2 tiles measured faster (B 16
// 5.40-5.44 against 5.50-5.55 ms, B 64 T 128 42.7-43.4 against 44.3-44.5),
// the zmm broadcasts costing more than its tiles' remainders.
constexpr size_t kGates3MaxRows = 8;

// The whole panels of vectors [q0, q1) in tile_gates3's tiles, panels
// outside and rows inside (a panel's weights stay in L1 while the rows
// pass); the vectors before the first whole panel and after the last on
// the AVX2 code.
void gemm_gates3(const GemmArgs& g, size_t m0, size_t m1, uint32_t q0, uint32_t q1) {
  const uint32_t p0 = (q0 + 2) / 3, p1 = q1 / 3;
  if (p0 >= p1) {
    avx2::gemm_panel8(g, m0, m1, q0, q1);
    return;
  }
  if (q0 < 3 * p0) avx2::gemm_panel8(g, m0, m1, q0, 3 * p0);
  for (uint32_t p = p0; p < p1; ++p) row_tiles(m0, m1, [&](auto mr, size_t m) { tile_gates3<decltype(mr)::value>(g, m, p); });
  if (3 * p1 < q1) avx2::gemm_panel8(g, m0, m1, 3 * p1, q1);
}

// 8 rows x 2 zmm (32 lanes: a whole LSTM panel row) is the main tile: 16
// accumulators, 2 weight registers, 1 broadcast, of 32 zmm; per k, 10 loads
// feed 16 FMAs.
void gemm_panel8_8x32(const GemmArgs& g, size_t m0, size_t m1, uint32_t q0, uint32_t q1) {
  const auto avx2_gemm = avx2::gemm_panel8;
  if (g.w->gates == 3 && m1 - m0 >= 4 && m1 - m0 <= kGates3MaxRows && size_t{q1} * 8 <= g.n_store) {
    gemm_gates3(g, m0, m1, q0, q1);
    return;
  }
  if (g.w->gates % 2 != 0 || size_t{q1} * 8 > g.n_store) {
    avx2_gemm(g, m0, m1, q0, q1);
    return;
  }
  if (q0 % 2 != 0) {  // a lone odd vector first
    avx2_gemm(g, m0, m1, q0, q0 + 1);
    ++q0;
  }
  uint32_t q = q0;
  const size_t rows = m1 - m0;
  if (rows >= 4) {
    // Vector quads outside, rows inside: a quad's weights stay in L1.
    for (; q + 4 <= q1; q += 4) sweep_rows<2>(g, m0, m1, q);
    for (; q + 2 <= q1; q += 2) sweep_rows<1>(g, m0, m1, q);
  } else if (rows == 3) {
    q = sweep_vectors<3>(g, m0, q, q1);
  } else if (rows == 2) {
    q = sweep_vectors<2>(g, m0, q, q1);
  } else if (rows == 1) {
    q = sweep_vectors<1>(g, m0, q, q1);
  }
  if (q < q1) avx2_gemm(g, m0, m1, q, q1);  // a last odd vector
}

// ---------------------------------------------------------- fused steps --

FERRY_VEC_INLINE Vec lo(__m512 v) { return {_mm512_castps512_ps256(v)}; }
FERRY_VEC_INLINE Vec hi(__m512 v) {
  return {_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))};
}

// The update of rows m .. m+N-1 of a tile, panel i of it (p + i), from the
// accumulators, stage by stage over the N rows (lstm_finish_n), on 8-lane
// halves. The batched step now calls it one row at a time (N = 1): for a
// last odd row, and where finish_row_pairs (below, two rows a zmm) cannot
// run. (On Zen 4, 4 rows staged took W3's step 401-405 us against 413-419
// one row at a time.) A group holding a row that has ended goes row by row,
// skipping it.
template <int N, int MR, int NZ>
FERRY_VEC_INLINE void finish_rows(const BatchStepArgs& s, const __m512 (&acc)[MR][NZ], size_t m0, int m, int i,
                                  uint32_t p) {
  bool all_active = true;
#pragma GCC unroll 8
  for (int n = 0; n < N; ++n) all_active = all_active && (!s.lengths || s.t < static_cast<size_t>(s.lengths[m0 + m + n]));
  if (N > 1 && !all_active) {
    for (int n = 0; n < N; ++n) finish_rows<1>(s, acc, m0, m + n, i, p);
    return;
  }
  if (!all_active) return;  // one row, ended: keeps its state
  const uint32_t pi = p + static_cast<uint32_t>(i), lanes = panel_lanes(pi, s.hidden);
  Vec a[N][4];
  float* c[N];
  float* h[N];
  uint32_t ln[N];
#pragma GCC unroll 8
  for (int n = 0; n < N; ++n) {
    a[n][0] = lo(acc[m + n][2 * i]);
    a[n][1] = hi(acc[m + n][2 * i]);
    a[n][2] = lo(acc[m + n][2 * i + 1]);
    a[n][3] = hi(acc[m + n][2 * i + 1]);
    c[n] = s.c + (m0 + m + n) * s.ldc + size_t{pi} * 8;
    h[n] = s.h_new + (m0 + m + n) * s.ldh_new + size_t{pi} * 8;
    ln[n] = lanes;
  }
  lstm_finish_n<N>(a, c, h, ln);
}

// The batched LSTM step in one kernel: MR rows x NP panels (2 zmm each:
// i,f | g,o), the tile of gemm_panel8_8x32 started from the bias, W_ih x
// then W_hh h accumulated (one chain), and the update (lstm_finish, the AVX2
// code on the halves) applied to the registers instead of a store.
// Where W3's step goes (Zen 4, BM_W3FusedStep 404-411 us): the products,
// timed with the update skipped, take 373-388 us, 94-95% of the FMA peak,
// which is what an 8x2, 4x4, 6x4, 12x2 or 8x3 tile's k loop alone reaches
// on this core (94-96%); the update is the rest, about its FMA-pipe
// throughput (the sigmoids and tanhs share the FMA pipes with the
// products). So running each tile's update in pieces inside the next
// tile's k loop (as lstm_step does) cannot help, and did not: 412-417 us
// against 404-411; not kept.
// The same update for 2 NPAIR rows m .. of panel i, two rows a zmm: the
// gate halves of rows m and m+1 shuffled together ([i_m i_m+1] and so on:
// 4 shuffles a pair), then lstm_finish_n's stages on 16 lanes
// (wide::vsigmoid, wide::vtanh; every lane the same operations as the
// 8-lane code, so the same bits), c and h read and written as 8-lane
// halves. On a core with two 512-bit FMA pipes (Intel), half the update's
// operations. Rows that have ended, and a last panel of fewer than 8
// units, go row by row.
// Two 8-lane vectors' gates, from their [i f] and [g o] chains, as
// [i0 i1], [f0 f1], [g0 g1], [o0 o1]: the 16-lane updates' inputs (rows m
// and m+1 of the batched step, panels p and p+1 of the one-sample step).
FERRY_VEC_INLINE void pair_gates(wide::Vec (&a)[4], __m512 if0, __m512 go0, __m512 if1, __m512 go1) {
  a[0] = {_mm512_shuffle_f32x4(if0, if1, 0x44)};
  a[1] = {_mm512_shuffle_f32x4(if0, if1, 0xEE)};
  a[2] = {_mm512_shuffle_f32x4(go0, go1, 0x44)};
  a[3] = {_mm512_shuffle_f32x4(go0, go1, 0xEE)};
}

// The batched update (gemm + update[]: the int8 sets' batched steps) two
// panels of one row a zmm: pair_gates of panels p and p+1 (their [i f] and
// [g o] halves, contiguous in the gate row), the stages of finish_row_pairs
// on 16 lanes, c and h of the two panels one zmm each (they are adjacent).
// Every lane the 8-lane code's operations, so lstm_update's bits. A last odd
// panel, or a pair whose second panel has fewer than 8 units, goes 8 lanes.
void lstm_update_pairs(const UpdateArgs& u, uint32_t p0, uint32_t p1) {
  uint32_t p = p0;
  for (; p + 2 <= p1 && panel_lanes(p + 1, u.hidden) == 8; p += 2) {
    const float* g = u.gates + size_t{p} * 32;
    wide::Vec a[4];
    pair_gates(a, _mm512_loadu_ps(g), _mm512_loadu_ps(g + 16), _mm512_loadu_ps(g + 32), _mm512_loadu_ps(g + 48));
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) a[k] = k == 2 ? wide::vtanh(a[k]) : wide::vsigmoid(a[k]);
    float* c = u.c + size_t{p} * 8;
    const wide::Vec c1 = wide::vfma(a[1], {_mm512_loadu_ps(c)}, wide::vmul(a[0], a[2]));  // lstm_cell
    _mm512_storeu_ps(c, c1.v);
    _mm512_storeu_ps(u.h_new + size_t{p} * 8, wide::vmul(a[3], wide::vtanh(c1)).v);  // lstm_hidden
  }
  if (p < p1) avx2::lstm_update(u, p, p1);
}

template <int NPAIR, int MR, int NZ>
FERRY_VEC_INLINE void finish_row_pairs(const BatchStepArgs& s, const __m512 (&acc)[MR][NZ], size_t m0, int m, int i,
                                       uint32_t p) {
  constexpr int N = 2 * NPAIR;
  const uint32_t pi = p + static_cast<uint32_t>(i);
  bool wide_ok = panel_lanes(pi, s.hidden) == 8;
#pragma GCC unroll 8
  for (int n = 0; n < N; ++n) wide_ok = wide_ok && (!s.lengths || s.t < static_cast<size_t>(s.lengths[m0 + m + n]));
  if (!wide_ok) {
    for (int n = 0; n < N; ++n) finish_rows<1>(s, acc, m0, m + n, i, p);
    return;
  }
  wide::Vec a[NPAIR][4], c1[NPAIR];
  float* c[N];
  float* h[N];
#pragma GCC unroll 8
  for (int n = 0; n < N; ++n) {
    c[n] = s.c + (m0 + m + n) * s.ldc + size_t{pi} * 8;
    h[n] = s.h_new + (m0 + m + n) * s.ldh_new + size_t{pi} * 8;
  }
#pragma GCC unroll 4
  for (int j = 0; j < NPAIR; ++j) {
    pair_gates(a[j], acc[m + 2 * j][2 * i], acc[m + 2 * j][2 * i + 1], acc[m + 2 * j + 1][2 * i],
               acc[m + 2 * j + 1][2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int j = 0; j < NPAIR; ++j) {
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) a[j][g] = g == 2 ? wide::vtanh(a[j][g]) : wide::vsigmoid(a[j][g]);
  }
#pragma GCC unroll 4
  for (int j = 0; j < NPAIR; ++j) {
    const __m256d c_lo = _mm256_castps_pd(_mm256_loadu_ps(c[2 * j]));
    const __m256d c_hi = _mm256_castps_pd(_mm256_loadu_ps(c[2 * j + 1]));
    const wide::Vec c0 = {_mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(c_lo), c_hi, 1))};
    c1[j] = wide::vfma(a[j][1], c0, wide::vmul(a[j][0], a[j][2]));  // lstm_cell: f c + i g
    vstore(c[2 * j], lo(c1[j].v));
    vstore(c[2 * j + 1], hi(c1[j].v));
  }
#pragma GCC unroll 4
  for (int j = 0; j < NPAIR; ++j) {
    const wide::Vec hv = wide::vmul(a[j][3], wide::vtanh(c1[j]));  // lstm_hidden: o tanh(c')
    vstore(h[2 * j], lo(hv.v));
    vstore(h[2 * j + 1], hi(hv.v));
  }
}

template <int MR, int NP>
void lstm_batch_tile(const BatchStepArgs& s, size_t m0, uint32_t p) {
  constexpr int NZ = 2 * NP;
  __m512 acc[MR][NZ];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int z = 0; z < NZ; ++z) {
      acc[m][z] = s.bias ? _mm512_loadu_ps(s.bias->f32() + size_t{p} * 32 + 16 * z) : _mm512_setzero_ps();
    }
  }
  accumulate_rows<MR, NZ>(acc, *s.w_ih, s.x, s.ldx, m0, 4 * p);
  accumulate_rows<MR, NZ>(acc, *s.w_hh, s.h, s.ldh, m0, 4 * p);
#pragma GCC unroll 4
  for (int i = 0; i < NP; ++i) {
    int m = 0;
    for (; m + 4 <= MR; m += 4) finish_row_pairs<2>(s, acc, m0, m, i, p);
    for (; m + 2 <= MR; m += 2) finish_row_pairs<1>(s, acc, m0, m, i, p);
    for (; m < MR; ++m) finish_rows<1>(s, acc, m0, m, i, p);
  }
}

// Panels outside, rows inside, as gemm_panel8_8x32 (a panel's weights stay
// in L1 while the rows pass); below 4 rows, two panels per tile.
void lstm_batch_step_8x32(const BatchStepArgs& s, size_t m0, size_t m1, uint32_t p0, uint32_t p1) {
  uint32_t p = p0;
  if (m1 - m0 < 4) {
    for (; p + 2 <= p1; p += 2) row_tiles(m0, m1, [&](auto mr, size_t m) { lstm_batch_tile<decltype(mr)::value, 2>(s, m, p); });
  }
  for (; p < p1; ++p) row_tiles(m0, m1, [&](auto mr, size_t m) { lstm_batch_tile<decltype(mr)::value, 1>(s, m, p); });
}

// acc[i][0..1] = the two zmm of an LSTM panel row (i,f | g,o): += x[k] * W.
// One pointer per panel stream (see kernels.inl: accumulate).
template <int NP>
FERRY_VEC_INLINE void accumulate_lstm(__m512 (&acc)[NP][2], const Weight& weight, const float* x, uint32_t p) {
  const float* w = weight.f32();
  const uint32_t kk = weight.cols;
  const size_t panel = layout::panel8_panel_elements(4, kk);
  const float* wi[NP];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) wi[i] = w + (p + i) * panel;
  for (uint32_t k = 0; k < kk; ++k) {
    const __m512 xk = _mm512_set1_ps(x[k]);
#pragma GCC unroll 8
    for (int i = 0; i < NP; ++i) {
      acc[i][0] = _mm512_fmadd_ps(xk, _mm512_loadu_ps(wi[i]), acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(xk, _mm512_loadu_ps(wi[i] + 16), acc[i][1]);
      wi[i] += 32;
    }
  }
}

// The chains of panels p .. p+NP-1 up to their recurrent part: from the
// step's input parts (pre), or from the bias and W_ih x.
template <int NP>
FERRY_VEC_INLINE void lstm_input_part_init(__m512 (&acc)[NP][2], const StepArgs& s, uint32_t p) {
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) {
    const float* init = s.pre ? s.pre : s.bias ? s.bias->f32() : nullptr;
    const size_t col = (size_t{p} + i) * 32;
    acc[i][0] = init ? _mm512_loadu_ps(init + col) : _mm512_setzero_ps();
    acc[i][1] = init ? _mm512_loadu_ps(init + col + 16) : _mm512_setzero_ps();
  }
}

template <int NP>
FERRY_VEC_INLINE void lstm_input_part(__m512 (&acc)[NP][2], const StepArgs& s, uint32_t p) {
  lstm_input_part_init<NP>(acc, s, p);
  if (!s.pre && s.w_ih) accumulate_lstm<NP>(acc, *s.w_ih, s.x, p);
}

// ------------------------------------- pipelined step, 16-lane update --
//
// The AVX2 code's pipelined step (kernels.inl: lstm_step_pipelined) on zmm:
// a panel pair's 4 chains ([i f] and [g o] of each panel, init, W_ih x,
// W_hh h, two k a pass), and its update, on 16 lanes (the pair's gates
// shuffled together: [i_p i_p+1] and so on, units p*8 .. p*8+15 of c and
// h), run in six pieces over the next pair's products: the four gate
// activations, c', h'. Per k, one 64-byte load per cache line of weights
// instead of two 32-byte ones, and half the update's operations. The
// lanes, the chains and the operations are the AVX2 code's: the same bits.
constexpr int kWidePieces = 6;

struct WidePending {
  wide::Vec a[4];  // [i i], [f f], [g g], [o o]: pre-activations, then activations
  wide::Vec c1;
  uint32_t p;  // the pair's first panel
  int next;    // the next piece; kWidePieces: none left
};

// Units p*8 .. of a pair: 16, or fewer in a last pair (masked: lanes past
// the layer read as 0 and are not written).
FERRY_VEC_INLINE __mmask16 pair_mask(uint32_t p, uint32_t hidden) {
  const uint32_t left = hidden - p * 8;
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

FERRY_VEC_INLINE void wide_piece(WidePending& q, const StepArgs& s) {
  const int piece = q.next++;
  const __mmask16 mask = pair_mask(q.p, s.hidden);
  if (piece < 4) {
    q.a[piece] = piece == 2 ? wide::vtanh(q.a[piece]) : wide::vsigmoid(q.a[piece]);
  } else if (piece == 4) {  // lstm_cell: f c + i g
    float* c = s.c + size_t{q.p} * 8;
    q.c1 = wide::vfma(q.a[1], {_mm512_maskz_loadu_ps(mask, c)}, wide::vmul(q.a[0], q.a[2]));
    _mm512_mask_storeu_ps(c, mask, q.c1.v);
  } else {  // lstm_hidden: o tanh(c')
    _mm512_mask_storeu_ps(s.h_new + size_t{q.p} * 8, mask, wide::vmul(q.a[3], wide::vtanh(q.c1)).v);
  }
}

// acc[i][0..1] += x[k] * (panel p+i's row k), k ascending, two k a pass,
// between() after every `every` passes.
template <typename Between>
FERRY_VEC_INLINE void accumulate_pair(__m512 (&acc)[2][2], const Weight& weight, const float* x, uint32_t p,
                                      Between&& between, uint32_t every, uint32_t& left) {
  const uint32_t kk = weight.cols;
  const size_t panel = layout::panel8_panel_elements(4, kk);
  const float* w0 = weight.f32() + size_t{p} * panel;
  const float* w1 = w0 + panel;
  const float* xk = x;
  const float* const pairs_end = x + (kk & ~1u);
  for (; xk != pairs_end; xk += 2) {
    const __m512 x0 = _mm512_set1_ps(xk[0]), x1 = _mm512_set1_ps(xk[1]);
    acc[0][0] = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w0), acc[0][0]);
    acc[0][1] = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w0 + 16), acc[0][1]);
    acc[1][0] = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w1), acc[1][0]);
    acc[1][1] = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w1 + 16), acc[1][1]);
    acc[0][0] = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w0 + 32), acc[0][0]);
    acc[0][1] = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w0 + 48), acc[0][1]);
    acc[1][0] = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w1 + 32), acc[1][0]);
    acc[1][1] = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w1 + 48), acc[1][1]);
    w0 += 64;
    w1 += 64;
    if (--left == 0) {
      left = every;
      between();
    }
  }
  if (kk & 1) {
    const __m512 xl = _mm512_set1_ps(*xk);
    acc[0][0] = _mm512_fmadd_ps(xl, _mm512_loadu_ps(w0), acc[0][0]);
    acc[0][1] = _mm512_fmadd_ps(xl, _mm512_loadu_ps(w0 + 16), acc[0][1]);
    acc[1][0] = _mm512_fmadd_ps(xl, _mm512_loadu_ps(w1), acc[1][0]);
    acc[1][1] = _mm512_fmadd_ps(xl, _mm512_loadu_ps(w1 + 16), acc[1][1]);
  }
}

// The pair's pending update from its chains.
FERRY_VEC_INLINE void wide_pending(WidePending& q, const __m512 (&acc0)[2], const __m512 (&acc1)[2], uint32_t p) {
  pair_gates(q.a, acc0[0], acc0[1], acc1[0], acc1[1]);
  q.p = p;
  q.next = 0;
}

// The update of panels p .. p+NP-1 (NP even) from their complete gates,
// pair by pair on 16 lanes, stage by stage over the pairs.
template <int NP>
FERRY_VEC_INLINE void lstm_finish_acc(const __m512 (&acc)[NP][2], const StepArgs& s, uint32_t p) {
  static_assert(NP % 2 == 0, "panel pairs");
  WidePending q[NP / 2];
#pragma GCC unroll 4
  for (int j = 0; j < NP / 2; ++j) wide_pending(q[j], acc[2 * j], acc[2 * j + 1], p + 2 * static_cast<uint32_t>(j));
#pragma GCC unroll 6
  for (int piece = 0; piece < kWidePieces; ++piece) {
#pragma GCC unroll 4
    for (int j = 0; j < NP / 2; ++j) wide_piece(q[j], s);
  }
}

// Panel pairs from p0 while two fit; returns the first panel not done.
uint32_t lstm_step_pipelined_wide(const StepArgs& s, uint32_t p0, uint32_t p1) {
  WidePending q;  // not zeroed whole: its rep stos took 4% of W1 H 16's step; no piece runs before a pair fills it
  q.p = 0;        // (quiets GCC's maybe-uninitialized)
  q.next = kWidePieces;
  const auto piece = [&q, &s] {
    if (q.next < kWidePieces) wide_piece(q, s);
  };
  const bool input = !s.pre && s.w_ih;
  const uint32_t pairs = ((input ? s.w_ih->cols : 0) + s.w_hh->cols) / 2;  // of k, over both products
  const uint32_t every = pairs / kWidePieces > 0 ? pairs / kWidePieces : 1;
  uint32_t p = p0;
  for (; p + 2 <= p1; p += 2) {
    __m512 acc[2][2];
    lstm_input_part_init<2>(acc, s, p);
    uint32_t left = every;
    if (input) accumulate_pair(acc, *s.w_ih, s.x, p, piece, every, left);
    accumulate_pair(acc, *s.w_hh, s.h, p, piece, every, left);
    while (q.next < kWidePieces) wide_piece(q, s);  // k too short for all six
    if (p + 4 > p1) {  // the last pair: nothing left to overlap, its update straight on the registers
      lstm_finish_acc<2>(acc, s, p);
      return p + 2;
    }
    wide_pending(q, acc[0], acc[1], p);
  }
  return p;
}

// Ranges of 2 panels or more (H >= 16), the pipelined step above; a lone
// panel (H <= 8, or a thread's share of one) and a last odd one, the AVX2
// code (kernels.inl: lstm_step). On this
// session's Intel Xeon (two 512-bit FMA pipes), ferry_peer_bench W1, 3
// alternations, against the AVX2 code below 16 panels and 4-panel zmm
// groups (8 chains, the update after their products) from 16: H 16
// 71.1-73.0 against 76.4-78.1 ns, H 64 834-856 against 1,038-1,046, H 256
// 17.7-19.1 against 19.2-20.3 us, H 1024 1,088-1,096 against 1,107-1,124
// us; H 32 180 against 225 ns (BM_LstmStepPerSet). Not measured on Zen 4,
// which runs a zmm operation as two ymm halves (where the AVX2 code had
// beaten the unpipelined 4-panel groups below H 128: H 64 1,342 against
// 1,465 ns; this step is that code's own pipeline on zmm).

void lstm_step_1x32(const StepArgs& s, uint32_t p0, uint32_t p1) {
  const uint32_t p = p1 - p0 >= 2 ? lstm_step_pipelined_wide(s, p0, p1) : p0;
  avx2::lstm_step(s, p, p1);
}

// ---------------------------------------------- GRU step, [r z] a zmm --
//
// The GRU's panel row is r, z, n (24 floats a k). Here a panel's [r z] is
// one zmm chain and its n a ymm chain, so that per k a panel takes 2 FMAs
// instead of the AVX2 code's 3. The chains are the AVX2 code's (kernels.inl:
// gru_step_panels): r and z from the input part through W_ih x and W_hh h,
// n's input part and its recurrent part (from b_hn) apart, k ascending.
// The update of a panel pair runs on 16 lanes: the sigmoid on each panel's
// [r z] as it lies, then [r r'], [z z'], [n_x n_x'], [n_h n_h'] shuffled
// together for tanh and h'; every lane the AVX2 code's operations, so the
// same bits.
//
// Two rows of a panel (k even, k + 1) are 192 bytes: three aligned zmm
// [r z], [n r'], [z' n'] where the panel starts on a cache line (even K:
// every panel of a 64-byte-aligned matrix), [r' z'] put together by one
// valignd; odd K reads the rows as they lie ([r z] of every odd k
// straddling two lines). Measured alone (ferry_bench_kernels
// BM_GruStreamModel, the step's loads and FMAs, alternating direction, on
// this session's Intel Xeon), the two tie: H 64 710-931 against 746-918
// ns; through ferry_step (ferry_peer_bench W4, 8 alternations, min / lower
// quartile / median of the runs' trial minima) the aligned form is ahead:
// H 64 946 / 961 / 968 against 982 / 1,000 / 1,048 ns, H 256 16.3 / 16.9 /
// 16.9 against 16.8 / 17.3 / 17.4 us, H 16 a tie. What bounds both is the
// loop itself: 3 FMAs a pair of rows instead
// of 4 ran 551-759 ns, but no exact form has that (each gate's lanes move
// between the two rows, and with 512-bit operations in flight the n gate's
// ymm FMAs take the same two ports as zmm ones).
FERRY_VEC_INLINE __m512 join(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

// [r' z'] of the odd row from the pair's second and third zmm.
FERRY_VEC_INLINE __m512 rows_odd_rz(__m512 b, __m512 c) {
  return _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(c), _mm512_castps_si512(b), 8));
}

// rz[i] += x[k] * [r z] and n[i] += x[k] * n of panel p+i's row k, k
// ascending, two k a pass.
template <int NP>
FERRY_VEC_INLINE void gru_accumulate_wide(__m512 (&rz)[NP], __m256 (&n)[NP], const Weight& weight, const float* x,
                                          uint32_t p) {
  const uint32_t kk = weight.cols;
  const size_t panel = layout::panel8_panel_elements(3, kk);
  const float* wi[NP];
#pragma GCC unroll 4
  for (int i = 0; i < NP; ++i) wi[i] = weight.f32() + (p + i) * panel;
  const float* xk = x;
  const float* const pairs_end = x + (kk & ~1u);
  if ((kk & 1) == 0 && (reinterpret_cast<uintptr_t>(wi[0]) & 63) == 0) {
    for (; xk != pairs_end; xk += 2) {
      const __m512 x0 = _mm512_set1_ps(xk[0]), x1 = _mm512_set1_ps(xk[1]);
#pragma GCC unroll 4
      for (int i = 0; i < NP; ++i) {
        const __m512 a = _mm512_load_ps(wi[i]), b = _mm512_load_ps(wi[i] + 16), c = _mm512_load_ps(wi[i] + 32);
        rz[i] = _mm512_fmadd_ps(x0, a, rz[i]);
        n[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(x0), _mm512_castps512_ps256(b), n[i]);
        rz[i] = _mm512_fmadd_ps(x1, rows_odd_rz(b, c), rz[i]);
        n[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(x1), _mm256_load_ps(wi[i] + 40), n[i]);
        wi[i] += 48;
      }
    }
    return;
  }
  for (; xk != pairs_end; xk += 2) {
    const __m512 x0 = _mm512_set1_ps(xk[0]), x1 = _mm512_set1_ps(xk[1]);
#pragma GCC unroll 4
    for (int i = 0; i < NP; ++i) {
      rz[i] = _mm512_fmadd_ps(x0, _mm512_loadu_ps(wi[i]), rz[i]);
      n[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(x0), _mm256_loadu_ps(wi[i] + 16), n[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < NP; ++i) {
      rz[i] = _mm512_fmadd_ps(x1, _mm512_loadu_ps(wi[i] + 24), rz[i]);
      n[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(x1), _mm256_loadu_ps(wi[i] + 40), n[i]);
      wi[i] += 48;
    }
  }
  if (kk & 1) {
    const __m512 xl = _mm512_set1_ps(*xk);
#pragma GCC unroll 4
    for (int i = 0; i < NP; ++i) {
      rz[i] = _mm512_fmadd_ps(xl, _mm512_loadu_ps(wi[i]), rz[i]);
      n[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(xl), _mm256_loadu_ps(wi[i] + 16), n[i]);
    }
  }
}

// Panels p .. p+NP-1 (NP even) of the step: products, then the update pair
// by pair, stage by stage over the pairs.
template <int NP>
FERRY_VEC_INLINE void gru_step_wide_panels(const StepArgs& s, uint32_t p) {
  static_assert(NP % 2 == 0, "panel pairs");
  __m512 rz[NP];
  __m256 nx[NP], nh[NP];
  const float* init = s.pre ? s.pre : s.bias ? s.bias->f32() : nullptr;
#pragma GCC unroll 4
  for (int i = 0; i < NP; ++i) {
    const size_t col = (size_t{p} + i) * 24;
    rz[i] = init ? _mm512_loadu_ps(init + col) : _mm512_setzero_ps();
    nx[i] = init ? _mm256_loadu_ps(init + col + 16) : _mm256_setzero_ps();
  }
  if (!s.pre && s.w_ih) gru_accumulate_wide<NP>(rz, nx, *s.w_ih, s.x, p);
#pragma GCC unroll 4
  for (int i = 0; i < NP; ++i)
    nh[i] = s.b_hn ? _mm256_loadu_ps(s.b_hn->f32() + (size_t{p} + i) * 8) : _mm256_setzero_ps();
  gru_accumulate_wide<NP>(rz, nh, *s.w_hh, s.h, p);
  constexpr int kPairs = NP / 2;
  wide::Vec g[NP], r[kPairs], z[kPairs], n[kPairs];
#pragma GCC unroll 4
  for (int i = 0; i < NP; ++i) g[i] = wide::vsigmoid({rz[i]});
#pragma GCC unroll 2
  for (int j = 0; j < kPairs; ++j) {
    r[j] = {_mm512_shuffle_f32x4(g[2 * j].v, g[2 * j + 1].v, 0x44)};
    z[j] = {_mm512_shuffle_f32x4(g[2 * j].v, g[2 * j + 1].v, 0xEE)};
    n[j] = wide::vtanh(wide::vfma(r[j], {join(nh[2 * j], nh[2 * j + 1])}, {join(nx[2 * j], nx[2 * j + 1])}));
  }
#pragma GCC unroll 2
  for (int j = 0; j < kPairs; ++j) {
    const uint32_t pj = p + 2 * static_cast<uint32_t>(j);
    const __mmask16 mask = pair_mask(pj, s.hidden);
    const wide::Vec h0 = {_mm512_maskz_loadu_ps(mask, s.h + size_t{pj} * 8)};
    _mm512_mask_storeu_ps(s.h_new + size_t{pj} * 8, mask, wide::vfma(z[j], wide::vsub(h0, n[j]), n[j]).v);
  }
}

// Groups of 4 panels (8 chains: 4 zmm, 4 ymm), then a pair; a last odd
// panel on the AVX2 code.
void gru_step_wide(const StepArgs& s, uint32_t p0, uint32_t p1) {
  uint32_t p = p0;
  for (; p + 4 <= p1; p += 4) gru_step_wide_panels<4>(s, p);
  if (p + 2 <= p1) {
    gru_step_wide_panels<2>(s, p);
    p += 2;
  }
  avx2::gru_step(s, p, p1);
}

// ------------------------------------------ steps with a projection share --

// The tiles of a projection share: rows in blocks of `block` (the last may
// be shorter) times `columns` column groups of W, numbered column-major, so
// that the consecutive tiles of one share read the same slice of W (16 KiB
// at K 256) for all the chunk's rows. The LSTM's: 8 rows x one zmm of W (2
// vectors); the GRU's: 4 rows x one panel (3 vectors).
struct ShareTiles {
  size_t block;       // rows a tile
  size_t row_blocks;
  size_t lo, hi;      // this share's tiles
};

ShareTiles share_tiles(const ProjectShare& pr, size_t block, size_t columns) {
  ShareTiles t;
  t.block = block;
  t.row_blocks = (pr.rows + block - 1) / block;
  const size_t n = t.row_blocks * columns;
  t.lo = n * pr.share / pr.shares;
  t.hi = n * (size_t{pr.share} + 1) / pr.shares;
  return t;
}

// Tile i: f(std::integral_constant<int, MR>(), its first row, its column
// group) with MR its rows.
template <typename F>
FERRY_VEC_INLINE void with_share_tile(const ProjectShare& pr, const ShareTiles& t, size_t i, F&& f) {
  const size_t m0 = i % t.row_blocks * t.block;
  const uint32_t column = static_cast<uint32_t>(i / t.row_blocks);
  with_rows(pr.rows - m0 < t.block ? pr.rows - m0 : t.block, [&](auto mr) { f(mr, m0, column); });
}

// The LSTM's tile i: its first vector q (even) = 2 x its zmm column.
template <typename F>
FERRY_VEC_INLINE void with_tile(const ProjectShare& pr, const ShareTiles& t, size_t i, F&& f) {
  with_share_tile(pr, t, i, [&](auto mr, size_t m0, uint32_t z) { f(mr, m0, 2 * z); });
}

// Tile i alone (gemm_panel8_8x32's tile).
void share_tile(const ProjectShare& pr, const ShareTiles& t, size_t i) {
  const GemmArgs g{pr.w, pr.a, pr.lda, pr.bias, nullptr, pr.c, pr.ldc, layout::gate_row_floats(pr.w->gates, pr.w->units)};
  with_tile(pr, t, i, [&](auto mr, size_t m0, uint32_t q) { tile<decltype(mr)::value, 1>(g, m0, q); });
}

// step_k(k) for k < kh and project_k(k) for k < kx, each k ascending, the
// two alternating while both have one left.
template <typename StepK, typename ProjectK>
FERRY_VEC_INLINE void interleave_k(uint32_t kh, uint32_t kx, StepK&& step_k, ProjectK&& project_k) {
  const uint32_t kb = kh < kx ? kh : kx;
  uint32_t k = 0;
  for (; k < kb; ++k) {
    step_k(k);
    project_k(k);
  }
  for (uint32_t j = k; j < kh; ++j) step_k(j);
  for (uint32_t j = k; j < kx; ++j) project_k(j);
}

// Four LSTM panels of the step (lstm_step_panels_x4<4>) and the MR x 1-zmm
// projection tile at rows m0, vector q in one k loop: per k, 8 FMAs of the
// step on weights from L2 and MR FMAs of the tile. Each accumulator is the
// chain its own kernel computes (the step's: init, W_ih x, W_hh h; the
// tile's: bias, W x).
template <int MR>
void lstm_panels_x4_project(const StepArgs& s, uint32_t p, const ProjectShare& pr, size_t m0, uint32_t q) {
  constexpr int NP = 4;
  __m512 acc[NP][2];
  lstm_input_part<NP>(acc, s, p);
  __m512 pa[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) pa[m] = pr.bias ? _mm512_loadu_ps(pr.bias->f32() + size_t{q} * 8) : _mm512_setzero_ps();

  const uint32_t kh = s.w_hh->cols, kx = pr.w->cols;
  const size_t panel = layout::panel8_panel_elements(4, kh);
  const float* wh[NP];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) wh[i] = s.w_hh->f32() + (p + i) * panel;
  const size_t ldw = layout::panel8_column_stride(pr.w->gates);
  const float* wp = pr.w->f32() + layout::panel8_vector_index(pr.w->gates, kx, q);
  const float* a[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) a[m] = pr.a + (m0 + m) * pr.lda;
  const float* h = s.h;
  auto step_k = [&](uint32_t k) {
    const __m512 hk = _mm512_set1_ps(h[k]);
#pragma GCC unroll 8
    for (int i = 0; i < NP; ++i) {
      acc[i][0] = _mm512_fmadd_ps(hk, _mm512_loadu_ps(wh[i]), acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(hk, _mm512_loadu_ps(wh[i] + 16), acc[i][1]);
      wh[i] += 32;
    }
  };
  auto project_k = [&](uint32_t k) {
    const __m512 w = _mm512_loadu_ps(wp);
    wp += ldw;
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) pa[m] = _mm512_fmadd_ps(_mm512_set1_ps(a[m][k]), w, pa[m]);
  };
  interleave_k(kh, kx, step_k, project_k);
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) _mm512_storeu_ps(pr.c + (m0 + m) * pr.ldc + size_t{q} * 8, pa[m]);
  lstm_finish_acc<NP>(acc, s, p);
}

// The driver of both step_project entries: the step over every panel in
// groups of `size` (from the end when `reverse`, as step_all_panels splits
// them) with the share's tiles spread over its first `groups` full groups:
// group j of F takes tiles [j m / F, (j + 1) m / F) of the share's m, the
// first in its own loop (fused(p0, tile)) and any more alone after it
// (alone(tile)). A group without a tile, a partial group, and every group
// when `groups` is 0 run plain(p0, p1); with no fused group the tiles run
// alone after the step.
template <typename Plain, typename Fused, typename Alone>
FERRY_VEC_INLINE void step_project_groups(uint32_t panels, bool reverse, uint32_t size, uint32_t groups,
                                          const ShareTiles& t, Plain&& plain, Fused&& fused, Alone&& alone) {
  const size_t m = t.hi - t.lo;
  uint32_t j = 0;  // groups run so far
  auto group = [&](uint32_t p0, uint32_t p1) {
    if (p1 - p0 != size || groups == 0) {
      plain(p0, p1);
      return;
    }
    const size_t b = t.lo + j * m / groups, e = t.lo + (j + 1) * m / groups;
    ++j;
    if (b == e) {
      plain(p0, p1);
      return;
    }
    fused(p0, b);
    for (size_t i = b + 1; i < e; ++i) alone(i);
  };
  if (!reverse) {
    uint32_t p = 0;
    for (; p + size <= panels; p += size) group(p, p + size);
    if (p < panels) group(p, panels);
  } else {
    for (uint32_t p1 = panels; p1 > 0;) {
      const uint32_t p0 = p1 > size ? p1 - size : 0;
      group(p0, p1);
      p1 = p0;
    }
  }
  if (groups == 0) {
    for (size_t i = t.lo; i < t.hi; ++i) alone(i);
  }
}

// The LSTM: groups of 4 panels, fused from 16 panels (below, the step is
// the AVX2 code's; the tiles run alone after it).
void lstm_step_project(const StepArgs& s, const ProjectShare& pr, uint32_t panels, bool reverse) {
  const ShareTiles t = share_tiles(pr, 8, pr.w->gates * layout::panels_of(s.hidden) / 2);
  step_project_groups(
      panels, reverse, 4, panels >= 16 ? panels / 4 : 0, t, [&](uint32_t p0, uint32_t p1) { lstm_step_1x32(s, p0, p1); },
      [&](uint32_t p0, size_t i) {
        with_tile(pr, t, i, [&](auto mr, size_t m0, uint32_t q) {
          lstm_panels_x4_project<decltype(mr)::value>(s, p0, pr, m0, q);
        });
      },
      [&](size_t i) { share_tile(pr, t, i); });
}

// ---------------------------------- GRU steps with a projection share --
//
// The GRU's gate row is 3 vectors a panel, so a zmm pair of vectors crosses
// a panel every other time: its share tiles here are 4 rows x one panel
// (alone: tile_gates3). Beside the step's 9 ymm chains, whose registers are
// ymm0-15 too, the tile's panel row (r, z, n: 24 floats a k) is read as two
// zmm, [r z] and [z n]: the z lanes are computed twice (the same chain both
// times) and the second's upper half gives n. Each lane is still its chain
// (bias, then k ascending).
constexpr size_t kGruTileRows = 4;

// Tile i alone: the set's gemm over its rows and the panel's 3 vectors.
void gru_share_tile(const ProjectShare& pr, const ShareTiles& t, size_t i) {
  const GemmArgs g{pr.w, pr.a, pr.lda, pr.bias, nullptr, pr.c, pr.ldc, layout::gate_row_floats(pr.w->gates, pr.w->units)};
  with_share_tile(pr, t, i, [&](auto mr, size_t m0, uint32_t pp) {
    gemm_panel8_8x32(g, m0, m0 + decltype(mr)::value, 3 * pp, 3 * pp + 3);
  });
}

// Three GRU panels of the step from their input parts (gru_step_panels<3>'s
// chains: r, z and n's recurrent part from b_hn, k ascending; 9 ymm) and the
// MR x 1-panel projection tile at rows m0, panel pp (2 MR zmm) in one k loop.
template <int MR>
void gru_panels_project(const StepArgs& s, uint32_t p, const ProjectShare& pr, size_t m0, uint32_t pp) {
  constexpr int NP = 3;
  Vec acc[NP][3], nx[NP];
#pragma GCC unroll 3
  for (int i = 0; i < NP; ++i) {
    const size_t col = (size_t{p} + i) * 24;
    acc[i][0] = vload(s.pre + col);
    acc[i][1] = vload(s.pre + col + 8);
    nx[i] = vload(s.pre + col + 16);
    acc[i][2] = s.b_hn ? vload(s.b_hn->f32() + (size_t{p} + i) * 8) : vzero();
  }
  __m512 rz[MR], zn[MR];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
    rz[m] = pr.bias ? _mm512_loadu_ps(pr.bias->f32() + size_t{pp} * 24) : _mm512_setzero_ps();
    zn[m] = pr.bias ? _mm512_loadu_ps(pr.bias->f32() + size_t{pp} * 24 + 8) : _mm512_setzero_ps();
  }
  const uint32_t kh = s.w_hh->cols, kx = pr.w->cols;
  const float* wh[NP];
#pragma GCC unroll 3
  for (int i = 0; i < NP; ++i) wh[i] = s.w_hh->f32() + (p + i) * layout::panel8_panel_elements(3, kh);
  const float* wp = pr.w->f32() + pp * layout::panel8_panel_elements(3, kx);
  const float* a[MR];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) a[m] = pr.a + (m0 + m) * pr.lda;
  const float* h = s.h;
  auto step_k = [&](uint32_t k) {
    const Vec hk = vbroadcast(h + k);
#pragma GCC unroll 3
    for (int i = 0; i < NP; ++i) {
#pragma GCC unroll 3
      for (int g = 0; g < 3; ++g) acc[i][g] = vfma(hk, vload(wh[i] + g * 8), acc[i][g]);
      wh[i] += 24;
    }
  };
  auto project_k = [&](uint32_t k) {
    const __m512 w0 = _mm512_loadu_ps(wp), w1 = _mm512_loadu_ps(wp + 8);
    wp += 24;
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const __m512 xm = _mm512_set1_ps(a[m][k]);
      rz[m] = _mm512_fmadd_ps(xm, w0, rz[m]);
      zn[m] = _mm512_fmadd_ps(xm, w1, zn[m]);
    }
  };
  interleave_k(kh, kx, step_k, project_k);
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
    float* c = pr.c + (m0 + m) * pr.ldc + size_t{pp} * 24;
    _mm512_storeu_ps(c, rz[m]);
    vstore(c + 16, hi(zn[m]));
  }
#pragma GCC unroll 3
  for (int i = 0; i < NP; ++i) gru_finish(acc[i][0], acc[i][1], nx[i], acc[i][2], s.h, s.h_new, p + i, s.hidden);
}

// The GRU: groups of 3 panels, fused at any size (the step is the AVX2
// code's either way). A step that computes its own input part (no `pre`: a
// last chunk of one step) runs unfused: the step, then the tiles.
void gru_step_project(const StepArgs& s, const ProjectShare& pr, uint32_t panels, bool reverse) {
  const ShareTiles t = share_tiles(pr, kGruTileRows, layout::panels_of(s.hidden));
  step_project_groups(
      panels, reverse, 3, s.pre ? panels / 3 : 0, t, [&](uint32_t p0, uint32_t p1) { avx2::gru_step(s, p0, p1); },
      [&](uint32_t p0, size_t i) {
        with_share_tile(pr, t, i, [&](auto mr, size_t m0, uint32_t pp) {
          gru_panels_project<decltype(mr)::value>(s, p0, pr, m0, pp);
        });
      },
      [&](size_t i) { gru_share_tile(pr, t, i); });
}

}  // namespace
}  // namespace avx512

namespace avx512 {
using namespace avx2;  // every entry this set does not replace
#define FERRY_KERNEL_SET_NAME "f32_avx512"
#define FERRY_SET_GEMM gemm_panel8_8x32
#define FERRY_SET_LSTM_STEP lstm_step_1x32
#define FERRY_SET_LSTM_GROUP 4
#define FERRY_SET_GRU_STEP gru_step_wide
#define FERRY_SET_GRU_GROUP 4
#define FERRY_SET_LSTM_BATCH_STEP lstm_batch_step_8x32
// The AVX2 set's batched GRU step (batch_step.inl: 4 rows x r, z, n on
// ymm), ahead of this set's gemm + update at every batch it runs (Zen 4,
// GRU(64, 256), thread CPU time, min of 100 interleaved rounds: B 8 38.4
// against 42.3 us, B 16 75.4 / 84.2, B 64 296.7 / 325.2).
#define FERRY_SET_GRU_BATCH_STEP avx2::gru_batch_step
#define FERRY_SET_LSTM_STEP_PROJECT lstm_step_project
#define FERRY_SET_GRU_STEP_PROJECT gru_step_project
#include "kernels/simd/table.inl"
}  // namespace avx512

const KernelSet* f32_avx512_kernel_set() { return &avx512::f32_kernel_set; }
void lstm_update_avx512(const UpdateArgs& u, uint32_t p0, uint32_t p1) { avx512::lstm_update_pairs(u, p0, p1); }

}  // namespace kernels
}  // namespace ferry

#else

namespace ferry {
namespace kernels {
const KernelSet* f32_avx512_kernel_set() { return nullptr; }
}  // namespace kernels
}  // namespace ferry

#endif
