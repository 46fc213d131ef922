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
//
// Quantized weights (--quantize; the sections at the end of this file):
//   f16    IEEE binary16 elements in Panel8 (2 bytes each).
//   int8   Panel8x4: Panel8 with 4 consecutive k per lane, K padded to a
//          multiple of 4; fp32 scale per row (a Panel8 vector of G*units).
//   int4   Panel8x8q4: two Panel8x4 vectors per 32 bytes (nibbles), K padded
//          to a multiple of 32; f16 scale per (row, group of 32 k).
// Each layout has its index function and byte count here; how a float
// matrix becomes one of them (the converter's quantizer) is
// shared/weight_quant.h.
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

// --------------------------------------------------------------- f16 --
//
// An f16 tensor stores IEEE binary16 bit patterns (uint16_t, little-endian
// like every tensor of the file) at the element index of its layout
// (RowMajor or Panel8): 2 bytes per element. Kernels compute in fp32 on the
// exactly converted weights.

// binary16 -> binary32, exact for every input (subnormals become normal
// floats, Inf stays Inf, a NaN stays a NaN with its payload's top bits).
// Portable: integer operations only, so a Cortex-M or the reference kernels
// convert exactly as F16C's vcvtph2ps and Arm's fcvtl do.
inline float float_from_half(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1fu) {
    bits = sign | 0x7f800000u | (mant << 13);  // Inf, NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);  // normal: rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal m * 2^-24: normalise (shift the leading 1 to bit 10).
    uint32_t e = 113;  // exponent of 2^-14, the scale of bit 10
    while (!(mant & 0x400u)) {
      mant <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

// binary32 -> binary16, rounded to nearest, ties to even (the conversion of
// F16C's vcvtps2ph with imm 0 and of IEEE 754). Overflow gives +-Inf; NaN
// stays NaN (quiet). For the converter; the runtime only reads halves.
inline uint16_t half_from_float(float f) {
  uint32_t x;
  __builtin_memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: Inf
  if (ax < 0x38800000u) {
    // Below 2^-14: a half subnormal (or 0); m * 2^-24 with m rounded.
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to 0 (2^-25 ties to even 0)
    const uint32_t e = ax >> 23;                                // 102..112
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;            // 24-bit significand
    const uint32_t shift = 126u - e;                            // 14..24: m * 2^(e-150) / 2^-24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  // Normal half: drop 13 mantissa bits, round to nearest even (a carry into
  // the exponent is the correct result, up to 65504 -> Inf handled above).
  uint32_t r = ((ax >> 13) - (112u << 10));
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

// ------------------------------------------------- int8: Panel8x4 --
//
// Symmetric per output row: real = scale[row] * q, q in [-127, 127] (never
// -128, so that |q| fits the unsigned operand of x86's vpmaddubsw and
// vpdpbusd after the sign trick). K is padded with zeros to K4 =
// round_up(K, 4). Like Panel8 (units in panels of 8, the last padded with
// zero rows), but each lane of a "panel row" holds 4 consecutive k:
// logical element (g*units + u, k), u = 8p + j, is the byte
//     ((p*(K4/4) + k/4)*G + g)*32 + j*4 + k%4
// i.e. per panel, per k-quad, per gate, one 32-byte vector whose lane j
// (bytes 4j .. 4j+3) holds the 4 k of unit j: exactly what vpdpbusd,
// vpmaddubsw + vpmaddwd and NEON sdot consume against 4 activation bytes
// broadcast to every lane. Vector q = p*G + g of quad c starts at byte
// ((p*(K4/4) + c)*G + g)*32, like Panel8's vector q.
//
// Scales: fp32, one per row, stored as a Panel8 vector of G*units (= panel
// order: the scale of row (g, u) at gate_column(G, g, u)); padding rows have
// scale 1.0 and weights 0.

constexpr uint32_t kQuad = 4;  // k per lane of an int8 vector

// Columns an int8 matrix may have: its kernels sum K products of |q| <= 127
// in int32 (K * 127^2 <= 2^31 - 1). Wider int8 tensors are invalid (the loader
// rejects them; the converter keeps such a layer in f16 or int4).
constexpr uint32_t kMaxI8Cols = 133144;

// K rounded up to whole quads.
constexpr uint64_t k4_of(uint64_t cols) { return (cols + kQuad - 1) / kQuad * kQuad; }

// Bytes of one panel: 8 units x G gates x K4.
constexpr uint64_t panel8x4_panel_bytes(uint32_t gates, uint64_t cols) { return uint64_t{kPanel} * gates * k4_of(cols); }

// Bytes (= elements) of a [G*units, K] matrix, padding included.
constexpr uint64_t panel8x4_bytes(uint32_t gates, uint32_t units, uint64_t cols) {
  return uint64_t{panels_of(units)} * panel8x4_panel_bytes(gates, cols);
}

// Byte of logical element (row g*units + u, column k).
constexpr uint64_t panel8x4_index(uint32_t gates, uint64_t cols, uint32_t g, uint32_t u, uint64_t k) {
  return ((uint64_t{u / kPanel} * (k4_of(cols) / kQuad) + k / kQuad) * gates + g) * (kPanel * kQuad) +
         (u % kPanel) * kQuad + k % kQuad;
}

// Bytes between quad c and c + 1 of the same vector.
constexpr uint64_t panel8x4_quad_stride(uint32_t gates) { return uint64_t{gates} * kPanel * kQuad; }

// Vector q (gate q % G of panel q / G): byte of its quad 0.
constexpr uint64_t panel8x4_vector_index(uint32_t gates, uint64_t cols, uint32_t q) {
  return uint64_t{q / gates} * panel8x4_panel_bytes(gates, cols) + uint64_t{q % gates} * kPanel * kQuad;
}

// Floats of the row scales (a Panel8 vector of G*units, padding included).
constexpr uint64_t row_scale_elements(uint32_t gates, uint32_t units) { return panel8_elements(gates, units, 1); }

// ----------------------------------------------- int4: Panel8x8q4 --
//
// Symmetric groups of 32 consecutive k per row (llama.cpp's Q4_0):
// real = group_scale[row][k / 32] * q, q in [-8, 7], stored as the nibble
// q + 8 (0..15). K is padded with zeros (q = 0, nibble 8) to K32 =
// round_up(K, 32). Per panel, per block of 8 k, per gate, 32 bytes: byte
// j*4 + k%4 holds unit j's k of quad (k/4)%2 == 0 in its low nibble and of
// quad (k/4)%2 == 1 in its high nibble. So logical element (g*units + u, k),
// u = 8p + j, is in the byte
//     ((p*(K32/8) + k/8)*G + g)*32 + j*4 + k%4,   high nibble iff (k/4)%2 == 1
// and the low (high) nibbles of a block's 32 bytes, minus 8, are the
// Panel8x4 vector of its first (second) quad.
//
// Group scales: f16 (binary16), one per (row, group) at
//     ((p*(K32/32) + k/32)*G + g)*8 + j
// i.e. per panel, per group, a Panel8 vector of G*8 (panel order within the
// panel). Padding rows have scale 1.0 (0x3c00) and nibbles 8.

constexpr uint32_t kGroup = 32;  // k per int4 scale group
constexpr uint32_t kBlock = 8;   // k per 32-byte int4 block (two quads)

// K rounded up to whole groups.
constexpr uint64_t k32_of(uint64_t cols) { return (cols + kGroup - 1) / kGroup * kGroup; }

// Scale groups per row.
constexpr uint64_t group_count(uint64_t cols) { return k32_of(cols) / kGroup; }

// Bytes of one panel: 8 units x G gates x K32 nibbles.
constexpr uint64_t panel8x8q4_panel_bytes(uint32_t gates, uint64_t cols) {
  return uint64_t{kPanel} * gates * k32_of(cols) / 2;
}

// Bytes of a [G*units, K] matrix, padding included.
constexpr uint64_t panel8x8q4_bytes(uint32_t gates, uint32_t units, uint64_t cols) {
  return uint64_t{panels_of(units)} * panel8x8q4_panel_bytes(gates, cols);
}

// Byte holding logical element (row g*units + u, column k) ...
constexpr uint64_t panel8x8q4_index(uint32_t gates, uint64_t cols, uint32_t g, uint32_t u, uint64_t k) {
  return ((uint64_t{u / kPanel} * (k32_of(cols) / kBlock) + k / kBlock) * gates + g) * (kPanel * kQuad) +
         (u % kPanel) * kQuad + k % kQuad;
}
// ... in its high nibble (true) or low nibble (false).
constexpr bool panel8x8q4_high_nibble(uint64_t k) { return (k / kQuad) % 2 == 1; }

// Bytes between block b and b + 1 (8 k further) of the same vector.
constexpr uint64_t panel8x8q4_block_stride(uint32_t gates) { return uint64_t{gates} * kPanel * kQuad; }

// Vector q (gate q % G of panel q / G): byte of its block 0.
constexpr uint64_t panel8x8q4_vector_index(uint32_t gates, uint64_t cols, uint32_t q) {
  return uint64_t{q / gates} * panel8x8q4_panel_bytes(gates, cols) + uint64_t{q % gates} * kPanel * kQuad;
}

// Element index (in halves) of the scale of row g*units + u, group k / 32.
constexpr uint64_t group_scale_index(uint32_t gates, uint64_t cols, uint32_t g, uint32_t u, uint64_t group) {
  return ((uint64_t{u / kPanel} * group_count(cols) + group) * gates + g) * kPanel + u % kPanel;
}

// Halves of the group scales of a [G*units, K] matrix, padding included.
constexpr uint64_t group_scale_elements(uint32_t gates, uint32_t units, uint64_t cols) {
  return uint64_t{padded_units(units)} * gates * group_count(cols);
}

// The nibble q + 8 of element (g*units + u, k) in `data`: set and get.
inline void panel8x8q4_store(uint8_t* data, uint32_t gates, uint64_t cols, uint32_t g, uint32_t u, uint64_t k, int q) {
  uint8_t& byte = data[panel8x8q4_index(gates, cols, g, u, k)];
  const uint8_t nibble = static_cast<uint8_t>((q + 8) & 0xf);
  byte = panel8x8q4_high_nibble(k) ? static_cast<uint8_t>((byte & 0x0f) | (nibble << 4))
                                   : static_cast<uint8_t>((byte & 0xf0) | nibble);
}
inline int panel8x8q4_load(const uint8_t* data, uint32_t gates, uint64_t cols, uint32_t g, uint32_t u, uint64_t k) {
  const uint8_t byte = data[panel8x8q4_index(gates, cols, g, u, k)];
  return (panel8x8q4_high_nibble(k) ? byte >> 4 : byte & 0xf) - 8;
}

}  // namespace layout
}  // namespace ferry
