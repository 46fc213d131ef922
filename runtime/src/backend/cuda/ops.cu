// The CUDA backend's kernels for the chain's other ops (kernels.h): each a
// grid-stride loop, or a block per sample, over a function of
// device_ops.h, which says what they compute (the CPU backend's semantics,
// in its order of operations).
#include "backend/cuda/kernels.h"
#include "backend/cuda/block_ops.cuh"

namespace ferry {
namespace cuda {
namespace {

__device__ __forceinline__ size_t global_index() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t global_stride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

unsigned grid_for(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 4096 ? (blocks ? blocks : 1) : 4096);
}

__global__ void __launch_bounds__(kThreads) ingest_f32(IngestParams p) {
  const size_t n = static_cast<size_t>(p.steps * p.batch * p.features);
  for (size_t i = global_index(); i < n; i += global_stride()) ingest_element(p, i);
}

__global__ void __launch_bounds__(kThreads) emit_f32(EmitParams p) {
  const size_t n = static_cast<size_t>(p.steps * p.batch * p.features);
  for (size_t i = global_index(); i < n; i += global_stride()) emit_element(p, i);
}

__global__ void __launch_bounds__(kThreads) last_f32(LastParams p) {
  const size_t n = static_cast<size_t>(p.batch * p.features);
  for (size_t i = global_index(); i < n; i += global_stride()) last_element(p, i);
}

__global__ void __launch_bounds__(kThreads) embed_f32(EmbedParams p) {
  const size_t n = static_cast<size_t>(p.steps * p.batch) * static_cast<size_t>(p.dim);
  for (size_t i = global_index(); i < n; i += global_stride()) embed_element(p, i);
}

__global__ void __launch_bounds__(kThreads) pointwise_f32(OpParams p, float* x, size_t rows) {
  pointwise_tile(p, x, rows, global_index(), global_stride());
}

// One thread per row (the row summed in index order, as the reference).
__global__ void __launch_bounds__(kThreads) rows_f32(OpParams p, float* x, size_t rows) {
  rows_tile(p, x, rows, global_index(), global_stride());
}

__global__ void __launch_bounds__(kThreads) add_f32(float* x, const float* y, size_t n) {
  add_tile(x, y, n, global_index(), global_stride());
}

// One thread per (sample, channel).
__global__ void __launch_bounds__(kThreads) conv_state_f32(ConvParams p) {
  const size_t n = static_cast<size_t>(p.batch) * static_cast<size_t>(p.channels);
  for (size_t i = global_index(); i < n; i += global_stride()) {
    conv_state_column(p, static_cast<int64_t>(i / p.channels), static_cast<int32_t>(i % p.channels));
  }
}

// A block per sample (block_ops.cuh).
__global__ void __launch_bounds__(kThreads) pool_f32(PoolParams p) { pool_blocks(p, blockIdx.x, gridDim.x); }

}  // namespace

cudaError_t launch_ingest(const IngestParams& p, cudaStream_t stream) {
  ingest_f32<<<grid_for(static_cast<size_t>(p.steps * p.batch * p.features)), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_emit(const EmitParams& p, cudaStream_t stream) {
  emit_f32<<<grid_for(static_cast<size_t>(p.steps * p.batch * p.features)), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_last(const LastParams& p, cudaStream_t stream) {
  last_f32<<<grid_for(static_cast<size_t>(p.batch * p.features)), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_embed(const EmbedParams& p, cudaStream_t stream) {
  embed_f32<<<grid_for(static_cast<size_t>(p.steps * p.batch) * static_cast<size_t>(p.dim)), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_pointwise(const OpParams& p, float* x, size_t rows, cudaStream_t stream) {
  const size_t n = rows * static_cast<size_t>(p.features);
  if (n == 0) return cudaSuccess;
  pointwise_f32<<<grid_for(n), kThreads, 0, stream>>>(p, x, rows);
  return cudaGetLastError();
}

cudaError_t launch_rows(const OpParams& p, float* x, size_t rows, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  rows_f32<<<grid_for(rows), kThreads, 0, stream>>>(p, x, rows);
  return cudaGetLastError();
}

cudaError_t launch_add(float* x, const float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  add_f32<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_conv_state(const ConvParams& p, cudaStream_t stream) {
  conv_state_f32<<<grid_for(static_cast<size_t>(p.batch) * static_cast<size_t>(p.channels)), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_pool(const PoolParams& p, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  pool_f32<<<static_cast<unsigned>(p.batch < 65535 ? p.batch : 65535), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace ferry
