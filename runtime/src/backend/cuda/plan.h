// The CUDA backend's decisions, as plain C++ that needs no GPU: what runs
// where, how memory is laid out, which recurrence strategy a cell gets.
// Everything here is a pure function of (model, options, device
// capabilities), so the backend's plan is deterministic and exact, and
// tests/unit/test_cuda_host.cpp checks it on any machine, with the
// capabilities of an Orin, a Thor or an H100 written down.
//
// Memory of a session
//   host (the caller's arena, ferry_session_arena_size):
//     [ferry_session][control block][cells: CellRuntime x num_cells][staging]
//     staging = [call descriptor + lengths][input][output], page-aligned
//     inside a region one page larger than it, so that on the zero-copy path
//     it can be registered (cudaHostRegister, mapped) without touching a
//     page the caller or another session owns.
//   device (one allocation, ferry_session_memory's device bytes):
//     [weights][per cell: h0, h1, c][step counters][xproj][h_full]
//     [qact][qscales][layer state][slots][call descriptor + lengths][act0][act1]
//     each region 256-byte aligned, present only when the model needs it.
//     The weights are the model file's weight bytes from its first tensor
//     to the end of its last (scales included), uploaded as they are, in
//     every dtype's own layout; the descriptor region ends exactly where
//     act0 begins, so on the copy path one transfer carries the descriptor
//     and a time-major input straight into act0. qact / qscales: the
//     quantized input rows of an int8 / int4 GEMM (input projections,
//     Linear layers); layer state: the state of the layers that are not
//     recurrent (a causal Conv1d's history, pooling sums), laid out as the
//     CPU backend's [state_offset * max_batch ...]; slots: the residual
//     saves. Activations hold max_steps(model, max_seq) steps (a Conv1d's
//     padding may add steps).
//   Not counted: what the CUDA driver keeps for the context, the module and
//   the instantiated graphs.
//
// Recurrence strategy of a cell (choose_recurrence):
//   persistent  one cooperative kernel runs all the time steps of a call,
//               each block keeping its panels of W_hh in shared memory, one
//               grid-wide sync per step (two with an LSTM projection). Chosen
//               when the device supports cooperative launch and, with at
//               most one block per SM, each block's slice of W_hh plus one
//               sample's working set fits in its shared memory:
//                 ceil(panels / SMs) * panel_bytes + work <= min(
//                   max shared per block (opt-in), shared per SM - 1 KiB)
//               where panel_bytes counts the stored dtype (device_weights.h:
//               8 G P x 4 bytes f32, x 2 f16, 8 G round_up(P, 4) int8,
//               8 G round_up(P, 32) / 2 int4), so an f16 / int8 / int4
//               W_hh fits where an f32 one does not. (panels = ceil(H / 8),
//               P = H_out, G = gates; int8 / int4 scales stay in global
//               memory.) Used for calls of more than one step; init
//               confirms with the occupancy API. What becomes persistent on
//               an Orin and an H100 per dtype: tests/unit/test_cuda_host.cpp,
//               PersistentRulePerDtype.
//               The SMs the panel groups leave idle split the batch
//               (batch_slices, at least kBatchGroup samples a slice; each
//               slice's blocks hold the same panels): W3 on an H100, 32
//               panel groups x 4 slices of 16 samples.
//   graph       otherwise, and for every single step: each step is one
//               kernel (two with a projection) reading W_hh through L2;
//               the steps of a call are replayed from CUDA Graphs captured
//               at init (one of kGraphSteps steps, one of a single step).
//   Both compute every output with the same arithmetic (device_math.h).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cuda/device_math.h"
#include "model/model.h"

namespace ferry {
namespace cuda {

constexpr size_t kDeviceAlign = 256;
constexpr size_t kNone = ~size_t{0};

// What the plan needs to know about a device (cudaDeviceProp and
// attributes); filled by the backend from the CUDA runtime, by tests from
// data sheets.
struct DeviceCaps {
  int cc_major = 0, cc_minor = 0;
  uint32_t sm_count = 0;
  size_t shared_per_block_optin = 0;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
  size_t shared_per_sm = 0;           // cudaDevAttrMaxSharedMemoryPerMultiprocessor
  bool integrated = false;            // Jetson: the GPU shares the host's DRAM
  bool can_map_host_memory = false;
  bool host_register_supported = false;  // cudaDevAttrHostRegisterSupported
  bool cooperative_launch = false;
  size_t host_page_size = 4096;
};

// ------------------------------------------------------------- device --

// Offsets of a cell's state in the device block.
struct CellDevice {
  size_t h[2] = {kNone, kNone};  // [max_batch][h_out] each
  size_t c = kNone;              // LSTM: [max_batch][hidden]
  size_t counter = kNone;        // 4 int32
};

struct DeviceLayout {
  size_t weights_begin = 0;  // offset of the uploaded span in the model's bytes
  size_t weights_bytes = 0;  // 0: no weights
  size_t xproj = kNone, xproj_bytes = 0;
  size_t h_full = kNone, h_full_bytes = 0;
  size_t qact = kNone, qact_bytes = 0;  // quantized GEMM input rows: qact_rows x qact_ld bytes
  size_t qact_rows = 0, qact_ld = 0;
  size_t qscales = kNone;               // qact_rows floats
  size_t layer_state = kNone;           // max_batch * state_floats floats (non-recurrent layers' part used)
  size_t slots = kNone, slot_floats = 0;  // num_slots x slot_floats
  size_t max_steps = 0;                 // steps the activations hold
  size_t counters = kNone;
  size_t desc = 0, desc_bytes = 0;  // act[0] == desc + desc_bytes
  size_t act[2] = {0, 0};
  size_t act_bytes = 0;
  size_t total = 0;  // the device allocation
};

// The model bytes every weight of `m` lies in: [*begin, *begin + *bytes).
void weight_span(const ferry_model* m, size_t* begin, size_t* bytes);

// The device layout for (max_batch, max_seq). `cells` (num_cells entries)
// may be null. FERRY_INVALID_ARGUMENT if a size overflows.
ferry_status plan_device(const ferry_model* m, size_t max_batch, size_t max_seq, DeviceLayout* out,
                         CellDevice* cells);

// --------------------------------------------------------------- host --

struct HostLayout {
  size_t control = 0;           // arena offset of the control block
  size_t cells = 0;             // arena offset of CellRuntime[num_cells]
  size_t staging_region = 0;    // arena offset of the staging region
  size_t staging_reserved = 0;  // its bytes (staging_bytes rounded to pages, plus one page)
  size_t staging_bytes = 0;     // used: desc_bytes + input + output
  size_t input = 0;             // within staging: == DeviceLayout::desc_bytes
  size_t input_bytes = 0;
  size_t output = 0;            // within staging
  size_t output_bytes = 0;
};

// Adds the CUDA session's regions to `arena` (which holds the ferry_session
// header already). `control_bytes` / `cell_bytes`: the control block and
// one CellRuntime.
ferry_status plan_host(const ferry_model* m, size_t max_batch, size_t max_seq, const DeviceLayout& dev,
                       size_t page_size, size_t control_bytes, size_t cell_bytes, ArenaPlan* arena,
                       HostLayout* out);

// The page-aligned staging block inside its region at `region` (host).
uint8_t* staging_in_region(uint8_t* region, size_t page_size);

// ------------------------------------------------------- recurrence --

struct CellShape {
  int32_t op = kCellLstm;
  uint32_t gates = 4, hidden = 0, h_out = 0;  // h_out != hidden: LSTM projection
  int32_t type = kWeightF32;                  // the stored dtype of W_hh (and W_hr)
};

// How a kernel splits a cell over blocks (RecurrentParams fields).
struct Decomposition {
  uint32_t blocks = 0, panels_per_block = 0, batch_tile = 0;  // phase A
  uint32_t batch_slices = 1;  // phase A: blocks = panel groups x slices of the batch (phase_a_share)
  uint32_t proj_blocks = 0, proj_panels_per_block = 0, proj_batch_tile = 0;  // phase B
  size_t shared_a = 0, shared_b = 0;  // dynamic shared memory bytes per block
};

struct Recurrence {
  Decomposition step;          // graph replay and single steps
  bool persistent = false;     // the rule in this file's header holds
  Decomposition resident;      // the persistent kernel's (blocks == proj_blocks)
  size_t resident_shared = 0;  // its dynamic shared memory: W_hh slice + work
  size_t resident_weights = 0; // of which the W_hh slice
  const char* reason = "";     // why not persistent
};

// The alignment padding a phase's shared memory may need beyond its
// samples' bytes (phase_shared: at most 3 x 15 bytes); tiles are sized
// with this much spare.
constexpr size_t kPhaseAlignSpare = 64;

// The dynamic shared memory one block may take when one block runs per SM:
// min(the opt-in per-block maximum, the SM's shared memory - 1 KiB).
size_t block_shared_limit(const DeviceCaps& caps);

// `p` with the blocks' share of the work that `d` says.
RecurrentParams with_decomposition(const RecurrentParams& p, const Decomposition& d);

// FERRY_UNSUPPORTED (with the limit in the message) when even one sample of
// a single step does not fit a block's shared memory.
ferry_status choose_recurrence(const CellShape& shape, size_t max_batch, const DeviceCaps& caps, Recurrence* out);

// The shape of cell `cell_index` of `layer`.
CellShape cell_shape(const Layer& layer);

// -------------------------------------------------------- input/output --

// The zero-copy path (inputs and outputs in mapped, pinned host memory the
// kernels read and write directly) or one copy in and one copy out.
// `requested` is the option (AUTO, COPY, ZERO_COPY); under AUTO, `env` (the
// FERRY_CUDA_IO environment variable: "copy" or "zero_copy", or null) may
// choose; otherwise an integrated GPU that can map registered host memory
// gets zero copy. FERRY_UNSUPPORTED when zero copy is asked for and the
// device cannot do it; FERRY_INVALID_ARGUMENT for an unknown env value.
ferry_status choose_io(const DeviceCaps& caps, ferry_device_io requested, const char* env, bool* zero_copy);

// How ferry_step runs: launched kernels and graph replays (the default), or
// the resident streaming kernel (resident.h, mailbox.h), from the
// FERRY_CUDA_STEP environment variable: "launch"; "resident" (launched
// steps where the resident kernel does not fit); "resident_only" (a session
// it does not fit is refused, with the reason); null or empty: launch. The
// resident kernel needs the zero-copy path (its mailbox, input and output
// are in mapped host memory): *zero_copy is set when it is chosen;
// FERRY_UNSUPPORTED when the device cannot map host memory or the options
// ask for the copy path; FERRY_INVALID_ARGUMENT for an unknown value.
enum class StepMode { kLaunch, kResident, kResidentOnly };
ferry_status choose_step(const DeviceCaps& caps, ferry_device_io requested, const char* env, StepMode* mode,
                         bool* zero_copy);

// Everything about a model file the CUDA backend refuses, whatever the
// device and the session's sizes, with the reason: weights in RowMajor (a
// format 1.0 file: "convert it again"), more cells than the call
// descriptor holds, a cell whose one sample does not fit a step kernel's
// shared memory. Every op and dtype the loader accepts runs. Plain C++:
// `ferry inspect` asks it on machines without a GPU or a CUDA build.
ferry_status check_file(const ferry_model* m);

// check_file, and what (options, device) add: larger sizes than the kernels
// index, a cell no decomposition fits on this device.
ferry_status check_model(const ferry_model* m, const SessionConfig& config, const DeviceCaps& caps);

}  // namespace cuda
}  // namespace ferry
