// The calibration moments GPTQ needs (quantize/gptq.h): for each weight
// matrix, H = sum x x^T over the inputs it meets when the fp32 model runs
// on the calibration data.
//
//   Linear weight      the layer's input (each step's, or after `last` the
//                      one vector per sample);
//   cell k's w_ih      x_t of stacked layer k: the chain's input to the
//                      layer for k = 0, else layer k-1's output (both
//                      directions, concatenated);
//   cell k's w_hh      h_{t-1} of the fp32 model: the cell's own output one
//                      step earlier (the backward direction: one step later),
//                      every step but the one no step follows (the zero
//                      initial state adds nothing to the sum);
//   cell k's w_hr      (LSTM proj_size) the unprojected o_t * tanh(c_t).
//
// Each input is read from the runtime itself: the plan is cut after the
// layer (or after stacked layer k of a recurrent module) and that prefix
// runs on the whole calibration batch (backend auto, whose fp32 bits are the
// reference's), its output being the activations sought. Only w_hr's input,
// which no output shows, is recomputed here from the cell's gates (the
// runtime's own x_t and r_{t-1} in, PyTorch's LSTM equations, in double).
#pragma once

#include <map>
#include <vector>

#include "plan/model_plan.h"
#include "quantize/evaluation.h"
#include "quantize/gptq.h"

namespace ferry::conv {

// Moments of every weight matrix of the layers `layers` (indices into
// plan.layers), by tensor index. The plan's dtypes are ignored: the fp32
// model is run.
std::map<int, InputMoments> collect_moments(const ModelPlan& plan, const EvalInput& in,
                                            const std::vector<int>& layers);

}  // namespace ferry::conv
