// The low-precision kernel sets of the ISA whose namespace includes this
// file (after lowp_kernels.inl): one definition for every ISA. The includer
// defines
//   FERRY_LOWP_ISA         the ISA's suffix of the set names ("avx2", ...)
//   FERRY_LOWP_HAS_F16     whether it has an f16 set
//   FERRY_LOWP_F32         the namespace of the same ISA's f32 set, whose
//                          update and element-wise entries these sets share
//                          (gates and state are fp32 in every dtype)
// and may set the panels per fused step (FERRY_LOWP_{I8,I4,F16}_{LSTM,GRU,RNN}).
// Softmax, log-softmax, LayerNorm and GELU's erf form are the reference's,
// as in every f32 set (simd/table.inl); the other format 1.2 element-wise
// ops are the same ISA's f32 entries.

#ifndef FERRY_LOWP_F16_LSTM
#define FERRY_LOWP_F16_LSTM 2
#endif
#ifndef FERRY_LOWP_F16_GRU
#define FERRY_LOWP_F16_GRU 3
#endif
#ifndef FERRY_LOWP_F16_RNN
#define FERRY_LOWP_F16_RNN 8
#endif
#ifndef FERRY_LOWP_I8_LSTM
#define FERRY_LOWP_I8_LSTM 2
#endif
#ifndef FERRY_LOWP_I8_GRU
#define FERRY_LOWP_I8_GRU 3
#endif
#ifndef FERRY_LOWP_I8_RNN
#define FERRY_LOWP_I8_RNN 8
#endif
#ifndef FERRY_LOWP_I4_LSTM
#define FERRY_LOWP_I4_LSTM 1
#endif
// An ISA may replace the int8 LSTM step with a wider one (x86_avx512vnni.cpp)
// whose panel group is FERRY_LOWP_I8_LSTM.
#ifndef FERRY_LOWP_I8_LSTM_STEP
#define FERRY_LOWP_I8_LSTM_STEP lstm_steps<I8Product, FERRY_LOWP_I8_LSTM>
#endif
// ... the LSTM update (gates and state are fp32 in every dtype) ...
#ifndef FERRY_LOWP_LSTM_UPDATE
#define FERRY_LOWP_LSTM_UPDATE FERRY_LOWP_F32::lstm_update
#endif
// ... and the int8 GEMM with a wider one (x86_avx512vnni.cpp).
#ifndef FERRY_LOWP_I8_GEMM
#define FERRY_LOWP_I8_GEMM i8_gemm
#endif
#ifndef FERRY_LOWP_I4_GRU
#define FERRY_LOWP_I4_GRU 1
#endif
#ifndef FERRY_LOWP_I4_RNN
#define FERRY_LOWP_I4_RNN 4
#endif

#define FERRY_LOWP_SET(DTYPE_NAME, DTYPE, PRODUCT, GEMM, LSTM_STEP, LSTM_NP, GRU_NP, RNN_NP, ACT_BYTES, QUANTIZE)  \
  {                                                                                                           \
    DTYPE_NAME "_" FERRY_LOWP_ISA, DTYPE, StepStrategy::kPanels, {LSTM_NP, GRU_NP, RNN_NP}, GEMM,              \
        FERRY_LOWP_F32::tanh_inplace, FERRY_LOWP_F32::sigmoid_inplace, FERRY_LOWP_F32::relu_inplace,           \
        ref::f32_softmax, FERRY_LOWP_F32::leaky_relu_inplace, FERRY_LOWP_F32::elu_inplace,                     \
        FERRY_LOWP_F32::hardtanh_inplace, FERRY_LOWP_F32::silu_inplace, ref::f32_gelu,                         \
        FERRY_LOWP_F32::gelu_tanh_inplace, FERRY_LOWP_F32::prelu_rows, FERRY_LOWP_F32::scale_shift_rows,       \
        ref::f32_layer_norm, ref::f32_log_softmax,                                                             \
        {LSTM_STEP, gru_steps<PRODUCT, GRU_NP>, rnn_steps<PRODUCT, RNN_NP>},                                   \
        {FERRY_LOWP_LSTM_UPDATE, FERRY_LOWP_F32::gru_update, FERRY_LOWP_F32::rnn_update},                      \
        {nullptr, nullptr, nullptr}, ACT_BYTES, QUANTIZE                                                       \
  }

#if FERRY_LOWP_HAS_F16
extern const KernelSet f16_kernel_set;
const KernelSet f16_kernel_set =
    FERRY_LOWP_SET("f16", DType::kF16, F16Product, f16_gemm, (lstm_steps<F16Product, FERRY_LOWP_F16_LSTM>),
                   FERRY_LOWP_F16_LSTM, FERRY_LOWP_F16_GRU, FERRY_LOWP_F16_RNN, nullptr, nullptr);
#endif
extern const KernelSet i8_kernel_set;
const KernelSet i8_kernel_set =
    FERRY_LOWP_SET("i8", DType::kI8, I8Product, FERRY_LOWP_I8_GEMM, (FERRY_LOWP_I8_LSTM_STEP), FERRY_LOWP_I8_LSTM,
                   FERRY_LOWP_I8_GRU, FERRY_LOWP_I8_RNN, i8_activation_bytes, i8_quantize_rows);
extern const KernelSet i4_kernel_set;
const KernelSet i4_kernel_set =
    FERRY_LOWP_SET("i4", DType::kI4, I4Product, i4_gemm, (lstm_steps<I4Product, FERRY_LOWP_I4_LSTM>),
                   FERRY_LOWP_I4_LSTM, FERRY_LOWP_I4_GRU, FERRY_LOWP_I4_RNN, i4_activation_bytes,
                   i4_quantize_rows);

#undef FERRY_LOWP_SET
