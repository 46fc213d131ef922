// The CPU backend: serves FERRY_BACKEND_AUTO, REFERENCE, SIMD and XNNPACK,
// which differ only in how a kernel set is chosen per layer.
//
// Map of this folder:
//   cpu_backend.cpp    the Backend entry: probe, plan (the arena regions),
//                      init, run, step, state
//   kernel_select.cpp  the per-layer choice of kernel set (op, dtype, weight
//                      layout, ISA) and of XNNPACK, made once at init
//   executor.cpp       the chain executor: layout in and out, one case per op
//   recurrent.cpp      the one recurrent loop (layers, directions, chunks of
//                      time steps, per-sample lengths) and the two step
//                      strategies of kernels/kernel_set.h
//   products.cpp       matrix products split over threads: input
//                      projections, Linear layers, projections; XNNPACK
//                      where chosen
//   xnnpack_ops.cpp    XNNPACK's operators in the arena (sizes, creation,
//                      the auto agreement probe)
//
// Backends, per layer:
//   reference  f32_reference, the scalar oracle; reads RowMajor and Panel8.
//   simd       the best SIMD set of the layer's dtype on Panel8 weights.
//   xnnpack    simd, with XNNPACK's f32 fully-connected for the input
//              projections of a chunk of time steps and for Linear layers
//              (XNNPACK has no recurrent op).
//   auto       simd where the CPU and the file allow, else reference; and
//              XNNPACK for the large products of a run where its GEMMs beat
//              ours (Arm: hand-written assembly), once a probe at init has
//              shown its results equal the simd kernels' bit for bit (both
//              one FMA chain per output: kernels/kernel_set.h).
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "kernels/kernel_set.h"
#include "model/model.h"

namespace ferry {
namespace cpu {

// A call with at least this many rows uses XNNPACK where auto chose it.
constexpr size_t kXnnpackMinRows = 32;
// Rows (time steps x batch) of input projection computed per chunk of a run.
// Small enough that the chunk's gate buffer (64 x 4H floats: 256 KiB at
// H = 256) stays in L2 beside W_hh while the steps consume it, large enough
// for the GEMM (and XNNPACK) to run at full speed; W_ih is re-read once per
// chunk.
constexpr size_t kChunkRows = 64;
// A one-sample step whose weights are at least this large runs its panels
// in alternating order, first to last on one step and last to first on the
// next (step_all_panels). Weights larger than a cache level are otherwise
// streamed whole from the next level at every step (a forward scan evicts
// the lines it is about to need); turned around, the scan starts on the
// panels the previous step read last, which are still in that cache. At
// 64 KiB they exceed a core's L1 (GRU H 64: 96 KiB); the weights of W2's
// layers (1 MiB) exceed a 1 MiB L2. Below this size one kernel call per
// step is cheaper.
constexpr uint64_t kAlternateMinBytes = 64 * 1024;
// A chunk of one step of at least this many rows runs the whole step in the
// set's batch_step where it has one (the update on the GEMM tile's
// registers); below, gemm + update, whose update takes 8 panels at a time.
// f32_avx512 on Zen 4, LSTM(64, 256), `ferry bench --stream --batch B`
// against gemm + update: B 2 +3%, 4 +7%, 8 -0.6%, 16 -1.5%, 64 -2%.
// f32_avx2's (batch_step.inl), Zen 4, (64, 256), one step, thread CPU time,
// min of 150 interleaved rounds: LSTM B 4 32.0 against 32.3 us, 8 56.3 /
// 65.1, 16 106.2 / 107.8, 64 410 / 445; GRU B 4 20.0 / 23.1, 8 38.8 /
// 48.9, 16 76.5 / 82.1, 64 298 / 323: never slower, so one threshold.
constexpr size_t kBatchStepMinRows = 8;
// A one-sample run on one thread computes each chunk's input projection in
// shares inside the previous chunk's steps (the set's step_project), for a
// cell whose W_hh is at least this large: the step then reads its weights
// from L2 at under half the FMA rate, and the projection's FMAs fill the
// rest. (At H 128, the first size f32_avx512 fuses, W_hh is 256 KiB.)
// f32_avx512 on Zen 4: W2's chunk (LSTM(32, 256) + LSTM(256, 256), 64 steps
// each; ferry_bench_kernels --benchmark_filter=W2Chunk) 1,612 us against
// 1,747 us for the steps, then the projection; `ferry bench --seq 512`,
// fastest of 80 runs against the build before: LSTM(64, 128) 1,627 / 1,734
// us, LSTM(128, 128) 1,779 / 2,022, LSTM(96, 192) 3,453 / 3,720, W2 13.02 /
// 13.87 ms.
constexpr uint64_t kProjectOverlapMinBytes = 256 * 1024;
// A one-sample run through stacked layers on two or more threads runs as a
// wavefront over the layers (each runner a layer, meeting once per chunk),
// and one through a bidirectional module runs its directions side by side,
// when every W_hh is below this size; larger ones split each step's panels
// between the threads instead, which halves the weights each core streams
// per step (so that more of them stay in its cache) at the price of
// meeting once per step. Zen 4 (2 vCPUs, 1 MiB L2 per core), T 512, `ferry
// bench --threads 2` alternating with the panel split: 2-layer GRU H 256
// 7.1-8.8 ms against 13.0-15.5, H 128 1.8-2.0 against 3.2-3.5; 2-layer LSTM
// H 64 0.75-1.0 against 1.2-1.5 (one thread: 1.24-1.32); W2 (LSTM H 256,
// W_hh 1 MiB) 8.9-9.2 against 12.3-12.7 in one hour, 9.0-10.7 against
// 8.8-11.9 (a tie) in the next; LSTM H 384 (2.25 MiB) 23.1-27.1 against
// 34.5-35.9, then a tie; H 448 (3.06 MiB) 31.3-35.0 against 33.2-44.9; H
// 512 (4 MiB) 41.0-42.3 against 33.7-53.6 (the split's best runs faster).
// A bidirectional module's two directions side by side, the same way (four
// alternations, `--repeat 40` medians): LSTM(64, 256) 6.1-6.3 ms against
// 7.9-9.8 (one thread 12.1-13.1); LSTM(64, 256) x 2 16.7-19.2 against
// 20.7-24.3 (32.7-34.0); GRU(40, 128) x 2 3.28-3.36 against 6.08-6.48
// (6.31-6.58); LSTM(32, 64) 0.47 against 1.04-1.20 (0.84-0.85); in one
// chunk, GRU(40, 128) x 2 at T 49 (`--repeat 200`, three alternations):
// 333-395 us against 626-657 (613-633).
constexpr uint64_t kWavefrontMaxBytes = 4 * 1024 * 1024;
// Output rows (steps x batch) a Conv1d computes per GEMM call: its patches
// (im2col rows) are gathered this many at a time.
constexpr size_t kConvRows = 64;
// Distinct kernel sets one session uses: per dtype (f32, f16, int8, int4:
// a converter's --fallback may mix all four) a SIMD set and the reference.
constexpr uint32_t kMaxSessionKernelSets = 8;

// The kernel set of each layer, compactly (it lives in the session).
struct LayerKernels {
  const kernels::KernelSet* sets[kMaxSessionKernelSets] = {};
  uint8_t layer_set[kMaxChain] = {};  // index into sets

  const kernels::KernelSet* layer(uint32_t i) const { return sets[layer_set[i]]; }
};

// What a session runs each layer with: a pure function of (model, config,
// CPU, build), computed identically by plan and init.
struct KernelChoice {
  LayerKernels kernels;
  bool xnn_cell[kMaxCells] = {};      // XNNPACK input projection for this cell
  bool xnn_linear[kMaxChain] = {};    // XNNPACK for this Linear layer
  bool xnn_always = false;            // xnnpack backend: every call, whatever its rows
  bool any_per_sample = false;        // some layer on a kPerSample set
  bool any_panel_recurrent = false;   // some recurrent layer on a kPanels set
  bool any_panel_gru = false;
  bool any_panel_projection = false;
  bool any_xnnpack = false;
  bool any_project_overlap = false;   // some cell may compute projections in its steps (project_overlaps)
  uint32_t wave_runners = 0;          // threads a wavefront runs on (layer_wavefronts), 0: none
  bool wave_overlap = false;          // some cell of such a module has project_overlaps
  bool wave_quantized = false;        // some such module's set quantizes its inputs (i8, i4)
};

ferry_status choose_kernels(const ferry_model* m, const SessionConfig& config, KernelChoice* out);

// Whether a one-sample run of `cell` on one thread computes the next chunk's
// projection inside its steps (kProjectOverlapMinBytes): the set has
// step_project for the kind, XNNPACK does not take the cell's projections.
bool project_overlaps(const kernels::KernelSet* k, int kind, const Cell& cell, bool xnn_cell);

// Whether a one-sample run of the recurrent module `l` on a pool of two or
// more threads runs as a wavefront over its cells (recurrent.cpp): a
// kPanels set, two or more layers of one direction or any layers of two
// directions, no projection (proj_size), no XNNPACK (`xnn`), every W_hh
// below kWavefrontMaxBytes. (An i8 / i4 set's runners quantize into their
// own bands of the session's rows.)
bool layer_wavefronts(const ferry_model* m, const kernels::KernelSet* k, const Layer& l, bool xnn);

// Cells of such a module that can run side by side: its layers (one
// direction: a chunk apart), or its two directions.
inline uint32_t wave_width(const Layer& l) { return l.dirs > 1 ? l.dirs : l.num_layers; }

// Whether a wavefront over `l` pays for a run of T steps in chunks of
// `chunk`: stacked layers overlap only across chunks; two directions run
// side by side from two steps on.
inline bool wave_pays(const Layer& l, size_t T, size_t chunk) { return T > chunk || (l.dirs > 1 && T >= 2); }

// What cell `ci` (layer ci / dirs, direction ci % dirs) of a wavefront over
// `l` waits for before its chunk `c` of `chunks`: cells [first, first +
// count) to have finished `need` chunks each (count 0: nothing).
//   One direction: layer k's chunk c waits for layer k-1 to finish chunk c
//   (c + 1 when `overlap`: layer k's steps project its next chunk, which
//   reads layer k-1's rows of chunk c + 1).
//   Two directions: before its first chunk, a cell of layer k waits for both
//   cells of layer k-1 to finish (its backward cell's first step reads the
//   last row of the layer below; the forward cell's rows are also written
//   by the backward cell below).
// Every cell waited on has a lower index, so runners that take cells in
// index order cannot wait on each other in a cycle (tests/unit: WaveWait).
struct WaveWait {
  uint32_t first, count;
  size_t need;
};
inline WaveWait wave_wait(const Layer& l, uint32_t ci, size_t c, size_t chunks, bool overlap) {
  const uint32_t kl = ci / l.dirs;
  if (kl == 0) return WaveWait{0, 0, 0};
  if (l.dirs > 1) return c == 0 ? WaveWait{(kl - 1) * l.dirs, l.dirs, chunks} : WaveWait{0, 0, 0};
  const size_t need = c + (overlap ? 2 : 1);
  return WaveWait{ci - 1, 1, need < chunks ? need : chunks};
}

// Time steps per input-projection chunk for `max_batch` rows per step.
size_t chunk_steps(size_t max_batch, size_t max_seq);

// Floats of the widest panel-order gate row of any recurrent layer.
uint32_t max_gate_cols(const ferry_model* m);

// A lone step (ferry_step of one sample) through one cell of a kPanels
// layer, laid out at init: only the input and the output row change per
// call (recurrent.cpp).
struct LoneStep {
  const kernels::KernelSet* k;  // null: this cell takes the general path
  int kind;                     // kernels::kind_index
  uint32_t panels;              // of its hidden units
  size_t tile, work;            // for a thread pool
  float* h;                     // its hidden state (row 0)
  kernels::StepArgs args;       // x and h_new are set per call
  bool alternate;               // weights of at least kAlternateMinBytes (step_all_panels)
  bool reverse;                 // the next call's panel order, when alternating
};

struct StepProgram;  // below

// The CPU backend's control block, in the arena after the ferry_session
// header.
struct CpuSession {
  void* threadpool;  // pthreadpool_t or null
  size_t threads;    // of the pool; 1 without
  LayerKernels kernels;
  bool xnn_always;   // KernelChoice::xnn_always
  bool wave_overlap;      // KernelChoice::wave_overlap (beside xnn_always: the control block's size is fixed)
  uint32_t wave_runners;  // runners a wavefront may take (KernelChoice), 0 when wave_gates is null
  float* state;      // per layer: h [cells][max_batch][h_out], then c [cells][max_batch][H]
  float* act[2];     // ping-pong activations [T][B][F]
  float* scratch;    // kPerSample: per-step gate values of one sample
  // kPanels (null when no layer runs there):
  float* gates;      // [chunk rows][max_gate_cols]: input parts, panel order
  float* gates_next; // the same for the next chunk, while the steps compute it (project_overlaps), or null
  float* gates_rec;  // GRU batched: [max_batch][max_gate_cols] recurrent parts
  float* h_new;      // [max_batch][max_hidden]: hidden after a step
  float* h_proj;     // [max_batch][max_h_out]: projected hidden (LSTM proj)
  // Wavefront (layer_wavefronts; null when no module takes one): per runner
  // its gate rows (chunk_steps x max_gate_cols floats, twice when
  // wave_overlap: the next chunk's beside them).
  float* wave_gates;
  LoneStep* lone;    // [num_cells] when the model streams and a cell runs on a kPanels set, else null
  StepProgram* program;  // ferry_step of one sample, when the model streams and every layer allows it
  float* slots;      // residual slots (Save / Add): [num_slots][steps][max_batch][max_features]
  float* patches;    // Conv1d: kConvRows rows of (in/groups)*kernel inputs
  size_t slot_floats;  // floats of one slot
  size_t chunk_steps;
  // i8 / i4 layers (kernels/kernel_set.h, "Activations"): q_rows quantized
  // rows of q_ld bytes each and their scales (times wave_runners when a
  // wavefront runs such a layer: a band of q_rows per runner, gemm_on), or
  // null when no layer's set
  // quantizes its inputs. Every product of such a layer quantizes its A rows
  // here, q_rows at a time, before the work is split between threads.
  int8_t* qact;
  float* qscales;
  size_t q_ld, q_rows;
  // XNNPACK operators (in the arena), where the choice says so (else null).
  void* xnn_cell[kMaxCells];
  void* xnn_linear[kMaxChain];
  bool xnn_cell_ok[kMaxCells];  // auto: the probe agreed (else simd)
  bool xnn_linear_ok[kMaxChain];
};

inline CpuSession* cpu_of(ferry_session* s) { return static_cast<CpuSession*>(s->impl); }
inline const CpuSession* cpu_of(const ferry_session* s) { return static_cast<const CpuSession*>(s->impl); }

// A state row's copy: inline for the short rows of streaming (no call into
// libc's dispatch for 64 bytes: fixed-size blocks the compiler turns into
// vector moves), memcpy beyond.
inline void copy_floats(float* dst, const float* src, size_t n) {
  if (n > 64) {
    memcpy(dst, src, n * sizeof(float));
    return;
  }
  size_t i = 0;
  for (; i + 8 <= n; i += 8) memcpy(dst + i, src + i, 8 * sizeof(float));
  if (i < n) memcpy(dst + i, src + i, (n - i) * sizeof(float));
}

// Hidden / cell state of cell `c` of `layer`, row `b` (max_batch rows).
inline float* state_h(const ferry_session* s, const Layer& layer, uint32_t c, size_t b) {
  float* base = cpu_of(s)->state + layer.state_offset * s->max_batch;
  return base + (c * s->max_batch + b) * layer.h_out;
}

inline float* state_c(const ferry_session* s, const Layer& layer, uint32_t c, size_t b) {
  const uint32_t cells = layer.num_layers * layer.dirs;
  float* base = cpu_of(s)->state + layer.state_offset * s->max_batch + cells * s->max_batch * layer.h_out;
  return base + (c * s->max_batch + b) * layer.hidden;
}

// FERRY_PROFILER 0 (-D, or ferry_config.h in an embedded export) leaves the
// profiled entry out of the build: a firmware that never profiles saves its
// code (the profiled instantiations of the executor and the step program),
// and a session asking for a profiler is refused (FERRY_UNSUPPORTED).
#ifndef FERRY_PROFILER
#define FERRY_PROFILER 1
#endif

// The chain executor (executor.cpp): runs `call` through every layer;
// execute_profiled also reports each layer to s->profiler (the profiled
// entry's run; the same code otherwise, instantiated from one template).
ferry_status execute(ferry_session* s, const RunCall& call);
ferry_status execute_profiled(ferry_session* s, const RunCall& call);

// Calls s->profiler around a layer (the profiled instantiations only).
inline void profile_layer(const ferry_session* s, uint32_t layer, int end) {
  s->profiler->layer(s->profiler->context, layer, end);
}

// The format 1.2 ops (ops.cpp). Buffers are time-major [steps][B][F].
// A Conv1d from `in` (T steps) into `out` (conv_output_steps(T) steps); a
// causal one reads and updates its state (the inputs before `in`).
void conv1d(ferry_session* s, uint32_t layer_index, const float* in, float* out, size_t T, size_t B,
            const int32_t* lengths);
// Mean or max over each sample's valid steps, from and into its running
// state: `in` [T][B][F] -> `out` [B][F].
void pool(ferry_session* s, uint32_t layer_index, const float* in, float* out, size_t T, size_t B,
          const int32_t* lengths);
// Token ids (the model's layout) -> embedding rows, time-major, into `out`.
void embed(const ferry_session* s, const int32_t* tokens, size_t T, size_t B, float* out);
// The per-feature and parameterised activations: BatchNorm, LayerNorm,
// PReLU, LeakyReLU, ELU, GELU, SiLU, Hardtanh, LogSoftmax, in place over
// `rows` rows.
void activation(const ferry_session* s, uint32_t layer_index, float* x, size_t rows);

// The one recurrent loop (recurrent.cpp). Time-major [T][B][F] buffers; a
// module ping-pongs between `in` and `out` and returns the buffer holding
// its result.
float* run_recurrent(ferry_session* s, uint32_t layer_index, float* in, float* out, size_t T, size_t B,
                     const int32_t* lengths);

// Fills cpu->lone for every cell of a kPanels recurrent layer that a lone
// step can run fused (recurrent.cpp).
void prepare_lone_steps(ferry_session* s, const KernelChoice& choice);
// One step of one sample through prepared cell `cell_index` of `layer`:
// reads x [in], writes y [h_out] and the cell's state (recurrent.cpp).
void lone_cell_step(ferry_session* s, const Layer& layer, uint32_t cell_index, const float* x, float* y);

// All panels of a one-sample fused step on the calling thread. With
// `reverse`, the panels run last to first in groups of the kernel's own
// width (the group that holds panel 0 may be shorter). Each panel's chain,
// update and outputs are its own, so the order changes no bit; it only
// decides which weights are still in cache (kAlternateMinBytes).
inline void step_all_panels(const kernels::KernelSet* k, int kind, const kernels::StepArgs& a, uint32_t panels,
                            bool reverse) {
  if (!reverse) {
    k->step[kind](a, 0, panels);
    return;
  }
  const uint32_t group = k->step_group[kind];
  uint32_t p1 = panels;
  while (p1 > 0) {
    const uint32_t p0 = p1 > group ? p1 - group : 0;
    k->step[kind](a, p0, p1);
    p1 = p0;
  }
}

// A lone step's fused kernel over all its panels on the calling thread
// (its x and h_new set), in this call's order; the next call takes the
// other order when the cell alternates.
inline void lone_panels(LoneStep* ls) {
  step_all_panels(ls->k, ls->kind, ls->args, ls->panels, ls->reverse);
  ls->reverse = ls->alternate && !ls->reverse;
}

// The step program (step_program.cpp): ferry_step of one sample as a list
// of ops laid out at init, from the caller's input to the caller's output,
// with the kernels (and so the bits) of the general path.
struct StepOp {
  enum Kind : uint8_t { kCell, kProduce, kInPlace, kSave, kCopy } kind;
  uint8_t src, dst;  // buffers: 0 the caller's input, 1 act[0], 2 act[1], 3 the caller's output
  uint32_t layer;
  uint32_t cell;     // kCell
};
struct StepProgram {
  // The whole program when it is one cell from the caller's input to the
  // caller's output on one thread, with no projection and no quantized
  // inputs (a lone LSTM / GRU / RNN layer, the firmware case): that cell's
  // lone step, called straight from ferry_step. Else null.
  LoneStep* direct;
  uint32_t count;
  StepOp ops[1];     // `count` of them (the region is sized for them)
};
// Ops a program of `m` may take (its size), and the program itself, or
// false when the model has a layer the program does not run (Embedding,
// XNNPACK for one row, a cell without a lone step).
size_t step_program_ops(const ferry_model* m);
bool build_step_program(ferry_session* s, const KernelChoice& choice, StepProgram* program);
void run_step_program(ferry_session* s, const float* input, float* output);
// The same, reporting each layer to s->profiler (consecutive ops of one
// layer, a stacked module's cells, as one report).
void run_step_program_profiled(ferry_session* s, const float* input, float* output);
// A program's `direct` cell: what lone_cell_step does for it, without its
// decisions (inlined into the backend's step).
inline void run_direct_step(LoneStep* d, const float* input, float* output) {
  d->args.x = input;
  d->args.h_new = output;
  lone_panels(d);
  copy_floats(d->h, output, d->args.hidden);
}

// Matrix products (products.cpp), split over the session's threads by
// output columns (or rows), never inside a sum. On an i8 / i4 set the A
// rows are quantized first (q_rows at a time; per-row, so the blocks change
// no bit).
void gemm(ferry_session* s, const kernels::KernelSet* k, const kernels::GemmArgs& args, size_t rows,
          uint32_t vectors);
// The same with an i8 / i4 set's A rows quantized into band `q_band` of the
// session's rows (rows [q_band * q_rows, (q_band + 1) * q_rows): a
// wavefront's runner has its own) and, unless `pool`, all of it on the
// calling thread.
void gemm_on(ferry_session* s, const kernels::KernelSet* k, const kernels::GemmArgs& args, size_t rows,
             uint32_t vectors, size_t q_band, bool pool);
// Quantizes `rows` (<= q_rows) rows of k floats, `ld` apart, into the
// session's qact rows from `first_row` on; the rows' bytes and scales.
void quantize_activations(ferry_session* s, const kernels::KernelSet* k, const float* x, size_t rows, size_t ld,
                          uint32_t cols, size_t first_row, const int8_t** q, const float** scales);
// The quantized-activation rows a session needs (rows, bytes per row), or
// {0, 0} when no layer's set quantizes its inputs.
void quantized_rows_needed(const ferry_model* m, const KernelChoice& c, size_t max_batch, size_t chunk_rows,
                           size_t* rows, size_t* ld);
// bias + W_ih x for `rows` rows of `x` (stride cell.in) into `dst` (panel
// order, stride gate_cols), on XNNPACK where chosen for this cell; with
// `pool` false (a wavefront's runner: gemm_on's band and no pool), on the
// calling thread with ferry's kernels.
void input_projection(ferry_session* s, const kernels::KernelSet* k, uint32_t cell_index, const Layer& layer,
                      const float* x, size_t rows, float* dst, size_t q_band = 0, bool pool = true);
// A Linear layer over `rows` rows (a failing XNNPACK call is returned).
ferry_status linear(ferry_session* s, uint32_t layer_index, const float* in, float* out, size_t rows);

// XNNPACK operators for a session, made at init (xnnpack_ops.cpp). `region`
// holds `xnn_bytes` (as measured by xnn_region_bytes); `temp` is at least
// xnn_temp_floats floats of memory unused until the first run.
ferry_status xnn_region_bytes(const ferry_model* m, const KernelChoice& choice, size_t* bytes_out);
size_t xnn_temp_floats(const ferry_model* m, const KernelChoice& choice);
ferry_status xnn_create_ops(ferry_session* s, const KernelChoice& choice, uint8_t* region, size_t xnn_bytes,
                            float* temp);

// The backend entry (cpu_backend.cpp), and the one a session made with a
// profiler runs through (Backend::profiled).
extern const Backend kCpuBackend;
extern const Backend kCpuProfiledBackend;

}  // namespace cpu
}  // namespace ferry
