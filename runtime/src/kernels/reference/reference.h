// Reference kernels: portable scalar C++, written for clarity. They are the
// oracle every other backend is compared with, so each follows PyTorch's
// equations literally (PYTORCH_FORMAT.md §7) and sums in a fixed order. They
// read weights in either stored layout (RowMajor or Panel8) through
// Matrix::row, so any model file runs here.
#pragma once

#include <stdint.h>

namespace ferry {
struct Cell;
struct Matrix;

namespace ref {

// y[r] = bias[r] (0 when bias is absent) + sum_k w[r][k] * x[k], k ascending.
void f32_gemv(const Matrix& w, const float* x, const Matrix& bias, float* y);

float sigmoid(float x);

// One time step of one sample. `x` [cell.in]; `h` [H_out] and `c` [hidden]
// are read and updated in place; `scratch` holds 2*G*H + H floats.
void f32_lstm_step(const Cell& cell, uint32_t hidden, const float* x, float* h, float* c,
                   float* scratch);
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
