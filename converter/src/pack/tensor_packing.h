// Packing: a planned tensor → the elements the model file stores, in the
// layout the kernels read (schema/ferry.fbs, TensorLayout).
//
// Every weight and bias a layer reads is stored Panel8: the layout the SIMD
// kernels stream, which the reference kernels read too, so the file holds one
// copy of each weight (for firmware, flash is the budget). Tensors no layer
// reads stay RowMajor. G, the padding to whole panels and each element's
// index come from runtime/src/shared/weight_layout.h, the definition the
// runtime reads the file with; G follows from the role a tensor plays in its
// layer (the cell's w_ih, w_hh and bias have the module's gates, every other
// tensor one). A Conv1d's weight [out, in/groups, kernel] is `groups` matrices
// [out/groups, (in/groups)*kernel], its bias `groups` vectors, each packed on
// its own. Per-feature parameters (BatchNorm, LayerNorm, PReLU) and an
// Embedding's table stay RowMajor: no kernel streams them in panels.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "plan/model_plan.h"

namespace ferry::conv {

struct StoredForm {
  bool panel8 = false;   // Panel8 (float), else RowMajor (or a quantized layout below)
  uint32_t gates = 1;    // G (panel layouts)
  uint32_t blocks = 1;   // Panel8: matrices stacked along dim 0, each packed (and padded) on its own
                         // (a grouped Conv1d: one per group; quantized weights are always one block)
  uint64_t elements = 0; // stored elements: the logical count, or padded to whole panels
  // Quantized weight matrices (TensorPlan::dtype F16, I8, I4) and their
  // scale tensors, appended after the plan's tensors:
  DType dtype = DType::F32;  // stored element type
  enum class Layout { RowMajor, Panel8, Panel8x4, Panel8x8q4 } layout = Layout::RowMajor;
  uint64_t bytes = 0;    // stored bytes, padding included
  int scales = -1;       // a weight: index of its scale tensor in the written list
  int scales_of = -1;    // a scale tensor: the weight (plan tensor) whose scales it holds
  uint64_t units = 0, cols = 1;  // the matrix [G*units, cols] (quantized weights and scales)
};

// The stored form of each of plan.tensors, from the roles the layers give
// them, followed by one scale tensor per I8 (F32 row scales) and I4 (F16
// group scales) weight. Throws Error("internal: ...") for a plan that is not
// self-consistent (an index out of range, a tensor used with two gate
// counts, a shape that does not split into its gates, a quantized tensor
// that is not a matrix of its layer).
std::vector<StoredForm> stored_forms(const ModelPlan& plan);

// A quantized weight (form.dtype F16, I8 or I4): its stored bytes and, for
// I8 / I4, its scales' bytes: rounded to nearest from the float tensor
// (read once, whole), or, where the quantize stage set TensorPlan::rounded,
// those integers and scales as they are. Throws
// Error naming the tensor when a weight cannot be represented (non-finite,
// beyond f16's range).
struct QuantizedTensor {
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> scales;
};
QuantizedTensor quantize_tensor(const TensorPlan& t, const StoredForm& form);

// Receives packed elements, in stored order.
using PackSink = std::function<void(const float* data, uint64_t count)>;

// Produces tensor `t` in its stored form, in order, in pieces of about
// 4 MiB handed to `sink` (reading `t.fill` by ranges: the tensor is never
// whole in memory). `scratch` is reused between calls.
void pack_tensor(const TensorPlan& t, const StoredForm& form, std::vector<float>& scratch, const PackSink& sink);

}  // namespace ferry::conv
