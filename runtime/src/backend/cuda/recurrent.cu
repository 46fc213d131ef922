// The CUDA backend's recurrent kernels (kernels.h), one set per weight type:
// each kernel is a template over a reader of device_weights.h, and the
// launches pick the instance by the cell's WeightType (the tables at the
// end). What a step computes and in which order is device_math.h
// (phase_a_unit, phase_b_row, cell_update) and device_weights.h (the
// chains); this file maps it onto threads. Data a kernel reads after other
// blocks of the same kernel wrote it (the hidden state between the steps of
// the persistent kernel, h_full before a projection) is read with __ldcg,
// from L2, never from a stale L1 line.
//
// Compiled with --fmad=false (cmake/cuda.cmake): the only fused
// multiply-adds are the explicit fmaf of the readers.
#include <cooperative_groups.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/recurrent_phases.cuh"

namespace cg = cooperative_groups;

namespace ferry {
namespace cuda {
namespace {

// The end of a replayed step's last kernel: the last block to finish
// advances the cell's step counter (device_math.h, next_step).
__device__ __forceinline__ void finish_step(const RecurrentParams& p, int i, int steps) {
  __syncthreads();  // every thread of this block has read the counter
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned done = atomicAdd(reinterpret_cast<unsigned*>(p.counter + 1), 1u);
    if (done == gridDim.x - 1) {
      p.counter[1] = 0;
      p.counter[0] = next_step(i, steps);
      __threadfence();
    }
  }
}

__device__ __forceinline__ int read_step(const RecurrentParams& p) {
  return *reinterpret_cast<volatile const int32_t*>(p.counter);
}

template <class R>
__global__ void __launch_bounds__(kThreads) recurrent_step_a(RecurrentParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const CallView call = read_call(p);
  const int i = read_step(p);
  uint32_t p0, p1;
  int32_t b0, b1;
  phase_a_share(p, blockIdx.x, call.batch, &p0, &p1, &b0, &b1);
  if (p0 < p1) {
    phase_a<R>(p, panel_slice(p.w_hh, p0), static_cast<int>(p0), static_cast<int>(p1), b0, b1, call, i, smem);
  }
  if (!p.w_hr.data) finish_step(p, i, call.steps);
}

template <class R>
__global__ void __launch_bounds__(kThreads) recurrent_step_b(RecurrentParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const CallView call = read_call(p);
  const int i = read_step(p);
  int q0, q1;
  block_panels(blockIdx.x, p.proj_panels_per_block, static_cast<int>(panels_of(p.h_out)), &q0, &q1);
  if (q0 < q1) phase_b<R>(p, q0, q1, call, i, smem);
  finish_step(p, i, call.steps);
}

// All the steps of the call: each block copies its W_hh panels (bytes of
// the stored type) into shared memory once, then steps with one grid-wide
// sync after phase A (and one after phase B). The scales of int8 / int4
// stay in global memory (read-only, cached). Launched cooperatively: every
// block is resident. With a large batch the plan splits it (batch_slices):
// the blocks of each slice hold the same panels and take their slice's
// samples in phase A.
template <class R>
__global__ void __launch_bounds__(kThreads, 1) recurrent_persistent(RecurrentParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  cg::grid_group grid = cg::this_grid();
  const CallView call = read_call(p);
  uint32_t p0, p1;
  int32_t b0, b1;
  phase_a_share(p, blockIdx.x, call.batch, &p0, &p1, &b0, &b1);
  const size_t panel = panel_bytes(R::kType, static_cast<uint32_t>(p.gates), static_cast<uint32_t>(p.h_out));
  const DeviceWeight global = panel_slice(p.w_hh, p0);
  DeviceWeight w = global;
  w.data = smem;
  uint8_t* work = smem + align16(static_cast<size_t>(p.panels_per_block) * panel);
  // Panel bytes are a multiple of 16 for every type (device_weights.h), and
  // a panel run starts 16-aligned in the uploaded weights.
  const uint4* src = static_cast<const uint4*>(global.data);
  uint4* dst = reinterpret_cast<uint4*>(smem);
  const size_t n = static_cast<size_t>(p1 - p0) * panel / sizeof(uint4);
  for (size_t e = threadIdx.x; e < n; e += kThreads) dst[e] = __ldg(src + e);
  __syncthreads();
  int q0 = 0, q1 = 0;
  if (p.w_hr.data) block_panels(blockIdx.x, p.proj_panels_per_block, static_cast<int>(panels_of(p.h_out)), &q0, &q1);
  for (int i = 0; i < call.steps; ++i) {
    if (p0 < p1) phase_a<R>(p, w, static_cast<int>(p0), static_cast<int>(p1), b0, b1, call, i, work);
    grid.sync();
    if (p.w_hr.data) {
      if (q0 < q1) phase_b<R>(p, q0, q1, call, i, work);
      grid.sync();
    }
  }
}

// ------------------------------------------------------------- tables --

template <class R>
cudaError_t launch_step(const RecurrentParams& p, unsigned blocks_a, size_t shared_a, unsigned blocks_b,
                        size_t shared_b, cudaStream_t stream) {
  recurrent_step_a<R><<<blocks_a, kThreads, shared_a, stream>>>(p);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || !p.w_hr.data) return e;
  recurrent_step_b<R><<<blocks_b, kThreads, shared_b, stream>>>(p);
  return cudaGetLastError();
}

template <class R>
const void* persistent_kernel() {
  return reinterpret_cast<const void*>(recurrent_persistent<R>);
}

const void* persistent_for(int32_t type) {
  switch (type) {
    case kWeightF16: return persistent_kernel<Reader<kWeightF16>>();
    case kWeightI8: return persistent_kernel<Reader<kWeightI8>>();
    case kWeightI4: return persistent_kernel<Reader<kWeightI4>>();
    default: return persistent_kernel<Reader<kWeightF32>>();
  }
}

}  // namespace

cudaError_t launch_recurrent_step(const RecurrentParams& p, unsigned blocks_a, size_t shared_a, unsigned blocks_b,
                                  size_t shared_b, cudaStream_t stream) {
  switch (p.w_hh.type) {
    case kWeightF16: return launch_step<Reader<kWeightF16>>(p, blocks_a, shared_a, blocks_b, shared_b, stream);
    case kWeightI8: return launch_step<Reader<kWeightI8>>(p, blocks_a, shared_a, blocks_b, shared_b, stream);
    case kWeightI4: return launch_step<Reader<kWeightI4>>(p, blocks_a, shared_a, blocks_b, shared_b, stream);
    default: return launch_step<Reader<kWeightF32>>(p, blocks_a, shared_a, blocks_b, shared_b, stream);
  }
}

cudaError_t launch_recurrent_persistent(const RecurrentParams& p, unsigned blocks, size_t shared,
                                        cudaStream_t stream) {
  RecurrentParams arg = p;
  void* args[] = {&arg};
  const cudaError_t e =
      cudaLaunchCooperativeKernel(persistent_for(p.w_hh.type), dim3(blocks), dim3(kThreads), args, shared, stream);
  return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t persistent_occupancy(int32_t type, size_t shared, size_t device_limit, int* blocks_per_sm) {
  *blocks_per_sm = 0;
  const void* kernel = persistent_for(type);
  // The attribute is the function's, shared by every session on the device:
  // always the device's limit, never one session's need.
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(device_limit));
  if (e != cudaSuccess) return e;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, kernel, kThreads, shared);
}

}  // namespace cuda
}  // namespace ferry
