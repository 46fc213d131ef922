// SIMD kernels, written once over the 8-lane `Vec` of vec_<isa>.h and
// compiled once per ISA: avx2.cpp and neon.cpp include this file inside their
// own namespace, after their vector header. See kernels/kernel_set.h for the
// argument structs and the numeric contract (one FMA chain per output, bias
// first, k ascending) that every function here keeps, and
// shared/weight_layout.h for the Panel8 layout.
//
// No function here allocates, calls libm or touches anything but its
// arguments; tails (H not a multiple of 8) go through an 8-float stack copy.
// The vector math (nonlinearities, state updates) is math.inl, included first.
// The entry points (entry_points.inl) have external linkage in the ISA's
// namespace, so another ISA's table can use them (avx512.cpp); table.inl
// makes the ISA's kernel set of them.

#include "kernels/simd/entry_points.inl"

// ---------------------------------------------------------------- GEMM --
//
// A tile of MR rows x NV vectors: MR*NV accumulators, each one FMA chain.
// Per k: NV weight vectors loaded once, MR broadcasts of A. 6x2 (12
// accumulators, 2 weights, 1 broadcast: 15 of 16 ymm registers) is the main
// tile; 1x8 keeps 8 chains in flight for a single row (FMA latency 4 x 2
// ports).

template <int MR, int NV>
static void gemm_tile(const GemmArgs& g, size_t m0, uint32_t q0) {
  const uint32_t gates = g.w->gates;
  const size_t kk = g.w->cols, ldw = layout::panel8_column_stride(gates);
  const float* wv[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) wv[v] = g.w->f32() + layout::panel8_vector_index(gates, kk, q0 + static_cast<uint32_t>(v));
  const float* a[MR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) a[m] = g.a + (m0 + m) * g.lda;
  Vec acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const size_t col = (size_t{q0} + static_cast<uint32_t>(v)) * 8;
      if (g.c_init) {
        acc[m][v] = vload(g.c_init + (m0 + m) * g.ldc + col);
      } else if (g.bias) {
        acc[m][v] = vload(g.bias->f32() + col);
      } else {
        acc[m][v] = vzero();
      }
    }
  }
  for (size_t k = 0; k < kk; ++k) {
    Vec w[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      w[v] = vload(wv[v]);
      wv[v] += ldw;
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const Vec x = vbroadcast(a[m] + k);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] = vfma(x, w[v], acc[m][v]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    float* c = g.c + (m0 + m) * g.ldc;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const uint32_t col = (q0 + static_cast<uint32_t>(v)) * 8;
      if (col + 8 <= g.n_store) {
        vstore(c + col, acc[m][v]);
      } else if (col < g.n_store) {
        vstore_partial(c + col, acc[m][v], g.n_store - col);
      }
    }
  }
}

// Rows [m0, m1) of vectors [q, q + NV): 6-row tiles, then the remainder.
template <int NV>
static void gemm_sweep_rows(const GemmArgs& g, size_t m0, size_t m1, uint32_t q) {
  size_t m = m0;
  for (; m + 6 <= m1; m += 6) gemm_tile<6, NV>(g, m, q);
  switch (m1 - m) {
    case 5: gemm_tile<5, NV>(g, m, q); break;
    case 4: gemm_tile<4, NV>(g, m, q); break;
    case 3: gemm_tile<3, NV>(g, m, q); break;
    case 2: gemm_tile<2, NV>(g, m, q); break;
    case 1: gemm_tile<1, NV>(g, m, q); break;
    default: break;
  }
}

// MR (1..3) rows, vectors [q0, q1) in tiles as wide as the registers allow.
template <int MR>
static void gemm_sweep_vectors(const GemmArgs& g, size_t m0, uint32_t q0, uint32_t q1) {
  constexpr int kWide = MR == 1 ? 8 : 4;
  uint32_t q = q0;
  for (; q + kWide <= q1; q += kWide) gemm_tile<MR, kWide>(g, m0, q);
  if (kWide > 4 && q + 4 <= q1) {
    gemm_tile<MR, 4>(g, m0, q);
    q += 4;
  }
  if (q + 2 <= q1) {
    gemm_tile<MR, 2>(g, m0, q);
    q += 2;
  }
  if (q < q1) gemm_tile<MR, 1>(g, m0, q);
}

void gemm_panel8(const GemmArgs& g, size_t m0, size_t m1, uint32_t q0, uint32_t q1) {
  const size_t rows = m1 - m0;
  if (rows >= 4) {
    // Vector pairs outside, rows inside: the pair's weights ([K][16] floats)
    // stay in L1 while the rows stream past.
    uint32_t q = q0;
    for (; q + 2 <= q1; q += 2) gemm_sweep_rows<2>(g, m0, m1, q);
    if (q < q1) gemm_sweep_rows<1>(g, m0, m1, q);
    return;
  }
  switch (rows) {
    case 3: gemm_sweep_vectors<3>(g, m0, q0, q1); break;
    case 2: gemm_sweep_vectors<2>(g, m0, q0, q1); break;
    case 1: gemm_sweep_vectors<1>(g, m0, q0, q1); break;
    default: break;
  }
}

// Batched: gates already in a panel-order row (computed by gemm_panel8).
template <int N>
FERRY_VEC_INLINE void lstm_update_panels(const UpdateArgs& u, uint32_t p) {
  Vec a[N][4];
#pragma GCC unroll 8
  for (int n = 0; n < N; ++n)
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) a[n][g] = vload(u.gates + (size_t{p} + n) * 32 + g * 8);
  lstm_finish_panels<N>(a, u.c, u.h_new, p, u.hidden);
}

// Eight panels at a time (lstm_finish_panels): on Zen 4 the 64 x 256 update
// of a W3 step takes 53 instead of 63 us (ferry_bench_kernels
// --benchmark_filter=Update, alternating with a build that takes one panel
// at a time); 2 and 4 at a time were no faster than one.
void lstm_update(const UpdateArgs& u, uint32_t p0, uint32_t p1) {
  uint32_t p = p0;
  for (; p + 8 <= p1; p += 8) lstm_update_panels<8>(u, p);
  for (; p < p1; ++p) lstm_update_panels<1>(u, p);
}

void gru_update(const UpdateArgs& u, uint32_t p0, uint32_t p1) {
  for (uint32_t p = p0; p < p1; ++p) {
    const float* g = u.gates + size_t{p} * 24;
    gru_finish(vload(g), vload(g + 8), vload(u.pre + size_t{p} * 24 + 16), vload(g + 16), u.h, u.h_new, p,
               u.hidden);
  }
}

void rnn_update(const UpdateArgs& u, uint32_t p0, uint32_t p1) {
  for (uint32_t p = p0; p < p1; ++p) rnn_finish(vload(u.gates + size_t{p} * 8), u.relu, u.h_new, p, u.hidden);
}

// ----------------------------------------------------------- fused steps --
//
// One sample, NP panels at once: NP*G accumulators (8 for LSTM NP=2, 9 for
// GRU NP=3, 8 for RNN NP=8) to cover the FMA latency; each accumulator is
// the chain init -> input part -> recurrent part, exactly what gemm_panel8
// computes for the same row. Weights are read as they lie (one stream per
// panel), which is the whole cost of a step for H >= 64.

// acc[i][g] += sum_k x[k] * W[panel p+i][k][gate g], k ascending.
// One pointer per panel stream, bumped each k: every load is [pointer +
// constant], which x86 keeps micro-fused into its FMA (an indexed address
// would cost an extra micro-op per load).
// `between`, when given, runs after every `every` pairs of k (lstm_step:
// the pieces of an earlier panel pair's update).
struct NoBetween {
  void operator()() const {}
};

template <int NP, int G, typename Between = NoBetween>
FERRY_VEC_INLINE void accumulate(Vec (&acc)[NP][G], const Weight& weight, const float* x, uint32_t p,
                                 Between&& between = NoBetween(), uint32_t every = 0) {
  const float* w = weight.f32();
  const uint32_t kk = weight.cols;
  const size_t panel = layout::panel8_panel_elements(G, kk);
  const float* wi[NP];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) wi[i] = w + (p + i) * panel;
  // Two k per iteration (each chain still takes them in order): half the
  // loop's pointer bumps and branches, which at H = 16 are a fifth of it.
  const float* xk = x;
  const float* const pairs_end = x + (kk & ~1u);
  constexpr bool kBetween = !std::is_same<std::decay_t<Between>, NoBetween>::value;
  uint32_t left = every;
  for (; xk != pairs_end; xk += 2) {
    const Vec x0 = vbroadcast(xk), x1 = vbroadcast(xk + 1);
#pragma GCC unroll 8
    for (int i = 0; i < NP; ++i) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[i][g] = vfma(x0, vload(wi[i] + g * 8), acc[i][g]);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[i][g] = vfma(x1, vload(wi[i] + (G + g) * 8), acc[i][g]);
      wi[i] += 2 * G * 8;
    }
    if constexpr (kBetween) {
      if (--left == 0) {
        left = every;
        between();
      }
    }
  }
  if (kk & 1) {
    const Vec xl = vbroadcast(xk);
#pragma GCC unroll 8
    for (int i = 0; i < NP; ++i) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[i][g] = vfma(xl, vload(wi[i] + g * 8), acc[i][g]);
    }
  }
}

// The chain's start for gate g of panel p: the precomputed input part, else
// the bias, else 0.
FERRY_VEC_INLINE Vec chain_init(const StepArgs& s, size_t col) {
  if (s.pre) return vload(s.pre + col);
  if (s.bias) return vload(s.bias->f32() + col);
  return vzero();
}

template <int NP>
static void lstm_step_panels(const StepArgs& s, uint32_t p) {
  Vec acc[NP][4];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i)
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) acc[i][g] = chain_init(s, ((size_t{p} + i) * 4 + g) * 8);
  if (!s.pre && s.w_ih) accumulate<NP, 4>(acc, *s.w_ih, s.x, p);
  accumulate<NP, 4>(acc, *s.w_hh, s.h, p);
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) lstm_finish(acc[i][0], acc[i][1], acc[i][2], acc[i][3], s.c, s.h_new, p + i, s.hidden);
}

// GRU: r and z continue one chain through both products; n keeps its input
// part (from the bias b_in) and its recurrent part (from b_hn) apart,
// because r multiplies only the latter. Each product is one pass over its
// weights: the n slot's accumulator is swapped between the passes.
template <int NP>
static void gru_step_panels(const StepArgs& s, uint32_t p) {
  Vec acc[NP][3], nx[NP];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i)
#pragma GCC unroll 4
    for (int g = 0; g < 3; ++g) acc[i][g] = chain_init(s, ((size_t{p} + i) * 3 + g) * 8);
  if (!s.pre && s.w_ih) accumulate<NP, 3>(acc, *s.w_ih, s.x, p);
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) {
    nx[i] = acc[i][2];
    acc[i][2] = s.b_hn ? vload(s.b_hn->f32() + (size_t{p} + i) * 8) : vzero();
  }
  accumulate<NP, 3>(acc, *s.w_hh, s.h, p);
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) gru_finish(acc[i][0], acc[i][1], nx[i], acc[i][2], s.h, s.h_new, p + i, s.hidden);
}

template <int NP>
static void rnn_step_panels(const StepArgs& s, uint32_t p) {
  Vec acc[NP][1];
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) acc[i][0] = chain_init(s, (size_t{p} + i) * 8);
  if (!s.pre && s.w_ih) accumulate<NP, 1>(acc, *s.w_ih, s.x, p);
  accumulate<NP, 1>(acc, *s.w_hh, s.h, p);
#pragma GCC unroll 8
  for (int i = 0; i < NP; ++i) rnn_finish(acc[i][0], s.relu, s.h_new, p + i, s.hidden);
}

// A step of 8 panels or more (lstm_step) runs each pair's update
// (lstm_finish's operations, lane by lane the same; measured on Zen 4, not
// yet on an Arm core) in six pieces spread over the next
// pair's products: the four gate activations, the cell states, tanh(c') and
// h. Run as a block after its products, the update holds the FP queues, so
// that no load of the next pair's weights issues until it drains (the core
// waits on the update's dependent chains, then on L2); interleaved, the
// weights keep streaming while the update's chains run. Only the last
// pair's update runs alone. (The GRU step's groups of 3 panels, pipelined
// the same way, were no faster through ferry_step: ferry_peer_bench W4
// H 64 929-956 ns against 909-916, H 256 within the noise; not kept.)
struct LstmPending {
  Vec a[2][4];  // the pre-activations, then the activations
  Vec c1[2];
  uint32_t p;  // the first panel
  int next;    // the next piece; kLstmPieces: none left
};
constexpr int kLstmPieces = 6;

// Pieces 0-3: gate `piece` of both panels; 4: their cell states; 5: h.
FERRY_VEC_INLINE void lstm_piece(LstmPending& q, const StepArgs& s) {
  const int piece = q.next++;
#pragma GCC unroll 2
  for (int n = 0; n < 2; ++n) {
    const uint32_t pn = q.p + static_cast<uint32_t>(n), lanes = panel_lanes(pn, s.hidden);
    if (piece < 4) {
      q.a[n][piece] = lstm_gate(q.a[n][piece], piece);
    } else if (piece == 4) {
      q.c1[n] = lstm_cell(q.a[n][0], q.a[n][1], q.a[n][2], s.c + pn * 8, lanes);
    } else {
      lstm_hidden(q.a[n][3], q.c1[n], s.h_new + pn * 8, lanes);
    }
  }
}

// Panel pairs from p0 while two fit; returns the first panel not done.
__attribute__((noinline)) static uint32_t lstm_step_pipelined(const StepArgs& s, uint32_t p0, uint32_t p1) {
  LstmPending q;  // not zeroed whole (a rep stos a call); no piece runs before a pair fills it
  q.c1[0] = q.c1[1] = vzero();  // (these two quiet GCC's maybe-uninitialized)
  q.p = 0;
  q.next = kLstmPieces;
  const auto piece = [&q, &s] {
    if (q.next < kLstmPieces) lstm_piece(q, s);
  };
  const bool input = !s.pre && s.w_ih;
  const uint32_t pairs = ((input ? s.w_ih->cols : 0) + s.w_hh->cols) / 2;  // of k, over both products
  const uint32_t every = pairs / kLstmPieces > 0 ? pairs / kLstmPieces : 1;
  uint32_t p = p0;
  for (; p + 2 <= p1; p += 2) {
    Vec acc[2][4];
#pragma GCC unroll 2
    for (int i = 0; i < 2; ++i)
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) acc[i][g] = chain_init(s, ((size_t{p} + i) * 4 + g) * 8);
    if (input) accumulate<2, 4>(acc, *s.w_ih, s.x, p, piece, every);
    accumulate<2, 4>(acc, *s.w_hh, s.h, p, piece, every);
    while (q.next < kLstmPieces) lstm_piece(q, s);  // k too short for all six
#pragma GCC unroll 2
    for (int i = 0; i < 2; ++i)
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) q.a[i][g] = acc[i][g];
    q.p = p;
    q.next = 0;
  }
  while (q.next < kLstmPieces) lstm_piece(q, s);
  return p;
}

// From 8 panels (H 64: 128 KiB of weights a step, from L2). Below, the
// weights are L1's and the products wait on no load: each pair's update
// after its products, as lstm_step_panels (H 32 on Zen 4: 264-281 ns
// against 287-314 pipelined; ferry_bench_kernels, BM_LstmStepPerSet/set:0).
constexpr uint32_t kPipelinedMinPanels = 8;

void lstm_step(const StepArgs& s, uint32_t p0, uint32_t p1) {
  uint32_t p = p1 - p0 >= kPipelinedMinPanels ? lstm_step_pipelined(s, p0, p1) : p0;
  for (; p + 2 <= p1; p += 2) lstm_step_panels<2>(s, p);
  if (p < p1) lstm_step_panels<1>(s, p);
}

void gru_step(const StepArgs& s, uint32_t p0, uint32_t p1) {
  uint32_t p = p0;
  for (; p + 3 <= p1; p += 3) gru_step_panels<3>(s, p);
  if (p + 2 <= p1) {
    gru_step_panels<2>(s, p);
    p += 2;
  }
  if (p < p1) gru_step_panels<1>(s, p);
}

void rnn_step(const StepArgs& s, uint32_t p0, uint32_t p1) {
  uint32_t p = p0;
  for (; p + 8 <= p1; p += 8) rnn_step_panels<8>(s, p);
  if (p + 4 <= p1) {
    rnn_step_panels<4>(s, p);
    p += 4;
  }
  if (p + 2 <= p1) {
    rnn_step_panels<2>(s, p);
    p += 2;
  }
  if (p < p1) rnn_step_panels<1>(s, p);
}

// ------------------------------------------------------------ element-wise --

template <Vec (*F)(Vec)>
static void map_inplace(float* x, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) vstore(x + i, F(vload(x + i)));
  if (i < n) {
    const uint32_t left = static_cast<uint32_t>(n - i);
    vstore_partial(x + i, F(vload_partial(x + i, left)), left);
  }
}

static Vec vtanh_fn(Vec x) { return vtanh(x); }
static Vec vsigmoid_fn(Vec x) { return vsigmoid(x); }
static Vec vrelu_fn(Vec x) { return vrelu(x); }

void tanh_inplace(float* x, size_t n) { map_inplace<vtanh_fn>(x, n); }
void sigmoid_inplace(float* x, size_t n) { map_inplace<vsigmoid_fn>(x, n); }
void relu_inplace(float* x, size_t n) { map_inplace<vrelu_fn>(x, n); }

// Format 1.2 element-wise ops, each lane independent (so any split into
// calls gives the same bits).

FERRY_VEC_INLINE Vec vsilu(Vec x) { return vmul(x, vsigmoid(x)); }

FERRY_VEC_INLINE Vec vgelu_tanh(Vec x) {
  const Vec inner = vmul(vset1(0.79788456080286536f), vfma(vmul(vset1(0.044715f), vmul(x, x)), x, x));
  return vmul(vmul(vset1(0.5f), x), vadd(vset1(1.0f), vtanh(inner)));
}

static Vec vsilu_fn(Vec x) { return vsilu(x); }
static Vec vgelu_tanh_fn(Vec x) { return vgelu_tanh(x); }

void silu_inplace(float* x, size_t n) { map_inplace<vsilu_fn>(x, n); }
void gelu_tanh_inplace(float* x, size_t n) { map_inplace<vgelu_tanh_fn>(x, n); }

// F(x, parameters) over n floats, 8 at a time then the tail.
template <typename F>
FERRY_VEC_INLINE void map_with(float* x, size_t n, F f) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) vstore(x + i, f(vload(x + i)));
  if (i < n) {
    const uint32_t left = static_cast<uint32_t>(n - i);
    vstore_partial(x + i, f(vload_partial(x + i, left)), left);
  }
}

void leaky_relu_inplace(float* x, size_t n, float slope) {
  const Vec s = vset1(slope);
  map_with(x, n, [s](Vec v) { return vselect_positive(v, v, vmul(v, s)); });
}

void elu_inplace(float* x, size_t n, float alpha) {
  const Vec a = vset1(alpha);
  map_with(x, n, [a](Vec v) { return vselect_positive(v, v, vmul(a, vsub(vexp_nonpositive(v), vset1(1.0f)))); });
}

void hardtanh_inplace(float* x, size_t n, float lo, float hi) {
  const Vec l = vset1(lo), h = vset1(hi);
  map_with(x, n, [l, h](Vec v) { return vmin(h, vmax(l, v)); });  // constants first: NaN stays NaN
}

void prelu_rows(float* x, size_t rows, size_t n, const float* w, size_t w_count) {
  for (size_t r = 0; r < rows; ++r, x += n) {
    if (w_count == 1) {
      leaky_relu_inplace(x, n, w[0]);
      continue;
    }
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const Vec v = vload(x + i);
      vstore(x + i, vselect_positive(v, v, vmul(vload(w + i), v)));
    }
    if (i < n) {
      const uint32_t left = static_cast<uint32_t>(n - i);
      const Vec v = vload_partial(x + i, left);
      vstore_partial(x + i, vselect_positive(v, v, vmul(vload_partial(w + i, left), v)), left);
    }
  }
}

// x * scale + shift, one rounding each (as the reference: no fused multiply-add).
void scale_shift_rows(float* x, size_t rows, size_t n, const float* scale, const float* shift) {
  for (size_t r = 0; r < rows; ++r, x += n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) vstore(x + i, vadd(vmul(vload(x + i), vload(scale + i)), vload(shift + i)));
    if (i < n) {
      const uint32_t left = static_cast<uint32_t>(n - i);
      vstore_partial(x + i, vadd(vmul(vload_partial(x + i, left), vload_partial(scale + i, left)),
                                 vload_partial(shift + i, left)),
                     left);
    }
  }
}
