// The target dtype of each tensor of a plan (`ferry convert --quantize`).
//
// Quantization is decided per layer (the runtime runs one kernel set per
// layer, so every matrix of a layer shares its dtype) and applied to weight
// matrices only: LSTM/GRU/RNN w_ih, w_hh, w_hr and Linear weights. Biases,
// GRU's b_hn and everything else stay F32. What a demanding user expects
// beside that, and what default_precisions() does:
//   - a layer whose matrices hold fewer than kMinQuantizedElements weights
//     stays F32: it saves under 3 KiB while every output of the model reads
//     it (a classifier or regression head is usually such a layer);
//   - int8 needs K <= layout::kMaxI8Cols (exact int32 sums): a wider layer
//     gets f16 instead.
// Each choice carries its reason, which the converter prints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/model_plan.h"

namespace ferry::conv {

constexpr uint64_t kMinQuantizedElements = 1024;

// "f32", "f16", "int8", "int4" -> F32, F16, I8, I4; throws Error otherwise.
DType precision_from_name(const std::string& name);
// The CLI's name of a target dtype ("int8", ...).
const char* precision_name(DType d);
// One rung up the ladder int4 -> int8 -> f16 -> f32 (F32 stays F32).
DType wider_precision(DType d);

// How an int8 / int4 layer's weights are rounded onto their grid: to
// nearest (shared/weight_quant.h), or by GPTQ on the calibration data's
// moments (quantize/gptq.h). Either way the stored grid is the same.
enum class Rounding { Nearest, Gptq };
const char* rounding_name(Rounding r);  // "nearest", "gptq"
// "nearest", "gptq" -> the value; throws Error otherwise.
Rounding rounding_from_name(const std::string& name);

struct LayerPrecision {
  int layer = -1;          // index into plan.layers
  DType dtype = DType::F32;
  std::string reason;      // why not what was requested ("" when it was)
  Rounding rounding = Rounding::Nearest;  // int8 / int4 only
};

// The weight matrices of a layer (tensor indices): a cell's w_ih, w_hh,
// w_hr, a Linear's weight.
std::vector<int> weight_matrices(const LayerPlan& l);

// Layers with weight matrices and the dtype each gets for `requested`.
std::vector<LayerPrecision> default_precisions(const ModelPlan& plan, DType requested);

// Sets TensorPlan::dtype of every matrix of the listed layers (the rest of
// the plan's tensors are left F32) and clears their TensorPlan::rounded.
void apply_precisions(ModelPlan& plan, const std::vector<LayerPrecision>& precisions);

}  // namespace ferry::conv
