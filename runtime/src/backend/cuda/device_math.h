// What the CUDA backend's kernels compute, written once for the device
// (kernels.cu, compiled by nvcc) and the host (the CPU emulation of the
// kernels in tests/unit/test_cuda_host.cpp, compiled by the C++ compiler):
// the structs the host fills for the kernels, the weight indexing, the
// fixed-order dot products and the cell updates.
//
// The device reads the model's weights as the converter stored them
// (Panel8 and its quantized forms, shared/weight_layout.h; the readers of
// device_weights.h): uploaded in one piece, never repacked. The chain's
// other ops (conv, norms, activations, pooling, ...) are device_ops.h.
// Panel8 suits a warp: for a fixed column k, the 8 units x G gates of a
// panel are contiguous, so lane l of a warp takes Panel8 "vector"
// q = 4w + l/8 (gate q % G of panel q / G), unit lane j = l % 8, and each
// load of a warp is one 128-byte line for LSTM (G = 4: one panel per warp).
//
// Numeric contract (the reason this file exists): every output of a matrix
// product is one fmaf chain over its columns in ascending order, split into
// a number of column ranges that depends only on the width K
// (k_splits_for), the partial sums added left to right; the bias (or the
// recurrent initial value) is added last. (f16: the same on the exactly
// converted weights; int8 / int4: device_weights.h, whose readers give
// every weight type's chain and its finish.) Which thread, block, kernel or
// launch strategy computes an output never changes a bit of it, so
// ferry_step equals ferry_run bit for bit, and the persistent kernel equals
// the CUDA Graph replay. The kernels are compiled with --fmad=false: the
// only fused multiply-adds are the explicit fmaf calls below.
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/device_weights.h"  // FERRY_HD, Panel8 indexing, the weight readers

// A load of data other blocks of the same kernel wrote (the state between
// the steps of the persistent kernel): from L2, never a stale L1 line.
#if defined(__CUDA_ARCH__)
#define FERRY_LOAD_L2(ptr) __ldcg(ptr)
#else
#define FERRY_LOAD_L2(ptr) (*(ptr))
#endif

namespace ferry {
namespace cuda {

// Threads of every block (8 warps).
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// Panel8 vectors one warp item covers (4 vectors x 8 lanes = 32 lanes).
constexpr int kVectorsPerWarp = 4;
// Samples one warp item carries in registers (each its own chain).
constexpr int kBatchGroup = 4;
// Capacity of the per-call descriptor (equal to ferry::kMaxCells, checked).
constexpr int kDescCells = 128;
// Steps one replay of a cell's multi-step CUDA Graph runs.
constexpr int kGraphSteps = 16;
// Shared memory a non-persistent kernel may use without opting in.
constexpr size_t kStepSharedBytes = 48 * 1024;

// The recurrent ops, as the kernels number them.
enum CellOp : int32_t { kCellLstm = 0, kCellGru = 1, kCellRnnTanh = 2, kCellRnnRelu = 3 };

// What changes from call to call, in one block the host writes before the
// kernels run: on the copy path it is copied to the device with the input in
// one transfer; on the zero-copy path the kernels read it in the host's
// mapped memory. `batch` int32 lengths follow the struct when has_lengths.
struct CallDesc {
  int32_t batch;
  int32_t has_lengths;
  int32_t reserved[2];
  int32_t steps[kDescCells];   // time steps each cell runs in this call
  int32_t parity[kDescCells];  // which of its two h buffers holds a cell's state
};

FERRY_HD const int32_t* desc_lengths(const CallDesc* d) {
  return d->has_lengths ? reinterpret_cast<const int32_t*>(d + 1) : nullptr;
}

// ------------------------------------------------------------ Panel8 ----

// Column of gate g of unit u in a panel-order gate row.
FERRY_HD uint32_t gate_column(uint32_t G, uint32_t g, uint32_t u) { return ((u / 8u) * G + g) * 8u + u % 8u; }

// Column ranges of a product over K columns: 1, 2, 4 or 8, from K alone.
FERRY_HD uint32_t k_splits_for(uint32_t K) {
  return K >= 1024u ? 8u : K >= 512u ? 4u : K >= 256u ? 2u : 1u;
}
FERRY_HD uint32_t k_chunk_for(uint32_t K) {
  const uint32_t s = k_splits_for(K);
  return (K + s - 1u) / s;
}

// The panels [p0, p1) of `panels` that block `block` owns, `per_block` each.
FERRY_HD void block_range(uint32_t block, uint32_t per_block, uint32_t panels, uint32_t* p0, uint32_t* p1) {
  const uint32_t begin = block * per_block;
  *p0 = begin < panels ? begin : panels;
  *p1 = begin + per_block < panels ? begin + per_block : panels;
}

// --------------------------------------------------------- cell update --

FERRY_HD float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

// The new hidden value of one unit of one sample (PyTorch's equations, as
// kernels/reference/reference.cpp writes them) from its gates' complete
// pre-activations a[g] = bias + W_ih x + W_hh h (each product's finish():
// the input part is the recurrent product's init), except GRU's n gate,
// whose parts stay apart: n = tanh(n_x + r * a[2]) with n_x = b_in + W_in x
// and a[2] = b_hn + W_hn h; h' = (1 - z) n + z h. LSTM gates i, f, g, o; `c`
// is updated in place. RNN: tanh or relu of a[0].
FERRY_HD float cell_update(int32_t op, const float* a, float n_x, float h_prev, float* c) {
  switch (op) {
    case kCellLstm: {
      const float i = sigmoid_f(a[0]);
      const float f = sigmoid_f(a[1]);
      const float g = tanhf(a[2]);
      const float o = sigmoid_f(a[3]);
      const float c_new = f * *c + i * g;
      *c = c_new;
      return o * tanhf(c_new);
    }
    case kCellGru: {
      const float rr = sigmoid_f(a[0]);
      const float z = sigmoid_f(a[1]);
      const float n = tanhf(n_x + rr * a[2]);
      return (1.0f - z) * n + z * h_prev;
    }
    case kCellRnnRelu: {
      const float v = a[0];
      return v < 0.0f ? 0.0f : v;  // NaN stays NaN
    }
    default:
      return tanhf(a[0]);
  }
}

// ------------------------------------------------ what kernels receive --

// One (layer, direction) cell of a recurrent module. Fixed at session init
// (a CUDA Graph captures it by value); what changes per call is read from
// `desc`: batch, lengths, this cell's steps and the parity of its state.
//
// Step i of a call (time t = i forward, T-1-i reverse) reads h from
// h[(parity + i) & 1] and writes h[(parity + i + 1) & 1]; so the state
// never moves, the host only flips its parity. Phase A: gates of the units
// of a block's panels, the update, h (or h_full before a projection) and the
// output row. Phase B (LSTM proj_size): h = W_hr h_full. A sample past its
// length keeps its state and outputs zeros.
struct RecurrentParams {
  int32_t op;      // CellOp
  int32_t gates;   // G
  int32_t hidden;  // H
  int32_t h_out;   // P: proj_size or H; also the width of W_hh's columns
  int32_t cols;    // floats of a panel-order gate row: G * 8 * panels_of(H)
  int32_t dir;     // 0 forward, 1 reverse
  int32_t cell;    // index into desc->steps / parity
  int32_t panels_per_block;       // phase A: hidden panels per block
  int32_t batch_tile;             // phase A: samples staged per pass
  int32_t proj_panels_per_block;  // phase B: projection panels per block
  int32_t proj_batch_tile;
  int32_t batch_slices;  // phase A: the batch split over this many groups of blocks (1: not split)
  int32_t y_stride;  // floats between output rows (the module's width)
  int32_t y_offset;  // this direction's first column
  DeviceWeight w_hh;   // [G*H, P] in the cell's dtype
  const float* b_hn;   // GRU [H] (Panel8 of G = 1: natural order), or null
  DeviceWeight w_hr;   // [P, H] in the cell's dtype, or data null
  const float* xproj;  // [T][B][cols]: bias + W_ih x, panel order
  float* h[2];         // [max_batch][P] each
  float* c;            // LSTM [max_batch][H], else null
  float* h_full;       // projection: [max_batch][H]
  float* y;            // [T][B][y_stride]
  int32_t* counter;    // [0] next step, [1] blocks done (CUDA Graph replay)
  const CallDesc* desc;
};

// Phase A's share of block `block`: hidden panels [p0, p1) and samples
// [b0, b1) of a call of `batch` samples. Blocks are panel groups within a
// batch slice (block = slice * panel_groups + group); the slices are
// contiguous, ceil(batch / slices) samples each. Which block computes a
// sample changes nothing in how it is computed, so any slicing gives the
// same bits.
FERRY_HD void phase_a_share(const RecurrentParams& p, uint32_t block, int32_t batch, uint32_t* p0, uint32_t* p1,
                            int32_t* b0, int32_t* b1) {
  const uint32_t panels = panels_of(static_cast<uint32_t>(p.hidden));
  const uint32_t per = static_cast<uint32_t>(p.panels_per_block);
  const uint32_t panel_groups = (panels + per - 1) / per;
  const int32_t slices = p.batch_slices > 1 ? p.batch_slices : 1;
  const uint32_t slice = block / panel_groups;
  block_range(block % panel_groups, per, panels, p0, p1);
  const int32_t per_slice = (batch + slices - 1) / slices;
  const int32_t begin = static_cast<int32_t>(slice) * per_slice;
  *b0 = slice < static_cast<uint32_t>(slices) && begin < batch ? begin : batch;
  *b1 = *b0 + per_slice < batch ? *b0 + per_slice : batch;
}

// What one call tells a cell (its CallDesc entries).
struct CallView {
  int32_t batch, steps, parity;
  const int32_t* lengths;  // null: every sample runs every step
};

FERRY_HD CallView read_call(const RecurrentParams& p) {
  const CallDesc* d = p.desc;
  CallView v;
  v.batch = d->batch;
  v.steps = d->steps[p.cell];
  v.parity = d->parity[p.cell];
  v.lengths = desc_lengths(d);
  return v;
}

// Step i of a call: time t, the h buffer read and the one written.
struct StepView {
  int32_t t;
  const float* h_prev;
  float* h_next;
};

FERRY_HD StepView step_view(const RecurrentParams& p, const CallView& call, int32_t i) {
  const int32_t cur = (call.parity + i) & 1;
  StepView v;
  v.t = p.dir == 0 ? i : call.steps - 1 - i;
  v.h_prev = cur ? p.h[1] : p.h[0];
  v.h_next = cur ? p.h[0] : p.h[1];
  return v;
}

// Shared memory of one pass of phase A or B: `tile` staged input rows of K
// floats (h, or h_full before a projection), for int8 / int4 their
// scales and quantized bytes (quantize_row, or the same bytes computed in
// parallel), and the partial products [splits][tile][outs] (float, or
// int32 for int8: 4 bytes either way). Offsets in bytes, 16-aligned.
struct PhaseShared {
  size_t scales, q, part, bytes;
  uint32_t ldq;
};

FERRY_HD size_t align16(size_t n) { return (n + 15u) / 16u * 16u; }

FERRY_HD PhaseShared phase_shared(int32_t type, uint32_t K, uint32_t tile, uint32_t outs) {
  PhaseShared s;
  s.ldq = activation_row_bytes(type, K);
  s.scales = align16(size_t{tile} * K * 4u);
  s.q = align16(s.scales + (s.ldq ? size_t{tile} * 4u : 0u));
  s.part = align16(s.q + size_t{tile} * s.ldq);
  s.bytes = s.part + size_t{k_splits_for(K)} * tile * outs * 4u;
  return s;
}

// Bytes per staged sample of a pass (what a tile costs, padding aside).
FERRY_HD size_t phase_sample_bytes(int32_t type, uint32_t K, uint32_t outs) {
  const uint32_t ldq = activation_row_bytes(type, K);
  return size_t{K} * 4u + (ldq ? ldq + 4u : 0u) + size_t{k_splits_for(K)} * outs * 4u;
}

// Phase A / phase B shared memory for a block of `panels` panels.
FERRY_HD size_t phase_a_bytes(int32_t type, uint32_t G, uint32_t P, uint32_t panels, uint32_t tile) {
  return phase_shared(type, P, tile, panels * G * 8u).bytes;
}
FERRY_HD size_t phase_b_bytes(int32_t type, uint32_t H, uint32_t panels, uint32_t tile) {
  return phase_shared(type, H, tile, panels * 8u).bytes;
}

// The sum of the column splits of output `row` of staged sample bb, left to
// right (integers for int8: exact): part is [splits][tile][rows].
template <class R>
FERRY_HD typename R::Partial sum_splits(const typename R::Partial* part, int32_t splits, int32_t tile, int32_t rows,
                                        int32_t bb, int32_t row) {
  typename R::Partial r = part[static_cast<size_t>(bb) * rows + row];
  for (int32_t s = 1; s < splits; ++s) r += part[(static_cast<size_t>(s) * tile + bb) * rows + row];
  return r;
}

// Phase A's update of one unit (ul, within the block whose W_hh panels
// start at `w`, the first being panel p0) of one sample (b; staged as bb:
// hs [tile][P], its quantization scale h_scale, part [splits][tile][block
// rows]): gates = xproj + W_hh h (the product's finish() with the input
// part as init; GRU's n from b_hn), the cell update, and h (or h_full
// before a projection) and the output. A sample past its length keeps its
// state and outputs zeros (with a projection, phase B does both).
template <class R>
FERRY_HD void phase_a_unit(const RecurrentParams& p, const DeviceWeight& w, const CallView& call, const StepView& sv,
                           int32_t p0, int32_t tile, int32_t rows, const float* hs, float h_scale,
                           const typename R::Partial* part, int32_t bb, int32_t b, int32_t ul) {
  const int32_t G = p.gates, H = p.hidden, P = p.h_out, B = call.batch;
  const int32_t u = p0 * 8 + ul;
  if (u >= H) return;  // a padding unit of the last panel
  const bool projection = p.w_hr.data != nullptr;
  float* y = p.y + (static_cast<size_t>(sv.t) * B + b) * p.y_stride + p.y_offset;
  if (call.lengths && sv.t >= call.lengths[b]) {
    if (!projection) {
      sv.h_next[static_cast<size_t>(b) * P + u] = hs[static_cast<size_t>(bb) * P + u];
      y[u] = 0.0f;
    }
    return;
  }
  const int32_t splits = static_cast<int32_t>(k_splits_for(static_cast<uint32_t>(P)));
  const float* xrow = p.xproj + (static_cast<size_t>(sv.t) * B + b) * p.cols;
  float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float n_x = 0.0f;
  for (int32_t g = 0; g < G; ++g) {
    const uint32_t local = gate_column(static_cast<uint32_t>(G), static_cast<uint32_t>(g), static_cast<uint32_t>(ul));
    const typename R::Partial total = sum_splits<R>(part, splits, tile, rows, bb, static_cast<int32_t>(local));
    const float x = xrow[gate_column(static_cast<uint32_t>(G), static_cast<uint32_t>(g), static_cast<uint32_t>(u))];
    const bool gru_n = p.op == kCellGru && g == 2;
    const float init = gru_n ? (p.b_hn ? p.b_hn[u] : 0.0f) : x;
    if (gru_n) n_x = x;
    a[g] = R::finish(R::lane(w, local / 8u, local % 8u), total, h_scale, init);
  }
  float c_unused = 0.0f;
  float* c = p.c ? p.c + static_cast<size_t>(b) * H + u : &c_unused;
  const float h_old = projection ? 0.0f : hs[static_cast<size_t>(bb) * P + u];
  const float h = cell_update(p.op, a, n_x, h_old, c);
  if (projection) {
    p.h_full[static_cast<size_t>(b) * H + u] = h;
  } else {
    sv.h_next[static_cast<size_t>(b) * P + u] = h;
    y[u] = h;
  }
}

// Phase B's result for one projection row (row, within the block whose
// W_hr panels start at `w`, the first being projection panel q0) of one
// sample: h = W_hr h_full (finish() with init -0, which adds nothing), into
// the state and the output.
template <class R>
FERRY_HD void phase_b_row(const RecurrentParams& p, const DeviceWeight& w, const CallView& call, const StepView& sv,
                          int32_t q0, int32_t tile, int32_t rows, float h_scale, const typename R::Partial* part,
                          int32_t bb, int32_t b, int32_t row) {
  const int32_t P = p.h_out, B = call.batch;
  const int32_t o = q0 * 8 + row;
  if (o >= P) return;
  float* y = p.y + (static_cast<size_t>(sv.t) * B + b) * p.y_stride + p.y_offset;
  const size_t at = static_cast<size_t>(b) * P + o;
  if (call.lengths && sv.t >= call.lengths[b]) {
    sv.h_next[at] = FERRY_LOAD_L2(sv.h_prev + at);
    y[o] = 0.0f;
    return;
  }
  const int32_t splits = static_cast<int32_t>(k_splits_for(static_cast<uint32_t>(p.hidden)));
  const typename R::Partial total = sum_splits<R>(part, splits, tile, rows, bb, row);
  const float h = R::finish(R::lane(w, static_cast<uint32_t>(row) / 8u, static_cast<uint32_t>(row) % 8u), total,
                            h_scale, -0.0f);
  sv.h_next[at] = h;
  y[o] = h;
}

// The counter protocol of a step replayed from a graph: every block reads
// the step from counter[0] when it starts; the last block of the step's
// last kernel to finish advances it (to 0 after the call's last step).
FERRY_HD int32_t next_step(int32_t step, int32_t steps) { return step + 1 == steps ? 0 : step + 1; }

}  // namespace cuda
}  // namespace ferry
