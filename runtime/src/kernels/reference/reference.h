// Reference kernels: portable scalar C++, written for clarity. They are the
// oracle every other backend is compared with, so each follows PyTorch's
// equations literally (PYTORCH_FORMAT.md §7) and sums in a fixed order.
#pragma once

#include <stdint.h>

namespace ferry {
struct Cell;

namespace ref {

// y[r] = bias[r] (0 when bias is null) + sum_k w[r*cols + k] * x[k], k ascending.
void f32_gemv(const float* w, uint32_t rows, uint32_t cols, const float* x,
              const float* bias, float* y);

float sigmoid(float x);

// One time step of one sample. `x` [cell.in]; `h` [h_out] and `c` [hidden]
// are read and updated in place; `scratch` holds 2*G*H + H floats.
void f32_lstm_step(const Cell& cell, uint32_t hidden, uint32_t h_out, const float* x,
                   float* h, float* c, float* scratch);
void f32_gru_step(const Cell& cell, uint32_t hidden, const float* x, float* h, float* scratch);
void f32_rnn_step(const Cell& cell, uint32_t hidden, bool relu, const float* x, float* h,
                  float* scratch);

// In place over `n` floats.
void f32_relu(float* x, uint32_t n);
void f32_tanh(float* x, uint32_t n);
void f32_sigmoid(float* x, uint32_t n);
// Softmax of one row of `n` floats, max-subtracted.
void f32_softmax(float* x, uint32_t n);

}  // namespace ref
}  // namespace ferry
