// Launches of the CUDA backend's kernels (kernels.cu), for the host side of
// the backend (cuda_backend.cpp). Each returns the CUDA runtime's error of
// the launch (cudaGetLastError after it); faults inside a kernel surface at
// the stream's next synchronisation. Names say what the kernel is, XNNPACK
// style: op, dtype, weight layout.
//
// Kernels (all 256 threads per block):
//   gemm_f32_panel8            C = bias + A W, 64x64 tiles, k ascending
//   gemm_f32_panel8_few_rows   the same bits for at most 8 rows of A (a
//                              streaming step), 32 columns a block
//   recurrent_f32_panel8_step_a / _step_b
//                              one time step: phase A (gates, update),
//                              phase B (LSTM projection); W from global/L2;
//                              replayed from CUDA Graphs
//   recurrent_f32_panel8_persistent
//                              all the steps of a call, cooperative launch,
//                              each block's W_hh panels in shared memory
//   ingest_f32, emit_f32, last_f32, activation_f32, softmax_f32
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "backend/cuda/device_math.h"

namespace ferry {
namespace cuda {

cudaError_t launch_gemm(const GemmParams& p, cudaStream_t stream);

// One step of a cell: phase A on `blocks_a` blocks (shared_a bytes), then,
// with a projection, phase B on `blocks_b` blocks.
cudaError_t launch_recurrent_step(const RecurrentParams& p, unsigned blocks_a, size_t shared_a, unsigned blocks_b,
                                  size_t shared_b, cudaStream_t stream);

// All the steps of the call for one cell: one cooperative launch of
// `blocks` blocks with `shared` bytes of dynamic shared memory.
cudaError_t launch_recurrent_persistent(const RecurrentParams& p, unsigned blocks, size_t shared,
                                        cudaStream_t stream);

cudaError_t launch_ingest(const IngestParams& p, cudaStream_t stream);
cudaError_t launch_emit(const EmitParams& p, cudaStream_t stream);
cudaError_t launch_last(const LastParams& p, cudaStream_t stream);
cudaError_t launch_activation(int32_t op, float* x, size_t n, cudaStream_t stream);
cudaError_t launch_softmax(float* x, size_t rows, size_t n, cudaStream_t stream);

// Whether this build holds code the current device runs (cudaFuncGetAttributes
// of a kernel: cudaErrorNoKernelImageForDevice when not).
cudaError_t check_kernel_image();

// Lets the persistent kernel use up to `device_limit` bytes of dynamic
// shared memory (the device's opt-in maximum; above 48 KiB needs the
// opt-in) and reports how many of its blocks with `shared` bytes one SM
// holds.
cudaError_t persistent_occupancy(size_t shared, size_t device_limit, int* blocks_per_sm);

}  // namespace cuda
}  // namespace ferry
