// The resident streaming kernel (kernels.h: launch_resident): one
// cooperative kernel per session that stays on the GPU and serves the
// session's ferry_step calls through the mailbox (mailbox.h) in mapped host
// memory. Per request:
//   thread 0 of block 0 polls the mailbox (spinning, then backing off with
//   __nanosleep), publishes the request to the grid and, for a step, block
//   0 copies the call descriptor out of the staging block (uncached: the
//   host wrote it for this call); a grid-wide sync;
//   every block runs the step program (resident_program.h) entry by entry,
//   a grid-wide sync after each: the element kinds through
//   program_elements on every thread of the grid, a quantization and
//   pooling as block-level loops (block_ops.cuh), a recurrent step as its
//   phases (recurrent_phases.cuh) with the plan's decomposition
//   (resident.h), each block's W_hh slice held in shared memory since the
//   launch where the plan says so;
//   every thread fences its writes to the staging block (the output) at
//   system scope; a grid-wide sync; thread 0 of block 0 replies.
// A stop request is answered and the kernel returns.
//
// Compiled with --fmad=false like the other kernels and with global loads
// cached in L2 only (-Xptxas -dlcm=cg, cmake/cuda.cmake): between the
// requests of a kernel that never ends, every block reads buffers other
// blocks wrote (activations, state, the descriptor's copy), and L1 is not
// coherent across blocks.
#include <cooperative_groups.h>

#include "backend/cuda/block_ops.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mailbox.h"
#include "backend/cuda/recurrent_phases.cuh"
#include "backend/cuda/resident_program.h"

namespace cg = cooperative_groups;

namespace ferry {
namespace cuda {
namespace {

__device__ __forceinline__ size_t grid_lane() { return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ size_t grid_lanes() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

// This block's share of cell `rc`'s W_hh panels (those phase A gives it),
// copied into shared memory once.
__device__ void load_slice(const ResidentCellArgs& rc, int32_t max_batch, uint8_t* smem) {
  const RecurrentParams& p = rc.p;
  uint32_t p0 = 0, p1 = 0;
  int32_t b0 = 0, b1 = 0;
  phase_a_share(p, blockIdx.x, max_batch, &p0, &p1, &b0, &b1);
  if (p0 >= p1) return;
  const size_t panel = panel_bytes(p.w_hh.type, static_cast<uint32_t>(p.gates), static_cast<uint32_t>(p.h_out));
  // Panel bytes are a multiple of 16 for every type, and a panel run
  // starts 16-aligned in the uploaded weights (device_weights.h).
  const uint4* src = static_cast<const uint4*>(panel_slice(p.w_hh, p0).data);
  uint4* dst = reinterpret_cast<uint4*>(smem + rc.shared_offset);
  const size_t n = static_cast<size_t>(p1 - p0) * panel / sizeof(uint4);
  for (size_t e = threadIdx.x; e < n; e += kThreads) dst[e] = __ldg(src + e);
}

// One step of a recurrent cell over the grid: phase A on the blocks the
// plan gives panels and samples, then (LSTM projection) phase B.
template <class R>
__device__ void cell_step(const ResidentCellArgs& rc, uint8_t* smem, size_t work_offset, cg::grid_group& grid) {
  const RecurrentParams& p = rc.p;
  const CallView call = read_call(p);
  uint32_t p0 = 0, p1 = 0;
  int32_t b0 = 0, b1 = 0;
  phase_a_share(p, blockIdx.x, call.batch, &p0, &p1, &b0, &b1);
  if (p0 < p1 && b0 < b1) {
    DeviceWeight w = panel_slice(p.w_hh, p0);
    if (rc.in_shared) w.data = smem + rc.shared_offset;
    phase_a<R>(p, w, static_cast<int>(p0), static_cast<int>(p1), b0, b1, call, 0, smem + work_offset);
  }
  if (p.w_hr.data) {
    grid.sync();
    int q0 = 0, q1 = 0;
    block_panels(blockIdx.x, p.proj_panels_per_block, static_cast<int>(panels_of(p.h_out)), &q0, &q1);
    if (q0 < q1) phase_b<R>(p, q0, q1, call, 0, smem + work_offset);
  }
}

__device__ void run_cell(const ResidentCellArgs& rc, uint8_t* smem, size_t work_offset, cg::grid_group& grid) {
  switch (rc.p.w_hh.type) {
    case kWeightF16: cell_step<Reader<kWeightF16>>(rc, smem, work_offset, grid); break;
    case kWeightI8: cell_step<Reader<kWeightI8>>(rc, smem, work_offset, grid); break;
    case kWeightI4: cell_step<Reader<kWeightI4>>(rc, smem, work_offset, grid); break;
    default: cell_step<Reader<kWeightF32>>(rc, smem, work_offset, grid); break;
  }
}

__global__ void __launch_bounds__(kThreads, 1) resident_kernel(ResidentArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  cg::grid_group grid = cg::this_grid();
  for (int32_t c = 0; c < a.num_cells; ++c) {
    if (a.cells[c].in_shared) load_slice(a.cells[c], a.max_batch, smem);
  }
  __syncthreads();
  const bool leader = blockIdx.x == 0 && threadIdx.x == 0;
  uint32_t served = 0, polls = 0;
  if (leader) {
    served = mail_load(&a.box->reply.done);
    mailbox_start(a.box);
  }
  for (;;) {
    if (blockIdx.x == 0) {
      if (threadIdx.x == 0) {
        MailboxRequest q;
        uint32_t idle = 0, nap = 32;
        while (!mailbox_poll(a.box, served, &polls, &q)) {
          if (++idle > a.spin_polls) {
            __nanosleep(nap);
            nap = nap * 2 < a.max_sleep_ns ? nap * 2 : a.max_sleep_ns;
          }
        }
        served = q.seq;
        a.request[0] = q.seq;
        a.request[1] = q.command;
        a.request[2] = q.batch;
        __threadfence();
      }
      __syncthreads();
      if (__ldcg(&a.request[1]) == kMailStep) {  // the descriptor of this call, uncached
        const uint32_t* src = reinterpret_cast<const uint32_t*>(a.desc_mapped);
        uint32_t* dst = reinterpret_cast<uint32_t*>(a.desc);
        for (size_t i = threadIdx.x; i < sizeof(CallDesc) / sizeof(uint32_t); i += kThreads) dst[i] = __ldcv(src + i);
      }
    }
    grid.sync();
    const uint32_t seq = __ldcg(&a.request[0]), command = __ldcg(&a.request[1]);
    const int64_t batch = static_cast<int64_t>(__ldcg(&a.request[2]));
    if (command == kMailStop) {
      if (leader) mailbox_reply(a.box, seq, kMailOk, true);
      return;
    }
    int32_t status = kMailOk;
    if (command != kMailStep) {
      status = kMailUnknownCommand;
    } else if (batch < 1 || batch > a.max_batch) {
      status = kMailBadBatch;
    } else {
      for (int32_t e = 0; e < a.program_size; ++e) {
        const ProgramOp op = at_batch(a.program[e], batch);
        if (!program_elements(op, batch, grid_lane(), grid_lanes())) {
          switch (op.kind) {
            case kProgQuantize: quantize_rows_blocks(op.quantize, blockIdx.x, gridDim.x); break;
            case kProgPool: pool_blocks(op.pool, blockIdx.x, gridDim.x); break;
            case kProgRecurrent: run_cell(a.cells[op.cell], smem, a.work_offset, grid); break;
            default: break;  // record_step_program writes no other kind
          }
        }
        grid.sync();
      }
      __threadfence_system();  // this thread's writes to the staging block, before the reply
      grid.sync();
    }
    if (leader) mailbox_reply(a.box, seq, status, false);
  }
}

}  // namespace

cudaError_t launch_resident(const ResidentArgs& a, unsigned blocks, size_t shared, cudaStream_t stream) {
  ResidentArgs arg = a;
  void* args[] = {&arg};
  const cudaError_t e = cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(resident_kernel), dim3(blocks),
                                                    dim3(kThreads), args, shared, stream);
  return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t resident_occupancy(size_t shared, size_t device_limit, int* blocks_per_sm) {
  *blocks_per_sm = 0;
  const void* kernel = reinterpret_cast<const void*>(resident_kernel);
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(device_limit));
  if (e != cudaSuccess) return e;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, kernel, kThreads, shared);
}

cudaError_t resident_static_shared(size_t* bytes) {
  cudaFuncAttributes attributes;
  const cudaError_t e = cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(resident_kernel));
  *bytes = e == cudaSuccess ? attributes.sharedSizeBytes : 0;
  return e;
}

}  // namespace cuda
}  // namespace ferry
