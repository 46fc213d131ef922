// Internal view of a verified model: plain structs with pointers into the
// caller's model bytes. Built once by ferry_model_load (model/loader.cpp)
// after the FlatBuffers verifier and ferry's own range checks; backends and
// kernels read only this. Every weight is a Weight (model/weight.h): data,
// dtype, layout and scales travel together from the loader to the kernel.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "ferry/ferry.h"
#include "model/weight.h"

namespace ferry {

// Fixed capacities keep the handle a fixed size (placeable in caller memory).
constexpr uint32_t kMaxChain = 64;    // elements of the chain
constexpr uint32_t kMaxCells = 128;   // (layer, direction) pairs, all modules
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
};

inline bool op_is_recurrent(Op op) { return op <= Op::kRnnRelu; }
inline bool op_has_weights(Op op) { return op_is_recurrent(op) || op == Op::kLinear; }

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
  // Floats of state per batch sample: h [L*D][H_out] (+ c [L*D][H] for LSTM).
  uint32_t state_floats = 0;
  uint32_t state_offset = 0;  // within the per-sample state of the model
  // Linear.
  Weight weight;  // [out, in]
  Weight bias;    // [out] or absent
  // Every weight of the layer is Panel8: the SIMD and XNNPACK backends can
  // run it (a format 1.0 file is RowMajor and runs on the reference only).
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
  bool has_time_axis = false;   // any recurrent layer
  bool output_is_sequence = false;
  bool streamable = true;       // no bidirectional layer
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
