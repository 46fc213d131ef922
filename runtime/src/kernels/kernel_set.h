// Kernel sets: all the kernels of one (weight dtype, ISA) in one table.
//
// The CPU backend picks one set per layer at session init, by (op, dtype,
// weight layout, ISA) (backend/cpu/kernel_select.cpp), and never dispatches
// per call. Sets, named like XNNPACK's kernels (dtype, then ISA):
//   f32_reference  portable scalar C++, the oracle (kernels/reference); reads
//                  any layout; separate sums, libm nonlinearities.
//   f32_avx2       AVX2 + FMA (kernels/simd/avx2.cpp; its batched LSTM and GRU
//                  steps: batch_step.inl)
//   f32_avx512     AVX-512F: the f32_avx2 set with 64-byte GEMM and LSTM steps
//   f32_neon       NEON, AArch64 and ARMv7
// and the quantized sets (f16, i8, i4) below.
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
//               (one sample) or gemm + update[] (a batch; or the two fused,
//               batch_step[], where the set has it), split over panels
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
//
// ---------------------------------------------------- quantized sets --
//
// Weights in f16, int8 or int4 (model/weight.h, shared/weight_layout.h);
// biases, b_hn, gates, cell state, nonlinearities stay fp32. Sets:
//   f16_reference, i8_reference, i4_reference   portable scalar C++
//       (kernels/quant/reference_quant.cpp), the oracles; built unless
//       FERRY_QUANT_REFERENCE=OFF (a firmware that runs f32 models only).
//   f16_avx2, i8_avx2, i4_avx2 (AVX2 + FMA + F16C),
//   i8_avxvnni, i4_avxvnni (+ AVX-VNNI, VEX vpdpbusd),
//   i8_avx512vnni, i4_avx512vnni (+ AVX-512 F/BW/VL/VNNI; EVEX vpdpbusd on
//       256 bits, the int8 LSTM step on 512),
//   f16_neon (AArch64), i8_neon, i4_neon (NEON; ARMv7 with VFPv4),
//   i8_neondot, i4_neondot (AArch64 + the dot-product extension, sdot).
// Every one is kPanels: one integration path in the recurrent loop for all
// of them (the references included, so that they need no second scratch
// contract), and ferry_step == ferry_run bit for bit by the argument above.
// Layouts read: f16 sets Panel8 (the reference also RowMajor), i8 sets
// Panel8x4 only, i4 sets Panel8x8q4 only. Biases are fp32 Panel8 vectors as
// for f32. update[], tanh, sigmoid, relu and softmax work on fp32 gate rows
// and are the f32 set's of the same ISA (the reference's: libm).
//
// Activations (i8, i4). Every A row of a product -- x_t of a chunk, h_{t-1},
// a projection's or a Linear's input -- is quantized per row by the set's
// quantize_rows before the product (the caller does it once per row and
// step, before splitting the product between threads):
//     m = max_k |x[k]|,  s = m / 127,  q[k] = round_to_nearest_even(x[k] * (127 / m))
// (two divisions per row, none per element; |q| <= 127 always). Special rows:
//     m < 2^-120 (zeros, subnormals, tiny):    s = 0, q = 0 (below 2^-120,
//                                              127 / m would overflow to Inf;
//                                              such a row adds < 2^-120 * sum|w|
//                                              to any output)
//     any NaN or +-Inf:                        s = NaN, q = 0, so every output
//                                              that reads the row is NaN
// (m is taken on the bit patterns, so NaN is seen whatever the ISA's max
// does with it). A quantized row is activation_bytes(K) bytes:
//     [0, Kp)          q, then zeros up to Kp = round_up(K, 4) (i8) or
//                      round_up(K, 32) (i4)
//     i4: [Kp, Kp + 4*Kp/32)  int32 c[g] = 8 * sum of q over group g (the
//                      correction for nibbles stored as q + 8, which x86's
//                      unsigned-times-signed dot products need)
// Rows must start 4-byte aligned (64 recommended) and be >= activation_bytes
// apart. Every set of a dtype writes the same bytes and scales, so a row
// quantized by one is valid for all.
//
// Products (the numeric contract of the quantized sets). Integer sums are
// exact in int32 (|dot| <= K * 127^2, hence int8 matrices have at most
// layout::kMaxI8Cols columns; an int4 group's sum is at most 32 * 8 * 127);
// the fp32 steps are fixed, so every set
// of a dtype -- reference, AVX2, VNNI, NEON with or without sdot -- gives
// the same bits for every output of a product:
//   i8:  y = fma(w_scale[row] * a_scale, float(dot), init),
//        dot = sum_k qw[row][k] * qa[k]
//   i4:  acc = 0;  for each group g ascending:
//            acc = fma(float(gscale[row][g]), float(dot_g), acc)
//        y = fma(acc, a_scale, init)
//   f16: the f32 contract above on the exactly converted weights:
//        acc = init;  for k ascending: acc = fma(a[k], float(w[row][k]), acc)
// where float() of an int32 rounds to nearest even and fma rounds once;
// init is the bias (or 0, or c_init), and the recurrent product continues
// the input one: gates = y(W_hh, h, init = y(W_ih, x, bias)); GRU's n slot
// starts its recurrent part from b_hn. A fused step therefore gives exactly
// what gemm + update give, and splitting rows, vectors or panels between
// threads changes no bit. The nonlinearities are the ISA's (simd/math.inl)
// or libm's (references), so steps and updates are bit-identical among the
// SIMD sets of one architecture and within float tolerance of the
// reference. Subnormal activations are flushed or not as the FP
// environment says (the runtime flushes them during runs).
//
// Driving a quantized set (backend/cpu and the arena planner):
//   choice   per layer by dtype, as for f32: best_simd_kernel_set(dtype)
//            when the layer's weights are in the dtype's layout, else
//            reference_kernel_set(dtype); never XNNPACK (f32 GEMMs only).
//   arena    i8, i4: per A row quantized at once, activation_bytes(K)
//            rounded up to 64, plus one float for its scale; at most the
//            chunk's input rows (chunk steps x B, K = the layer's input
//            width), B hidden rows (K = h_out), B rows of H for an LSTM
//            projection, a Linear's input rows. f16: nothing more than f32.
//   chunk    quantize_rows(x rows of the chunk), then gemm with qa, ldqa,
//            a_scales (a unused), split over threads as for f32.
//   step     B == 1: quantize_rows(h_{t-1}) -- and x_t when the step fuses
//            the input part -- then step[] with qh, h_scale (qx, x_scale);
//            x and h still point at the floats (GRU's update reads h).
//            B >= 2: quantize_rows(the B hidden rows), then gemm(W_hh,
//            c_init = the gate rows) and update[] as for f32.
//   proj, Linear  quantize_rows(their input rows), then gemm.
// Each row is quantized once per step, before the work is split between
// threads (O(K), a few hundred ns at K = 1024), so every task reads the same
// bytes.
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
  // i8 and i4 sets (`a` unused): A rows quantized by the set's quantize_rows.
  const int8_t* qa = nullptr;        // row m at qa + m * ldqa (activation_bytes(K) bytes)
  size_t ldqa = 0;                   // bytes between quantized rows, a multiple of 4
  const float* a_scales = nullptr;   // a_scales[m]: the scale of row m
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
  // i8 and i4 sets (x and h unused): the quantized rows and their scales
  // (quantize_rows). qx only when w_ih is used (no `pre`).
  const int8_t* qx = nullptr;
  float x_scale = 0.0f;
  const int8_t* qh = nullptr;
  float h_scale = 0.0f;
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

// kPanels, a batch (B >= 2): one whole step of rows [m0, m1) in one kernel.
// Each gate is the chain bias (or 0), then W_ih x, then W_hh h (GRU's n:
// bias + W_in x and b_hn + W_hn h apart, as gemm + update have them), kept
// in registers, and the state update is applied to it before anything is
// stored: the same bits as the input gemm, the recurrent gemm continuing
// it, then update[] on each active row. Rows past their length
// (lengths[b] <= t) get no update and keep their state.
struct BatchStepArgs {
  const Weight* w_ih;    // [G*H, in]
  const float* x;        // input row b at x + b * ldx
  size_t ldx;
  const Weight* bias;    // panel-order, or null
  const Weight* w_hh;    // [G*H, h_in]
  const float* h;        // hidden row b (before the step) at h + b * ldh
  size_t ldh;
  float* c;              // LSTM: cell state row b at c + b * ldc, updated in place
  size_t ldc;
  float* h_new;          // row b at h_new + b * ldh_new
  size_t ldh_new;
  const int32_t* lengths;  // or null: every row is active
  size_t t;
  uint32_t hidden;
  const Weight* b_hn = nullptr;  // GRU: [H], or null (the n gate's recurrent chain starts from it)
};

// kPanels, a chunk's input projection computed in shares beside the steps
// of the chunk before it (step_project): share `share` of `shares` of
//     c[m] = bias + W x[m]   for rows m in [0, rows), every vector of W,
// the product input_projection computes for those rows (gemm with n_store =
// the gate row's floats). Shares 0 .. shares-1, each once and in any order,
// write every output once, each the one chain of the contract above, so the
// result is gemm's bit for bit whatever the split.
struct ProjectShare {
  const Weight* w;       // W_ih [G*H, in] of the cell
  const float* a;        // row m at a + m * lda
  size_t lda;
  const Weight* bias;    // panel-order, or null
  float* c;              // gate row m at c + m * ldc (panel order)
  size_t ldc;
  size_t rows;
  uint32_t share, shares;
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

  // i8 and i4 sets; null in the float sets (f32, f16), whose products read
  // float activations. Bytes of one quantized row of `k` values (see
  // "Activations" above): what the arena reserves per row, plus one float
  // for its scale.
  uint32_t (*activation_bytes)(uint32_t k) = nullptr;
  // Quantizes rows [0, rows) of x (row r at x + r * ldx, k floats) into
  // q + r * ldq (activation_bytes(k) bytes, ldq a multiple of 4) and
  // scales[r].
  void (*quantize_rows)(const float* x, size_t rows, size_t ldx, uint32_t k, int8_t* q, size_t ldq,
                        float* scales) = nullptr;

  // kPanels, optional: a batched step in one kernel (BatchStepArgs) over
  // rows [m0, m1) and panels [p0, p1). Null where the set has none for the
  // cell kind: the backend then runs gemm and update[].
  void (*batch_step[kCellKinds])(const BatchStepArgs& args, size_t m0, size_t m1, uint32_t p0,
                                 uint32_t p1) = {nullptr, nullptr, nullptr};

  // kPanels, optional: one whole one-sample step (step[kind] over panels
  // [0, panels), last to first in groups of step_group when `reverse`, as
  // the backend's step_all_panels runs it) and one share of a later chunk's
  // input projection, in the same loop: the step reads its weights from L2
  // at under half the FMA rate, and the projection's FMAs fill the rest.
  // Both results are those of step[] and of the projection's gemm, bit for
  // bit. Null where the set has none for the cell kind: the backend computes
  // each chunk's projection before its steps.
  void (*step_project[kCellKinds])(const StepArgs& step, const ProjectShare& share, uint32_t panels,
                                   bool reverse) = {nullptr, nullptr, nullptr};
};

}  // namespace kernels
}  // namespace ferry
