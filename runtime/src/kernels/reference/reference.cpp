#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "kernels/reference/reference.h"

#include <math.h>

namespace ferry {
namespace ref {

void f32_gemv(const Weight& w, const float* x, const Weight& bias, float* y) {
  const uint32_t cols = w.cols;
  if (w.panel8()) {
    // Panel by panel, in the order the bytes are stored (a row-by-row walk
    // would touch a new cache line per element). Each row's sum is still
    // its own, k ascending: the same result as the row-major loop below.
    const uint32_t G = w.gates, H = w.units;
    float acc[layout::kMaxGates * layout::kPanel];
    for (uint32_t p = 0; p < layout::panels_of(H); ++p) {
      for (uint32_t i = 0; i < G * layout::kPanel; ++i) acc[i] = 0.0f;
      const float* panel = w.f32() + p * layout::panel8_panel_elements(G, cols);
      for (uint32_t k = 0; k < cols; ++k) {
        const float* col = panel + k * layout::panel8_column_stride(G);
        for (uint32_t i = 0; i < G * layout::kPanel; ++i) acc[i] += col[i] * x[k];
      }
      for (uint32_t g = 0; g < G; ++g) {
        for (uint32_t j = 0; j < layout::kPanel && p * layout::kPanel + j < H; ++j) {
          const uint32_t r = g * H + p * layout::kPanel + j;
          y[r] = (bias ? bias.at_f32(r, 0) : 0.0f) + acc[g * layout::kPanel + j];
        }
      }
    }
    return;
  }
  const uint32_t rows = w.rows();
  for (uint32_t r = 0; r < rows; ++r) {
    const float* row = w.f32() + static_cast<uint64_t>(r) * cols;
    float acc = 0.0f;
    for (uint32_t k = 0; k < cols; ++k) acc += row[k] * x[k];
    y[r] = (bias ? bias.at_f32(r, 0) : 0.0f) + acc;
  }
}

float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// gates = (b_ih + b_hh) + W_ih x + W_hh h; rows i, f, g, o.
// c' = f*c + i*g; h' = o*tanh(c'); with a projection h' = W_hr h'.
void f32_lstm_step(const kernels::SampleStepArgs& a) {
  const Cell& cell = *a.cell;
  const uint32_t hidden = a.hidden, rows = 4 * hidden;
  float* gi = a.scratch;
  float* gh = a.scratch + rows;
  float* full = a.scratch + 2 * rows;
  float* c = a.c;
  f32_gemv(cell.w_ih, a.x, cell.bias, gi);
  f32_gemv(cell.w_hh, a.h, Weight(), gh);
  for (uint32_t j = 0; j < hidden; ++j) {
    const float i = sigmoid(gi[j] + gh[j]);
    const float f = sigmoid(gi[hidden + j] + gh[hidden + j]);
    const float g = tanhf(gi[2 * hidden + j] + gh[2 * hidden + j]);
    const float o = sigmoid(gi[3 * hidden + j] + gh[3 * hidden + j]);
    c[j] = f * c[j] + i * g;
    full[j] = o * tanhf(c[j]);
  }
  if (cell.w_hr) {
    f32_gemv(cell.w_hr, full, Weight(), a.h);
  } else {
    for (uint32_t j = 0; j < hidden; ++j) a.h[j] = full[j];
  }
}

// r = σ(W_ir x + b_ir + W_hr h + b_hr), z likewise, n = tanh(W_in x + b_in +
// r*(W_hn h + b_hn)), h' = (1-z)*n + z*h. The folded bias holds b_ir+b_hr,
// b_iz+b_hz and b_in; b_hn stays apart because r multiplies it.
void f32_gru_step(const kernels::SampleStepArgs& a) {
  const Cell& cell = *a.cell;
  const uint32_t hidden = a.hidden, rows = 3 * hidden;
  float* gi = a.scratch;
  float* gh = a.scratch + rows;
  float* h = a.h;
  f32_gemv(cell.w_ih, a.x, cell.bias, gi);
  f32_gemv(cell.w_hh, h, Weight(), gh);
  for (uint32_t j = 0; j < hidden; ++j) {
    const float r = sigmoid(gi[j] + gh[j]);
    const float z = sigmoid(gi[hidden + j] + gh[hidden + j]);
    const float hn = gh[2 * hidden + j] + (cell.b_hn ? cell.b_hn.at_f32(j, 0) : 0.0f);
    const float n = tanhf(gi[2 * hidden + j] + r * hn);
    h[j] = (1.0f - z) * n + z * h[j];
  }
}

void f32_rnn_step(const kernels::SampleStepArgs& a) {
  const Cell& cell = *a.cell;
  const uint32_t hidden = a.hidden;
  float* gi = a.scratch;
  float* gh = a.scratch + hidden;
  f32_gemv(cell.w_ih, a.x, cell.bias, gi);
  f32_gemv(cell.w_hh, a.h, Weight(), gh);
  for (uint32_t j = 0; j < hidden; ++j) {
    const float v = gi[j] + gh[j];
    a.h[j] = a.relu ? (v < 0.0f ? 0.0f : v) : tanhf(v);
  }
}

void f32_relu(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = x[i] < 0.0f ? 0.0f : x[i];  // NaN stays NaN, as in PyTorch
}

void f32_tanh(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = tanhf(x[i]);
}

void f32_sigmoid(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = sigmoid(x[i]);
}

void f32_softmax(float* x, size_t n) {
  float m = x[0];
  for (size_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    x[i] = expf(x[i] - m);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

void f32_leaky_relu(float* x, size_t n, float slope) {
  for (size_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : x[i] * slope;
}

void f32_elu(float* x, size_t n, float alpha) {
  for (size_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : alpha * expm1f(x[i]);
}

void f32_hardtanh(float* x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; ++i) x[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];  // NaN stays NaN
}

void f32_silu(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = x[i] * sigmoid(x[i]);
}

void f32_gelu(float* x, size_t n) {
  const float kInvSqrt2 = 0.70710678118654752f;
  for (size_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * kInvSqrt2));
}

void f32_gelu_tanh(float* x, size_t n) {
  const float kSqrt2OverPi = 0.79788456080286536f, kCubic = 0.044715f;
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + kCubic * v * v * v)));
  }
}

void f32_prelu(float* x, size_t rows, size_t n, const float* w, size_t w_count) {
  for (size_t r = 0; r < rows; ++r, x += n) {
    for (size_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : w[w_count == 1 ? 0 : i] * x[i];
  }
}

void f32_scale_shift(float* x, size_t rows, size_t n, const float* scale, const float* shift) {
  for (size_t r = 0; r < rows; ++r, x += n) {
    for (size_t i = 0; i < n; ++i) x[i] = x[i] * scale[i] + shift[i];
  }
}

// Mean, then the mean of squared deviations (the biased variance PyTorch's
// layer_norm uses), both summed in order.
void f32_layer_norm(float* x, size_t n, const float* weight, const float* bias, float eps) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  float sq = 0.0f;
  for (size_t i = 0; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const float inv = 1.0f / sqrtf(sq / static_cast<float>(n) + eps);
  for (size_t i = 0; i < n; ++i) {
    const float v = (x[i] - mean) * inv;
    x[i] = (weight ? v * weight[i] : v) + (bias ? bias[i] : 0.0f);
  }
}

void f32_log_softmax(float* x, size_t n) {
  float m = x[0];
  for (size_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) sum += expf(x[i] - m);
  const float lse = m + logf(sum);
  for (size_t i = 0; i < n; ++i) x[i] -= lse;
}

}  // namespace ref

namespace kernels {
namespace {

// C = init + A W for rows [m0, m1), vectors [q0, q1) (kernel_set.h): each
// output its own sum from 0, k ascending, the initial value added last, as
// f32_gemv; lanes of vector q land at columns 8q + j (panel order, which for
// G = 1 is the natural order).
void f32_gemm_reference(const GemmArgs& g, size_t m0, size_t m1, uint32_t q0, uint32_t q1) {
  const Weight& w = *g.w;
  const uint32_t G = w.gates, K = w.cols;
  for (size_t m = m0; m < m1; ++m) {
    const float* a = g.a + m * g.lda;
    float* c = g.c + m * g.ldc;
    const float* c_init = g.c_init ? g.c_init + m * g.ldc : nullptr;
    for (uint32_t q = q0; q < q1; ++q) {
      for (uint32_t j = 0; j < layout::kPanel; ++j) {
        const uint32_t col = q * layout::kPanel + j;
        const uint32_t u = (q / G) * layout::kPanel + j;
        if (col >= g.n_store || u >= w.units) continue;
        const uint32_t r = layout::panel8_row_of(G, w.units, q, j);
        uint64_t stride = 0;
        const float* row = w.row_f32(r, &stride);
        float acc = 0.0f;
        for (uint32_t k = 0; k < K; ++k) acc += row[k * stride] * a[k];
        const float init = c_init ? c_init[col] : g.bias ? g.bias->at_f32(r, 0) : 0.0f;
        c[col] = init + acc;
      }
    }
  }
}

const KernelSet kF32Reference = {
    "f32_reference",
    DType::kF32,
    StepStrategy::kPerSample,
    {1, 1, 1},
    f32_gemm_reference,
    ref::f32_tanh,
    ref::f32_sigmoid,
    ref::f32_relu,
    ref::f32_softmax,
    ref::f32_leaky_relu,
    ref::f32_elu,
    ref::f32_hardtanh,
    ref::f32_silu,
    ref::f32_gelu,
    ref::f32_gelu_tanh,
    ref::f32_prelu,
    ref::f32_scale_shift,
    ref::f32_layer_norm,
    ref::f32_log_softmax,
    {nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr},
    {ref::f32_lstm_step, ref::f32_gru_step, ref::f32_rnn_step},
};

}  // namespace

const KernelSet* f32_reference_kernel_set() { return &kF32Reference; }

}  // namespace kernels
}  // namespace ferry
