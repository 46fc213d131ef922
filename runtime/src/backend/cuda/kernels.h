// Launches of the CUDA backend's kernels, for the host side of the backend
// (cuda_backend.cpp). Each returns the CUDA runtime's error of the launch
// (cudaGetLastError after it); faults inside a kernel surface at the
// stream's next synchronisation. Names say what the kernel is, XNNPACK
// style: op, dtype, weight layout.
//
// Kernels (all 256 threads per block), by file:
//   kernels.cu    products: gemm_f32_panel8 (C = bias + A W, 64x64 tiles, k
//                 ascending) and gemm_f32_panel8_few_rows (the same bits for
//                 at most 8 rows of A: a streaming step), each over plain
//                 rows or a Conv1d's patch rows (conv_patch); gemm_<type>
//                 for f16 / int8 / int4 weights (one thread per output,
//                 gemm_output); quantize_rows (activation rows for int8 /
//                 int4 products, one block per row)
//   recurrent.cu  per weight type (f32, f16, i8, i4): recurrent_<type>_step_a
//                 / _step_b (one time step: phase A gates and update, phase B
//                 LSTM projection; W from global/L2; replayed from CUDA
//                 Graphs) and recurrent_<type>_persistent (all the steps of a
//                 call, cooperative launch, each block's W_hh panels in
//                 shared memory)
//   ops.cu        the chain's other ops (device_ops.h): ingest, emit, last,
//                 embed, pointwise, rows (softmax, log-softmax, LayerNorm),
//                 add (residual), conv_state (a causal Conv1d's history), pool
// Which kernel a weight type gets is a table in each file (one switch over
// WeightType per launch), so a new dtype is a reader (device_weights.h)
// plus its entries there.
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "backend/cuda/device_math.h"
#include "backend/cuda/device_ops.h"
#include "backend/cuda/resident.h"

namespace ferry {
namespace cuda {

// kernels.cu
cudaError_t launch_gemm(const GemmParams& p, cudaStream_t stream);
cudaError_t launch_conv(const ConvParams& p, cudaStream_t stream);  // every group's product
cudaError_t launch_quantize(const QuantizeParams& p, cudaStream_t stream);

// recurrent.cu. One step of a cell: phase A on `blocks_a` blocks (shared_a
// bytes), then, with a projection, phase B on `blocks_b` blocks.
cudaError_t launch_recurrent_step(const RecurrentParams& p, unsigned blocks_a, size_t shared_a, unsigned blocks_b,
                                  size_t shared_b, cudaStream_t stream);

// All the steps of the call for one cell: one cooperative launch of
// `blocks` blocks with `shared` bytes of dynamic shared memory.
cudaError_t launch_recurrent_persistent(const RecurrentParams& p, unsigned blocks, size_t shared,
                                        cudaStream_t stream);

// Lets the persistent kernel of weight type `type` use up to
// `device_limit` bytes of dynamic shared memory (the device's opt-in
// maximum; above 48 KiB needs the opt-in) and reports how many of its
// blocks with `shared` bytes one SM holds.
cudaError_t persistent_occupancy(int32_t type, size_t shared, size_t device_limit, int* blocks_per_sm);

// ops.cu
cudaError_t launch_ingest(const IngestParams& p, cudaStream_t stream);
cudaError_t launch_emit(const EmitParams& p, cudaStream_t stream);
cudaError_t launch_last(const LastParams& p, cudaStream_t stream);
cudaError_t launch_embed(const EmbedParams& p, cudaStream_t stream);
cudaError_t launch_pointwise(const OpParams& p, float* x, size_t rows, cudaStream_t stream);
cudaError_t launch_rows(const OpParams& p, float* x, size_t rows, cudaStream_t stream);
cudaError_t launch_add(float* x, const float* y, size_t n, cudaStream_t stream);
cudaError_t launch_conv_state(const ConvParams& p, cudaStream_t stream);
cudaError_t launch_pool(const PoolParams& p, cudaStream_t stream);

// Whether this build holds code the current device runs (cudaFuncGetAttributes
// of a kernel: cudaErrorNoKernelImageForDevice when not).
// The resident streaming kernel (resident.cu; its arguments: resident.h).
cudaError_t launch_resident(const ResidentArgs& a, unsigned blocks, size_t shared, cudaStream_t stream);
cudaError_t resident_occupancy(size_t shared, size_t device_limit, int* blocks_per_sm);
cudaError_t resident_static_shared(size_t* bytes);  // the kernel's own shared memory

cudaError_t check_kernel_image();

}  // namespace cuda
}  // namespace ferry
