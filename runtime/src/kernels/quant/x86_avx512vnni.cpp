// i8_avx512vnni, i4_avx512vnni: the low-precision kernels with the integer
// products on AVX-512 VNNI's vpdpbusd (Ice Lake, Sapphire Rapids, Zen 4 and
// later), EVEX-encoded on 256-bit vectors (AVX-512 VL) so that the kernels
// are lowp_kernels.inl's, on 32 vector registers (ops_x86.h, FERRY_QDOT 2).
// Same integer sums, hence the same bits as i8_avx2 / i4_avx2. Compiled
// alone with AVX-512 F/BW/VL/VNNI; chosen only after the CPU check in
// kernels/registry.cpp.
#include "kernels/quant/quant.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <string.h>

#include "kernels/reference/reference.h"

namespace ferry {
namespace kernels {

namespace avx2 {
#include "kernels/simd/entry_points.inl"
}  // namespace avx2

namespace quant_avx512vnni {

#define FERRY_QDOT 2
#define FERRY_LOWP_HAS_F16 0
#define FERRY_LOWP_ISA "avx512vnni"
#define FERRY_LOWP_F32 avx2
// 32 registers: the int4 steps keep two panels' group sums and chains.
#define FERRY_LOWP_I4_LSTM 2
#define FERRY_LOWP_I4_GRU 2
#define FERRY_LOWP_I4_RNN 8
#include "kernels/simd/vec_avx2.h"
#include "kernels/simd/math.inl"
#include "kernels/quant/ops_x86.h"
#include "kernels/quant/lowp_kernels.inl"
#include "kernels/quant/lowp_tables.inl"

}  // namespace quant_avx512vnni

const KernelSet* i8_avx512vnni_kernel_set() { return &quant_avx512vnni::i8_kernel_set; }
const KernelSet* i4_avx512vnni_kernel_set() { return &quant_avx512vnni::i4_kernel_set; }

}  // namespace kernels
}  // namespace ferry

#else

namespace ferry {
namespace kernels {
const KernelSet* i8_avx512vnni_kernel_set() { return nullptr; }
const KernelSet* i4_avx512vnni_kernel_set() { return nullptr; }
}  // namespace kernels
}  // namespace ferry

#endif
