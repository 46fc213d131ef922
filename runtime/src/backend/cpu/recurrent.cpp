// The one recurrent loop of the CPU backend, for every kernel set.
//
// For each (layer k, direction d) of a module, time runs in chunks of steps,
// in the direction's order; a sample past its length keeps its state and
// outputs zeros. Per step, the layer's kernel set does the work in one of
// two strategies (kernels/kernel_set.h):
//
// kPerSample (the reference): per sample, sample_step computes bias + W_ih x
//   + W_hh h, the update and the projection in place in the state; the new h
//   is copied to the output. One chunk spans the whole sequence.
//
// kPanels (the SIMD sets):
//   1. input part of the gates for every (t, b) of the chunk at once,
//        P[t][b] = bias + W_ih x[t][b]             (gemm or XNNPACK)
//      (not for a chunk of one step of one sample, nor of a batch whose set
//      has batch_step: their step kernels compute it, in the same chain)
//   2. per step t:
//        B == 1: one fused kernel per panel group: P row (or, for a lone
//                step, bias + W_ih x itself) + W_hh h, nonlinearities, state
//                (on one thread over large weights, where the set has
//                step_project: the step also computes a share of the next
//                chunk's P into the other gate buffer, so that 1. runs
//                inside the previous chunk's steps for all but the first;
//                a stacked layer's last chunk computes the first chunk's P
//                of the layer above, one direction, so that only the
//                first layer's first P runs alone)
//        B >= 2: gemm P[t] += W_hh h for all rows, then the update per row
//                (a chunk of one step of >= kBatchStepMinRows rows, where
//                the set has batch_step: the whole step, input part
//                included, in that one kernel; LSTM and GRU on f32_avx2
//                and f32_avx512, whose chunks of B >= 64 are one step)
//      then the LSTM projection, and the new h is committed to the state and
//      the output.
//   Every gate is one FMA chain, so chunking, fusing and threading never
//   change a bit: ferry_step gives exactly what ferry_run gives.
//
// On a pool of two or more threads, a one-sample run through a module of
// stacked layers is a wavefront over them (run_wavefront, below): each
// layer's chunks run on one thread, a chunk behind the layer below; through
// a bidirectional module, its two directions run side by side.
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include <string.h>

#include <atomic>

#include "backend/cpu/cpu_backend.h"
#include "platform/threads.h"

namespace ferry {
namespace cpu {
namespace {

using kernels::KernelSet;

bool active(const int32_t* lengths, size_t b, size_t t) {
  return !lengths || t < static_cast<size_t>(lengths[b]);
}

// One (layer k, direction d) being run.
struct CellRun {
  ferry_session* s;
  const Layer* layer;
  const Cell* cell;
  const KernelSet* k;
  int kind;            // kernels::kind_index of the layer's cell kind
  uint32_t ci;         // cell within the layer: k * dirs + d
  uint32_t d;
  const float* in;     // [T][B][in_w]
  uint32_t in_w;
  float* out;          // [T][B][layer.out]
  size_t T, B;
  const int32_t* lengths;
  // kPanels, per layer:
  uint32_t cols;        // floats of a panel-order gate row
  uint32_t panels;      // of the hidden units
  size_t tile;          // panels per thread task
  size_t macs_per_row;  // of the recurrent product
  // One thread does all of this cell's work: the session's pool has one
  // thread, or a wavefront runs the cell on one of its runners (`wave`:
  // then no product of it goes to the pool either).
  bool solo;
  bool wave;
  size_t q_band;  // i8 / i4: the band of the session's quantized rows it uses (gemm_on)
};

// ------------------------------------------------------------ kPerSample --

void per_sample_step(const CellRun& r, size_t t) {
  const Layer& layer = *r.layer;
  for (size_t b = 0; b < r.B; ++b) {
    float* y = r.out + (t * r.B + b) * layer.out + r.d * layer.h_out;
    if (!active(r.lengths, b, t)) {  // past this sample's end: no update, zero output
      memset(y, 0, layer.h_out * sizeof(float));
      continue;
    }
    float* h = state_h(r.s, layer, r.ci, b);
    const kernels::SampleStepArgs a{r.cell,
                                    layer.hidden,
                                    r.in + (t * r.B + b) * r.in_w,
                                    h,
                                    layer.op == Op::kLstm ? state_c(r.s, layer, r.ci, b) : nullptr,
                                    cpu_of(r.s)->scratch,
                                    layer.op == Op::kRnnRelu};
    r.k->sample_step[r.kind](a);
    memcpy(y, h, layer.h_out * sizeof(float));
  }
}

// --------------------------------------------------------------- kPanels --

struct StepTask {
  const KernelSet* k;
  int kind;
  kernels::StepArgs args;
};

void step_panels(void* ctx, size_t begin, size_t end) {
  const StepTask* t = static_cast<const StepTask*>(ctx);
  t->k->step[t->kind](t->args, static_cast<uint32_t>(begin), static_cast<uint32_t>(end));
}

// Whether a one-sample step over these weights alternates its panel order.
bool alternates(const Weight& w_hh, const Weight* w_ih) {
  return w_hh.bytes() + (w_ih ? w_ih->bytes() : 0) >= kAlternateMinBytes;
}

// Batched step: per panel range, the recurrent gemm of every row and the
// updates of the active rows.
struct BatchTask {
  const CellRun* r;
  size_t t;
  float* pre;       // P rows of this step [B][cols]
  float* rec;       // rows the gemm accumulates into: P itself, or (GRU) gates_rec
  const float* h;   // the hidden state before the step: B rows, `ldh` apart
  size_t ldh;
  float* h_new;     // where the update writes the new hidden: B rows, `ldh_new` apart
  size_t ldh_new;
  const float* x;   // the B input rows of step t when the set's batch_step runs the whole step, else null
  // i8 / i4 sets: the B rows of h quantized (null otherwise).
  const int8_t* qh;
  size_t ldqh;
  const float* h_scales;
};

void batch_panels(void* ctx, size_t begin, size_t end) {
  const BatchTask* bt = static_cast<const BatchTask*>(ctx);
  const CellRun& r = *bt->r;
  const Layer& layer = *r.layer;
  const Cell& cell = *r.cell;
  const uint32_t G = layer.gates, cols = r.cols;
  const uint32_t p0 = static_cast<uint32_t>(begin), p1 = static_cast<uint32_t>(end);
  if (bt->x) {  // the whole step in the set's batch_step
    const kernels::BatchStepArgs a{&cell.w_ih,
                                   bt->x,
                                   r.in_w,
                                   cell.bias ? &cell.bias : nullptr,
                                   &cell.w_hh,
                                   bt->h,
                                   bt->ldh,
                                   layer.op == Op::kLstm ? state_c(r.s, layer, r.ci, 0) : nullptr,
                                   layer.hidden,
                                   bt->h_new,
                                   bt->ldh_new,
                                   r.lengths,
                                   bt->t,
                                   layer.hidden,
                                   cell.b_hn ? &cell.b_hn : nullptr};
    r.k->batch_step[r.kind](a, 0, r.B, p0, p1);
    return;
  }
  if (layer.op == Op::kGru) {
    // The recurrent accumulators: r, z continue the input chains; n starts
    // from b_hn (r multiplies it, so it cannot join the input part).
    constexpr uint32_t kN = 2 * layout::kPanel, kRow = 3 * layout::kPanel;  // n slot, panel row (GRU)
    for (size_t b = 0; b < r.B; ++b) {
      const float* pre = bt->pre + b * cols;
      float* rec = bt->rec + b * cols;
      for (uint32_t p = p0; p < p1; ++p) {
        memcpy(rec + p * kRow, pre + p * kRow, kN * sizeof(float));
        if (cell.b_hn) {
          memcpy(rec + p * kRow + kN, cell.b_hn.f32() + p * layout::kPanel, layout::kPanel * sizeof(float));
        } else {
          memset(rec + p * kRow + kN, 0, layout::kPanel * sizeof(float));
        }
      }
    }
  }
  kernels::GemmArgs g{&cell.w_hh, bt->h, bt->ldh, nullptr, bt->rec, bt->rec, cols, cols};
  g.qa = bt->qh;
  g.ldqa = bt->ldqh;
  g.a_scales = bt->h_scales;
  r.k->gemm(g, 0, r.B, p0 * G, p1 * G);
  for (size_t b = 0; b < r.B; ++b) {
    if (!active(r.lengths, b, bt->t)) continue;
    const kernels::UpdateArgs u{bt->rec + b * cols,
                                bt->pre + b * cols,
                                layer.op == Op::kLstm ? state_c(r.s, layer, r.ci, b) : nullptr,
                                bt->h + b * bt->ldh,
                                bt->h_new + b * bt->ldh_new,
                                layer.hidden,
                                layer.op == Op::kRnnRelu};
    r.k->update[r.kind](u, p0, p1);
  }
}

// i8 / i4 sets: the rows a fused step reads, quantized into the first two
// rows of band `q_band` of the session's rows: h (K = h_out), then x (K =
// the cell's input, when the step computes the input part itself).
void quantize_step_inputs(ferry_session* s, const KernelSet* k, const Cell& cell, const Layer& layer,
                          kernels::StepArgs* a, size_t q_band = 0) {
  const size_t row = q_band * cpu_of(s)->q_rows;
  const float* scale = nullptr;
  quantize_activations(s, k, a->h, 1, layer.h_out, layer.h_out, row, &a->qh, &scale);
  a->h_scale = *scale;
  if (a->w_ih) {
    quantize_activations(s, k, a->x, 1, cell.in, cell.in, row + 1, &a->qx, &scale);
    a->x_scale = *scale;
  }
}

// Panels per task: whole groups of the fused kernel's panel count, about two
// tasks per thread.
size_t panel_tile(size_t threads, uint32_t panels, uint32_t group) {
  size_t tile = (panels + 2 * threads - 1) / (2 * threads);
  tile = (tile + group - 1) / group * group;
  return tile ? tile : group;
}

// Step t of the chunk that starts at t_lo, whose input parts are in
// `gates`. `fuse_input`: no projection was computed (a lone step of one
// sample: the fused kernel does it); `first` and `last`: the sequence's
// first and last step in this direction; `share`: a share of the next
// chunk's projection for the step to compute (one sample, one thread), or
// null.
void panel_step(const CellRun& r, size_t t, size_t t_lo, float* gates, bool fuse_input, bool first, bool last,
                const kernels::ProjectShare* share) {
  ferry_session* s = r.s;
  CpuSession* cpu = cpu_of(s);
  const Layer& layer = *r.layer;
  const Cell& cell = *r.cell;
  const KernelSet* k = r.k;
  const size_t B = r.B;
  const uint32_t cols = r.cols, panels = r.panels;
  const size_t tile = r.tile, macs_per_row = r.macs_per_row;
  float* pre = gates + (t - t_lo) * B * cols;
  if (B == 1) {
    float* y = r.out + t * layer.out + r.d * layer.h_out;
    if (!active(r.lengths, 0, t)) {
      memset(y, 0, layer.h_out * sizeof(float));
      return;
    }
    // Without a projection the kernel writes h straight into the output row
    // (it cannot write the state: later panels still read the old h); with
    // one, into h_new for the projection.
    float* h_target = cell.w_hr ? cpu->h_new : y;
    StepTask st;
    st.k = k;
    st.kind = r.kind;
    st.args = kernels::StepArgs{fuse_input ? &cell.w_ih : nullptr,
                                r.in + t * r.in_w,
                                fuse_input ? nullptr : pre,
                                cell.bias ? &cell.bias : nullptr,
                                &cell.w_hh,
                                state_h(s, layer, r.ci, 0),
                                cell.b_hn ? &cell.b_hn : nullptr,
                                layer.op == Op::kLstm ? state_c(s, layer, r.ci, 0) : nullptr,
                                h_target,
                                layer.hidden,
                                layer.op == Op::kRnnRelu};
    if (k->quantize_rows) quantize_step_inputs(s, k, cell, layer, &st.args, r.q_band);
    if (r.solo) {
      // The streaming fast path: no pool, no indirection. Large weights
      // alternate their panel order from one time step to the next (t's
      // parity; any sequence of steps alternates).
      const bool reverse = (t & 1) && alternates(cell.w_hh, st.args.w_ih);
      if (share) {
        k->step_project[r.kind](st.args, *share, panels, reverse);
      } else {
        step_all_panels(k, r.kind, st.args, panels, reverse);
      }
    } else {
      const size_t work = macs_per_row + (fuse_input ? size_t{cols} * cell.in : 0);
      parallel_ranges(cpu->threadpool, panels, tile, work, step_panels, &st);
    }
    if (!cell.w_hr) {
      copy_floats(state_h(s, layer, r.ci, 0), y, layer.h_out);
      return;
    }
  } else {
    // Without lengths every row advances together: the hidden state is read
    // from the previous step's output rows and the update writes the new one
    // straight into this step's (the state is written once, after the last
    // step). With lengths, rows that have ended keep theirs, so h goes
    // through the state.
    const bool direct = !r.lengths && !cell.w_hr;
    const size_t t_prev = r.d == 0 ? t - 1 : t + 1;
    const float* h_old = direct && !first ? r.out + t_prev * B * layer.out + r.d * layer.h_out
                                          : state_h(s, layer, r.ci, 0);
    const size_t ldh = direct && !first ? layer.out : layer.h_out;
    BatchTask bt{&r,
                 t,
                 pre,
                 layer.op == Op::kGru ? cpu->gates_rec : pre,
                 h_old,
                 ldh,
                 direct ? r.out + t * B * layer.out + r.d * layer.h_out : cpu->h_new,
                 direct ? layer.out : layer.hidden,
                 fuse_input ? r.in + t * B * r.in_w : nullptr,
                 nullptr,
                 0,
                 nullptr};
    if (k->quantize_rows) {  // i8 / i4: the B hidden rows quantized once, before the split
      quantize_activations(s, k, h_old, B, ldh, layer.h_out, 0, &bt.qh, &bt.h_scales);
      bt.ldqh = cpu->q_ld;
    }
    const size_t work = B * (macs_per_row + (fuse_input ? size_t{cols} * cell.in : 0));
    parallel_ranges(cpu->threadpool, panels, tile, work, batch_panels, &bt);
    if (direct) {
      if (last) {  // the last step: the state takes the final h
        for (size_t b = 0; b < B; ++b) {
          copy_floats(state_h(s, layer, r.ci, b), r.out + (t * B + b) * layer.out + r.d * layer.h_out,
                      layer.h_out);
        }
      }
      return;
    }
  }
  // Projection (LSTM proj_size), then commit h to the state and y.
  const float* h = cpu->h_new;
  size_t ldh = layer.hidden;
  if (cell.w_hr) {
    const kernels::GemmArgs g{&cell.w_hr, cpu->h_new, layer.hidden, nullptr,
                              nullptr,    cpu->h_proj, layer.h_out, layer.h_out};
    gemm(s, k, g, B, layout::panels_of(layer.h_out));
    h = cpu->h_proj;
    ldh = layer.h_out;
  }
  for (size_t b = 0; b < B; ++b) {
    float* y = r.out + (t * B + b) * layer.out + r.d * layer.h_out;
    if (!active(r.lengths, b, t)) {
      memset(y, 0, layer.h_out * sizeof(float));
      continue;
    }
    copy_floats(state_h(s, layer, r.ci, b), h + b * ldh, layer.h_out);
    copy_floats(y, h + b * ldh, layer.h_out);
  }
}

// The gate buffers of one (layer, direction) running on a kPanels set, from
// one chunk to the next.
struct ChunkLoop {
  float* gates;       // this chunk's input parts
  float* gates_next;  // the next chunk's, while the steps compute them (overlap), or null
  bool overlap;       // the steps compute the next chunk's projection (step_project)
  bool projected;     // `gates` already holds this chunk's input parts
  // The stacked layer above (one direction), whose first chunk's projection
  // the last chunk's steps compute, as they would their own next chunk's:
  // its input rows, this layer's first chunk of outputs, are final by then.
  // Null: none (or it does not overlap: overlaps()).
  const CellRun* above;
};

// The chunk of one (layer, direction) that starts `done` steps into its
// direction: its input projection (unless the chunk before computed it),
// then its steps.
void panel_chunk(const CellRun& r, uint32_t cell_index, ChunkLoop* loop, size_t done) {
  const CpuSession* cpu = cpu_of(r.s);
  const KernelSet* k = r.k;
  const int kind = r.kind;
  const size_t T = r.T, B = r.B, chunk = cpu->chunk_steps, in_w = r.in_w;
  const uint32_t d = r.d;
  // A chunk of one step (a lone step of one sample; a batch of
  // kChunkRows rows or more, or one step of a batch) has no input
  // projection to share between steps: its step kernel computes the
  // input part itself, in the same chain (for a batch of at least
  // kBatchStepMinRows, where the set has batch_step), unless the
  // xnnpack backend is to compute it.
  // A wavefront's layers above the first run in place (below): their
  // steps never read the input row they overwrite.
  const auto fuses_input = [&](size_t n) {
    return n == 1 && (B == 1 || (B >= kBatchStepMinRows && k->batch_step[kind])) &&
           !(cpu->xnn_cell[cell_index] && cpu->xnn_always) && !r.wave;
  };
  const size_t n = T - done < chunk ? T - done : chunk;
  const size_t t_lo = d == 0 ? done : T - done - n;  // the chunk is times [t_lo, t_lo + n)
  const bool fuse_input = fuses_input(n);
  if (!fuse_input && !loop->projected) {  // a wavefront's runner: on its own thread, in its band of rows
    input_projection(r.s, k, cell_index, *r.layer, r.in + t_lo * B * in_w, n * B, loop->gates, r.q_band, !r.wave);
  }
  const size_t left = T - done - n, n_next = left < chunk ? left : chunk;
  bool sharing = loop->overlap && n_next > 0 && !fuses_input(n_next);
  kernels::ProjectShare share{};
  if (sharing) {  // the next chunk is times [t_next, t_next + n_next)
    const size_t t_next = d == 0 ? done + n : left - n_next;
    const Weight* bias = r.cell->bias ? &r.cell->bias : nullptr;
    share = kernels::ProjectShare{&r.cell->w_ih, r.in + t_next * in_w, in_w, bias, loop->gates_next, r.cols,
                                  n_next,        0,                      static_cast<uint32_t>(n)};
  } else if (const CellRun* up = loop->above; up && loop->overlap && left == 0 && done > 0) {
    // The last chunk, not the first (whose steps write the rows read): the
    // layer above's first chunk, times [0, n_up), at least 2 steps (B is 1,
    // so chunk >= 2 once done > 0). A last chunk of one step, its input
    // part fused, computes all of it in that step.
    const size_t n_up = T < chunk ? T : chunk;
    const Weight* bias = up->cell->bias ? &up->cell->bias : nullptr;
    share = kernels::ProjectShare{&up->cell->w_ih, up->in, up->in_w, bias, loop->gates_next, up->cols,
                                  n_up,            0,      static_cast<uint32_t>(n)};
    sharing = true;
  }
  for (size_t i = 0; i < n; ++i) {
    const size_t t = d == 0 ? t_lo + i : t_lo + n - 1 - i;
    share.share = static_cast<uint32_t>(i);
    panel_step(r, t, t_lo, loop->gates, fuse_input, i == 0 && done == 0, done + i + 1 == T, sharing ? &share : nullptr);
  }
  loop->projected = sharing;
  if (sharing) {
    float* g = loop->gates;
    loop->gates = loop->gates_next;
    loop->gates_next = g;
  }
}

// Whether the steps of `r` compute each next chunk's projection, with
// `gates_next` as the second buffer: one sample on one thread over large
// weights (project_overlaps), and every step runs (no length ends the
// sample early).
bool overlaps(const CellRun& r, uint32_t cell_index, const float* gates_next) {
  return gates_next && r.B == 1 && !r.lengths && r.solo &&
         project_overlaps(r.k, r.kind, *r.cell, cpu_of(r.s)->xnn_cell[cell_index]);
}

// The chunks of one (layer, direction) on a kPanels set, in its direction.
// `loop` carries the gate buffers from the layer below (`projected`: its
// last chunk computed this layer's first projection) to the layer above.
void panel_chunks(const CellRun& r, uint32_t cell_index, ChunkLoop* loop) {
  CpuSession* cpu = cpu_of(r.s);
  loop->overlap = overlaps(r, cell_index, cpu->gates_next);
  for (size_t done = 0; done < r.T; done += cpu->chunk_steps) panel_chunk(r, cell_index, loop, done);
}

// ------------------------------------------------------------ wavefront --
//
// A one-sample run of a module of two or more layers, or of two directions,
// on a pool of two or more threads (layer_wavefronts): each runner (a thread
// of the pool) takes the next cell (layer k, direction d) not yet taken, in
// order, and runs all its chunks on its own, each with its weights in its
// own core's cache; the runners meet once per chunk or once per layer
// instead of once per step (as splitting a step's panels between threads
// does).
//   One direction (stacked layers): layer k runs chunk c as soon as layer
//   k-1 has finished chunk c (c + 1 when the steps also project the next
//   chunk), so that layer 2 runs while layer 1 runs.
//   Two directions: the forward and backward cells of a layer run side by
//   side; a layer's cells start once both cells of the layer below have
//   finished (its backward cell's first step needs the last output of the
//   layer below).
// (The rule is wave_wait, cpu_backend.h.) Cells are taken in order and each
// waits only on cells of the layer below, which runners have already taken:
// no runner can wait on one that waits on it, whatever number of threads the
// pool really gives. The same kernels run on the same chunks as on one
// thread: the same bits.
//
// Buffers, one direction: layer 0 reads `in` and writes `out`; each layer
// above works in place in `out` (rows of the module's width). A chunk's rows
// pass from layer to layer: layer k touches them only once layer k-1 has
// finished that chunk (and the next, when layer k projects in its steps),
// and layer k+1 only once layer k has. Within a layer, a chunk's input rows
// are all projected before its steps write the first of them, and a
// wavefront never fuses the input part into a step (which would read x_t
// while writing h_t). Two directions: layers ping-pong between `out` and
// `in` as on one thread (layer k writes `out` for even k), each cell its
// half of every row; a layer overwrites its input's input only once the
// whole layer below, which read it, has finished.

struct Wave {
  ferry_session* s;
  const Layer* layer;
  const KernelSet* k;
  int kind;
  float* in;
  float* out;
  size_t T;
  const int32_t* lengths;
  size_t chunks;
  size_t runner_floats;  // of one runner's gate rows (each buffer)
  std::atomic<uint32_t> next_runner;
  std::atomic<uint32_t> next_cell;
  std::atomic<size_t> done[kMaxCells];  // chunks finished per cell of the module
};

void wait_until(const std::atomic<size_t>& done, size_t need) {
  for (unsigned spins = 0; done.load(std::memory_order_acquire) < need; ++spins) {
    if (spins < 2048) {
      cpu_relax();
    } else {
      yield_thread();
    }
  }
}

// The buffer layer `kl` of a wavefront writes (two directions: as
// run_recurrent's ping-pong; one direction: `out` throughout).
float* wave_output(const Wave* w, uint32_t kl) {
  return w->layer->dirs == 1 || kl % 2 == 0 ? w->out : w->in;
}

void wave_runner(void* ctx, size_t begin, size_t end) {
  Wave* w = static_cast<Wave*>(ctx);
  const CpuSession* cpu = cpu_of(w->s);
  const Layer& layer = *w->layer;
  const uint32_t dirs = layer.dirs, cells = layer.num_layers * dirs;
  const uint32_t cols = layout::gate_row_floats(layer.gates, layer.hidden);
  const uint32_t panels = layout::panels_of(layer.hidden);
  for (size_t item = begin; item < end; ++item) {
    const uint32_t slot = w->next_runner.fetch_add(1, std::memory_order_relaxed);
    float* gates = cpu->wave_gates + size_t{slot} * (cpu->wave_overlap ? 2 : 1) * w->runner_floats;
    float* gates_next = cpu->wave_overlap ? gates + w->runner_floats : nullptr;
    for (;;) {
      const uint32_t ci = w->next_cell.fetch_add(1, std::memory_order_relaxed);
      if (ci >= cells) break;
      const uint32_t kl = ci / dirs, d = ci % dirs;
      const uint32_t cell_index = layer.first_cell + ci;
      const float* in = kl == 0 ? w->in : wave_output(w, kl - 1);
      const CellRun r{w->s,      &layer,          &w->s->model->cells[cell_index],
                      w->k,      w->kind,         ci,
                      d,         in,              kl == 0 ? layer.in : layer.out,
                      wave_output(w, kl), w->T,
                      1,         w->lengths,      cols,
                      panels,    panels,          size_t{cols} * layer.h_out,
                      true,      true,            slot};
      ChunkLoop loop{gates, gates_next, overlaps(r, cell_index, gates_next), false, nullptr};
      for (size_t c = 0; c < w->chunks; ++c) {
        const WaveWait wait = wave_wait(layer, ci, c, w->chunks, loop.overlap);
        for (uint32_t below = wait.first; below < wait.first + wait.count; ++below) {
          wait_until(w->done[below], wait.need);
        }
        panel_chunk(r, cell_index, &loop, c * cpu->chunk_steps);
        w->done[ci].store(c + 1, std::memory_order_release);
      }
    }
  }
}

// Whether a run of `layer` (T steps, B samples) is a wavefront.
bool wavefront(const ferry_session* s, const Layer& layer, const KernelSet* k, size_t T, size_t B) {
  const CpuSession* cpu = cpu_of(s);
  return cpu->wave_runners >= 2 && B == 1 && wave_pays(layer, T, cpu->chunk_steps) &&
         layer_wavefronts(s->model, k, layer, cpu->xnn_cell[layer.first_cell] != nullptr);
}

float* run_wavefront(ferry_session* s, const Layer& layer, const KernelSet* k, float* in, float* out, size_t T,
                     const int32_t* lengths) {
  CpuSession* cpu = cpu_of(s);
  Wave w;
  w.s = s;
  w.layer = &layer;
  w.k = k;
  w.kind = kernels::kind_index(cell_kind(layer.op));
  w.in = in;
  w.out = out;
  w.T = T;
  w.lengths = lengths;
  w.chunks = (T + cpu->chunk_steps - 1) / cpu->chunk_steps;
  w.runner_floats = cpu->chunk_steps * size_t{layout::gate_row_floats(layer.gates, layer.hidden)};
  w.next_runner.store(0, std::memory_order_relaxed);
  w.next_cell.store(0, std::memory_order_relaxed);
  const uint32_t cells = layer.num_layers * layer.dirs;
  for (uint32_t ci = 0; ci < cells; ++ci) w.done[ci].store(0, std::memory_order_relaxed);
  const uint32_t side_by_side = wave_width(layer);
  const uint32_t runners = side_by_side < cpu->wave_runners ? side_by_side : cpu->wave_runners;
  size_t work = 0;  // multiply-adds of the whole run: below the pool's threshold, one runner takes every cell
  for (uint32_t ci = 0; ci < cells; ++ci) {
    const Cell& cell = s->model->cells[layer.first_cell + ci];
    work += T * (cell.w_ih.rows() * size_t{cell.w_ih.cols} + cell.w_hh.rows() * size_t{cell.w_hh.cols});
  }
  parallel_ranges(cpu->threadpool, runners, 1, work, wave_runner, &w);
  return wave_output(&w, layer.num_layers - 1);
}

// A lone step (T == 1, B == 1) of a layer whose cells were prepared: per
// cell, lone_cell_step; multi-layer modules ping-pong between the buffers.
float* lone_step(ferry_session* s, const Layer& layer, float* in, float* out) {
  for (uint32_t kl = 0; kl < layer.num_layers; ++kl) {
    lone_cell_step(s, layer, layer.first_cell + kl, in, out);
    if (kl + 1 < layer.num_layers) {
      float* t = in;
      in = out;
      out = t;
    }
  }
  return out;
}

}  // namespace

void lone_cell_step(ferry_session* s, const Layer& layer, uint32_t cell_index, const float* x, float* y) {
  CpuSession* cpu = cpu_of(s);
  LoneStep& ls = cpu->lone[cell_index];  // a session runs one call at a time: its arguments are ours
  const Cell& cell = s->model->cells[cell_index];
  ls.args.x = x;
  ls.args.h_new = cell.w_hr ? cpu->h_new : y;
  if (ls.k->quantize_rows) quantize_step_inputs(s, ls.k, cell, layer, &ls.args);
  if (cpu->threads == 1) {
    lone_panels(&ls);
  } else {
    StepTask st{ls.k, ls.kind, ls.args};
    parallel_ranges(cpu->threadpool, ls.panels, ls.tile, ls.work, step_panels, &st);
  }
  if (cell.w_hr) {
    const kernels::GemmArgs g{&cell.w_hr, cpu->h_new, layer.hidden, nullptr, nullptr, cpu->h_proj, layer.h_out,
                              layer.h_out};
    gemm(s, ls.k, g, 1, layout::panels_of(layer.h_out));
    copy_floats(y, cpu->h_proj, layer.h_out);
  }
  copy_floats(ls.h, y, layer.h_out);
}

void prepare_lone_steps(ferry_session* s, const KernelChoice& choice) {
  const ferry_model* m = s->model;
  CpuSession* cpu = cpu_of(s);
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& layer = m->layers[li];
    if (!op_is_recurrent(layer.op)) continue;
    const KernelSet* k = choice.kernels.layer(li);
    const bool panels = k->strategy == kernels::StepStrategy::kPanels;
    const int kind = kernels::kind_index(cell_kind(layer.op));
    const uint32_t cols = layout::gate_row_floats(layer.gates, layer.hidden);
    const uint32_t n_panels = layout::panels_of(layer.hidden);
    for (uint32_t c = 0; c < layer.num_layers * layer.dirs; ++c) {
      const uint32_t ci = layer.first_cell + c;
      const Cell& cell = m->cells[ci];
      LoneStep& ls = cpu->lone[ci];
      ls = LoneStep();
      // The general path computes a lone step's input part on XNNPACK when
      // the xnnpack backend chose it: that cell keeps the general path.
      if (!panels || (choice.xnn_cell[ci] && choice.xnn_always)) continue;
      ls.k = k;
      ls.kind = kind;
      ls.panels = n_panels;
      ls.tile = cpu->threads > 1 ? panel_tile(cpu->threads, n_panels, k->step_group[kind]) : n_panels;
      ls.work = size_t{cols} * layer.h_out + size_t{cols} * cell.in;
      ls.h = state_h(s, layer, c, 0);
      ls.alternate = alternates(cell.w_hh, &cell.w_ih);
      ls.reverse = false;
      ls.args = kernels::StepArgs{&cell.w_ih,
                                  nullptr,
                                  nullptr,
                                  cell.bias ? &cell.bias : nullptr,
                                  &cell.w_hh,
                                  ls.h,
                                  cell.b_hn ? &cell.b_hn : nullptr,
                                  layer.op == Op::kLstm ? state_c(s, layer, c, 0) : nullptr,
                                  nullptr,
                                  layer.hidden,
                                  layer.op == Op::kRnnRelu};
    }
  }
}

float* run_recurrent(ferry_session* s, uint32_t layer_index, float* in, float* out, size_t T, size_t B,
                     const int32_t* lengths) {
  const ferry_model* m = s->model;
  CpuSession* cpu = cpu_of(s);
  const Layer& layer = m->layers[layer_index];
  if (T == 1 && B == 1 && cpu->lone && cpu->lone[layer.first_cell].k) return lone_step(s, layer, in, out);
  const KernelSet* k = cpu->kernels.layer(layer_index);
  if (wavefront(s, layer, k, T, B)) return run_wavefront(s, layer, k, in, out, T, lengths);
  const bool panels = k->strategy == kernels::StepStrategy::kPanels;
  const int kind = kernels::kind_index(cell_kind(layer.op));
  const uint32_t cols = layout::gate_row_floats(layer.gates, layer.hidden);
  const uint32_t n_panels = layout::panels_of(layer.hidden);
  const size_t tile = cpu->threads > 1 ? panel_tile(cpu->threads, n_panels, k->step_group[kind]) : n_panels;
  const auto cell_run = [&](uint32_t kl, uint32_t d, const float* x, float* y) {
    const uint32_t ci = kl * layer.dirs + d;
    return CellRun{s,         &layer, &m->cells[layer.first_cell + ci], k,     kind,     ci,   d,
                   x,         kl == 0 ? layer.in : layer.out,           y,     T,        B,    lengths,
                   cols,      n_panels, tile,                           size_t{cols} * layer.h_out,
                   cpu->threads == 1, false, 0};
  };
  ChunkLoop loop{cpu->gates, cpu->gates_next, false, false, nullptr};
  for (uint32_t kl = 0; kl < layer.num_layers; ++kl) {
    for (uint32_t d = 0; d < layer.dirs; ++d) {
      const uint32_t cell_index = layer.first_cell + kl * layer.dirs + d;
      const CellRun r = cell_run(kl, d, in, out);
      if (panels) {
        // One direction: the layer above reads this one's output rows
        // (and writes over this one's input rows, `in`).
        CellRun up{};
        loop.above = nullptr;
        if (layer.dirs == 1 && kl + 1 < layer.num_layers) {
          up = cell_run(kl + 1, 0, out, in);
          if (overlaps(up, cell_index + 1, cpu->gates_next)) loop.above = &up;
        }
        panel_chunks(r, cell_index, &loop);
      } else {  // kPerSample: the whole sequence is one chunk
        for (size_t i = 0; i < T; ++i) per_sample_step(r, d == 0 ? i : T - 1 - i);
      }
    }
    if (kl + 1 < layer.num_layers) {
      float* t = in;
      in = out;
      out = t;
    }
  }
  return out;
}

}  // namespace cpu
}  // namespace ferry
