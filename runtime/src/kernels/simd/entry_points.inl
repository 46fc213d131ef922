// The entry points of a SIMD kernel set, declared in the namespace of the
// ISA that includes this file (kernels.inl defines them there; avx512.cpp
// declares avx2's to reuse them). The argument structs and contracts are
// kernels/kernel_set.h's.

void gemm_panel8(const GemmArgs& g, size_t m0, size_t m1, uint32_t q0, uint32_t q1);
void lstm_step(const StepArgs& s, uint32_t p0, uint32_t p1);
void gru_step(const StepArgs& s, uint32_t p0, uint32_t p1);
void rnn_step(const StepArgs& s, uint32_t p0, uint32_t p1);
void lstm_update(const UpdateArgs& u, uint32_t p0, uint32_t p1);
void gru_update(const UpdateArgs& u, uint32_t p0, uint32_t p1);
void rnn_update(const UpdateArgs& u, uint32_t p0, uint32_t p1);
// batch_step.inl (16-register ISAs: AVX2; declared everywhere, defined where included)
void lstm_batch_step(const BatchStepArgs& s, size_t m0, size_t m1, uint32_t p0, uint32_t p1);
void gru_batch_step(const BatchStepArgs& s, size_t m0, size_t m1, uint32_t p0, uint32_t p1);
void tanh_inplace(float* x, size_t n);
void sigmoid_inplace(float* x, size_t n);
void relu_inplace(float* x, size_t n);
void leaky_relu_inplace(float* x, size_t n, float slope);
void elu_inplace(float* x, size_t n, float alpha);
void hardtanh_inplace(float* x, size_t n, float lo, float hi);
void silu_inplace(float* x, size_t n);
void gelu_tanh_inplace(float* x, size_t n);
void prelu_rows(float* x, size_t rows, size_t n, const float* w, size_t w_count);
void scale_shift_rows(float* x, size_t rows, size_t n, const float* scale, const float* shift);
