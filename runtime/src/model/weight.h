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
enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kI8 = 2,
};
constexpr uint32_t kDTypeCount = 3;

// How the elements lie. Values are the schema's (fb::TensorLayout).
enum class WeightLayout : uint8_t {
  kRowMajor = 0,  // C order over the logical shape (format 1.0 files)
  kPanel8 = 1,    // shared/weight_layout.h
};

// A matrix [gates*units rows, cols columns] (a vector: cols == 1). `gates`
// is the G of the tensor's role (layout::gates_for_role); it groups the rows
// in RowMajor too.
struct Weight {
  const void* data = nullptr;     // null: absent (bias=False, no b_hn, ...)
  const float* scales = nullptr;  // quantized types: per-row scales; null for floats
  uint32_t units = 0;
  uint32_t cols = 1;
  uint8_t gates = 1;
  DType dtype = DType::kF32;
  WeightLayout layout = WeightLayout::kRowMajor;

  explicit operator bool() const { return data != nullptr; }
  uint32_t rows() const { return uint32_t{gates} * units; }
  bool panel8() const { return layout == WeightLayout::kPanel8; }
  // The elements of an F32 tensor (the kernel set chosen for it guarantees
  // the dtype).
  const float* f32() const { return static_cast<const float*>(data); }

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
