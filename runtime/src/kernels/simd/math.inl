// The vector math shared by every kernel: partial loads and stores, the
// nonlinearities (activations.inl), and the state-update equations on
// 8-lane vectors. Written once over the `Vec` of vec_<isa>.h; included
// (after that header) by each ISA's translation unit inside its own
// namespace, so that every table computes the same operations in the same
// order. All inline.

// ------------------------------------------------------------ helpers --

FERRY_VEC_INLINE Vec vload_partial(const float* p, uint32_t n) {
  float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (uint32_t i = 0; i < n; ++i) t[i] = p[i];
  return vload(t);
}

FERRY_VEC_INLINE void vstore_partial(float* p, Vec v, uint32_t n) {
  float t[8];
  vstore(t, v);
  for (uint32_t i = 0; i < n; ++i) p[i] = t[i];
}

// Valid units of panel p of a layer with `units` units (8 but in the last).
FERRY_VEC_INLINE uint32_t panel_lanes(uint32_t p, uint32_t units) {
  const uint32_t left = units - p * 8;
  return left < 8 ? left : 8;
}

FERRY_VEC_INLINE Vec vload_lanes(const float* p, uint32_t n) { return n == 8 ? vload(p) : vload_partial(p, n); }

FERRY_VEC_INLINE void vstore_lanes(float* p, Vec v, uint32_t n) {
  if (n == 8) {
    vstore(p, v);
  } else {
    vstore_partial(p, v, n);
  }
}

// ------------------------------------------------------ nonlinearities --

#include "kernels/simd/activations.inl"

// ------------------------------------------------------- state updates --
//
// The equations are PyTorch's (see kernels/reference/reference.cpp):
//   LSTM  c' = f*c + i*g,  h' = o*tanh(c')     (i, f, o = sigmoid; g = tanh)
//   GRU   n = tanh(n_x + r*n_h),  h' = (1-z)*n + z*h = n + z*(h - n)
//   RNN   h' = tanh(a) or relu(a)

// LSTM state update of N panel vectors (a[n] = their i, f, g, o
// pre-activations; vector n's cell state at c[n], its new hidden to h[n],
// lanes[n] of them valid), stage by stage: the 4N gate activations, then the
// N cell states, then the N tanh(c'). Each lane's operations do not depend
// on N; the stages only give the core N independent chains at a time where
// one vector alone leaves it waiting on the sigmoid's ~30-cycle dependent
// chain.
// The three stages of one vector's LSTM update, shared by lstm_finish_n
// and the pipelined step (kernels.inl), which runs them as separate pieces.
// Gate g's activation: i, f, o (0, 1, 3) sigmoid; g (2) tanh.
FERRY_VEC_INLINE Vec lstm_gate(Vec a, int g) { return g == 2 ? vtanh(a) : vsigmoid(a); }

// c' = f c + i g from the activations, stored over c and returned.
FERRY_VEC_INLINE Vec lstm_cell(Vec i, Vec f, Vec g, float* c, uint32_t lanes) {
  const Vec c1 = vfma(f, vload_lanes(c, lanes), vmul(i, g));
  vstore_lanes(c, c1, lanes);
  return c1;
}

// h' = o tanh(c'), stored.
FERRY_VEC_INLINE void lstm_hidden(Vec o, Vec c1, float* h, uint32_t lanes) {
  vstore_lanes(h, vmul(o, vtanh(c1)), lanes);
}

template <int N>
FERRY_VEC_INLINE void lstm_finish_n(const Vec (&a)[N][4], float* const (&c)[N], float* const (&h)[N],
                                    const uint32_t (&lanes)[N]) {
  Vec act[N][4], c1[N];
#pragma GCC unroll 8
  for (int n = 0; n < N; ++n)
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) act[n][g] = lstm_gate(a[n][g], g);
#pragma GCC unroll 8
  for (int n = 0; n < N; ++n) c1[n] = lstm_cell(act[n][0], act[n][1], act[n][2], c[n], lanes[n]);
#pragma GCC unroll 8
  for (int n = 0; n < N; ++n) lstm_hidden(act[n][3], c1[n], h[n], lanes[n]);
}

// The same for N consecutive panels p .. p+N-1 of one sample.
template <int N>
FERRY_VEC_INLINE void lstm_finish_panels(const Vec (&a)[N][4], float* c, float* h_new, uint32_t p, uint32_t hidden) {
  float* cn[N];
  float* hn[N];
  uint32_t lanes[N];
#pragma GCC unroll 8
  for (int n = 0; n < N; ++n) {
    cn[n] = c + (p + n) * 8;
    hn[n] = h_new + (p + n) * 8;
    lanes[n] = panel_lanes(p + n, hidden);
  }
  lstm_finish_n<N>(a, cn, hn, lanes);
}

FERRY_VEC_INLINE void lstm_finish(Vec gi, Vec gf, Vec gg, Vec go, float* c, float* h_new, uint32_t p,
                                  uint32_t hidden) {
  const Vec a[1][4] = {{gi, gf, gg, go}};
  lstm_finish_panels<1>(a, c, h_new, p, hidden);
}

FERRY_VEC_INLINE void gru_finish(Vec ar, Vec az, Vec anx, Vec anh, const float* h, float* h_new, uint32_t p,
                                 uint32_t hidden) {
  const uint32_t lanes = panel_lanes(p, hidden);
  const Vec r = vsigmoid(ar), z = vsigmoid(az);
  const Vec n = vtanh(vfma(r, anh, anx));
  const Vec h0 = vload_lanes(h + p * 8, lanes);
  vstore_lanes(h_new + p * 8, vfma(z, vsub(h0, n), n), lanes);
}

FERRY_VEC_INLINE void rnn_finish(Vec a, int relu, float* h_new, uint32_t p, uint32_t hidden) {
  vstore_lanes(h_new + p * 8, relu ? vrelu(a) : vtanh(a), panel_lanes(p, hidden));
}

