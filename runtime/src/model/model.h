// Internal view of a verified model: plain structs with pointers into the
// caller's model bytes. Built once by ferry_model_load (model/loader.cpp)
// after the FlatBuffers verifier and ferry's own range checks; backends and
// kernels read only this. Every weight is a Weight (model/weight.h): data,
// dtype, layout and scales travel together from the loader to the kernel.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <algorithm>

#include "ferry/ferry.h"
#include "model/weight.h"

namespace ferry {

// Fixed capacities keep the handle a fixed size (placeable in caller memory).
// FERRY_MAX_CHAIN and FERRY_MAX_CELLS (ferry/ferry_sizes.h: 64 and 128 unless
// the build says otherwise) size it; a model beyond them is refused at load.
constexpr uint32_t kMaxChain = FERRY_MAX_CHAIN;  // elements of the chain
constexpr uint32_t kMaxCells = FERRY_MAX_CELLS;  // (layer, direction) pairs, all modules
static_assert(kMaxChain >= 1 && kMaxChain <= 255 && kMaxCells >= 1, "FERRY_MAX_CHAIN 1..255, FERRY_MAX_CELLS >= 1");
constexpr uint32_t kMaxFeatures = 1u << 20;  // any one feature width

enum class Op : uint8_t {
  kLstm,
  kGru,
  kRnnTanh,
  kRnnRelu,
  kLinear,
  kLast,
  kRelu,
  kTanh,
  kSigmoid,
  kSoftmax,
  kIdentity,
  // format 1.2
  kConv1d,
  kBatchNorm,
  kLayerNorm,
  kPRelu,
  kLeakyRelu,
  kElu,
  kGelu,
  kSilu,
  kHardtanh,
  kLogSoftmax,
  kMeanPool,
  kMaxPool,
  kEmbedding,
  kSave,
  kAdd,
};

// Values of the schema's PaddingMode.
enum class PaddingMode : uint8_t { kZeros, kReflect, kReplicate };

// Residual slots (Save / Add) one model may hold at once.
constexpr uint32_t kMaxSlots = 4;

inline bool op_is_recurrent(Op op) { return op <= Op::kRnnRelu; }
// Layers whose weights a kernel set's GEMM reads (the SIMD sets need them Panel8).
inline bool op_has_weights(Op op) { return op_is_recurrent(op) || op == Op::kLinear || op == Op::kConv1d; }
// Layers that turn [T,B,F] into [B,F].
inline bool op_collapses_time(Op op) { return op == Op::kLast || op == Op::kMeanPool || op == Op::kMaxPool; }

// The cell kind of a recurrent op (its gate count: layout::gate_count).
inline layout::CellKind cell_kind(Op op) {
  return op == Op::kLstm ? layout::CellKind::kLstm : op == Op::kGru ? layout::CellKind::kGru : layout::CellKind::kRnn;
}

// One (layer k, direction d) of a recurrent module.
struct Cell {
  Weight w_ih;   // [G*H, in]
  Weight w_hh;   // [G*H, h_out]
  Weight bias;   // [G*H] folded, or absent (bias=False)
  Weight b_hn;   // GRU: [H], or absent
  Weight w_hr;   // LSTM projection [P, H], or absent
  uint32_t in = 0;  // input features of this layer
};

struct Layer {
  Op op = Op::kIdentity;
  uint32_t in = 0;   // features in
  uint32_t out = 0;  // features out
  // Recurrent modules.
  uint32_t hidden = 0;      // H
  uint32_t h_out = 0;       // proj_size or H
  uint32_t gates = 0;       // 4 LSTM, 3 GRU, 1 RNN
  uint32_t num_layers = 0;
  uint32_t dirs = 0;        // 1 or 2
  uint32_t first_cell = 0;  // cells[first_cell + k * dirs + d]
  // Floats of state per batch sample: h [L*D][H_out] (+ c [L*D][H] for LSTM);
  // a causal Conv1d: its last (kernel-1)*dilation inputs [steps][in]; a
  // pooling layer: the running sum (mean) or maximum [F], then the count.
  uint32_t state_floats = 0;
  uint32_t state_offset = 0;  // within the per-sample state of the model
  // Linear [out, in] / Conv1d (below) / BatchNorm scale [F] / LayerNorm,
  // PReLU weight [F] or [1] / Embedding [num, dim].
  Weight weight;
  Weight bias;    // [out] or absent; BatchNorm shift [F]
  // Conv1d: `groups` matrices [out/groups, (in/groups)*kernel] (Weight::units,
  // ::cols) stored one after the other, `group_stride` elements apart.
  // The bias likewise: `groups` vectors of out/groups, `bias_group_stride` apart.
  uint32_t kernel = 0, stride = 1, dilation = 1, groups = 1, pad_left = 0, pad_right = 0;
  PaddingMode pad_mode = PaddingMode::kZeros;
  uint64_t group_stride = 0, bias_group_stride = 0;
  // A Conv1d ferry_step can run: stride 1, zero padding on the left only,
  // (kernel-1)*dilation of it: its state is the last (kernel-1)*dilation inputs.
  bool causal = false;
  // Parameters: LayerNorm eps; LeakyReLU slope, ELU alpha, Hardtanh [alpha,
  // beta]; GELU's tanh approximation; Save / Add slot.
  float eps = 0.0f, alpha = 0.0f, beta = 0.0f;
  bool approximate_tanh = false;
  uint32_t slot = 0;
  // Every weight of the layer is in a panel layout (Panel8; int8 Panel8x4;
  // int4 Panel8x8q4): the SIMD backends can run it (a format 1.0 file is
  // RowMajor and runs on the reference only).
  bool panel8 = false;
  // The element type of the layer's weights (one per layer; biases and
  // scales are F32 whatever it is). F32 for layers without weights.
  DType dtype = DType::kF32;
};

}  // namespace ferry

struct ferry_model {
  const uint8_t* bytes = nullptr;
  size_t size = 0;
  bool owned_handle = false;  // allocated by ferry_model_load
  bool batch_first = false;
  bool channels_first = false;  // input (and a sequence output) [B,F,T]
  bool input_is_tokens = false; // int32 token ids; the first layer is an Embedding
  bool has_time_axis = false;   // a recurrent / conv / pooling layer, or Model.time_axis
  bool output_is_sequence = false;
  // A sequence output's layout: the input's unless the file says otherwise
  // (Model.output_layout, format 2). ferry_run writes it; ferry_step's
  // [B,F] is unaffected.
  ferry_layout output_layout = FERRY_LAYOUT_TIME_MAJOR;
  bool streamable = true;       // no bidirectional layer, every Conv1d causal
  uint32_t unstreamable_layer = 0;  // the first layer that makes it not streamable
  bool lengths_ok = true;       // no Conv1d changes the number of steps
  uint32_t num_slots = 0;       // residual slots used (Save)
  uint32_t max_conv_patch = 0;  // widest (in/groups)*kernel of a Conv1d
  uint32_t input_size = 0;
  uint32_t output_size = 0;
  uint32_t max_features = 0;    // widest activation in the chain
  uint32_t max_gate_rows = 0;   // widest G*H of any recurrent module
  uint32_t max_hidden = 0;      // widest H of any recurrent module
  uint32_t max_h_out = 0;       // widest H_out of any recurrent module
  uint32_t state_floats = 0;    // per batch sample, all recurrent modules
  uint32_t num_layers = 0;
  uint32_t num_cells = 0;
  ferry::Layer layers[ferry::kMaxChain];
  ferry::Cell cells[ferry::kMaxCells];
};

namespace ferry {

// Steps a Conv1d gives for `steps` input steps (0: the kernel is larger than
// the padded input).
inline size_t conv_output_steps(const Layer& l, size_t steps) {
  const size_t padded = steps + l.pad_left + l.pad_right;
  const size_t span = size_t{l.dilation} * (l.kernel - 1) + 1;
  return padded < span ? 0 : (padded - span) / l.stride + 1;
}

// Fewest input steps a whole-sequence run accepts: the chain walked
// backwards from one output step, each Conv1d asking for its span, stride
// and reflect padding (PyTorch's L_out >= 1). 1 for a chain without convs
// or without a time axis. Saturates at 2^40 (no arena holds that many steps).
inline size_t min_input_steps(const ferry_model* m) {
  if (!m->has_time_axis) return 1;
  constexpr uint64_t kCap = uint64_t{1} << 40;
  uint64_t need = 1;
  for (uint32_t i = m->num_layers; i-- > 0;) {
    const Layer& l = m->layers[i];
    if (op_collapses_time(l.op)) {
      need = 1;
    } else if (l.op == Op::kConv1d) {
      const uint64_t span = uint64_t{l.dilation} * (l.kernel - 1) + 1;
      const uint64_t pads = uint64_t{l.pad_left} + l.pad_right;
      uint64_t t = (need - 1) * l.stride + span;
      t = t > pads ? t - pads : 1;
      if (l.pad_mode == PaddingMode::kReflect) t = std::max<uint64_t>(t, uint64_t{std::max(l.pad_left, l.pad_right)} + 1);
      need = std::min(t, kCap);
    }
  }
  return static_cast<size_t>(need);
}

// Steps after layer `upto` (exclusive) for `steps` input steps; 1 once time
// has collapsed; 0 if a conv's kernel exceeds its padded input.
inline size_t steps_before(const ferry_model* m, uint32_t upto, size_t steps) {
  for (uint32_t i = 0; i < upto && steps; ++i) {
    const Layer& l = m->layers[i];
    if (l.op == Op::kConv1d) steps = conv_output_steps(l, steps);
    else if (op_collapses_time(l.op)) steps = 1;
  }
  return steps;
}

// The most steps any layer's activations hold for `steps` input steps.
inline size_t max_steps(const ferry_model* m, size_t steps) {
  size_t most = steps;
  for (uint32_t i = 1; i <= m->num_layers; ++i) {
    const size_t s = steps_before(m, i, steps);
    if (s > most) most = s;
  }
  return most;
}

}  // namespace ferry
