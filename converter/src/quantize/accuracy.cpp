#include "quantize/accuracy.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "error.h"
#include "ferry/ferry.h"
#include "io/npy.h"
#include "plan/selftest_plan.h"
#include "writer/model_writer.h"

namespace ferry::conv {
namespace {

constexpr uint32_t kSyntheticBatch = 8, kSyntheticSeq = 32;

bool is_recurrent(LayerOp op) {
  return op == LayerOp::LSTM || op == LayerOp::GRU || op == LayerOp::RNN_TANH || op == LayerOp::RNN_RELU;
}

std::string runtime_error(const char* what) { return std::string("internal: ") + what + ": " + ferry_last_error(); }

// The evaluation input, in the model's layout.
struct EvalInput {
  std::vector<float> x;
  size_t batch = 0, seq = 1;
  std::string description;
};

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
  return in;
}

// A model built in memory and loaded.
class LoadedModel {
 public:
  explicit LoadedModel(const ModelPlan& plan) {
    ModelPlan p = plan;  // no self-test, no hashing: only the weights matter here
    p.selftest = SelfTestPlan();
    p.source_sha256_async = nullptr;
    p.quantization = QuantizationPlan();
    bytes_ = build_model(p);
    if (ferry_model_load(bytes_.data(), bytes_.size(), nullptr, &model_) != FERRY_OK) {
      throw Error(runtime_error("the runtime refuses the evaluation model"));
    }
  }
  ~LoadedModel() { ferry_model_free(model_); }
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
  const ferry_model* get() const { return model_; }

 private:
  ModelBytes bytes_;
  ferry_model* model_ = nullptr;
};

class Session {
 public:
  Session(const ferry_model* m, size_t batch, size_t seq) {
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
  ferry_session* get() const { return s_; }

 private:
  std::unique_ptr<void, void (*)(void*)> arena_{nullptr, std::free};
  ferry_session* s_ = nullptr;
};

std::vector<float> run(const ModelPlan& plan, const EvalInput& in) {
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

ErrorStatsPlan compare(const std::string& name, DType dtype, const std::vector<float>& ref,
                       const std::vector<float>& got) {
  ErrorStatsPlan e;
  e.name = name;
  e.dtype = dtype;
  double sq = 0, dot = 0, rr = 0, gg = 0, worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    worst = std::isnan(d) ? INFINITY : std::max(worst, std::fabs(d));
    sq += d * d;
    dot += static_cast<double>(got[i]) * ref[i];
    rr += static_cast<double>(ref[i]) * ref[i];
    gg += static_cast<double>(got[i]) * got[i];
  }
  e.max_abs = static_cast<float>(worst);
  e.rms = static_cast<float>(ref.empty() ? 0.0 : std::sqrt(sq / ref.size()));
  e.cosine = static_cast<float>(rr > 0 && gg > 0 ? dot / std::sqrt(rr * gg) : (rr == gg ? 1.0 : 0.0));
  return e;
}

// A plan with only `precisions` applied (every other matrix F32).
ModelPlan with_precisions(const ModelPlan& plan, const std::vector<LayerPrecision>& precisions) {
  ModelPlan p = plan;
  for (TensorPlan& t : p.tensors) t.dtype = DType::F32;
  apply_precisions(p, precisions);
  return p;
}

// Streams kDriftSteps steps of batch 1 through both models.
void measure_drift(const ModelPlan& f32, const ModelPlan& quantized, const EvalInput& in, QuantizationPlan* q) {
  LoadedModel a(f32), b(quantized);
  ferry_model_info info;
  info.struct_size = sizeof info;
  if (ferry_model_get_info(a.get(), &info) != FERRY_OK) throw Error(runtime_error("model info"));
  if (!info.streamable || !info.has_time_axis) return;
  Session sa(a.get(), 1, 1), sb(b.get(), 1, 1);
  const size_t I = info.input_size, O = info.output_size;
  // The input's steps sample by sample, cycled: real data when calibrated.
  const size_t rows = in.batch * in.seq;
  std::vector<float> ya(O), yb(O);
  const size_t window = kDriftSteps / 100;
  double start = 0, end = 0;
  for (uint32_t t = 0; t < kDriftSteps; ++t) {
    const size_t r = t % rows, sample = r / in.seq, step = r % in.seq;
    const size_t at = f32.batch_first ? sample * in.seq + step : step * in.batch + sample;
    const float* x = in.x.data() + at * I;
    if (ferry_step(sa.get(), x, 1, ya.data(), O) != FERRY_OK || ferry_step(sb.get(), x, 1, yb.data(), O) != FERRY_OK) {
      throw Error(runtime_error("step"));
    }
    double sq = 0;
    for (size_t i = 0; i < O; ++i) sq += (static_cast<double>(yb[i]) - ya[i]) * (static_cast<double>(yb[i]) - ya[i]);
    if (t < window) start += sq;
    if (t >= kDriftSteps - window) end += sq;
  }
  q->drift_steps = kDriftSteps;
  q->drift_start_rms = static_cast<float>(std::sqrt(start / (window * O)));
  q->drift_end_rms = static_cast<float>(std::sqrt(end / (window * O)));
}

DType smallest(const std::vector<LayerPrecision>& precisions) {
  DType d = DType::F32;
  const auto bits = [](DType x) { return x == DType::I4 ? 4 : x == DType::I8 ? 8 : x == DType::F16 ? 16 : 32; };
  for (const LayerPrecision& p : precisions)
    if (bits(p.dtype) < bits(d)) d = p.dtype;
  return d;
}

}  // namespace

QuantizeOutcome quantize_plan(ModelPlan& plan, const QuantizeRequest& request) {
  QuantizeOutcome out;
  for (TensorPlan& t : plan.tensors) t.dtype = DType::F32;
  out.precisions = default_precisions(plan, request.dtype);
  QuantizationPlan& q = out.report;
  q.requested = precision_name(request.dtype);
  q.max_error = request.max_error.value_or(0.0f);
  const EvalInput in = evaluation_input(plan, request);
  q.input = in.description;
  const std::vector<float> ref = run(plan, in);

  // Each layer alone at its dtype: its sensitivity (and the fallback's order).
  const auto layer_error = [&](const LayerPrecision& p) {
    if (p.dtype == DType::F32) return compare(plan.layers[p.layer].name, DType::F32, ref, ref);
    return compare(plan.layers[p.layer].name, p.dtype, ref, run(with_precisions(plan, {p}), in));
  };
  std::vector<ErrorStatsPlan> alone;
  for (const LayerPrecision& p : out.precisions) alone.push_back(layer_error(p));
  ErrorStatsPlan model = compare("model", smallest(out.precisions), ref, run(with_precisions(plan, out.precisions), in));
  while (request.max_error && !(model.max_abs <= *request.max_error)) {
    // The layer whose error alone is largest, among those still quantized.
    int worst = -1;
    for (size_t i = 0; i < out.precisions.size(); ++i) {
      if (out.precisions[i].dtype == DType::F32) continue;
      if (worst < 0 || alone[i].max_abs > alone[static_cast<size_t>(worst)].max_abs) worst = static_cast<int>(i);
    }
    char text[256];
    if (!request.fallback || worst < 0) {
      std::snprintf(text, sizeof text,
                    "the quantized model's max abs error %.3g exceeds --max-error %.3g (%s)%s", model.max_abs,
                    *request.max_error, q.input.c_str(),
                    request.fallback ? "" : "; pass --fallback to keep the most sensitive layers wider");
      throw Error(text);
    }
    LayerPrecision& p = out.precisions[static_cast<size_t>(worst)];
    const DType from = p.dtype;
    p.dtype = wider_precision(from);
    std::snprintf(text, sizeof text, "%s: %s -> %s (model max abs error %.3g > %.3g; this layer alone gave %.3g)",
                  plan.layers[p.layer].name.c_str(), precision_name(from), precision_name(p.dtype), model.max_abs,
                  *request.max_error, alone[static_cast<size_t>(worst)].max_abs);
    out.decisions.push_back(text);
    p.reason = "fallback from " + std::string(precision_name(from)) + " to meet --max-error";
    alone[static_cast<size_t>(worst)] = layer_error(p);
    model = compare("model", smallest(out.precisions), ref, run(with_precisions(plan, out.precisions), in));
  }
  q.model = model;
  q.layers = alone;
  apply_precisions(plan, out.precisions);
  measure_drift(with_precisions(plan, {}), plan, in, &q);
  plan.quantization = q;
  return out;
}

}  // namespace ferry::conv
