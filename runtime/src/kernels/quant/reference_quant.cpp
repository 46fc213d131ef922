// The quantized reference sets f16_reference, i8_reference, i4_reference:
// portable scalar C++, the oracles of the quantized SIMD sets, and what a
// Cortex-M runs. Written for clarity: every output is computed on its own,
// element by element through the index functions of
// shared/weight_layout.h, with exactly the formulas of kernels/kernel_set.h
// ("quantized sets"): plain int32 sums, then the fixed fp32 steps with
// fmaf. So their products are the contract itself, and every SIMD set's
// must equal them bit for bit; the independent check of the contract's
// arithmetic is the float64 computation in tests/unit/test_quant_kernels.cpp.
//
// Step strategy kPanels (not kPerSample like f32_reference): the recurrent
// loop then drives every quantized set the same way (quantize_rows, gemm,
// fused step or update), with no second scratch contract, and ferry_step
// equals ferry_run bit for bit for the reference too. Nonlinearities are
// libm's, in the f32 reference's order of operations.
//
// Built unless FERRY_QUANT_REFERENCE=OFF (FERRY_NO_QUANT_REFERENCE): a
// firmware that runs f32 models only can leave them out.
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "kernels/quant/quant.h"

#if !defined(FERRY_NO_QUANT_REFERENCE)

#include <math.h>
#include <string.h>

#include "kernels/reference/reference.h"
#include "shared/weight_layout.h"

namespace ferry {
namespace kernels {
namespace {

using layout::kPanel;

// ------------------------------------------------------- activations --

uint32_t bits_of(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return b;
}

// round_to_nearest_even(v) for |v| <= 2^22 (here |v| <= 127.00002): adding
// 1.5 * 2^23 leaves v rounded to an integer in the low mantissa bits. The
// product v was rounded before the add (the library builds with
// -ffp-contract=off), as cvtps2dq / fcvtns round the rounded product.
int32_t round_even(float v) { return static_cast<int32_t>(bits_of(v + 12582912.0f) - 0x4b400000u); }

uint32_t i8_activation_bytes(uint32_t k) { return static_cast<uint32_t>(layout::k4_of(k)); }
uint32_t i4_activation_bytes(uint32_t k) {
  const uint32_t kp = static_cast<uint32_t>(layout::k32_of(k));
  return kp + 4 * (kp / layout::kGroup);
}

// One row: m = max|x| on the bit patterns (NaN and Inf are the largest);
// s = m / 127, q = round_even(x * (127 / m)), zeros up to kp. Rows with
// m < 2^-120 (bit pattern 0x03800000), where 127 / m would overflow, are
// zero rows.
void quantize_row(const float* x, uint32_t k, uint32_t kp, int8_t* q, float* scale) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < k; ++i) {
    const uint32_t b = bits_of(x[i]) & 0x7fffffffu;
    m = b > m ? b : m;
  }
  if (m >= 0x7f800000u || m < 0x03800000u) {  // NaN or Inf: s = NaN; m < 2^-120: s = 0
    *scale = m >= 0x7f800000u ? __builtin_nanf("") : 0.0f;
    memset(q, 0, kp);
    return;
  }
  float mf;
  memcpy(&mf, &m, sizeof mf);
  *scale = mf / 127.0f;
  const float inv = 127.0f / mf;
  for (uint32_t i = 0; i < k; ++i) q[i] = static_cast<int8_t>(round_even(x[i] * inv));
  for (uint32_t i = k; i < kp; ++i) q[i] = 0;
}

void i8_quantize_rows(const float* x, size_t rows, size_t ldx, uint32_t k, int8_t* q, size_t ldq, float* scales) {
  const uint32_t kp = static_cast<uint32_t>(layout::k4_of(k));
  for (size_t r = 0; r < rows; ++r) quantize_row(x + r * ldx, k, kp, q + r * ldq, scales + r);
}

// int4 rows also carry c[g] = 8 * sum of the group's q after the Kp bytes.
void i4_quantize_rows(const float* x, size_t rows, size_t ldx, uint32_t k, int8_t* q, size_t ldq, float* scales) {
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

// The A row of a product: floats (f16) or a quantized row and its scale.
struct Act {
  const float* x;
  const int8_t* q;
  float scale;
};

// y for row g*units + u of w, from `init` (kernel_set.h, the contract).
float i8_output(const Weight& w, uint32_t g, uint32_t u, const Act& a, float init) {
  const uint32_t G = w.gates, K = w.cols;
  int32_t dot = 0;
  for (uint32_t k = 0; k < K; ++k) dot += int32_t{w.i8()[layout::panel8x4_index(G, K, g, u, k)]} * a.q[k];
  return fmaf(w.scales[layout::gate_column(G, g, u)] * a.scale, static_cast<float>(dot), init);
}

float i4_output(const Weight& w, uint32_t g, uint32_t u, const Act& a, float init) {
  const uint32_t G = w.gates, K = w.cols;
  float acc = 0.0f;
  for (uint32_t gi = 0; gi < layout::group_count(K); ++gi) {
    int32_t dot = 0;
    for (uint32_t k = gi * layout::kGroup; k < K && k < (gi + 1) * layout::kGroup; ++k) {
      dot += layout::panel8x8q4_load(w.u8(), G, K, g, u, k) * a.q[k];
    }
    const float scale = layout::float_from_half(w.group_scales[layout::group_scale_index(G, K, g, u, gi)]);
    acc = fmaf(scale, static_cast<float>(dot), acc);
  }
  return fmaf(acc, a.scale, init);
}

float f16_output(const Weight& w, uint32_t g, uint32_t u, const Act& a, float init) {
  const uint32_t G = w.gates, K = w.cols;
  float acc = init;
  for (uint32_t k = 0; k < K; ++k) {
    const uint64_t i = w.panel8() ? layout::panel8_index(G, K, g, u, k) : (uint64_t{g} * w.units + u) * K + k;
    acc = fmaf(a.x[k], layout::float_from_half(w.f16()[i]), acc);
  }
  return acc;
}

// One loop of each kind serves the three sets: the output of a row is
// chosen by the weight's dtype (per output, not per element; keeps the
// Cortex-M image small).
float output(const Weight& w, uint32_t g, uint32_t u, const Act& a, float init) {
  switch (w.dtype) {
    case DType::kF16: return f16_output(w, g, u, a, init);
    case DType::kI8: return i8_output(w, g, u, a, init);
    case DType::kI4: return i4_output(w, g, u, a, init);
    case DType::kF32: break;
  }
  return init;  // not reached: a quantized set never sees F32 weights
}

// C = init + A W over rows [m0, m1), vectors [q0, q1): lanes of vector q at
// columns 8q + j (panel order); padding lanes (u >= units) are not written.
void gemm(const GemmArgs& ga, size_t m0, size_t m1, uint32_t q0, uint32_t q1) {
  const Weight& w = *ga.w;
  const uint32_t G = w.gates;
  for (size_t m = m0; m < m1; ++m) {
    const Act a{ga.a ? ga.a + m * ga.lda : nullptr, ga.qa ? ga.qa + m * ga.ldqa : nullptr,
                ga.a_scales ? ga.a_scales[m] : 0.0f};
    float* c = ga.c + m * ga.ldc;
    for (uint32_t q = q0; q < q1; ++q) {
      for (uint32_t j = 0; j < kPanel; ++j) {
        const uint32_t col = q * kPanel + j, g = q % G, u = (q / G) * kPanel + j;
        if (col >= ga.n_store || u >= w.units) continue;
        const float init = ga.c_init ? ga.c_init[m * ga.ldc + col] : ga.bias ? ga.bias->at_f32(g * w.units + u, 0) : 0.0f;
        c[col] = output(w, g, u, a, init);
      }
    }
  }
}

// ------------------------------------------------------ state updates --
// PyTorch's equations in the f32 reference's order (reference.cpp).

void lstm_unit(float gi, float gf, float gg, float go, float* c, float* h) {
  const float i = ref::sigmoid(gi), f = ref::sigmoid(gf), g = tanhf(gg), o = ref::sigmoid(go);
  *c = f * *c + i * g;
  *h = o * tanhf(*c);
}

float gru_unit(float ar, float az, float anx, float anh, float h) {
  const float r = ref::sigmoid(ar), z = ref::sigmoid(az);
  const float n = tanhf(anx + r * anh);
  return (1.0f - z) * n + z * h;
}

float rnn_unit(float a, int relu) { return relu ? (a < 0.0f ? 0.0f : a) : tanhf(a); }

void lstm_update(const UpdateArgs& a, uint32_t p0, uint32_t p1) {
  for (uint32_t p = p0; p < p1; ++p) {
    for (uint32_t j = 0; j < kPanel && p * kPanel + j < a.hidden; ++j) {
      const float* g = a.gates + p * 4 * kPanel + j;
      const uint32_t u = p * kPanel + j;
      lstm_unit(g[0], g[kPanel], g[2 * kPanel], g[3 * kPanel], a.c + u, a.h_new + u);
    }
  }
}

void gru_update(const UpdateArgs& a, uint32_t p0, uint32_t p1) {
  for (uint32_t p = p0; p < p1; ++p) {
    for (uint32_t j = 0; j < kPanel && p * kPanel + j < a.hidden; ++j) {
      const size_t col = p * 3 * kPanel + j;
      const uint32_t u = p * kPanel + j;
      a.h_new[u] = gru_unit(a.gates[col], a.gates[col + kPanel], a.pre[col + 2 * kPanel], a.gates[col + 2 * kPanel], a.h[u]);
    }
  }
}

void rnn_update(const UpdateArgs& a, uint32_t p0, uint32_t p1) {
  for (uint32_t p = p0; p < p1; ++p) {
    for (uint32_t j = 0; j < kPanel && p * kPanel + j < a.hidden; ++j) {
      const uint32_t u = p * kPanel + j;
      a.h_new[u] = rnn_unit(a.gates[u], a.relu);  // G = 1: column u
    }
  }
}

// ------------------------------------------------------- fused steps --
//
// The chain of gate g of unit u: the input part (pre, or bias + W_ih x),
// continued by W_hh h; the same outputs gemm computes.

float chain_start(const StepArgs& s, uint32_t G, uint32_t g, uint32_t u) {
  if (s.pre) return s.pre[layout::gate_column(G, g, u)];
  return s.bias ? s.bias->at_f32(g * s.hidden + u, 0) : 0.0f;
}

float input_part(const StepArgs& s, uint32_t G, uint32_t g, uint32_t u) {
  const float init = chain_start(s, G, g, u);
  if (s.pre || !s.w_ih) return init;
  return output(*s.w_ih, g, u, Act{s.x, s.qx, s.x_scale}, init);
}

void lstm_step(const StepArgs& s, uint32_t p0, uint32_t p1) {
  const Act h{s.h, s.qh, s.h_scale};
  for (uint32_t u = p0 * kPanel; u < p1 * kPanel && u < s.hidden; ++u) {
    float gate[4];
    for (uint32_t g = 0; g < 4; ++g) gate[g] = output(*s.w_hh, g, u, h, input_part(s, 4, g, u));
    lstm_unit(gate[0], gate[1], gate[2], gate[3], s.c + u, s.h_new + u);
  }
}

// r and z continue one chain; n keeps its input part (from b_in) and its
// recurrent part (from b_hn) apart, as in f32.
void gru_step(const StepArgs& s, uint32_t p0, uint32_t p1) {
  const Act h{s.h, s.qh, s.h_scale};
  for (uint32_t u = p0 * kPanel; u < p1 * kPanel && u < s.hidden; ++u) {
    const float r = output(*s.w_hh, 0, u, h, input_part(s, 3, 0, u));
    const float z = output(*s.w_hh, 1, u, h, input_part(s, 3, 1, u));
    const float nx = input_part(s, 3, 2, u);
    const float nh = output(*s.w_hh, 2, u, h, s.b_hn ? s.b_hn->at_f32(u, 0) : 0.0f);
    s.h_new[u] = gru_unit(r, z, nx, nh, s.h[u]);
  }
}

void rnn_step(const StepArgs& s, uint32_t p0, uint32_t p1) {
  const Act h{s.h, s.qh, s.h_scale};
  for (uint32_t u = p0 * kPanel; u < p1 * kPanel && u < s.hidden; ++u) {
    s.h_new[u] = rnn_unit(output(*s.w_hh, 0, u, h, input_part(s, 1, 0, u)), s.relu);
  }
}

// ------------------------------------------------------------- tables --

#define FERRY_QUANT_REFERENCE_SET(NAME, DTYPE, ACT_BYTES, QUANTIZE)                                      \
  {                                                                                                   \
    NAME, DTYPE, StepStrategy::kPanels, {1, 1, 1}, gemm, ref::f32_tanh, ref::f32_sigmoid, ref::f32_relu, \
        ref::f32_softmax, ref::f32_leaky_relu, ref::f32_elu, ref::f32_hardtanh, ref::f32_silu,            \
        ref::f32_gelu, ref::f32_gelu_tanh, ref::f32_prelu, ref::f32_scale_shift, ref::f32_layer_norm,     \
        ref::f32_log_softmax, {lstm_step, gru_step, rnn_step}, {lstm_update, gru_update, rnn_update},    \
        {nullptr, nullptr, nullptr}, ACT_BYTES, QUANTIZE                                               \
  }

const KernelSet kF16Reference = FERRY_QUANT_REFERENCE_SET("f16_reference", DType::kF16, nullptr, nullptr);
const KernelSet kI8Reference =
    FERRY_QUANT_REFERENCE_SET("i8_reference", DType::kI8, i8_activation_bytes, i8_quantize_rows);
const KernelSet kI4Reference =
    FERRY_QUANT_REFERENCE_SET("i4_reference", DType::kI4, i4_activation_bytes, i4_quantize_rows);

#undef FERRY_QUANT_REFERENCE_SET

}  // namespace

const KernelSet* f16_reference_kernel_set() { return &kF16Reference; }
const KernelSet* i8_reference_kernel_set() { return &kI8Reference; }
const KernelSet* i4_reference_kernel_set() { return &kI4Reference; }

}  // namespace kernels
}  // namespace ferry

#else  // FERRY_NO_QUANT_REFERENCE

namespace ferry {
namespace kernels {
const KernelSet* f16_reference_kernel_set() { return nullptr; }
const KernelSet* i8_reference_kernel_set() { return nullptr; }
const KernelSet* i4_reference_kernel_set() { return nullptr; }
}  // namespace kernels
}  // namespace ferry

#endif
