// Internal view of a verified model: plain structs with pointers into the
// caller's model bytes. Built once by ferry_model_load (model.cpp) after the
// FlatBuffers verifier and ferry's own range checks; kernels read only this.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "ferry/ferry.h"

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

// Hidden units per panel of the Panel8 layout (schema/ferry.fbs).
constexpr uint32_t kPanel = 8;

inline uint32_t panels_of(uint32_t units) { return (units + kPanel - 1) / kPanel; }

// A weight matrix [gates*units rows, cols columns] (a vector: cols == 1) as
// it lies in the model bytes, RowMajor or Panel8. `gates` is the G of the
// Panel8 layout (4 LSTM / 3 GRU / 1 RNN for the cell's w_ih, w_hh and bias;
// 1 for everything else); it also tells how rows are grouped in RowMajor.
struct Matrix {
  const float* data = nullptr;  // null: absent (bias=False, no b_hn, ...)
  uint32_t gates = 1;
  uint32_t units = 0;
  uint32_t cols = 1;
  bool panel8 = false;

  explicit operator bool() const { return data != nullptr; }
  uint32_t rows() const { return gates * units; }
  // Floats of one Panel8 panel: 8 units x all gates x all columns.
  uint64_t panel_floats() const { return uint64_t{kPanel} * gates * cols; }
  // Row r (= g*units + u) whatever the layout: element k of the row is
  // row(r, &stride)[k * stride]. How the reference kernels read weights.
  const float* row(uint32_t r, uint64_t* stride) const {
    if (!panel8) {
      *stride = 1;
      return data + uint64_t{r} * cols;
    }
    const uint32_t g = r / units, u = r % units;
    *stride = uint64_t{gates} * kPanel;
    return data + (uint64_t{u / kPanel} * cols * gates + g) * kPanel + u % kPanel;
  }
  // Element (row r, column k).
  float at(uint32_t r, uint32_t k) const {
    uint64_t stride = 0;
    return row(r, &stride)[k * stride];
  }
};

// One (layer k, direction d) of a recurrent module.
struct Cell {
  Matrix w_ih;   // [G*H, in]
  Matrix w_hh;   // [G*H, h_out]
  Matrix bias;   // [G*H] folded, or absent (bias=False)
  Matrix b_hn;   // GRU: [H], or absent
  Matrix w_hr;   // LSTM projection [P, H], or absent
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
  Matrix weight;  // [out, in]
  Matrix bias;    // [out] or absent
  // Every weight of the layer is Panel8: the SIMD and XNNPACK backends can
  // run it (a format 1.0 file is RowMajor and runs on the reference only).
  bool panel8 = false;
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
