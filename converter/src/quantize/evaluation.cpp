#include "quantize/evaluation.h"

#include <algorithm>
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

bool plan_has_time_axis(const ModelPlan& plan) {
  bool time_axis = plan.time_axis || plan.channels_first || plan.input_is_tokens;
  for (const LayerPlan& l : plan.layers) time_axis = time_axis || is_recurrent(l.op) || l.op == LayerOp::Conv1d;
  return time_axis;
}

EvalInput evaluation_input(const ModelPlan& plan, const QuantizeRequest& r) {
  const bool time_axis = plan_has_time_axis(plan);
  // The runtime's own word on the shortest input (a conv without padding
  // needs its kernel's span).
  size_t min_seq = 1;
  {
    LoadedModel m(plan);
    ferry_model_info info{};
    info.struct_size = sizeof info;
    if (ferry_model_get_info(m.get(), &info) != FERRY_OK) throw Error(runtime_error("model info"));
    min_seq = std::max<size_t>(1, info.min_seq);
  }
  // An Embedding's rows: the ids it takes.
  const uint32_t vocabulary = plan.input_is_tokens && !plan.layers.empty() ? plan.layers[0].input_size : 0;
  EvalInput in;
  in.tokens = plan.input_is_tokens;
  if (!r.calibration) {
    in.batch = kSyntheticBatch;
    in.seq = time_axis ? std::max<size_t>(kSyntheticSeq, min_seq) : 1;
    char text[128];
    if (in.tokens) {
      uint64_t state = r.seed | 1;
      in.ids.resize(in.batch * in.seq);
      for (int32_t& id : in.ids) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;  // PCG's LCG step
        id = static_cast<int32_t>((state >> 33) % vocabulary);
      }
      std::snprintf(text, sizeof text, "synthetic token ids uniform in [0, %u), seed %llu, batch %zu x %zu steps",
                    vocabulary, static_cast<unsigned long long>(r.seed), in.batch, in.seq);
    } else {
      in.x = selftest_input(r.seed, in.batch * in.seq * plan.input_size);
      std::snprintf(text, sizeof text, "synthetic uniform [-1, 1), seed %llu, batch %zu x %zu steps",
                    static_cast<unsigned long long>(r.seed), in.batch, in.seq);
    }
    in.description = text;
    return in;
  }
  const std::string& path = *r.calibration;
  NpyArray a = read_npy(path, in.tokens);
  auto shape_text = [&a] {
    std::string got;
    for (size_t d : a.shape) got += (got.empty() ? "" : ",") + std::to_string(d);
    return "[" + got + "]";
  };
  if (in.tokens) {
    if (!a.is_ids || a.shape.size() != 2) {
      throw Error("--calibration '" + path + "': " + (a.is_ids ? "shape " + shape_text() : std::string("float32 values")) +
                  ", the model takes token ids (int32 or int64) " + (plan.batch_first ? "[B,T]" : "[T,B]"));
    }
    in.batch = plan.batch_first ? a.shape[0] : a.shape[1];
    in.seq = plan.batch_first ? a.shape[1] : a.shape[0];
    for (int32_t id : a.ids) {
      if (id < 0 || static_cast<uint32_t>(id) >= vocabulary) {
        throw Error("--calibration '" + path + "': token id " + std::to_string(id) + " outside the embedding's " +
                    std::to_string(vocabulary) + " rows");
      }
    }
    in.ids = std::move(a.ids);
  } else {
    const size_t rank = time_axis ? 3 : 2;
    if (a.shape.size() != rank || a.shape[plan.channels_first ? 1 : rank - 1] != plan.input_size) {
      throw Error("--calibration '" + path + "': shape " + shape_text() + ", the model takes " +
                  (!time_axis             ? "[B,"
                   : plan.channels_first ? "[B,"
                   : plan.batch_first    ? "[B,T,"
                                         : "[T,B,") +
                  std::to_string(plan.input_size) + (time_axis && plan.channels_first ? ",T]" : "]"));
    }
    in.batch = plan.batch_first || plan.channels_first || !time_axis ? a.shape[0] : a.shape[1];
    in.seq = !time_axis ? 1 : plan.channels_first ? a.shape[2] : plan.batch_first ? a.shape[1] : a.shape[0];
    for (float v : a.data)
      if (!std::isfinite(v)) throw Error("--calibration '" + path + "': holds NaN or Inf");
    in.x = std::move(a.data);
  }
  if (in.batch == 0 || in.seq == 0) throw Error("--calibration '" + path + "': empty array");
  if (in.seq < min_seq) {
    throw Error("--calibration '" + path + "': " + std::to_string(in.seq) + " steps; the model takes at least " +
                std::to_string(min_seq) + " (its Conv1d's kernel span)");
  }
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
  const ferry_status st = in.tokens
                              ? ferry_run_tokens(s.get(), in.ids.data(), in.batch, in.seq, nullptr, y.data(), y.size())
                              : ferry_run(s.get(), in.x.data(), in.batch, in.seq, nullptr, y.data(), y.size());
  if (st != FERRY_OK) throw Error(runtime_error("run"));
  return y;
}

}  // namespace ferry::conv
