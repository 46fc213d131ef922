// The step program of a resident streaming kernel: what one ferry_step of
// the whole chain does on the device, as a list of operations the kernel
// runs in order with a grid-wide sync between them. It is recorded once at
// init by running the executor's own device part (executor.h,
// device_call) for a one-step call of max_batch samples against a
// recording table of device operations, so the kernel does exactly what the
// launched kernels do, in the same order, on the same buffers: the input
// read from the mapped staging block, each layer's products (quantizing
// their input first for int8 / int4), each recurrent cell's step, the
// element-wise and row ops, residual saves and adds, pooling and Conv1d
// history, the output written to the staging block.
//
// A step of `batch` <= max_batch samples runs the same program with every
// batch-dependent size scaled (at_batch): in a one-step call each size is a
// fixed count per sample (rows of a product, elements of an add, bytes of
// a save), recorded as that count. The recurrent steps read the batch, the
// parity of their state and their step count from the call descriptor in
// the staging block, which the host writes before ringing (stage_call), as
// it does for the launched kernels on the zero-copy path.
//
// Plain C++ with FERRY_HD parts: the host records and (in the tests, or a
// fake device) replays the program through any DeviceOps table; the
// resident kernel interprets the same entries on the GPU.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/device_ops.h"
#include "backend/cuda/executor.h"

namespace ferry {
namespace cuda {

enum ProgramKind : int32_t {
  kProgGemm = 0,
  kProgQuantize,
  kProgConv,
  kProgConvState,
  kProgRecurrent,
  kProgPointwise,
  kProgRows,
  kProgAdd,
  kProgLast,
  kProgPool,
  kProgEmbed,
  kProgIngest,
  kProgEmit,
  kProgCopy,
  kProgKinds,
};

// The most entries a program holds: per layer at most a quantization, a
// product and a recurrent step per cell, or a Conv1d's two, plus the
// ingest and the emit.
constexpr size_t kMaxProgram = 3 * kMaxCells + 2 * kMaxChain + 2;

struct ProgramOp {
  int32_t kind;          // ProgramKind
  int32_t cell;          // kProgRecurrent: the cell's index
  int64_t per_sample;    // the batch-dependent size per sample (see at_batch)
  float* x;              // pointwise / rows / add: the buffer; copy: destination
  const float* y;        // add: the addend; copy: source
  union {
    GemmParams gemm;
    QuantizeParams quantize;
    ConvParams conv;      // kProgConv, kProgConvState
    OpParams op;          // kProgPointwise, kProgRows
    LastParams last;
    PoolParams pool;
    EmbedParams embed;
    IngestParams ingest;
    EmitParams emit;
  };
};

// The entry for a step of `batch` samples. The sizes a one-step call
// scales with the batch: rows of a product or a quantization, rows of an
// element-wise or row op (per_sample each), elements of an add and bytes of
// a copy (per_sample each), and the batch of everything else that has one.
FERRY_HD ProgramOp at_batch(const ProgramOp& in, int64_t batch) {
  ProgramOp op = in;
  switch (op.kind) {
    case kProgGemm: op.gemm.m = op.per_sample * batch; break;
    case kProgQuantize: op.quantize.rows = op.per_sample * batch; break;
    case kProgConv: case kProgConvState: op.conv.batch = batch; break;
    case kProgLast: op.last.batch = batch; break;
    case kProgPool: op.pool.batch = batch; break;
    case kProgEmbed: op.embed.batch = batch; break;
    case kProgIngest: op.ingest.batch = batch; break;
    case kProgEmit: op.emit.batch = batch; break;
    default: break;  // rows / elements / bytes: per_sample * batch where they are used
  }
  return op;
}

// Records the step program of session `x` (zero copy: the kernel reads and
// writes the mapped staging block) into out[0, *count). FERRY_UNSUPPORTED
// with the reason when the chain cannot be a step program: not zero copy, a
// model that cannot stream, more entries than `capacity`, or a size that is
// not a whole count per sample.
ferry_status record_step_program(ExecState& x, ProgramOp* out, size_t capacity, size_t* count);

// Runs program[0, n) for a step of `batch` samples through `ops`, each
// recurrent entry as one step of its cell (StepLaunch::kGraphOne), and
// then ops.finish: what the resident kernel computes, on any DeviceOps.
// The caller stages the call first (stage_call) and completes it after
// (complete_call).
ferry_status replay_step_program(ExecState& x, const ProgramOp* program, size_t n, int64_t batch,
                                 const DeviceOps& ops, void* ctx);

const char* program_kind_name(int32_t kind);

}  // namespace cuda
}  // namespace ferry
