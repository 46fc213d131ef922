// The backend interface: everything the C API asks of a backend, in the
// spirit of ExecuTorch's BackendInterface and ggml's ggml_backend_i.
//
// The C API (api/session_api.cpp) checks the caller's arguments, then calls
// the backend that `ferry_backend` selects through this table of function
// pointers, and nothing else: a backend owns the whole chain, its memory
// plan (host bytes in the caller's arena, device bytes where it has a
// device) and its recurrent state.
//
// Backends sit in a static table indexed by ferry_backend
// (backend/registry.cpp); there is no self-registration, which static
// firmware links drop. Today: the CPU backend (backend/cpu) serves
// FERRY_BACKEND_AUTO, REFERENCE, SIMD and XNNPACK, each a policy for choosing
// kernel sets; FERRY_BACKEND_CUDA is the CUDA backend where built, else an
// entry whose probe says why it is not there. A new backend is a folder here
// plus its table entry.
//
// Contract of every entry:
//   probe  is pure: may `config` run `model` here? FERRY_UNSUPPORTED with the
//          reason if not (a backend not built, a CPU without the ISA, a file
//          the backend cannot read).
//   plan   is pure and deterministic: the same (model, config, machine)
//          gives the same plan, so ferry_session_arena_size is exact.
//          It only adds regions after the ferry_session header.
//   init   lays the session out in the arena exactly as `plan` said; the
//          state starts at zero; everything run/step need is placed here.
//   run, step, state_*: never allocate; the C API has checked the arguments
//          (pointers, batch and seq against the session's limits, lengths,
//          output capacity, streamable for step).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "ferry/ferry.h"
#include "model/model.h"
#include "plan/arena_plan.h"

namespace ferry {

// The session options as this runtime reads them (the fields a caller
// compiled against an older header did not have take their defaults).
struct SessionConfig {
  size_t max_batch = 1;
  size_t max_seq = 1;
  ferry_backend backend = FERRY_BACKEND_AUTO;
  void* threadpool = nullptr;  // pthreadpool_t or null
  ferry_fp_mode fp_mode = FERRY_FP_FLUSH;
  // Device backends only.
  const ferry_device_allocator* device_allocator = nullptr;
  ferry_device_io device_io = FERRY_DEVICE_IO_AUTO;
  int device = 0;
  const ferry_profiler* profiler = nullptr;  // null, or one with a `layer` callback
};

// One ferry_run / ferry_step call, arguments checked.
struct RunCall {
  const float* input;      // the model's layout (null for a model taking tokens)
  const int32_t* tokens;   // the token ids of a model taking tokens, else null
  size_t batch, seq;       // seq is 1 for ferry_step
  const int32_t* lengths;  // null or batch values in 1..seq
  float* output;           // ferry_output_floats(batch, seq) floats
  size_t out_steps;        // steps of a sequence output (1 otherwise)
};

struct ArenaParts;  // shared/arena_parts.h

struct Backend {
  const char* name;  // of the implementation: "cpu", "cuda"
  ferry_status (*probe)(const ferry_model* model, const SessionConfig& config);
  // Adds the backend's regions to `arena` (which already holds the
  // ferry_session header) and returns the device bytes it will take (0 for
  // a host backend) in *device_bytes.
  ferry_status (*plan)(const ferry_model* model, const SessionConfig& config, ArenaPlan* arena,
                       size_t* device_bytes);
  ferry_status (*init)(ferry_session* session, const SessionConfig& config, uint8_t* arena);
  ferry_status (*run)(ferry_session* session, const RunCall& call);
  ferry_status (*step)(ferry_session* session, const RunCall& call);
  // Public state layout (ferry.h, ferry_state_get); `batch` <= max_batch and
  // `state` holds batch * model->state_floats floats (checked).
  void (*state_get)(const ferry_session* session, size_t batch, float* state);
  void (*state_set)(ferry_session* session, size_t batch, const float* state);
  void (*state_reset)(ferry_session* session);
  // Optional entries of a device backend (null by default: host backends'
  // table entries end above):
  //   release       gives back what init acquired outside the arena (device
  //                 memory, streams, graphs); ferry_session_release.
  //   state_status  the outcome of the last state_get/set/reset, whose copies
  //                 to or from a device can fail (with the message set).
  void (*release)(ferry_session* session) = nullptr;
  ferry_status (*state_status)(const ferry_session* session) = nullptr;
  // Optional: the arena of `plan` in ferry_sizes.h's parts and named
  // regions (shared/arena_parts.h), for a backend whose arena has a
  // target-independent part (the CPU backend); null: it has none.
  ferry_status (*arena_parts)(const ferry_model* model, const SessionConfig& config, ArenaParts* out) = nullptr;
  // Optional: the entry a session made with a profiler runs through (its
  // run and step report each layer to session->profiler; its other entries
  // are this one's), so that a session without one runs the same code as if
  // profiling did not exist; null: the backend cannot profile per layer.
  const Backend* profiled = nullptr;
};

// The entry for `backend` (a value the C API has range-checked).
const Backend& backend_for(ferry_backend backend);

}  // namespace ferry

// What every session holds, whatever its backend; the backend's own control
// block (`impl`) follows it in the arena.
struct ferry_session {
  const ferry::Backend* backend;
  const ferry_model* model;
  size_t max_batch;
  size_t max_seq;
  void* impl;
  ferry_fp_mode fp_mode;
  // ferry_step of one sample needs no more than the buffer checks: the model
  // streams, takes floats and has no Conv1d (one step in, one step out).
  bool plain_step;
  // The per-layer callbacks (ferry_session_options.profiler), or null; read
  // only by a backend's `profiled` entry.
  const ferry_profiler* profiler;
};
