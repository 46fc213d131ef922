// Running a plan in memory, for the quantize stage: the evaluation input
// (--calibration, else seeded synthetic data), a model built from a plan and
// loaded by the runtime, and one whole run of it. The accuracy report
// (accuracy.h) and the calibration moments (moments.h) both run the fp32
// model through these, so both see exactly what a device computes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ferry/ferry.h"
#include "plan/model_plan.h"
#include "writer/model_bytes.h"

namespace ferry::conv {

struct QuantizeRequest;

// The evaluation input, in the model's layout: floats, or for a model
// whose first layer is an Embedding, token ids.
struct EvalInput {
  std::vector<float> x;
  std::vector<int32_t> ids;  // token ids, when `tokens`
  bool tokens = false;
  size_t batch = 0, seq = 1;
  std::string description;
  bool calibrated = false;  // from --calibration (real data), not synthetic
};

// Whether the plan's input has a time axis: a recurrent or Conv1d layer, a
// channels-first or token input, or a recorded one.
bool plan_has_time_axis(const ModelPlan& plan);

// The calibration array (checked against the model's input shape and its
// shortest input, ferry_model_info.min_seq), else seeded synthetic input:
// floats uniform in [-1, 1), or token ids uniform over the embedding's rows.
EvalInput evaluation_input(const ModelPlan& plan, const QuantizeRequest& r);

// A model built in memory (no self-test, no hash, no report) and loaded.
class LoadedModel {
 public:
  explicit LoadedModel(const ModelPlan& plan);
  ~LoadedModel();
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
  const ferry_model* get() const { return model_; }

 private:
  ModelBytes bytes_;
  ferry_model* model_ = nullptr;
};

// A session of `batch` x `seq` on the auto backend, in an arena it owns.
class Session {
 public:
  Session(const ferry_model* m, size_t batch, size_t seq);
  ferry_session* get() const { return s_; }

 private:
  std::unique_ptr<void, void (*)(void*)> arena_{nullptr, std::free};
  ferry_session* s_ = nullptr;
};

// The plan's output for the whole input (one ferry_run, or ferry_run_tokens).
std::vector<float> run_plan(const ModelPlan& plan, const EvalInput& in);

std::string runtime_error(const char* what);

}  // namespace ferry::conv
