// The session: what ferry_session_init lays out in the caller's arena, and
// the split of work between the chain executor (session.cpp) and the fast
// backends (exec_fast.cpp).
//
// Backends, decided per layer at init (choose_engines) and never per call:
//   reference  scalar oracle; reads RowMajor and Panel8.
//   simd       AVX2/FMA or NEON kernels (kernels/simd) on Panel8 weights.
//   xnnpack    XNNPACK's f32 fully-connected for the input projections of a
//              chunk of time steps and for Linear layers; the recurrence
//              itself is the simd kernels' (XNNPACK has no recurrent op).
//   auto       simd where the CPU and the file allow, else reference; and
//              XNNPACK for the large products of a run where its GEMMs beat
//              ours (Arm: hand-written assembly), once a probe at init has
//              shown its results equal the simd kernels' bit for bit (both
//              one FMA chain per output: simd.h).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "ferry/ferry.h"
#include "kernels/simd/simd.h"
#include "model.h"

namespace ferry {

enum class Engine : uint8_t { kReference, kSimd };

// A call with at least this many rows uses XNNPACK where auto chose it.
constexpr size_t kXnnpackMinRows = 32;
// Rows (time steps x batch) of input projection computed per chunk of a run.
// Small enough that the chunk's gate buffer (64 x 4H floats: 256 KiB at
// H = 256) stays in L2 beside W_hh while the steps consume it, large enough
// for the GEMM (and XNNPACK) to run at full speed; W_ih is re-read once per
// chunk.
constexpr size_t kChunkRows = 64;

// What a session runs each layer with; a pure function of (model, options,
// CPU, build), computed identically by ferry_arena_size and
// ferry_session_init.
struct Engines {
  const simd::Kernels* simd = nullptr;  // null: no layer on simd
  Engine layer[kMaxChain] = {};
  bool xnn_cell[kMaxCells] = {};    // XNNPACK input projection for this cell
  bool xnn_linear[kMaxChain] = {};  // XNNPACK for this Linear layer
  bool xnn_always = false;          // xnnpack backend: every call, whatever its rows
  bool any_reference = false;
  bool any_xnnpack = false;
};

ferry_status choose_engines(const ferry_model* m, ferry_backend backend, size_t max_batch, size_t max_seq,
                            Engines* out);

// Time steps per input-projection chunk for `max_batch` rows per step.
size_t chunk_steps(size_t max_batch, size_t max_seq);

// Floats of the widest panel-order gate row of any recurrent layer: the
// widest ceil(H/8)*8*G.
uint32_t max_gate_cols(const ferry_model* m);

}  // namespace ferry

struct ferry_session {
  const ferry_model* model;
  size_t max_batch;
  size_t max_seq;
  void* threadpool;  // pthreadpool_t or null
  size_t threads;    // of the pool; 1 without
  ferry::Engines engines;
  float* state;     // per layer: h [cells][max_batch][h_out], then c [cells][max_batch][H]
  float* act[2];    // ping-pong activations [T][B][F]
  float* scratch;   // reference: per-step gate values of one sample
  // simd (null when no layer runs there):
  float* gates;     // [chunk rows][max_gate_cols]: input parts, panel order
  float* gates_rec; // GRU batched: [max_batch][max_gate_cols] recurrent parts
  float* h_new;     // [max_batch][max_hidden]: hidden after a step
  float* h_proj;    // [max_batch][max_h_out]: projected hidden (LSTM proj)
  size_t chunk_steps;
  // XNNPACK operators (in the arena), where engines say so.
  void* xnn_cell[ferry::kMaxCells];
  void* xnn_linear[ferry::kMaxChain];
  bool xnn_cell_ok[ferry::kMaxCells];   // auto: the probe agreed (else simd)
  bool xnn_linear_ok[ferry::kMaxChain];
};

namespace ferry {

// Hidden / cell state of cell `c` of `layer`, row `b` (max_batch rows).
inline float* state_h(ferry_session* s, const Layer& layer, uint32_t c, size_t b) {
  float* base = s->state + layer.state_offset * s->max_batch;
  return base + (c * s->max_batch + b) * layer.h_out;
}

inline float* state_c(ferry_session* s, const Layer& layer, uint32_t c, size_t b) {
  const uint32_t cells = layer.num_layers * layer.dirs;
  float* base = s->state + layer.state_offset * s->max_batch + cells * s->max_batch * layer.h_out;
  return base + (c * s->max_batch + b) * layer.hidden;
}

// Fast backends (exec_fast.cpp). Same contracts as the reference paths in
// session.cpp: time-major [T][B][F] buffers; a recurrent module ping-pongs
// between `in` and `out` and returns the buffer holding its result.
float* fast_recurrent(ferry_session* s, const Layer& layer, float* in, float* out, size_t T, size_t B,
                      const int32_t* lengths);
ferry_status fast_linear(ferry_session* s, const Layer& layer, uint32_t layer_index, const float* in,
                         float* out, size_t rows);
void fast_activation(ferry_session* s, Op op, float* x, size_t n);

// XNNPACK operators for a session, made at init (exec_fast.cpp). `region`
// holds `xnn_bytes` (as measured by xnn_region_bytes); `temp` is at least
// xnn_temp_floats floats of memory unused until the first run.
ferry_status xnn_region_bytes(const ferry_model* m, const Engines& e, size_t* bytes_out);
size_t xnn_temp_floats(const ferry_model* m, const Engines& e);
ferry_status xnn_create_ops(ferry_session* s, uint8_t* region, size_t xnn_bytes, float* temp);

}  // namespace ferry
