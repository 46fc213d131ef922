#include "quantize/evaluation.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "error.h"
#include "io/npy.h"
#include "plan/selftest_plan.h"
#include "quantize/accuracy.h"
#include "writer/model_writer.h"

namespace ferry::conv {
namespace {

constexpr uint32_t kSyntheticBatch = 8, kSyntheticSeq = 32;

bool is_recurrent(LayerOp op) {
  return op == LayerOp::LSTM || op == LayerOp::GRU || op == LayerOp::RNN_TANH || op == LayerOp::RNN_RELU;
}

}  // namespace

std::string runtime_error(const char* what) { return std::string("internal: ") + what + ": " + ferry_last_error(); }

EvalInput evaluation_input(const ModelPlan& plan, const QuantizeRequest& r) {
  bool time_axis = false;
  for (const LayerPlan& l : plan.layers) time_axis = time_axis || is_recurrent(l.op);
  EvalInput in;
  if (!r.calibration) {
    in.batch = kSyntheticBatch;
    in.seq = time_axis ? kSyntheticSeq : 1;
    in.x = selftest_input(r.seed, in.batch * in.seq * plan.input_size);
    char text[96];
    std::snprintf(text, sizeof text, "synthetic uniform [-1, 1), seed %llu, batch %zu x %zu steps",
                  static_cast<unsigned long long>(r.seed), in.batch, in.seq);
    in.description = text;
    return in;
  }
  NpyArray a = read_npy(*r.calibration);
  const std::string& path = *r.calibration;
  const size_t rank = time_axis ? 3 : 2;
  if (a.shape.size() != rank || a.shape.back() != plan.input_size) {
    std::string got;
    for (size_t d : a.shape) got += (got.empty() ? "" : ",") + std::to_string(d);
    throw Error("--calibration '" + path + "': shape [" + got + "], the model takes " +
                (time_axis ? (plan.batch_first ? "[B,T," : "[T,B,") : "[B,") + std::to_string(plan.input_size) + "]");
  }
  in.batch = time_axis ? (plan.batch_first ? a.shape[0] : a.shape[1]) : a.shape[0];
  in.seq = time_axis ? (plan.batch_first ? a.shape[1] : a.shape[0]) : 1;
  if (in.batch == 0 || in.seq == 0) throw Error("--calibration '" + path + "': empty array");
  for (float v : a.data)
    if (!std::isfinite(v)) throw Error("--calibration '" + path + "': holds NaN or Inf");
  in.x = std::move(a.data);
  in.description = "calibration " + path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  in.calibrated = true;
  return in;
}

LoadedModel::LoadedModel(const ModelPlan& plan) {
  ModelPlan p = plan;  // no self-test, no hashing: only the weights matter here
  p.selftest = SelfTestPlan();
  p.source_sha256_async = nullptr;
  p.quantization = QuantizationPlan();
  bytes_ = build_model(p);
  if (ferry_model_load(bytes_.data(), bytes_.size(), nullptr, &model_) != FERRY_OK) {
    throw Error(runtime_error("the runtime refuses the evaluation model"));
  }
}

LoadedModel::~LoadedModel() { ferry_model_free(model_); }

Session::Session(const ferry_model* m, size_t batch, size_t seq) {
  ferry_session_options o;
  ferry_session_options_init(&o);
  o.max_batch = batch;
  o.max_seq = seq;
  size_t bytes = 0;
  if (ferry_session_arena_size(m, &o, &bytes) != FERRY_OK) throw Error(runtime_error("arena size"));
  arena_.reset(std::aligned_alloc(FERRY_ALIGNMENT, (bytes + FERRY_ALIGNMENT - 1) / FERRY_ALIGNMENT * FERRY_ALIGNMENT));
  if (!arena_) throw Error("cannot allocate a " + std::to_string(bytes) + "-byte arena for the accuracy report");
  if (ferry_session_init(m, &o, arena_.get(), bytes, &s_) != FERRY_OK) throw Error(runtime_error("session"));
}

std::vector<float> run_plan(const ModelPlan& plan, const EvalInput& in) {
  LoadedModel m(plan);
  Session s(m.get(), in.batch, in.seq);
  size_t n = 0;
  if (ferry_output_floats(m.get(), in.batch, in.seq, &n) != FERRY_OK) throw Error(runtime_error("output size"));
  std::vector<float> y(n);
  if (ferry_run(s.get(), in.x.data(), in.batch, in.seq, nullptr, y.data(), y.size()) != FERRY_OK) {
    throw Error(runtime_error("run"));
  }
  return y;
}

}  // namespace ferry::conv
