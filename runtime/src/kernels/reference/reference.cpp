#include "kernels/reference/reference.h"

#include <math.h>

#include "model.h"

namespace ferry {
namespace ref {

void f32_gemv(const Matrix& w, const float* x, const Matrix& bias, float* y) {
  const uint32_t cols = w.cols;
  if (w.panel8) {
    // Panel by panel, in the order the bytes are stored (a row-by-row walk
    // would touch a new cache line per element). Each row's sum is still
    // its own, k ascending: the same result as the row-major loop below.
    const uint32_t G = w.gates, H = w.units;
    float acc[4 * kPanel];  // G <= 4
    for (uint32_t p = 0; p < panels_of(H); ++p) {
      for (uint32_t i = 0; i < G * kPanel; ++i) acc[i] = 0.0f;
      const float* panel = w.data + static_cast<uint64_t>(p) * w.panel_floats();
      for (uint32_t k = 0; k < cols; ++k) {
        const float* col = panel + static_cast<uint64_t>(k) * G * kPanel;
        for (uint32_t i = 0; i < G * kPanel; ++i) acc[i] += col[i] * x[k];
      }
      for (uint32_t g = 0; g < G; ++g) {
        for (uint32_t j = 0; j < kPanel && p * kPanel + j < H; ++j) {
          const uint32_t r = g * H + p * kPanel + j;
          y[r] = (bias ? bias.at(r, 0) : 0.0f) + acc[g * kPanel + j];
        }
      }
    }
    return;
  }
  const uint32_t rows = w.rows();
  for (uint32_t r = 0; r < rows; ++r) {
    const float* row = w.data + static_cast<uint64_t>(r) * cols;
    float acc = 0.0f;
    for (uint32_t k = 0; k < cols; ++k) acc += row[k] * x[k];
    y[r] = (bias ? bias.at(r, 0) : 0.0f) + acc;
  }
}

float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// gates = (b_ih + b_hh) + W_ih x + W_hh h; rows i, f, g, o.
// c' = f*c + i*g; h' = o*tanh(c'); with a projection h' = W_hr h'.
void f32_lstm_step(const Cell& cell, uint32_t hidden, const float* x, float* h, float* c,
                   float* scratch) {
  const uint32_t rows = 4 * hidden;
  float* gi = scratch;
  float* gh = scratch + rows;
  float* full = scratch + 2 * rows;
  f32_gemv(cell.w_ih, x, cell.bias, gi);
  f32_gemv(cell.w_hh, h, Matrix(), gh);
  for (uint32_t j = 0; j < hidden; ++j) {
    const float i = sigmoid(gi[j] + gh[j]);
    const float f = sigmoid(gi[hidden + j] + gh[hidden + j]);
    const float g = tanhf(gi[2 * hidden + j] + gh[2 * hidden + j]);
    const float o = sigmoid(gi[3 * hidden + j] + gh[3 * hidden + j]);
    c[j] = f * c[j] + i * g;
    full[j] = o * tanhf(c[j]);
  }
  if (cell.w_hr) {
    f32_gemv(cell.w_hr, full, Matrix(), h);
  } else {
    for (uint32_t j = 0; j < hidden; ++j) h[j] = full[j];
  }
}

// r = σ(W_ir x + b_ir + W_hr h + b_hr), z likewise, n = tanh(W_in x + b_in +
// r*(W_hn h + b_hn)), h' = (1-z)*n + z*h. The folded bias holds b_ir+b_hr,
// b_iz+b_hz and b_in; b_hn stays apart because r multiplies it.
void f32_gru_step(const Cell& cell, uint32_t hidden, const float* x, float* h, float* scratch) {
  const uint32_t rows = 3 * hidden;
  float* gi = scratch;
  float* gh = scratch + rows;
  f32_gemv(cell.w_ih, x, cell.bias, gi);
  f32_gemv(cell.w_hh, h, Matrix(), gh);
  for (uint32_t j = 0; j < hidden; ++j) {
    const float r = sigmoid(gi[j] + gh[j]);
    const float z = sigmoid(gi[hidden + j] + gh[hidden + j]);
    const float hn = gh[2 * hidden + j] + (cell.b_hn ? cell.b_hn.at(j, 0) : 0.0f);
    const float n = tanhf(gi[2 * hidden + j] + r * hn);
    h[j] = (1.0f - z) * n + z * h[j];
  }
}

void f32_rnn_step(const Cell& cell, uint32_t hidden, bool relu, const float* x, float* h,
                  float* scratch) {
  float* gi = scratch;
  float* gh = scratch + hidden;
  f32_gemv(cell.w_ih, x, cell.bias, gi);
  f32_gemv(cell.w_hh, h, Matrix(), gh);
  for (uint32_t j = 0; j < hidden; ++j) {
    const float a = gi[j] + gh[j];
    h[j] = relu ? (a < 0.0f ? 0.0f : a) : tanhf(a);
  }
}

void f32_relu(float* x, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) x[i] = x[i] < 0.0f ? 0.0f : x[i];  // NaN stays NaN, as in PyTorch
}

void f32_tanh(float* x, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) x[i] = tanhf(x[i]);
}

void f32_sigmoid(float* x, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) x[i] = sigmoid(x[i]);
}

void f32_softmax(float* x, uint32_t n) {
  float m = x[0];
  for (uint32_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  float sum = 0.0f;
  for (uint32_t i = 0; i < n; ++i) {
    x[i] = expf(x[i] - m);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (uint32_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace ref
}  // namespace ferry
