#include "quantize/accuracy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <tuple>

#include "error.h"
#include "ferry/ferry.h"
#include "quantize/evaluation.h"
#include "quantize/gptq.h"
#include "quantize/moments.h"

namespace ferry::conv {
namespace {

bool is_integer(DType d) { return d == DType::I8 || d == DType::I4; }

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

DType smallest(const std::vector<LayerPrecision>& precisions) {
  DType d = DType::F32;
  const auto bits = [](DType x) { return x == DType::I4 ? 4 : x == DType::I8 ? 8 : x == DType::F16 ? 16 : 32; };
  for (const LayerPrecision& p : precisions)
    if (bits(p.dtype) < bits(d)) d = p.dtype;
  return d;
}

// "nearest" / "gptq" when every int8 / int4 layer is rounded so, "mixed"
// otherwise, "" without such layers.
std::string rounding_label(const std::vector<LayerPrecision>& precisions) {
  std::string label;
  for (const LayerPrecision& p : precisions) {
    if (!is_integer(p.dtype)) continue;
    const std::string r = rounding_name(p.rounding);
    label = label.empty() || label == r ? r : "mixed";
  }
  return label;
}

// Plans with precisions applied, GPTQ's roundings computed once per
// (matrix, dtype) from the moments, collected once.
class Configurations {
 public:
  Configurations(const ModelPlan& plan, const EvalInput& in, const std::vector<LayerPrecision>& layers, bool gptq,
                 const std::function<void(const std::string&)>& stage)
      : plan_(plan), stage_(stage) {
    if (!gptq) return;
    std::vector<int> which;
    for (const LayerPrecision& p : layers) {
      if (p.dtype != DType::F32) which.push_back(p.layer);  // any of them may end int8 / int4
      if (is_integer(p.dtype)) gptq_total_ += weight_matrices(plan.layers.at(static_cast<size_t>(p.layer))).size();
    }
    if (stage_) stage_("collecting the calibration moments");
    moments_ = collect_moments(plan, in, which);
  }

  // The plan with only `precisions` applied (every other matrix F32).
  ModelPlan with(const std::vector<LayerPrecision>& precisions) {
    ModelPlan p = plan_;
    for (TensorPlan& t : p.tensors) {
      t.dtype = DType::F32;
      t.rounded.reset();
    }
    apply(p, precisions);
    return p;
  }

  // apply_precisions, and GPTQ's integers where a layer asks for them.
  void apply(ModelPlan& p, const std::vector<LayerPrecision>& precisions) {
    apply_precisions(p, precisions);
    for (const LayerPrecision& lp : precisions) {
      if (!is_integer(lp.dtype) || lp.rounding != Rounding::Gptq) continue;
      for (int i : weight_matrices(p.layers.at(static_cast<size_t>(lp.layer)))) {
        p.tensors[static_cast<size_t>(i)].rounded = rounded(i, lp.dtype);
      }
    }
  }

 private:
  std::shared_ptr<const RoundedMatrix> rounded(int tensor, DType dtype) {
    auto& slot = cache_[{tensor, dtype}];
    if (slot) return slot;
    const TensorPlan& t = plan_.tensors.at(static_cast<size_t>(tensor));
    auto m = moments_.find(tensor);
    if (m == moments_.end() || t.shape.size() != 2) throw Error("internal: no calibration moments for '" + t.name + "'");
    std::vector<float> w(static_cast<size_t>(t.numel()));
    t.fill(w.data(), 0, w.size());
    // Counted against the matrices of the layers asked for; a fallback to
    // another integer dtype adds to both.
    gptq_total_ = std::max(gptq_total_, ++gptq_done_);
    if (stage_) {
      stage_("GPTQ " + std::to_string(gptq_done_) + "/" + std::to_string(gptq_total_) + " " + t.name + " (" +
             precision_name(dtype) + ")");
    }
    slot = std::make_shared<const RoundedMatrix>(round_gptq(t.name, w.data(), t.shape[0], t.shape[1], dtype,
                                                            m->second.matrix()));
    return slot;
  }

  const ModelPlan& plan_;
  const std::function<void(const std::string&)>& stage_;
  std::map<int, InputMoments> moments_;
  std::map<std::pair<int, DType>, std::shared_ptr<const RoundedMatrix>> cache_;
  size_t gptq_done_ = 0, gptq_total_ = 0;
};

// Streams kDriftSteps steps of batch 1 through the fp32 model and each of
// `quantized`, in lockstep; one (start, end) RMS pair per quantized plan.
std::vector<std::pair<float, float>> measure_drift(const ModelPlan& f32, const std::vector<ModelPlan>& quantized,
                                                   const EvalInput& in, uint32_t* steps) {
  LoadedModel a(f32);
  ferry_model_info info;
  info.struct_size = sizeof info;
  if (ferry_model_get_info(a.get(), &info) != FERRY_OK) throw Error(runtime_error("model info"));
  *steps = 0;
  if (!info.streamable || !info.has_time_axis) return {};
  *steps = kDriftSteps;
  std::vector<std::unique_ptr<LoadedModel>> models;
  std::vector<std::unique_ptr<Session>> sessions;
  for (const ModelPlan& q : quantized) {
    models.push_back(std::make_unique<LoadedModel>(q));
    sessions.push_back(std::make_unique<Session>(models.back()->get(), 1, 1));
  }
  Session sa(a.get(), 1, 1);
  const size_t I = info.input_size, O = info.output_size;
  // The input's steps sample by sample, cycled: real data when calibrated.
  const size_t rows = in.batch * in.seq;
  std::vector<float> ya(O), yb(O), xt(I);
  const size_t window = kDriftSteps / 100;
  std::vector<double> start(quantized.size(), 0.0), end(quantized.size(), 0.0);
  for (uint32_t t = 0; t < kDriftSteps; ++t) {
    const size_t r = t % rows, sample = r / in.seq, step = r % in.seq;
    const size_t at = f32.batch_first || f32.channels_first ? sample * in.seq + step : step * in.batch + sample;
    if (!in.tokens) {
      // The step's features; [B,F,T] keeps them a whole sequence apart.
      for (size_t f = 0; f < I; ++f)
        xt[f] = f32.channels_first ? in.x[(sample * I + f) * in.seq + step] : in.x[at * I + f];
    }
    const auto advance = [&](ferry_session* s, float* y) {
      const ferry_status st = in.tokens ? ferry_step_tokens(s, in.ids.data() + at, 1, y, O)
                                        : ferry_step(s, xt.data(), 1, y, O);
      if (st != FERRY_OK) throw Error(runtime_error("step"));
    };
    advance(sa.get(), ya.data());
    for (size_t m = 0; m < sessions.size(); ++m) {
      advance(sessions[m]->get(), yb.data());
      double sq = 0;
      for (size_t i = 0; i < O; ++i) sq += (static_cast<double>(yb[i]) - ya[i]) * (static_cast<double>(yb[i]) - ya[i]);
      if (t < window) start[m] += sq;
      if (t >= kDriftSteps - window) end[m] += sq;
    }
  }
  std::vector<std::pair<float, float>> out;
  for (size_t m = 0; m < quantized.size(); ++m) {
    out.emplace_back(static_cast<float>(std::sqrt(start[m] / (window * O))),
                     static_cast<float>(std::sqrt(end[m] / (window * O))));
  }
  return out;
}

}  // namespace

QuantizeOutcome quantize_plan(ModelPlan& plan, const QuantizeRequest& request) {
  QuantizeOutcome out;
  for (TensorPlan& t : plan.tensors) {
    t.dtype = DType::F32;
    t.rounded.reset();
  }
  out.precisions = default_precisions(plan, request.dtype);
  QuantizationPlan& q = out.report;
  q.requested = precision_name(request.dtype);
  q.max_error = request.max_error.value_or(0.0f);
  const EvalInput in = evaluation_input(plan, request);
  q.input = in.description;
  if (request.rounding == Rounding::Gptq && !in.calibrated) {
    throw Error("--rounding gptq needs --calibration X.npy: GPTQ weighs each weight by the inputs it meets");
  }
  // Both roundings exist where calibration data does and int8 / int4 may be used.
  const bool both = in.calibrated && (is_integer(request.dtype) || request.rounding.has_value());
  const Rounding preferred = request.rounding.value_or(both ? Rounding::Gptq : Rounding::Nearest);
  const bool may_switch = both && !request.rounding;  // --fallback may take the other rounding
  for (LayerPrecision& p : out.precisions) p.rounding = preferred;
  const std::vector<float> ref = run_plan(plan, in);
  Configurations configs(plan, in, out.precisions, both, request.stage);

  // Each layer alone at its dtype and rounding: its sensitivity (and the
  // fallback's order); measured once per (layer, dtype, rounding).
  std::map<std::tuple<int, DType, Rounding>, ErrorStatsPlan> alone_cache;
  const auto layer_error = [&](LayerPrecision p) {
    if (!is_integer(p.dtype)) p.rounding = Rounding::Nearest;  // no rounding choice
    auto& slot = alone_cache[{p.layer, p.dtype, p.rounding}];
    if (slot.name.empty()) {
      const std::string& name = plan.layers[static_cast<size_t>(p.layer)].name;
      if (request.stage && p.dtype != DType::F32) {
        request.stage("measuring " + name + " alone at " + precision_name(p.dtype) +
                      (is_integer(p.dtype) ? std::string(" ") + rounding_name(p.rounding) : std::string()));
      }
      slot = p.dtype == DType::F32 ? compare(name, DType::F32, ref, ref)
                                   : compare(name, p.dtype, ref, run_plan(configs.with({p}), in));
      if (is_integer(p.dtype)) slot.rounding = rounding_name(p.rounding);
    }
    return slot;
  };
  const auto model_error = [&](const std::vector<LayerPrecision>& precisions) {
    if (request.stage) request.stage("measuring the quantized model");
    ErrorStatsPlan e = compare("model", smallest(precisions), ref, run_plan(configs.with(precisions), in));
    e.rounding = rounding_label(precisions);
    return e;
  };
  if (may_switch) {
    // Per layer, the rounding that measured better on the calibration data
    // (RMS of the model's output with that layer alone quantized); GPTQ on
    // a tie.
    for (LayerPrecision& p : out.precisions) {
      if (!is_integer(p.dtype)) continue;
      LayerPrecision nearest = p;
      nearest.rounding = Rounding::Nearest;
      const ErrorStatsPlan g = layer_error(p), n = layer_error(nearest);
      if (n.rms < g.rms) {
        char text[160];
        std::snprintf(text, sizeof text, "(rms %.3g against gptq's %.3g on the calibration data)",
                      n.rms, g.rms);
        p.rounding = Rounding::Nearest;
        p.reason = p.reason.empty() ? text : p.reason + "; " + text;
      }
    }
  }
  std::vector<ErrorStatsPlan> alone;
  for (const LayerPrecision& p : out.precisions) alone.push_back(layer_error(p));
  ErrorStatsPlan model = model_error(out.precisions);
  while (request.max_error && !(model.max_abs <= *request.max_error)) {
    // The layer whose error alone is largest, among those still quantized.
    int worst = -1;
    for (size_t i = 0; i < out.precisions.size(); ++i) {
      if (out.precisions[i].dtype == DType::F32) continue;
      if (worst < 0 || alone[i].max_abs > alone[static_cast<size_t>(worst)].max_abs) worst = static_cast<int>(i);
    }
    char text[320];
    if (!request.fallback || worst < 0) {
      std::snprintf(text, sizeof text,
                    "the quantized model's max abs error %.3g exceeds --max-error %.3g (%s)%s", model.max_abs,
                    *request.max_error, q.input.c_str(),
                    request.fallback ? "" : "; pass --fallback to keep the most sensitive layers wider");
      throw Error(text);
    }
    const size_t w = static_cast<size_t>(worst);
    LayerPrecision& p = out.precisions[w];
    const DType from = p.dtype;
    const std::string& name = plan.layers[static_cast<size_t>(p.layer)].name;
    if (may_switch && is_integer(from)) {
      LayerPrecision other = p;
      other.rounding = p.rounding == Rounding::Gptq ? Rounding::Nearest : Rounding::Gptq;
      const ErrorStatsPlan e = layer_error(other);
      if (e.max_abs < alone[w].max_abs) {
        std::snprintf(text, sizeof text,
                      "%s: %s %s -> %s %s (model max abs error %.3g > %.3g; this layer alone gave %.3g, %.3g "
                      "rounded %s)",
                      name.c_str(), precision_name(from), rounding_name(p.rounding), precision_name(from),
                      rounding_name(other.rounding), model.max_abs, *request.max_error, alone[w].max_abs, e.max_abs,
                      rounding_name(other.rounding));
        out.decisions.push_back(text);
        p.rounding = other.rounding;
        p.reason = std::string("rounded ") + rounding_name(p.rounding) + " to meet --max-error";
        alone[w] = e;
        model = model_error(out.precisions);
        continue;
      }
    }
    p.dtype = wider_precision(from);
    p.rounding = preferred;
    std::snprintf(text, sizeof text, "%s: %s -> %s (model max abs error %.3g > %.3g; this layer alone gave %.3g)",
                  name.c_str(), precision_name(from), precision_name(p.dtype), model.max_abs, *request.max_error,
                  alone[w].max_abs);
    out.decisions.push_back(text);
    p.reason = "fallback from " + std::string(precision_name(from)) + " to meet --max-error";
    alone[w] = layer_error(p);
    model = model_error(out.precisions);
  }
  q.model = model;
  q.layers = alone;

  // Both roundings at the final dtypes, where there was a choice.
  std::vector<std::vector<LayerPrecision>> streamed = {out.precisions};
  bool any_integer = false;
  for (const LayerPrecision& p : out.precisions) any_integer = any_integer || is_integer(p.dtype);
  if (both && any_integer) {
    for (Rounding r : {Rounding::Nearest, Rounding::Gptq}) {
      std::vector<LayerPrecision> all = out.precisions;
      for (LayerPrecision& p : all) p.rounding = r;
      RoundingReport rr;
      rr.rounding = rounding_name(r);
      for (const LayerPrecision& p : all) rr.layers.push_back(layer_error(p));
      rr.model = rounding_label(all) == rounding_label(out.precisions) ? model : model_error(all);
      q.roundings.push_back(rr);
      streamed.push_back(all);
    }
  }
  // The drift of the written model and of each rounding (one stream each,
  // the fp32 model's alongside).
  std::vector<ModelPlan> plans;
  std::vector<size_t> stream_of(streamed.size());
  std::vector<std::string> labels;
  for (size_t i = 0; i < streamed.size(); ++i) {
    const std::string label = rounding_label(streamed[i]);
    size_t j = 0;
    while (j < labels.size() && labels[j] != label) ++j;
    if (j == labels.size()) {
      labels.push_back(label);
      plans.push_back(configs.with(streamed[i]));
    }
    stream_of[i] = j;
  }
  if (request.stage) request.stage("streaming 10,000 steps for the drift");
  const std::vector<std::pair<float, float>> drift = measure_drift(configs.with({}), plans, in, &q.drift_steps);
  if (q.drift_steps) {
    q.drift_start_rms = drift[stream_of[0]].first;
    q.drift_end_rms = drift[stream_of[0]].second;
    for (size_t i = 1; i < streamed.size(); ++i) {
      q.roundings[i - 1].drift_start_rms = drift[stream_of[i]].first;
      q.roundings[i - 1].drift_end_rms = drift[stream_of[i]].second;
    }
  }
  configs.apply(plan, out.precisions);
  plan.quantization = q;
  return out;
}

}  // namespace ferry::conv
