// SIMD kernels (AVX2/FMA on x86-64, NEON on Arm) over Panel8 weights.
//
// The kernels are written once, as templates over an 8-lane vector type
// (math.inl, kernels.inl), and compiled once per ISA in their own
// translation unit with that ISA's flags (avx2.cpp, neon.cpp); avx512.cpp
// adds AVX-512 versions of the two kernels where 64-byte vectors pay (the
// batched GEMM, the single-sample LSTM step) to the AVX2 table. select.cpp
// picks one table at session init from CPU detection; nothing is dispatched
// per call and nothing registers itself from a static initializer.
//
// Numeric contract, shared by every table and by XNNPACK's f32 GEMMs: each
// output of a matrix product is ONE fused multiply-add chain,
//     acc = init;  for k = 0, 1, ..., K-1:  acc = fma(a[k], w[k], acc)
// where init is the bias (or 0), and the recurrent product continues the
// chain of the input product: gates = ((bias + W_ih x) + W_hh h), k ascending
// in each. Splitting a run into steps, a batch into rows, or the work into
// threads therefore never changes a single bit of the result; only the
// reference backend (separate sums, libm nonlinearities) differs in rounding.
//
// Panel8 (schema/ferry.fbs): a [G*H, K] matrix stored as panels of 8 units,
// panel p = floats [p*K*G*8, (p+1)*K*G*8), row k of the panel = G vectors of
// 8 lanes (one per gate). "Vector q" of a Panel8 matrix is gate q % G of
// panel q / G; its 8 outputs land at columns [8q, 8q + 8) of a "panel-order"
// row, the order in which every gate buffer below is laid out.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace ferry {
namespace simd {

// C[m][.] = init + A[m][:K] * W over vectors [q0, q1) of a Panel8 matrix.
struct GemmArgs {
  const float* w;        // Panel8 weights
  uint32_t gates;        // G
  uint32_t k;            // K: columns of the logical matrix = floats of an A row used
  const float* a;        // A rows
  size_t lda;            // floats between A rows
  const float* bias;     // init: Panel8 bias vector (panel order), or null for 0 ...
  const float* c_init;   // ... or, when set, these rows (panel order, stride ldc; may be c)
  float* c;              // output rows, panel order
  size_t ldc;            // floats between C rows
  uint32_t n_store;      // columns of a C row to write: G*8*panels for gate buffers,
                         // the true width N for compact outputs (Linear, projection)
};

// One time step of one sample, fused: gates of `panels` panels accumulated
// in registers (input part, then recurrent part), nonlinearities and the
// state update applied before anything is stored.
struct StepArgs {
  const float* w_ih;     // Panel8 [G*H, in], or null when `pre` holds the input part
  uint32_t in;
  const float* x;        // [in]
  const float* pre;      // panel-order [G*8*panels]: bias + W_ih x already computed, or null
  const float* bias;     // Panel8 bias, or null (used when pre is null)
  const float* w_hh;     // Panel8 [G*H, h_in]
  uint32_t h_in;         // H_out (the projected size for an LSTM with proj_size)
  const float* h;        // [h_in] hidden state before the step
  const float* b_hn;     // GRU: Panel8 [H], or null
  float* c;              // LSTM: [H] cell state, updated in place
  float* h_new;          // [H] hidden after the step (before an LSTM projection)
  uint32_t hidden;       // H
  int relu;              // RNN: 1 relu, 0 tanh
};

// The state update of one sample from gate pre-activations computed by gemm.
struct UpdateArgs {
  const float* gates;    // panel order: LSTM i,f,g,o / RNN a: complete pre-activations;
                         // GRU r, z complete and the n slot = b_hn + W_hn h
  const float* pre;      // GRU: the input part (n slot = b_in + W_in x)
  float* c;              // LSTM: [H], updated in place
  const float* h;        // GRU: [H] hidden before the step
  float* h_new;          // [H]
  uint32_t hidden;
  int relu;
};

struct Kernels {
  const char* isa;  // "avx2", "avx512", "neon"
  // Panels the fused LSTM, GRU and RNN steps take at a time: a split of the
  // panels into tasks at multiples of these keeps every task on the fast path.
  uint32_t step_group[3];
  void (*gemm)(const GemmArgs& args, size_t m0, size_t m1, uint32_t q0, uint32_t q1);
  // Fused steps over panels [p0, p1).
  void (*lstm_step)(const StepArgs& args, uint32_t p0, uint32_t p1);
  void (*gru_step)(const StepArgs& args, uint32_t p0, uint32_t p1);
  void (*rnn_step)(const StepArgs& args, uint32_t p0, uint32_t p1);
  // Updates over panels [p0, p1) of one sample.
  void (*lstm_update)(const UpdateArgs& args, uint32_t p0, uint32_t p1);
  void (*gru_update)(const UpdateArgs& args, uint32_t p0, uint32_t p1);
  void (*rnn_update)(const UpdateArgs& args, uint32_t p0, uint32_t p1);
  // Element-wise, in place (the chain's activation ops).
  void (*tanh)(float* x, size_t n);
  void (*sigmoid)(float* x, size_t n);
  void (*relu)(float* x, size_t n);
};

// The table for this CPU, or null when it has none of the ISAs built in
// (e.g. an x86-64 without AVX2+FMA). Asked at session init (cheap: libgcc
// reads CPUID once per process).
const Kernels* kernels_for_this_cpu();

// Tables compiled in (null where not built for this architecture).
const Kernels* avx2_kernels();
const Kernels* avx512_kernels();  // avx2's, with AVX-512 gemm and LSTM step
const Kernels* neon_kernels();

}  // namespace simd
}  // namespace ferry
