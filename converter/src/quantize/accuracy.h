// The accuracy report of a quantized conversion and the per-layer fallback
// (`ferry convert --quantize ... [--calibration X.npy] [--max-error E]
// [--fallback]`).
//
// The quantized model and the fp32 model are built in memory from the same
// plan and run side by side by the runtime (backend auto: the kernels a
// device runs) on one input: the user's calibration array (real data, in the
// model's input layout), else seeded synthetic input uniform in [-1, 1) in
// that layout. Measured on the model's outputs:
//   max abs error, RMS error, cosine similarity of quantized vs fp32;
//   per layer: the same with only that layer quantized (its sensitivity);
//   drift: a stream of kDriftSteps ferry_step calls (batch 1) through both
//          models, RMS error over the first and the last 1% of the steps,
//          which shows whether the error grows through the recurrence.
// --max-error E bounds the model's max abs error. Without --fallback a
// model beyond E is refused (Error, nothing written). With it, the layer
// whose error alone is largest moves one rung up int4 -> int8 -> f16 -> f32,
// and again, until the model is within E; every move is reported.
//
// Rounding (int8 / int4 layers): with --calibration, GPTQ on the
// calibration moments (quantize/gptq.h, quantize/moments.h); without, to
// nearest (--rounding gptq is refused: synthetic inputs say nothing about
// the weights' real inputs). With calibration both roundings are measured
// and reported (each layer alone, the model, the drift), and unless
// --rounding pins one, each layer keeps GPTQ except where rounding it to
// nearest gave a smaller RMS error on the calibration data (GPTQ minimises
// the error of each product, not of the model's output through the
// recurrence, and on a few int8 layers nearest comes out ahead); the reason
// is printed. --fallback, unless --rounding pins one, first
// moves the layer to the other rounding where that alone gave it a smaller
// error, and only then a dtype up. GPTQ runs once per (matrix, dtype); the
// moments once per conversion.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "plan/model_plan.h"
#include "plan/quantization.h"

namespace ferry::conv {

constexpr uint32_t kDriftSteps = 10000;

struct QuantizeRequest {
  DType dtype = DType::F32;               // F32: no quantization
  std::optional<std::string> calibration; // --calibration X.npy
  std::optional<Rounding> rounding;       // --rounding; default gptq with calibration, else nearest
  std::optional<float> max_error;         // --max-error E
  bool fallback = false;                  // --fallback
  uint64_t seed = 0x5eed;                 // synthetic input
  // Called as each long step starts ("collecting calibration moments",
  // "GPTQ lstm.weight_hh_l0 (int4)", "measuring lstm alone at int8", ...),
  // for a progress display; may be empty.
  std::function<void(const std::string&)> stage;
};

struct QuantizeOutcome {
  std::vector<LayerPrecision> precisions;  // what each weighted layer got
  std::vector<std::string> decisions;      // one line per fallback move, in order
  QuantizationPlan report;                 // stored in the file
};

// Chooses the precisions, measures them and applies them to `plan`
// (TensorPlan::dtype) and plan.quantization. Throws Error when the
// calibration file does not fit the model, or when the model exceeds
// --max-error without --fallback.
QuantizeOutcome quantize_plan(ModelPlan& plan, const QuantizeRequest& request);

}  // namespace ferry::conv
