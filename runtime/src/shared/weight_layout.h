// The weight layouts of the model file, defined once.
//
// The converter's packer writes weights in these layouts and the runtime
// reads them (model verification, the kernels, the XNNPACK staging copy);
// both include this header, so a gate count, a panel's padding or an
// element's index is worked out in exactly one place. Header-only, C++17,
// no dependencies: it is compiled into firmware as well as into the host
// converter. tests/unit/test_layout.cpp checks every function against a
// direct transcription of schema/ferry.fbs.
//
// Terms
//   G      gates per hidden unit of a recurrent cell (LSTM 4: i,f,g,o; GRU 3:
//          r,z,n; RNN 1) for the cell's w_ih, w_hh and folded bias; 1 for
//          every other tensor (GRU b_hn, LSTM w_hr, Linear weight and bias).
//   units  rows per gate (H for a cell, the output width of a Linear).
//   K      columns of the logical matrix [G*units, K]; 1 for a vector.
//
// RowMajor: PyTorch's C order over the logical shape.
//
// Panel8 (format 1.1): units in panels of 8, the last one zero-padded; each
// panel stores its 8*G rows column by column, so one "panel row" (fixed k)
// is G vectors of 8 lanes, every gate of 8 units, consumed with one
// broadcast of input k. Logical element (g*units + u, k), u = 8p + j, sits
// at element ((p*K + k)*G + g)*8 + j.
//
// Panel order: the gate buffers of the recurrent kernels (one row per time
// step and sample) hold gate g of unit u = 8p + j at column (p*G + g)*8 + j,
// i.e. "vector" q = p*G + g of a Panel8 matrix lands at columns [8q, 8q+8).
#pragma once

#include <stdint.h>

namespace ferry {
namespace layout {

enum class CellKind : uint8_t { kLstm, kGru, kRnn };

// G of a cell's w_ih, w_hh and bias.
constexpr uint32_t gate_count(CellKind kind) {
  return kind == CellKind::kLstm ? 4u : kind == CellKind::kGru ? 3u : 1u;
}
constexpr uint32_t kMaxGates = 4;

// What a tensor is to its layer; decides its G.
enum class Role : uint8_t {
  kCellInput,      // w_ih [G*H, I]
  kCellRecurrent,  // w_hh [G*H, H_out]
  kCellBias,       // folded bias [G*H]
  kGruHiddenBias,  // b_hn [H]
  kProjection,     // w_hr [P, H]
  kLinearWeight,   // [out, in]
  kLinearBias,     // [out]
};

constexpr uint32_t gates_for_role(CellKind kind, Role role) {
  return role == Role::kCellInput || role == Role::kCellRecurrent || role == Role::kCellBias ? gate_count(kind)
                                                                                           : 1u;
}

// ------------------------------------------------------------- Panel8 --

constexpr uint32_t kPanel = 8;

constexpr uint32_t panels_of(uint32_t units) { return (units + kPanel - 1) / kPanel; }

// Units rounded up to whole panels.
constexpr uint32_t padded_units(uint32_t units) { return panels_of(units) * kPanel; }

// Elements a [G*units, K] matrix stores in Panel8 (padding included).
constexpr uint64_t panel8_elements(uint32_t gates, uint32_t units, uint64_t cols) {
  return uint64_t{padded_units(units)} * gates * cols;
}

// Elements of one panel: 8 units x G gates x K columns.
constexpr uint64_t panel8_panel_elements(uint32_t gates, uint64_t cols) { return uint64_t{kPanel} * gates * cols; }

// Element index of logical (row g*units + u, column k).
constexpr uint64_t panel8_index(uint32_t gates, uint64_t cols, uint32_t g, uint32_t u, uint64_t k) {
  return ((uint64_t{u / kPanel} * cols + k) * gates + g) * kPanel + u % kPanel;
}

// Element stride between column k and k + 1 of the same logical row.
constexpr uint64_t panel8_column_stride(uint32_t gates) { return uint64_t{gates} * kPanel; }

// Vector q (gate q % G of panel q / G): index of its 8 lanes at column 0;
// column k is panel8_column_stride(G) * k further on.
constexpr uint64_t panel8_vector_index(uint32_t gates, uint64_t cols, uint32_t q) {
  return (uint64_t{q / gates} * cols * gates + q % gates) * kPanel;
}

// ------------------------------------------------------- panel order --

// Floats of a panel-order gate row of a cell with `units` units.
constexpr uint32_t gate_row_floats(uint32_t gates, uint32_t units) { return padded_units(units) * gates; }

// Column of gate g of unit u in a panel-order gate row.
constexpr uint32_t gate_column(uint32_t gates, uint32_t g, uint32_t u) {
  return ((u / kPanel) * gates + g) * kPanel + u % kPanel;
}

// The logical row that vector q, lane j of a Panel8 matrix holds (may be a
// padding row >= G*units when u >= units: check u = (q / G)*8 + j < units).
constexpr uint32_t panel8_row_of(uint32_t gates, uint32_t units, uint32_t q, uint32_t j) {
  return (q % gates) * units + (q / gates) * kPanel + j;
}

}  // namespace layout
}  // namespace ferry
