// Block-level device functions for the ops whose work is one block per
// row or sample: the quantization of activation rows (int8 / int4 GEMM
// inputs) and pooling. Shared by the launched kernels (kernels.cu,
// ops.cu) and the resident streaming kernel (resident.cu), which runs them
// over its own blocks (`first`, `stride`: this block's index and the
// number of blocks). Every thread of a block takes the same path through
// each __syncthreads.
//
// Included by .cu files only; everything here is in an anonymous namespace
// of ferry::cuda, one copy per including file.
#pragma once

#include "backend/cuda/kernels.h"

namespace ferry {
namespace cuda {
namespace {

// Row r's quantization (device_weights.h, quantize_row's bytes) for rows
// first, first + stride, ...: the maximum over the block is exact whatever
// the order.
__device__ void quantize_rows_blocks(const QuantizeParams& p, int64_t first, int64_t stride) {
  __shared__ uint32_t warp_max[kWarps];
  __shared__ float row_inv;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t r = first; r < p.rows; r += stride) {
    const float* x = p.x + r * p.ldx;
    uint32_t m = 0;
    for (int k = threadIdx.x; k < p.k; k += kThreads) {
      const uint32_t b = magnitude_bits(x[k]);
      m = b > m ? b : m;
    }
    for (int off = 16; off > 0; off >>= 1) {
      const uint32_t o = __shfl_xor_sync(0xffffffffu, m, off);
      m = o > m ? o : m;
    }
    if (lane == 0) warp_max[warp] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t all = 0;
      for (int w = 0; w < kWarps; ++w) all = warp_max[w] > all ? warp_max[w] : all;
      float scale = 0.0f, inv = 0.0f;
      row_quantizer(all, &scale, &inv);
      p.scales[r] = scale;
      row_inv = inv;
    }
    __syncthreads();
    const float inv = row_inv;
    int8_t* q = p.q + r * p.ldq;
    for (int k = threadIdx.x; k < p.kp; k += kThreads) q[k] = k < p.k ? quantize_value(x[k], inv) : 0;
    __syncthreads();  // row_inv and warp_max are reused by the next row
  }
}

// Pooling of samples first, first + stride, ...: every thread reads the
// count before thread 0 stores the new one.
__device__ void pool_blocks(const PoolParams& p, int64_t first, int64_t stride) {
  for (int64_t b = first; b < p.batch; b += stride) {
    const float count0 = pool_count(p, b);
    __syncthreads();
    for (int32_t f = threadIdx.x; f < p.features; f += kThreads) pool_feature(p, b, f, count0);
    if (threadIdx.x == 0) pool_store_count(p, b, count0);
    __syncthreads();
  }
}

}  // namespace
}  // namespace cuda
}  // namespace ferry
