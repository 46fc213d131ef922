#include "kernels/reference/reference.h"

#include <math.h>

#include "model.h"

namespace ferry {
namespace ref {

void f32_gemv(const float* w, uint32_t rows, uint32_t cols, const float* x,
              const float* bias, float* y) {
  for (uint32_t r = 0; r < rows; ++r) {
    const float* row = w + static_cast<uint64_t>(r) * cols;
    float acc = 0.0f;
    for (uint32_t k = 0; k < cols; ++k) acc += row[k] * x[k];
    y[r] = (bias ? bias[r] : 0.0f) + acc;
  }
}

float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// gates = (b_ih + b_hh) + W_ih x + W_hh h; rows i, f, g, o.
// c' = f*c + i*g; h' = o*tanh(c'); with a projection h' = W_hr h'.
void f32_lstm_step(const Cell& cell, uint32_t hidden, uint32_t h_out, const float* x,
                   float* h, float* c, float* scratch) {
  const uint32_t rows = 4 * hidden;
  float* gi = scratch;
  float* gh = scratch + rows;
  float* full = scratch + 2 * rows;
  f32_gemv(cell.w_ih, rows, cell.in, x, cell.bias, gi);
  f32_gemv(cell.w_hh, rows, h_out, h, nullptr, gh);
  for (uint32_t j = 0; j < hidden; ++j) {
    const float i = sigmoid(gi[j] + gh[j]);
    const float f = sigmoid(gi[hidden + j] + gh[hidden + j]);
    const float g = tanhf(gi[2 * hidden + j] + gh[2 * hidden + j]);
    const float o = sigmoid(gi[3 * hidden + j] + gh[3 * hidden + j]);
    c[j] = f * c[j] + i * g;
    full[j] = o * tanhf(c[j]);
  }
  if (cell.w_hr) {
    f32_gemv(cell.w_hr, h_out, hidden, full, nullptr, h);
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
  f32_gemv(cell.w_ih, rows, cell.in, x, cell.bias, gi);
  f32_gemv(cell.w_hh, rows, hidden, h, nullptr, gh);
  for (uint32_t j = 0; j < hidden; ++j) {
    const float r = sigmoid(gi[j] + gh[j]);
    const float z = sigmoid(gi[hidden + j] + gh[hidden + j]);
    const float hn = gh[2 * hidden + j] + (cell.b_hn ? cell.b_hn[j] : 0.0f);
    const float n = tanhf(gi[2 * hidden + j] + r * hn);
    h[j] = (1.0f - z) * n + z * h[j];
  }
}

void f32_rnn_step(const Cell& cell, uint32_t hidden, bool relu, const float* x, float* h,
                  float* scratch) {
  float* gi = scratch;
  float* gh = scratch + hidden;
  f32_gemv(cell.w_ih, hidden, cell.in, x, cell.bias, gi);
  f32_gemv(cell.w_hh, hidden, hidden, h, nullptr, gh);
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
