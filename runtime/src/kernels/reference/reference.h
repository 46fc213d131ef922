// Reference kernels: portable scalar C++, written for clarity. They are the
// oracle every other kernel set is compared with, so each follows PyTorch's
// equations literally (PYTORCH_FORMAT.md §7) and sums in a fixed order: each
// product from 0, k ascending, the bias (or initial value) added last. They
// read weights in either stored layout (RowMajor or Panel8) through
// Weight::row_f32, so any model file runs here. The set f32_reference
// (kernels/kernel_set.h, step strategy kPerSample) is made of them.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernel_set.h"

namespace ferry {
namespace ref {

// y[r] = bias[r] (0 when bias is absent) + sum_k w[r][k] * x[k], k ascending;
// y in the tensor's own row order (RowMajor rows, gate-major).
void f32_gemv(const Weight& w, const float* x, const Weight& bias, float* y);

float sigmoid(float x);

// One time step of one sample (kernels::SampleStepArgs).
void f32_lstm_step(const kernels::SampleStepArgs& args);
void f32_gru_step(const kernels::SampleStepArgs& args);
void f32_rnn_step(const kernels::SampleStepArgs& args);

// In place over `n` floats.
void f32_relu(float* x, size_t n);
void f32_tanh(float* x, size_t n);
void f32_sigmoid(float* x, size_t n);
// Softmax of one row of `n` floats, max-subtracted.
void f32_softmax(float* x, size_t n);
// The format 1.2 element-wise and per-row ops (kernels::KernelSet).
void f32_leaky_relu(float* x, size_t n, float slope);
void f32_elu(float* x, size_t n, float alpha);
void f32_hardtanh(float* x, size_t n, float lo, float hi);
void f32_silu(float* x, size_t n);
void f32_gelu(float* x, size_t n);
void f32_gelu_tanh(float* x, size_t n);
void f32_prelu(float* x, size_t rows, size_t n, const float* w, size_t w_count);
void f32_scale_shift(float* x, size_t rows, size_t n, const float* scale, const float* shift);
void f32_layer_norm(float* x, size_t n, const float* weight, const float* bias, float eps);
void f32_log_softmax(float* x, size_t n);

}  // namespace ref

namespace kernels {
// The f32 reference set.
const KernelSet* f32_reference_kernel_set();
}  // namespace kernels
}  // namespace ferry
