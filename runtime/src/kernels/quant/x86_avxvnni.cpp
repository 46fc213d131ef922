// i8_avxvnni, i4_avxvnni: the AVX2 low-precision kernels with the integer
// products on AVX-VNNI's VEX vpdpbusd (Alder Lake, Sapphire Rapids, Zen 5
// and later): one instruction per 32 bytes of weights instead of
// vpmaddubsw + vpmaddwd + vpaddd (ops_x86.h, FERRY_QDOT 1). Same integer
// sums, hence the same bits as i8_avx2 / i4_avx2. Compiled alone with
// -mavxvnni; chosen only after the CPU check in kernels/registry.cpp.
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "kernels/quant/quant.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__AVXVNNI__)

#include <immintrin.h>
#include <string.h>

#include "kernels/reference/reference.h"

namespace ferry {
namespace kernels {

namespace avx2 {
#include "kernels/simd/entry_points.inl"
}  // namespace avx2

namespace quant_avxvnni {

#define FERRY_QDOT 1
#define FERRY_LOWP_HAS_F16 0
#define FERRY_LOWP_ISA "avxvnni"
#define FERRY_LOWP_F32 avx2
#include "kernels/simd/vec_avx2.h"
#include "kernels/simd/math.inl"
#include "kernels/quant/ops_x86.h"
#include "kernels/quant/lowp_kernels.inl"
#include "kernels/quant/lowp_tables.inl"

}  // namespace quant_avxvnni

const KernelSet* i8_avxvnni_kernel_set() { return &quant_avxvnni::i8_kernel_set; }
const KernelSet* i4_avxvnni_kernel_set() { return &quant_avxvnni::i4_kernel_set; }

}  // namespace kernels
}  // namespace ferry

#else

namespace ferry {
namespace kernels {
const KernelSet* i8_avxvnni_kernel_set() { return nullptr; }
const KernelSet* i4_avxvnni_kernel_set() { return nullptr; }
}  // namespace kernels
}  // namespace ferry

#endif
