// The low-precision SIMD kernels (f16, i8, i4), written once over the
// 8-lane float `Vec` of simd/vec_<isa>.h (with simd/math.inl's
// nonlinearities and state updates) and the integer primitives of
// ops_<isa>.h, and compiled once per ISA inside that ISA's namespace
// (x86_avx2.cpp, x86_avxvnni.cpp, x86_avx512vnni.cpp, arm_neon.cpp,
// arm_neondot.cpp). The contract -- activation quantization, the fp32
// formulas, what gemm / step / quantize_rows do -- is kernels/kernel_set.h's
// ("quantized sets"); the layouts are shared/weight_layout.h's.
//
// Primitives an ops_<isa>.h provides (all static inline):
//   Vec qfma(a, b, c)                            a * b + c rounded once (the
//                                                contract's fma; vec_neon.h's
//                                                vfma is two roundings on ARMv7)
//   Vec vload_h(const uint16_t*)                 8 halves -> 8 floats, exact
//   QW qw_load(const int8_t*)                    one Panel8x4 vector of a quad
//   QX qx_load(const int8_t*)                    a quad of activations, every lane
//   QAcc qacc_zero(); QAcc qacc_dot(QAcc, QW, QX)  acc[j] + sum_i w[4j+i] x[i]
//   Vec qacc_float(QAcc)                         float(acc[j])
//   Q4W q4w_load(const uint8_t*)                 one int4 block, nibbles unpacked
//   Q4X q4x_load(const int8_t*)                  a quad of activations, every lane
//   GAcc gacc_zero(); GAcc gacc_block(GAcc, Q4W, Q4X, Q4X)  a group's nibble sums
//   Vec gacc_float(GAcc, int32_t c)              float(sum - c)
//   uint32_t qmax_abs_bits(const float*, k); qround(const float*, k, inv, int8_t*)
// FERRY_LOWP_HAS_F16 (0/1): whether this ISA has the f16 kernels.
//
// Shape of the kernels, as simd/kernels.inl for f32: GEMM tiles of MR rows
// x NV vectors; fused steps over NP panels of all G gates (accumulators
// NP*G: LSTM 2 x 4, GRU 3 x 3, RNN 8 x 1), one pointer per panel stream.
// Each output is exactly the contract's formula, so tiling, panel groups
// and thread splits never change a bit.

// ------------------------------------------------------------ helpers --

// The quantized A row of a product, or the float one (f16).
struct Act {
  const float* x;
  const int8_t* q;
  float scale;
};

// Initial value of output column `col` of GEMM row `m`: the row's c_init,
// else the bias (a Panel8 vector: whole panels, always 8 lanes), else 0.
FERRY_VEC_INLINE Vec gemm_init(const GemmArgs& g, size_t m, uint32_t col) {
  if (g.c_init) {
    const float* p = g.c_init + m * g.ldc + col;
    return col + 8 <= g.n_store ? vload(p) : vload_partial(p, g.n_store - col);
  }
  if (g.bias) return vload(g.bias->f32() + col);
  return vzero();
}

FERRY_VEC_INLINE void gemm_store(const GemmArgs& g, size_t m, uint32_t col, Vec v) {
  float* c = g.c + m * g.ldc + col;
  if (col + 8 <= g.n_store) {
    vstore(c, v);
  } else if (col < g.n_store) {
    vstore_partial(c, v, g.n_store - col);
  }
}

// Rows [m0, m1) x vectors [q0, q1) in tiles of Tile::run<MR, NV>:
// kRows x kVectors when there are kRows rows or more (vector groups
// outside, rows inside: the group's weights stay in L1 while the rows pass),
// else MR = the row count with as many vectors as Tile::wide<MR>.
template <class Tile, int NV>
static void gemm_rows(const GemmArgs& g, size_t m0, size_t m1, uint32_t q) {
  constexpr int MB = Tile::kRows;
  size_t m = m0;
  for (; m + MB <= m1; m += MB) Tile::template run<MB, NV>(g, m, q);
  switch (m1 - m) {
    case 5: if constexpr (MB > 5) Tile::template run<(MB > 5 ? 5 : 1), NV>(g, m, q); break;
    case 4: if constexpr (MB > 4) Tile::template run<(MB > 4 ? 4 : 1), NV>(g, m, q); break;
    case 3: if constexpr (MB > 3) Tile::template run<(MB > 3 ? 3 : 1), NV>(g, m, q); break;
    case 2: if constexpr (MB > 2) Tile::template run<(MB > 2 ? 2 : 1), NV>(g, m, q); break;
    case 1: Tile::template run<1, NV>(g, m, q); break;
    default: break;
  }
}

template <class Tile, int MR>
static void gemm_vectors(const GemmArgs& g, size_t m0, uint32_t q0, uint32_t q1) {
  constexpr int kWide = Tile::template wide<MR>();
  uint32_t q = q0;
  for (; q + kWide <= q1; q += kWide) Tile::template run<MR, kWide>(g, m0, q);
  if constexpr (kWide > 4) {
    if (q + 4 <= q1) {
      Tile::template run<MR, 4>(g, m0, q);
      q += 4;
    }
  }
  if constexpr (kWide > 2) {
    if (q + 2 <= q1) {
      Tile::template run<MR, 2>(g, m0, q);
      q += 2;
    }
  }
  if (q < q1) Tile::template run<MR, 1>(g, m0, q);
}

template <class Tile>
static void gemm_tiles(const GemmArgs& g, size_t m0, size_t m1, uint32_t q0, uint32_t q1) {
  constexpr int MB = Tile::kRows, NB = Tile::kVectors;
  const size_t rows = m1 - m0;
  if (rows >= static_cast<size_t>(MB)) {
    uint32_t q = q0;
    for (; q + NB <= q1; q += NB) gemm_rows<Tile, NB>(g, m0, m1, q);
    for (; q < q1; ++q) gemm_rows<Tile, 1>(g, m0, m1, q);
    return;
  }
  switch (rows) {
    case 5: if constexpr (MB > 5) gemm_vectors<Tile, (MB > 5 ? 5 : 1)>(g, m0, q0, q1); break;
    case 4: if constexpr (MB > 4) gemm_vectors<Tile, (MB > 4 ? 4 : 1)>(g, m0, q0, q1); break;
    case 3: if constexpr (MB > 3) gemm_vectors<Tile, (MB > 3 ? 3 : 1)>(g, m0, q0, q1); break;
    case 2: if constexpr (MB > 2) gemm_vectors<Tile, (MB > 2 ? 2 : 1)>(g, m0, q0, q1); break;
    case 1: gemm_vectors<Tile, 1>(g, m0, q0, q1); break;
    default: break;
  }
}

// ------------------------------------------------------- activations --

static uint32_t i8_activation_bytes(uint32_t k) { return static_cast<uint32_t>(layout::k4_of(k)); }
static uint32_t i4_activation_bytes(uint32_t k) {
  const uint32_t kp = static_cast<uint32_t>(layout::k32_of(k));
  return kp + 4 * (kp / layout::kGroup);
}

// One row, as reference_quant.cpp's quantize_row (kernel_set.h: m on the
// bit patterns; NaN/Inf -> s = NaN; m < 2^-120 -> s = 0, q = 0).
static void quantize_row(const float* x, uint32_t k, uint32_t kp, int8_t* q, float* scale) {
  const uint32_t m = qmax_abs_bits(x, k);
  if (m >= 0x7f800000u || m < 0x03800000u) {
    *scale = m >= 0x7f800000u ? __builtin_nanf("") : 0.0f;
    memset(q, 0, kp);
    return;
  }
  float mf;
  memcpy(&mf, &m, sizeof mf);
  *scale = mf / 127.0f;
  qround(x, k, 127.0f / mf, q);
  for (uint32_t i = k; i < kp; ++i) q[i] = 0;
}

static void i8_quantize_rows(const float* x, size_t rows, size_t ldx, uint32_t k, int8_t* q, size_t ldq,
                             float* scales) {
  const uint32_t kp = static_cast<uint32_t>(layout::k4_of(k));
  for (size_t r = 0; r < rows; ++r) quantize_row(x + r * ldx, k, kp, q + r * ldq, scales + r);
}

static void i4_quantize_rows(const float* x, size_t rows, size_t ldx, uint32_t k, int8_t* q, size_t ldq,
                             float* scales) {
  const uint32_t kp = static_cast<uint32_t>(layout::k32_of(k));
  for (size_t r = 0; r < rows; ++r) {
    int8_t* row = q + r * ldq;
    quantize_row(x + r * ldx, k, kp, row, scales + r);
    for (uint32_t g = 0; g < kp / layout::kGroup; ++g) {
      int32_t sum = 0;
      for (uint32_t i = 0; i < layout::kGroup; ++i) sum += row[g * layout::kGroup + i];
      sum *= 8;
      memcpy(row + kp + 4 * g, &sum, sizeof sum);
    }
  }
}

// ----------------------------------------------------------- products --
//
// y[i][g] (gate g of panel p + i, 8 lanes) continued by W's product with
// one activation row (kernel_set.h):
//   f16  y = fma(x[k], float(w[k]), y), k ascending
//   i8   y = fma(w_scale * a_scale, float(dot), y)
//   i4   acc = fma(gscale, float(dot_g), acc) over groups from 0; y = fma(acc, a_scale, y)

#if FERRY_LOWP_HAS_F16
template <int NP, int G>
FERRY_VEC_INLINE void f16_product(Vec (&y)[NP][G], const Weight& w, const Act& a, uint32_t p) {
  const uint32_t kk = w.cols;
  const size_t panel = layout::panel8_panel_elements(G, kk);
  const uint16_t* wi[NP];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) wi[i] = w.f16() + (p + i) * panel;
  for (uint32_t k = 0; k < kk; ++k) {
    const Vec xk = vbroadcast(a.x + k);
#pragma GCC unroll 8
    for (int i = 0; i < NP; ++i) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) y[i][g] = qfma(xk, vload_h(wi[i] + g * 8), y[i][g]);
      wi[i] += G * 8;
    }
  }
}
#endif

template <int NP, int G>
FERRY_VEC_INLINE void i8_product(Vec (&y)[NP][G], const Weight& w, const Act& a, uint32_t p) {
  const uint32_t quads = static_cast<uint32_t>(layout::k4_of(w.cols) / layout::kQuad);
  const size_t panel = layout::panel8x4_panel_bytes(G, w.cols);
  const int8_t* wi[NP];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) wi[i] = w.i8() + (p + i) * panel;
  QAcc acc[NP][G];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[i][g] = qacc_zero();
  const int8_t* xq = a.q;
  for (uint32_t c = 0; c < quads; ++c) {
    const QX x = qx_load(xq);
    xq += 4;
#pragma GCC unroll 8
    for (int i = 0; i < NP; ++i) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[i][g] = qacc_dot(acc[i][g], qw_load(wi[i] + g * 32), x);
      wi[i] += G * 32;
    }
  }
  // The sums leave through memory: an optimisation barrier without which
  // GCC 12's register allocator keeps three of the eight LSTM accumulators
  // on the stack inside the loop above (a store and a load per quad).
  QAcc sums[NP][G];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) sums[i][g] = acc[i][g];
  __asm__ volatile("" : : "r"(sums) : "memory");
  const Vec s = vset1(a.scale);
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const Vec ws = vmul(vload(w.scales + ((size_t{p} + i) * G + g) * 8), s);
      y[i][g] = qfma(ws, qacc_float(sums[i][g]), y[i][g]);
    }
}

template <int NP, int G>
FERRY_VEC_INLINE void i4_product(Vec (&y)[NP][G], const Weight& w, const Act& a, uint32_t p) {
  const uint32_t kp = static_cast<uint32_t>(layout::k32_of(w.cols));
  const uint32_t groups = kp / layout::kGroup;
  const size_t panel = layout::panel8x8q4_panel_bytes(G, w.cols);
  const uint8_t* wi[NP];
  const uint16_t* si[NP];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) {
    wi[i] = w.u8() + (p + i) * panel;
    si[i] = w.group_scales + (size_t{p} + i) * groups * G * 8;
  }
  Vec acc[NP][G];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) acc[i][g] = vzero();
  const int8_t* xq = a.q;
  const int8_t* corr = a.q + kp;
  for (uint32_t gi = 0; gi < groups; ++gi) {
    GAcc ga[NP][G];
#pragma GCC unroll 8
    for (int i = 0; i < NP; ++i)
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) ga[i][g] = gacc_zero();
    // Not unrolled: GCC would reassociate the four blocks' integer sums
    // into a tree of live products and spill them.
#pragma GCC unroll 1
    for (int b = 0; b < 4; ++b) {
      const Q4X x0 = q4x_load(xq), x1 = q4x_load(xq + 4);
      xq += 8;
#pragma GCC unroll 8
      for (int i = 0; i < NP; ++i) {
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) ga[i][g] = gacc_block(ga[i][g], q4w_load(wi[i] + g * 32), x0, x1);
        wi[i] += G * 32;
      }
    }
    int32_t c;
    memcpy(&c, corr + 4 * gi, sizeof c);
#pragma GCC unroll 8
    for (int i = 0; i < NP; ++i) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[i][g] = qfma(vload_h(si[i] + g * 8), gacc_float(ga[i][g], c), acc[i][g]);
      si[i] += G * 8;
    }
  }
  const Vec s = vset1(a.scale);
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) y[i][g] = qfma(acc[i][g], s, y[i][g]);
}

// The product of each dtype behind one name, for the step templates.
#if FERRY_LOWP_HAS_F16
struct F16Product {
  template <int NP, int G>
  __attribute__((always_inline)) static inline void run(Vec (&y)[NP][G], const Weight& w, const Act& a, uint32_t p) {
    f16_product<NP, G>(y, w, a, p);
  }
};
#endif
struct I8Product {
  template <int NP, int G>
  __attribute__((always_inline)) static inline void run(Vec (&y)[NP][G], const Weight& w, const Act& a, uint32_t p) {
    i8_product<NP, G>(y, w, a, p);
  }
};
struct I4Product {
  template <int NP, int G>
  __attribute__((always_inline)) static inline void run(Vec (&y)[NP][G], const Weight& w, const Act& a, uint32_t p) {
    i4_product<NP, G>(y, w, a, p);
  }
};

// ---------------------------------------------------------------- GEMM --

#if FERRY_LOWP_HAS_F16
// f16: simd/kernels.inl's f32 tiles with the weights converted on load:
// 6 x 2 main tile, 1 x 8 for a single row.
struct F16Tile {
  static constexpr int kRows = 6, kVectors = 2;
  template <int MR>
  static constexpr int wide() {
    return MR == 1 ? 8 : 4;
  }
  template <int MR, int NV>
  static void run(const GemmArgs& g, size_t m0, uint32_t q0) {
    const uint32_t gates = g.w->gates;
    const size_t kk = g.w->cols, ldw = layout::panel8_column_stride(gates);
    const uint16_t* wv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) wv[v] = g.w->f16() + layout::panel8_vector_index(gates, kk, q0 + static_cast<uint32_t>(v));
    const float* a[MR];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) a[m] = g.a + (m0 + m) * g.lda;
    Vec acc[MR][NV];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] = gemm_init(g, m0 + m, (q0 + static_cast<uint32_t>(v)) * 8);
    for (size_t k = 0; k < kk; ++k) {
      Vec w[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        w[v] = vload_h(wv[v]);
        wv[v] += ldw;
      }
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        const Vec x = vbroadcast(a[m] + k);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[m][v] = qfma(x, w[v], acc[m][v]);
      }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) gemm_store(g, m0 + m, (q0 + static_cast<uint32_t>(v)) * 8, acc[m][v]);
  }
};
static void f16_gemm(const GemmArgs& g, size_t m0, size_t m1, uint32_t q0, uint32_t q1) {
  gemm_tiles<F16Tile>(g, m0, m1, q0, q1);
}
#endif

// The GEMM tiles' rows (ops_x86.h, qrow_load): where the ISA has no row form
// of its own, qacc_dot's signed quads, and no weight sum to take off (the
// sums are never read, and the compiler drops them).
#if !defined(FERRY_QROW_VNNI)
typedef QX QRow;
FERRY_VEC_INLINE QRow qrow_load(const int8_t* p) { return qx_load(p); }
FERRY_VEC_INLINE QAcc qacc_rowdot(QAcc acc, QW w, QRow x) { return qacc_dot(acc, w, x); }
FERRY_VEC_INLINE QAcc qacc_wsum(QAcc acc, QW) { return acc; }
FERRY_VEC_INLINE QAcc qacc_rowdot_finish(QAcc acc, QAcc) { return acc; }
#endif

// i8: per quad, NV weight vectors loaded once for MR rows; MR*NV int32
// accumulators (4 x 2 main tile: 8 accumulators, 2 weights, 2 registers per
// activation quad, the constant 1s). With VNNI the activations go in as
// unsigned bytes and the tile keeps NV weight sums besides (ops_x86.h,
// qrow_load): one vpdpbusd per row and vector instead of a vpsignb and a
// vpdpbusd, 1.7x faster on W3 int8 (LSTM 256, batch 64).
struct I8Tile {
#if defined(FERRY_QROW_VNNI) && FERRY_QDOT == 2
  // 32 registers (AVX-512VL): 6 x 2 measured fastest on W3 int8 (4 x 2,
  // 4 x 4, 8 x 2 and 3 x 4 slower on an AVX-512 VNNI Xeon).
  static constexpr int kRows = 6, kVectors = 2;
#else
  static constexpr int kRows = 4, kVectors = 2;
#endif
  template <int MR>
  static constexpr int wide() {
    return MR == 1 ? 8 : MR == 2 ? 4 : 2;
  }
  template <int MR, int NV>
  static void run(const GemmArgs& g, size_t m0, uint32_t q0) {
    const Weight& w = *g.w;
    const uint32_t quads = static_cast<uint32_t>(layout::k4_of(w.cols) / layout::kQuad);
    const size_t ldw = layout::panel8x4_quad_stride(w.gates);
    const int8_t* wv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) wv[v] = w.i8() + layout::panel8x4_vector_index(w.gates, w.cols, q0 + static_cast<uint32_t>(v));
    const int8_t* a[MR];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) a[m] = g.qa + (m0 + m) * g.ldqa;
    QAcc acc[MR][NV];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] = qacc_zero();
    QAcc wsum[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) wsum[v] = qacc_zero();
    for (uint32_t c = 0; c < quads; ++c) {
      QW wq[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        wq[v] = qw_load(wv[v]);
        wv[v] += ldw;
        wsum[v] = qacc_wsum(wsum[v], wq[v]);
      }
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        const QRow x = qrow_load(a[m] + 4 * c);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[m][v] = qacc_rowdot(acc[m][v], wq[v], x);
      }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] = qacc_rowdot_finish(acc[m][v], wsum[v]);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const Vec s = vset1(g.a_scales[m0 + m]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        const uint32_t col = (q0 + static_cast<uint32_t>(v)) * 8;
        const Vec ws = vmul(vload(w.scales + col), s);
        gemm_store(g, m0 + m, col, qfma(ws, qacc_float(acc[m][v]), gemm_init(g, m0 + m, col)));
      }
    }
  }
};
static void i8_gemm(const GemmArgs& g, size_t m0, size_t m1, uint32_t q0, uint32_t q1) {
  gemm_tiles<I8Tile>(g, m0, m1, q0, q1);
}

// i4: per group, per block, NV blocks unpacked once for MR rows; a group's
// integer sums (MR*NV) are folded into MR*NV float chains at its end.
struct I4Tile {
  static constexpr int kRows = 2, kVectors = 2;
  template <int MR>
  static constexpr int wide() {
    return 2;
  }
  template <int MR, int NV>
  static void run(const GemmArgs& g, size_t m0, uint32_t q0) {
    const Weight& w = *g.w;
    const uint32_t gates = w.gates;
    const uint32_t kp = static_cast<uint32_t>(layout::k32_of(w.cols)), groups = kp / layout::kGroup;
    const size_t ldw = layout::panel8x8q4_block_stride(gates);
    const uint8_t* wv[NV];
    const uint16_t* sv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const uint32_t q = q0 + static_cast<uint32_t>(v);
      wv[v] = w.u8() + layout::panel8x8q4_vector_index(gates, w.cols, q);
      sv[v] = w.group_scales + (size_t{q / gates} * groups * gates + q % gates) * 8;
    }
    const int8_t* a[MR];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) a[m] = g.qa + (m0 + m) * g.ldqa;
    Vec acc[MR][NV];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] = vzero();
    for (uint32_t gi = 0; gi < groups; ++gi) {
      GAcc ga[MR][NV];
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) ga[m][v] = gacc_zero();
#pragma GCC unroll 1
      for (uint32_t b = 0; b < 4; ++b) {  // not unrolled: see i4_product
        Q4W wb[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
          wb[v] = q4w_load(wv[v]);
          wv[v] += ldw;
        }
        const uint32_t k = gi * layout::kGroup + b * layout::kBlock;
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) {
          const Q4X x0 = q4x_load(a[m] + k), x1 = q4x_load(a[m] + k + 4);
#pragma GCC unroll 8
          for (int v = 0; v < NV; ++v) ga[m][v] = gacc_block(ga[m][v], wb[v], x0, x1);
        }
      }
#pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) {
        int32_t c;
        memcpy(&c, a[m] + kp + 4 * gi, sizeof c);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[m][v] = qfma(vload_h(sv[v]), gacc_float(ga[m][v], c), acc[m][v]);
      }
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) sv[v] += gates * 8;
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const Vec s = vset1(g.a_scales[m0 + m]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        const uint32_t col = (q0 + static_cast<uint32_t>(v)) * 8;
        gemm_store(g, m0 + m, col, qfma(acc[m][v], s, gemm_init(g, m0 + m, col)));
      }
    }
  }
};
static void i4_gemm(const GemmArgs& g, size_t m0, size_t m1, uint32_t q0, uint32_t q1) {
  gemm_tiles<I4Tile>(g, m0, m1, q0, q1);
}

// --------------------------------------------------------- fused steps --
//
// One sample, NP panels at once; each gate's chain is init (pre, or the
// bias) -> input part -> recurrent part, what the GEMMs compute for the
// same row, then simd/math.inl's state update.

FERRY_VEC_INLINE Vec step_init(const StepArgs& s, size_t col) {
  if (s.pre) return vload(s.pre + col);
  if (s.bias) return vload(s.bias->f32() + col);
  return vzero();
}

template <class P, int NP>
static void lstm_panels(const StepArgs& s, uint32_t p) {
  Vec y[NP][4];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i)
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) y[i][g] = step_init(s, ((size_t{p} + i) * 4 + g) * 8);
  if (!s.pre && s.w_ih) P::template run<NP, 4>(y, *s.w_ih, Act{s.x, s.qx, s.x_scale}, p);
  P::template run<NP, 4>(y, *s.w_hh, Act{s.h, s.qh, s.h_scale}, p);
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) lstm_finish(y[i][0], y[i][1], y[i][2], y[i][3], s.c, s.h_new, p + i, s.hidden);
}

// GRU: n keeps its input part (from b_in) and its recurrent part (from
// b_hn) apart; r and z continue one chain.
template <class P, int NP>
static void gru_panels(const StepArgs& s, uint32_t p) {
  Vec y[NP][3], nx[NP];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i)
#pragma GCC unroll 4
    for (int g = 0; g < 3; ++g) y[i][g] = step_init(s, ((size_t{p} + i) * 3 + g) * 8);
  if (!s.pre && s.w_ih) P::template run<NP, 3>(y, *s.w_ih, Act{s.x, s.qx, s.x_scale}, p);
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) {
    nx[i] = y[i][2];
    y[i][2] = s.b_hn ? vload(s.b_hn->f32() + (size_t{p} + i) * 8) : vzero();
  }
  P::template run<NP, 3>(y, *s.w_hh, Act{s.h, s.qh, s.h_scale}, p);
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) gru_finish(y[i][0], y[i][1], nx[i], y[i][2], s.h, s.h_new, p + i, s.hidden);
}

template <class P, int NP>
static void rnn_panels(const StepArgs& s, uint32_t p) {
  Vec y[NP][1];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) y[i][0] = step_init(s, (size_t{p} + i) * 8);
  if (!s.pre && s.w_ih) P::template run<NP, 1>(y, *s.w_ih, Act{s.x, s.qx, s.x_scale}, p);
  P::template run<NP, 1>(y, *s.w_hh, Act{s.h, s.qh, s.h_scale}, p);
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) rnn_finish(y[i][0], s.relu, s.h_new, p + i, s.hidden);
}

// Panels [p0, p1) in groups of NP (the set's step_group), then smaller.
template <class P, int NP>
static void lstm_steps(const StepArgs& s, uint32_t p0, uint32_t p1) {
  uint32_t p = p0;
  for (; p + NP <= p1; p += NP) lstm_panels<P, NP>(s, p);
  if constexpr (NP > 1) {
    for (; p < p1; ++p) lstm_panels<P, 1>(s, p);
  }
}

template <class P, int NP>
static void gru_steps(const StepArgs& s, uint32_t p0, uint32_t p1) {
  uint32_t p = p0;
  for (; p + NP <= p1; p += NP) gru_panels<P, NP>(s, p);
  if constexpr (NP > 1) {
    for (; p < p1; ++p) gru_panels<P, 1>(s, p);
  }
}

template <class P, int NP>
static void rnn_steps(const StepArgs& s, uint32_t p0, uint32_t p1) {
  uint32_t p = p0;
  for (; p + NP <= p1; p += NP) rnn_panels<P, NP>(s, p);
  if constexpr (NP > 4) {
    if (p + 4 <= p1) {
      rnn_panels<P, 4>(s, p);
      p += 4;
    }
  }
  if constexpr (NP > 1) {
    for (; p < p1; ++p) rnn_panels<P, 1>(s, p);
  }
}
