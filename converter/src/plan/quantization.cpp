#include "plan/quantization.h"

#include "error.h"
#include "weight_layout.h"

namespace ferry::conv {

std::vector<int> weight_matrices(const LayerPlan& l) {
  std::vector<int> out;
  for (const CellPlan& c : l.cells) {
    for (int i : {c.w_ih, c.w_hh, c.w_hr})
      if (i >= 0) out.push_back(i);
  }
  if (l.op == LayerOp::Linear && l.weight >= 0) out.push_back(l.weight);
  return out;
}

const char* rounding_name(Rounding r) { return r == Rounding::Gptq ? "gptq" : "nearest"; }

Rounding rounding_from_name(const std::string& name) {
  if (name == "nearest") return Rounding::Nearest;
  if (name == "gptq") return Rounding::Gptq;
  throw Error("--rounding " + name + ": expected nearest or gptq");
}

DType precision_from_name(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "int8") return DType::I8;
  if (name == "int4") return DType::I4;
  throw Error("--quantize " + name + ": expected f32, f16, int8 or int4");
}

const char* precision_name(DType d) {
  switch (d) {
    case DType::F16: return "f16";
    case DType::I8: return "int8";
    case DType::I4: return "int4";
    default: return "f32";
  }
}

DType wider_precision(DType d) {
  switch (d) {
    case DType::I4: return DType::I8;
    case DType::I8: return DType::F16;
    default: return DType::F32;
  }
}

std::vector<LayerPrecision> default_precisions(const ModelPlan& plan, DType requested) {
  std::vector<LayerPrecision> out;
  for (size_t li = 0; li < plan.layers.size(); ++li) {
    const std::vector<int> m = weight_matrices(plan.layers[li]);
    if (m.empty()) continue;
    LayerPrecision p{static_cast<int>(li), requested, ""};
    uint64_t elements = 0;
    uint64_t widest = 0;
    for (int i : m) {
      const TensorPlan& t = plan.tensors.at(static_cast<size_t>(i));
      elements += t.numel();
      if (t.shape.size() == 2 && t.shape[1] > widest) widest = t.shape[1];
    }
    if (requested != DType::F32 && elements < kMinQuantizedElements) {
      p.dtype = DType::F32;
      p.reason = "kept f32: " + std::to_string(elements) + " weights (< " + std::to_string(kMinQuantizedElements) +
                 "), too small to gain from quantization";
    } else if (requested == DType::I8 && widest > layout::kMaxI8Cols) {
      p.dtype = DType::F16;
      p.reason = "f16: " + std::to_string(widest) + " inputs, above int8's " + std::to_string(layout::kMaxI8Cols);
    }
    out.push_back(p);
  }
  return out;
}

void apply_precisions(ModelPlan& plan, const std::vector<LayerPrecision>& precisions) {
  for (const LayerPrecision& p : precisions) {
    for (int i : weight_matrices(plan.layers.at(static_cast<size_t>(p.layer)))) {
      plan.tensors[static_cast<size_t>(i)].dtype = p.dtype;
      plan.tensors[static_cast<size_t>(i)].rounded.reset();  // rounded to nearest unless the quantize stage sets it
    }
  }
}

}  // namespace ferry::conv
