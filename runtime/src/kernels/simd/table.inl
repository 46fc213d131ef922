// The f32 kernel set of the ISA whose namespace includes this file: one
// definition for every ISA. The includer names the set
// (FERRY_KERNEL_SET_NAME) and may replace the GEMM and the LSTM and GRU
// steps with wider ones (FERRY_SET_GEMM, FERRY_SET_LSTM_STEP and
// FERRY_SET_GRU_STEP with their panel groups FERRY_SET_LSTM_GROUP and
// FERRY_SET_GRU_GROUP: avx512.cpp), and may add fused batched LSTM and GRU
// steps (FERRY_SET_LSTM_BATCH_STEP, FERRY_SET_GRU_BATCH_STEP: avx2.cpp's
// from batch_step.inl, avx512.cpp's LSTM one) and one-sample LSTM and GRU
// steps that compute a share of the next chunk's input projection in their loop
// (FERRY_SET_LSTM_STEP_PROJECT, FERRY_SET_GRU_STEP_PROJECT); every other
// entry is the entry point of that name visible in the namespace
// (entry_points.inl). Softmax, log-softmax, LayerNorm and GELU's erf form
// are the reference kernels on every set (per row or libm-bound, rarely the
// cost of a model).

#ifndef FERRY_SET_GEMM
#define FERRY_SET_GEMM gemm_panel8
#endif
#ifndef FERRY_SET_LSTM_STEP
#define FERRY_SET_LSTM_STEP lstm_step
#endif
#ifndef FERRY_SET_LSTM_GROUP
#define FERRY_SET_LSTM_GROUP 2
#endif
#ifndef FERRY_SET_GRU_STEP
#define FERRY_SET_GRU_STEP gru_step
#endif
#ifndef FERRY_SET_GRU_GROUP
#define FERRY_SET_GRU_GROUP 3
#endif
#ifndef FERRY_SET_LSTM_BATCH_STEP
#define FERRY_SET_LSTM_BATCH_STEP nullptr
#endif
#ifndef FERRY_SET_GRU_BATCH_STEP
#define FERRY_SET_GRU_BATCH_STEP nullptr
#endif
#ifndef FERRY_SET_LSTM_STEP_PROJECT
#define FERRY_SET_LSTM_STEP_PROJECT nullptr
#endif
#ifndef FERRY_SET_GRU_STEP_PROJECT
#define FERRY_SET_GRU_STEP_PROJECT nullptr
#endif

extern const KernelSet f32_kernel_set;
const KernelSet f32_kernel_set = {
    FERRY_KERNEL_SET_NAME,
    DType::kF32,
    StepStrategy::kPanels,
    // fused steps' panels: LSTM 2 x 4 gates, GRU 3 x 3, RNN 8 x 1 accumulators (AVX-512: LSTM and GRU 4)
    {FERRY_SET_LSTM_GROUP, FERRY_SET_GRU_GROUP, 8},
    FERRY_SET_GEMM,
    tanh_inplace,
    sigmoid_inplace,
    relu_inplace,
    ref::f32_softmax,
    leaky_relu_inplace,
    elu_inplace,
    hardtanh_inplace,
    silu_inplace,
    ref::f32_gelu,  // erf: the reference kernel (libm's erff)
    gelu_tanh_inplace,
    prelu_rows,
    scale_shift_rows,
    ref::f32_layer_norm,  // one row at a time, sums in order: the reference kernel
    ref::f32_log_softmax,
    {FERRY_SET_LSTM_STEP, FERRY_SET_GRU_STEP, rnn_step},
    {lstm_update, gru_update, rnn_update},
    {nullptr, nullptr, nullptr},
    nullptr,  // activation_bytes, quantize_rows: float activations
    nullptr,
    {FERRY_SET_LSTM_BATCH_STEP, FERRY_SET_GRU_BATCH_STEP, nullptr},
    {FERRY_SET_LSTM_STEP_PROJECT, FERRY_SET_GRU_STEP_PROJECT, nullptr},
};

#undef FERRY_SET_GEMM
#undef FERRY_SET_LSTM_STEP
#undef FERRY_SET_LSTM_GROUP
#undef FERRY_SET_GRU_STEP
#undef FERRY_SET_GRU_GROUP
#undef FERRY_SET_LSTM_BATCH_STEP
#undef FERRY_SET_GRU_BATCH_STEP
#undef FERRY_SET_LSTM_STEP_PROJECT
#undef FERRY_SET_GRU_STEP_PROJECT
