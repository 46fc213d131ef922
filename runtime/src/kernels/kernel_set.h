// Kernel sets: all the kernels of one (weight dtype, ISA) in one table.
//
// The CPU backend picks one set per layer at session init, by (op, dtype,
// weight layout, ISA) (backend/cpu/kernel_select.cpp), and never dispatches
// per call. Sets, named like XNNPACK's kernels (dtype, then ISA):
//   f32_reference  portable scalar C++, the oracle (kernels/reference); reads
//                  any layout; separate sums, libm nonlinearities.
//   f32_avx2       AVX2 + FMA (kernels/simd/avx2.cpp)
//   f32_avx512     AVX-512F: the f32_avx2 set with 64-byte GEMM and LSTM step
//   f32_neon       NEON, AArch64 and ARMv7
// The SIMD sets are one source (kernels/simd/kernels.inl, math.inl) compiled
// once per ISA, each into its own table from one definition (table.inl).
// A new dtype is a new set per ISA plus a reference set, and table entries
// in kernels/registry.cpp; nothing else dispatches on dtype.
//
// Two step strategies (how a recurrent step is split into kernels; the
// one recurrent loop in backend/cpu/recurrent.cpp drives either):
//   kPerSample  one call per sample and step: sample_step[] computes the
//               gates, the state update and the projection in place
//               (the reference set; scratch: 2 gate rows + 1 hidden row).
//   kPanels     the input part of a chunk of steps as one GEMM into
//               panel-order gate rows, then per step the fused step[] kernel
//               (one sample) or gemm + update[] (a batch), split over panels
//               between threads (the SIMD sets).
//
// Numeric contract of the kPanels sets, shared by XNNPACK's f32 GEMMs: each
// output of a matrix product is ONE fused multiply-add chain,
//     acc = init;  for k = 0, 1, ..., K-1:  acc = fma(a[k], w[k], acc)
// where init is the bias (or 0), and the recurrent product continues the
// chain of the input product: gates = ((bias + W_ih x) + W_hh h), k ascending
// in each. Splitting a run into steps, a batch into rows, or the work into
// threads therefore never changes a single bit of the result. The reference
// set sums each product separately from 0 and adds the bias last; it is
// bit-identical to itself across steps, rows and threads too.
//
// Panel order and Panel8: shared/weight_layout.h. "Vector q" of a Panel8
// matrix is gate q % G of panel q / G; its 8 outputs land at columns
// [8q, 8q + 8) of a panel-order row, the order every gate buffer uses. A
// Panel8 vector of G*H (a cell's folded bias) is itself a panel-order row.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

namespace ferry {
namespace kernels {

// C[m][.] = init + A[m][:K] * W over vectors [q0, q1) of W (K = w->cols).
struct GemmArgs {
  const Weight* w;       // [G*units, K]
  const float* a;        // A rows
  size_t lda;            // floats between A rows
  const Weight* bias;    // init: a vector of G*units (panel order for Panel8), or null for 0 ...
  const float* c_init;   // ... or, when set, these rows (panel order, stride ldc; may be c)
  float* c;              // output rows, panel order
  size_t ldc;            // floats between C rows
  uint32_t n_store;      // columns of a C row to write: G*8*panels for gate buffers,
                         // the true width N for compact outputs (Linear, projection)
};

// kPanels: one time step of one sample, fused: gates of the panels
// accumulated in registers (input part, then recurrent part),
// nonlinearities and the state update applied before anything is stored.
struct StepArgs {
  const Weight* w_ih;    // [G*H, in], or null when `pre` holds the input part
  const float* x;        // [in]
  const float* pre;      // panel-order [G*8*panels]: bias + W_ih x already computed, or null
  const Weight* bias;    // panel-order bias, or null (used when pre is null)
  const Weight* w_hh;    // [G*H, h_in]
  const float* h;        // [h_in] hidden state before the step (h_in = w_hh->cols)
  const Weight* b_hn;    // GRU: [H], or null
  float* c;              // LSTM: [H] cell state, updated in place
  float* h_new;          // [H] hidden after the step (before an LSTM projection)
  uint32_t hidden;       // H
  int relu;              // RNN: 1 relu, 0 tanh
};

// kPanels: the state update of one sample from gate pre-activations
// computed by gemm.
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

// kPerSample: one step of one sample. `h` [H_out] and `c` [H] are read and
// updated in place; with a projection h is W_hr times the new hidden.
struct SampleStepArgs {
  const Cell* cell;
  uint32_t hidden;
  const float* x;        // [cell->in]
  float* h;
  float* c;              // LSTM only
  float* scratch;        // 2*G*H + H floats
  int relu;
};

enum class StepStrategy : uint8_t { kPerSample, kPanels };

// Indexed by layout::CellKind: LSTM, GRU, RNN.
constexpr int kCellKinds = 3;
inline int kind_index(layout::CellKind kind) { return static_cast<int>(kind); }

struct KernelSet {
  const char* name;  // "f32_reference", "f32_avx2", ...
  DType dtype;       // of the weight matrices it reads
  StepStrategy strategy;
  // kPanels: panels the fused steps take at a time; splitting panels into
  // tasks at multiples of these keeps every task on the fast path.
  uint32_t step_group[kCellKinds];

  // Every set: matrix products over rows [m0, m1) and vectors [q0, q1).
  void (*gemm)(const GemmArgs& args, size_t m0, size_t m1, uint32_t q0, uint32_t q1);
  // Element-wise, in place (the chain's activation ops), and softmax of one row.
  void (*tanh)(float* x, size_t n);
  void (*sigmoid)(float* x, size_t n);
  void (*relu)(float* x, size_t n);
  void (*softmax)(float* x, size_t n);
  // (format 1.2 ops) In place over n floats, with the layer's parameters:
  void (*leaky_relu)(float* x, size_t n, float slope);     // x > 0 ? x : slope * x
  void (*elu)(float* x, size_t n, float alpha);            // x > 0 ? x : alpha * (exp(x) - 1)
  void (*hardtanh)(float* x, size_t n, float lo, float hi);  // min(max(x, lo), hi)
  void (*silu)(float* x, size_t n);                        // x * sigmoid(x)
  void (*gelu)(float* x, size_t n);                        // x * (1 + erf(x / sqrt 2)) / 2
  void (*gelu_tanh)(float* x, size_t n);                   // PyTorch's approximate='tanh'
  // Over `rows` rows of n features: PReLU (w_count 1 or n weights) and a
  // per-feature scale and shift (BatchNorm, folded).
  void (*prelu)(float* x, size_t rows, size_t n, const float* w, size_t w_count);
  void (*scale_shift)(float* x, size_t rows, size_t n, const float* scale, const float* shift);
  // One row of n features: LayerNorm (weight, bias may be null) and log-softmax.
  void (*layer_norm)(float* x, size_t n, const float* weight, const float* bias, float eps);
  void (*log_softmax)(float* x, size_t n);

  // kPanels: fused steps over panels [p0, p1), and updates over panels of one
  // sample.
  void (*step[kCellKinds])(const StepArgs& args, uint32_t p0, uint32_t p1);
  void (*update[kCellKinds])(const UpdateArgs& args, uint32_t p0, uint32_t p1);

  // kPerSample.
  void (*sample_step[kCellKinds])(const SampleStepArgs& args);
};

}  // namespace kernels
}  // namespace ferry
