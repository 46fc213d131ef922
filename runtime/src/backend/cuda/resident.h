// The plan of a resident streaming kernel: one cooperative kernel per
// session, launched at init, that stays on the GPU and runs each
// ferry_step of the whole chain when the mailbox (mailbox.h) rings. Plain
// C++, a pure function of (model, max_batch, device capabilities, options),
// so tests/unit/test_cuda_resident.cpp checks it for an H100, an H200, an
// Orin and a Thor on any machine.
//
// What it decides:
//   blocks        one per SM held (a cooperative grid may not exceed the
//                 blocks that are resident at once; one block per SM keeps
//                 each block's shared memory as large as the SM allows).
//                 The fewest that (a) give every recurrent cell the
//                 parallelism its step kernel has (Recurrence::step.blocks)
//                 and (b) let every cell's W_hh (and W_hr) slices fit the
//                 blocks' shared memory together, capped by the SMs the
//                 device has and by ResidentOptions::max_sms. SMs left
//                 over at the cap are not taken: a Jetson's camera and
//                 display pipelines share the GPU.
//   batch_slices  with SMs to spare under the cap, the batch splits in
//                 slices of at least kBatchGroup samples, each slice's
//                 blocks holding the same panels (as the persistent
//                 sequence kernel does, plan.h).
//   per cell      its panels per block, and whether its W_hh slices live
//                 in shared memory for the session's life or are read
//                 through L2 at each step (when all of them cannot fit at
//                 the cap, the cells with the largest slices go to L2
//                 first, until the rest fits). An LSTM projection's W_hr
//                 is read through L2.
//   shared memory per block: the held slices plus the largest working set
//                 of a phase (the step's samples of the cell it serves).
//   phases        the grid-wide syncs of a step: per recurrent layer its
//                 input projection, its recurrence, and its projection
//                 (LSTM proj_size); one per other layer with a product
//                 (Linear, Conv1d; int8 / int4 add one to quantize their
//                 input); one per row op (softmax, LayerNorm, ...); none
//                 for element-wise ops, which run in the phase before.
//                 Plus the output phase.
// The kernel's own (static) shared memory comes off the limit first.
// Refused (fits false, with the reason): no cooperative launch, no mapped
// host memory (the mailbox lives there), a model that cannot stream (a
// bidirectional layer, a Conv1d that is not causal), or a step whose
// working set does not fit a block. A chain without a recurrent layer holds
// one SM.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/plan.h"
#include "model/model.h"

namespace ferry {
namespace cuda {

struct ResidentOptions {
  uint32_t max_sms = 0;           // at most this many SMs (0: as many as help)
  size_t kernel_static_shared = 0;  // the kernel's own shared memory (cudaFuncAttributes::sharedSizeBytes)
};

struct ResidentCell {
  uint32_t layer = 0;             // chain index
  uint32_t panels = 0;            // W_hh panels: ceil(H / 8) (x 8 G gate rows each)
  uint32_t panels_per_block = 0;  // of them, per block (per batch slice)
  uint32_t proj_panels = 0;       // W_hr panels: ceil(P / 8), or 0
  uint32_t proj_panels_per_block = 0;
  size_t slice_bytes = 0;         // per block: its W_hh slice, 16-byte aligned
  size_t work_bytes = 0;          // per block: its phases' working set for the step's samples
  bool in_shared = false;         // the slices stay in shared memory; else read through L2 each step
};

struct ResidentPlan {
  bool fits = false;
  const char* reason = "";        // why not, when !fits
  uint32_t blocks = 0;            // SMs held, one block each (panel groups x batch slices)
  uint32_t panel_groups = 0;      // blocks per batch slice
  uint32_t batch_slices = 1;
  uint32_t batch_tile = 0;        // samples a block computes per pass
  size_t shared_per_block = 0;    // dynamic shared memory: weights_per_block + work_per_block
  size_t weights_per_block = 0;
  size_t work_per_block = 0;
  size_t shared_limit = 0;        // min(opt-in per block, per SM - 1 KiB) - the kernel's static shared memory
  size_t weights_in_shared = 0;   // W_hh bytes held on chip, all blocks of one slice
  size_t weights_streamed = 0;    // weight bytes read through L2 at each step (W_ih, W_hr, Linear, Conv1d, spilled W_hh)
  uint32_t phases = 0;            // grid-wide syncs per step
  uint32_t num_cells = 0;
  ResidentCell cells[kDescCells];
};

struct Mailbox;    // mailbox.h
struct ProgramOp;  // resident_program.h

// What the resident kernel (resident.cu) receives: per cell, and in all.
struct ResidentCellArgs {
  RecurrentParams p;       // resident_cell_params, desc pointing to ResidentArgs::desc
  uint32_t shared_offset;  // its W_hh slice in the block's dynamic shared memory
  int32_t in_shared;       // 0: W_hh read through L2
};

struct ResidentArgs {
  Mailbox* box;                  // the device's view of the mapped mailbox
  const ProgramOp* program;      // device memory
  int32_t program_size;
  int32_t max_batch;
  const CallDesc* desc_mapped;   // the device's view of the staging block's descriptor
  CallDesc* desc;                // device memory: this call's copy
  uint32_t* request;             // device memory: seq, command, batch of the request served
  const ResidentCellArgs* cells; // device memory, num_cells
  int32_t num_cells;
  size_t work_offset;            // dynamic shared memory: [W_hh slices][work]
  uint32_t spin_polls;           // polls of the mailbox before backing off
  uint32_t max_sleep_ns;         // the longest __nanosleep between polls after that
};

// The resident kernel's parameters of cell `ci`: the cell's step
// parameters (its buffers and weights) with the plan's decomposition.
RecurrentParams resident_cell_params(const RecurrentParams& step, const ResidentPlan& plan, uint32_t ci);

// FERRY_OK with out->fits saying whether the chain runs resident (and
// out->reason why not); FERRY_INVALID_ARGUMENT for a max_batch of 0.
ferry_status plan_resident(const ferry_model* m, size_t max_batch, const DeviceCaps& caps,
                           const ResidentOptions& options, ResidentPlan* out);

}  // namespace cuda
}  // namespace ferry
