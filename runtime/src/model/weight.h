// A weight tensor as the kernels see it: where its bytes lie in the model,
// their element type, their layout, and (for quantized types) their scales.
// Built by the loader (model/loader.cpp) after every field was checked
// against the tensor's role; kernels index through it without checks.
//
// The layouts themselves (Panel8 padding and indexing, gate counts) are
// defined once in shared/weight_layout.h, which the converter's packer uses
// too; this view only records which one a tensor is in.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "shared/weight_layout.h"

namespace ferry {

// Element type of a stored tensor. The values are the schema's (fb::DType);
// the loader accepts the ones some kernel set of this runtime reads.
// Which layout each quantized type comes in, and what its scales are:
// shared/weight_layout.h; the kernels that read them: kernels/kernel_set.h.
enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,  // IEEE half, Panel8 (or RowMajor); computed in fp32
  kI8 = 2,   // symmetric per-row int8, Panel8x4, fp32 row scales in `scales`
  kI4 = 3,   // symmetric int4 in groups of 32 k, Panel8x8q4, f16 scales in `group_scales`
};
// The dtypes of the model schema (schema/ferry.fbs, fb::DType; the loader
// static_asserts the two agree).
constexpr uint32_t kDTypeCount = 4;

// How the elements lie. Values are the schema's (fb::TensorLayout).
enum class WeightLayout : uint8_t {
  kRowMajor = 0,    // C order over the logical shape (format 1.0 files)
  kPanel8 = 1,      // shared/weight_layout.h (F32, F16)
  kPanel8x4 = 2,    // shared/weight_layout.h: int8, 4 k per lane
  kPanel8x8q4 = 3,  // shared/weight_layout.h: int4 nibbles, 8 k per 32-byte block
};

// A matrix [gates*units rows, cols columns] (a vector: cols == 1). `gates`
// is the G of the tensor's role (layout::gates_for_role); it groups the rows
// in RowMajor too.
//
// Quantized matrices carry their scales here (biases, b_hn and every scale
// stay fp32 or f16 whatever the weights are):
//   kI8  `scales`: G*units fp32 row scales as a Panel8 vector (panel order,
//        layout::row_scale_elements floats; padding rows 1.0).
//   kI4  `group_scales`: f16 bit patterns, one per (row, group of 32 k), at
//        layout::group_scale_index (layout::group_scale_elements halves).
//   kF16, kF32: neither.
// What the loader checks for them: the layout belongs to the dtype (F16:
// Panel8 or RowMajor; I8: Panel8x4; I4: Panel8x8q4), the byte size is the
// layout's (Weight::bytes()), the scales tensor has layout::
// row_scale_elements / group_scale_elements elements (F32 for I8, F16 for
// I4), every I8 scale finite and > 0 and every I4 scale finite and nonzero
// (signed: Q4_0 maps a group's largest magnitude to -8); only matrices
// (w_ih, w_hh, w_hr, Linear weight) may be quantized, one dtype per layer,
// the layer's biases then Panel8; I8 has at most layout::kMaxI8Cols columns.
// Both must be 4-byte aligned (the loader places them at 64 bytes). They
// share one pointer (a union, the member of the weight's dtype being the
// one set): a second pointer would grow every Weight, hence the fixed-size
// model handle by 768 pointers (3 KiB on a 32-bit core, past the example
// firmware's handle budget).
struct Weight {
  const void* data = nullptr;  // null: absent (bias=False, no b_hn, ...)
  union {
    const float* scales = nullptr;  // kI8: per-row scales (panel order); null for the float types
    const uint16_t* group_scales;   // kI4: f16 scale per (row, group of 32 k)
  };
  uint32_t units = 0;
  uint32_t cols = 1;
  uint8_t gates = 1;
  DType dtype = DType::kF32;
  WeightLayout layout = WeightLayout::kRowMajor;

  explicit operator bool() const { return data != nullptr; }
  uint32_t rows() const { return uint32_t{gates} * units; }
  bool panel8() const { return layout == WeightLayout::kPanel8; }
  // In a panel layout (Panel8, Panel8x4, Panel8x8q4): what the SIMD sets of
  // its dtype read (RowMajor is read by the reference sets only).
  bool packed() const { return layout != WeightLayout::kRowMajor; }
  // The elements of an F32 tensor (the kernel set chosen for it guarantees
  // the dtype).
  const float* f32() const { return static_cast<const float*>(data); }
  // The elements of an F16 tensor (binary16 bit patterns).
  const uint16_t* f16() const { return static_cast<const uint16_t*>(data); }
  // The bytes of an I8 (Panel8x4) or I4 (Panel8x8q4) tensor.
  const int8_t* i8() const { return static_cast<const int8_t*>(data); }
  const uint8_t* u8() const { return static_cast<const uint8_t*>(data); }
  // Bytes the tensor's elements take in its dtype and layout (padding
  // included; scales not included).
  // The int types exist only in their own layouts (Panel8x4, Panel8x8q4).
  uint64_t bytes() const {
    const uint64_t element = dtype == DType::kF16 ? 2 : dtype == DType::kF32 ? 4 : 1;
    switch (layout) {
      case WeightLayout::kPanel8x4: return layout::panel8x4_bytes(gates, units, cols);
      case WeightLayout::kPanel8x8q4: return layout::panel8x8q4_bytes(gates, units, cols);
      case WeightLayout::kPanel8: return layout::panel8_elements(gates, units, cols) * element;
      case WeightLayout::kRowMajor: break;
    }
    return uint64_t{rows()} * cols * element;
  }

  // Row r (= g*units + u) of an F32 tensor, whatever the layout: element k of
  // the row is row_f32(r, &stride)[k * stride]. How the reference kernels
  // read weights.
  const float* row_f32(uint32_t r, uint64_t* stride) const {
    if (!panel8()) {
      *stride = 1;
      return f32() + uint64_t{r} * cols;
    }
    *stride = layout::panel8_column_stride(gates);
    return f32() + layout::panel8_index(gates, cols, r / units, r % units, 0);
  }
  // Element (row r, column k) of an F32 tensor.
  float at_f32(uint32_t r, uint32_t k) const {
    uint64_t stride = 0;
    return row_f32(r, &stride)[k * stride];
  }
};

}  // namespace ferry
