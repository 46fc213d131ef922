// The CUDA backend's chain executor and state copies, as plain C++ against
// a table of device operations (DeviceOps). The backend (cuda_backend.cpp)
// implements the table with the CUDA runtime and the kernels of kernels.cu;
// tests/unit/test_cuda_host.cpp implements it with a CPU emulation of the
// same kernels (device_math.h), so everything the host decides per call
// (the descriptor, the buffers each layer reads and writes, the GEMMs'
// arguments, persistent kernel or graph replays and how many of each, the
// parity of every cell's state, the layouts in and out) is tested without a
// GPU.
//
// One call (ferry_run; ferry_step is a run of one step):
//   1. the descriptor (batch, lengths, each cell's steps and state parity)
//      and the input go to the staging block of the host arena;
//   2. copy path: one transfer of [descriptor | input] to the device, the
//      input landing in act0 (a batch-first sequence is then transposed to
//      time-major, act0 -> act1 -> act0); zero-copy path: one kernel reads
//      the mapped input into act0 (transposing as needed);
//   3. the layers in order (one case per op, as the CPU executor's),
//      ping-ponging between act0 and act1: which buffer a layer reads is a
//      function of the chain alone (act_index_before), so the output
//      pointers the recurrent kernels were given at init stay right; int8 /
//      int4 products first quantize their input rows (ops.quantize, into
//      qact) where the weight type says so (quantizes_activations);
//   4. the output back in the model's layout, with zeros past each
//      sample's length: one transfer out (or, zero copy, a kernel writing
//      the mapped output), then one stream synchronisation;
//   5. on success every cell's parity flips by its steps.
// Recurrent cells: per (layer, direction), the input projections of all
// steps as one GEMM into xproj, then the steps: one persistent kernel when
// the cell has one and the call has more than one step, else replays of the
// cell's kGraphSteps-step graph and then of its one-step graph.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cuda/device_math.h"
#include "backend/cuda/device_ops.h"
#include "backend/cuda/plan.h"

namespace ferry {
namespace cuda {

// Per cell, in the host arena.
struct CellRuntime {
  RecurrentParams step;      // graph replays and single steps
  RecurrentParams resident;  // the persistent kernel (when recurrence.persistent)
  Recurrence recurrence;
  bool use_persistent;       // recurrence.persistent, confirmed at init
  uint8_t parity;            // h[parity] holds the state between calls
  uint32_t layer;            // chain index
  uint32_t in_width;         // features of this cell's input
  void* graph_one;           // cudaGraphExec_t of one step (CUDA only)
  void* graph_many;          // of kGraphSteps steps, or null
};

// How the executor asks for a cell's steps.
enum class StepLaunch : uint8_t {
  kPersistent,  // all of the call's steps, one cooperative launch
  kGraphMany,   // kGraphSteps steps
  kGraphOne,    // one step
};

// The device's operations, one per kernel (or copy) the executor asks for;
// what each computes is device_weights.h / device_math.h / device_ops.h.
struct DeviceOps {
  // Asynchronous on the session's stream.
  ferry_status (*to_device)(void* ctx, void* device_dst, const void* host_src, size_t bytes);
  ferry_status (*to_host)(void* ctx, void* host_dst, const void* device_src, size_t bytes);
  ferry_status (*copy)(void* ctx, void* device_dst, const void* device_src, size_t bytes);  // device to device
  ferry_status (*zero)(void* ctx, void* device_dst, size_t bytes);
  ferry_status (*gemm)(void* ctx, const GemmParams& params);          // any weight type
  ferry_status (*quantize)(void* ctx, const QuantizeParams& params);  // int8 / int4 GEMM inputs
  ferry_status (*conv)(void* ctx, const ConvParams& params);          // a Conv1d's products, every group
  ferry_status (*conv_state)(void* ctx, const ConvParams& params);    // a causal Conv1d's history after them
  ferry_status (*recurrent)(void* ctx, const CellRuntime& cell, StepLaunch how);
  ferry_status (*pointwise)(void* ctx, const OpParams& op, float* x, size_t rows);  // PointOp
  ferry_status (*rows)(void* ctx, const OpParams& op, float* x, size_t rows);       // RowOp
  ferry_status (*add)(void* ctx, float* x, const float* y, size_t n);
  ferry_status (*last)(void* ctx, const LastParams& params);
  ferry_status (*pool)(void* ctx, const PoolParams& params);
  ferry_status (*embed)(void* ctx, const EmbedParams& params);
  ferry_status (*ingest)(void* ctx, const IngestParams& params);
  ferry_status (*emit)(void* ctx, const EmitParams& params);
  // Waits for the stream; reports a failed kernel or copy.
  ferry_status (*finish)(void* ctx);
};

// What the executor works on: the layouts, where they lie, the cells.
struct ExecState {
  const ferry_model* model = nullptr;
  size_t max_batch = 0, max_seq = 0;
  bool zero_copy = false;
  DeviceLayout dev;
  HostLayout host;
  uint8_t* device = nullptr;          // the device block
  uint8_t* staging = nullptr;         // host, page-aligned
  uint8_t* staging_device = nullptr;  // the device's view of staging (zero copy), else null
  CellRuntime* cells = nullptr;       // model->num_cells

  // Where the kernels read the call descriptor.
  const CallDesc* desc_for_kernels() const {
    return reinterpret_cast<const CallDesc*>(zero_copy ? staging_device : device + dev.desc);
  }
};

// Where model bytes lie on the device (the span uploaded at init): any
// pointer into the span, a vector of floats (null for an absent one), a
// matrix with its dtype and scales (data null for an absent one).
const uint8_t* device_ptr(const ExecState& x, const void* host);
const float* device_floats(const ExecState& x, const Weight& w);
DeviceWeight device_matrix(const ExecState& x, const Weight& w);

// The element-wise or row op a layer is (row_op: softmax, log-softmax,
// LayerNorm), with its parameters on the device; false for a layer that is
// neither.
bool layer_op(const ExecState& x, const Layer& layer, OpParams* op, bool* row_op);

// The activation buffer (0 or 1) that holds layer `li`'s input
// (li == num_layers: the chain's output).
uint32_t act_index_before(const ferry_model* m, uint32_t li);

// Time steps layer `li` runs for a call of `seq` steps (a Conv1d changes
// them; 1 after `last` or pooling).
size_t steps_at(const ferry_model* m, uint32_t li, size_t seq);

// Fills `x` and the cells' runtime for a session whose device block is at
// `device` and whose staging block is at `staging` (host) and, on the
// zero-copy path, `staging_device` (the device's view of it). Persistent
// kernels are used where the recurrence allows (use_persistent); the
// backend may turn them off after asking the occupancy API.
ferry_status build_exec_state(const ferry_model* m, const SessionConfig& config, const DeviceCaps& caps,
                              bool zero_copy, uint8_t* device, uint8_t* staging, uint8_t* staging_device,
                              CellRuntime* cells, ExecState* x);

// One ferry_run / ferry_step call (arguments checked by the C API):
// stage_call, device_call, and on success complete_call.
ferry_status execute(ExecState& x, const DeviceOps& ops, void* ctx, const RunCall& call);

// The parts of a call, for paths that run the device's part otherwise (the
// resident kernel, resident_program.h): 1. the descriptor and the input into
// the staging block; 2.-4. the device's work through `ops` (on the copy
// path ending with the output in call.output); then the output from the
// staging block (zero copy) and every cell's parity flipped by its steps.
void stage_call(ExecState& x, const RunCall& call);
ferry_status device_call(ExecState& x, const DeviceOps& ops, void* ctx, const RunCall& call);
void complete_call(ExecState& x, const RunCall& call);

// The public state layout (ferry.h, ferry_state_get) from or to the device.
ferry_status copy_state(ExecState& x, const DeviceOps& ops, void* ctx, size_t batch, float* user, bool to_user);
ferry_status reset_state(ExecState& x, const DeviceOps& ops, void* ctx);

}  // namespace cuda
}  // namespace ferry
