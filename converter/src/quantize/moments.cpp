#include "quantize/moments.h"

#include <Eigen/Core>
#include <cmath>

#include "error.h"

namespace ferry::conv {
namespace {

bool is_recurrent(LayerOp op) {
  return op == LayerOp::LSTM || op == LayerOp::GRU || op == LayerOp::RNN_TANH || op == LayerOp::RNN_RELU;
}
bool collapses(LayerOp op) { return op == LayerOp::Last || op == LayerOp::MeanPool || op == LayerOp::MaxPool; }
bool implies_time(LayerOp op) { return is_recurrent(op) || op == LayerOp::Conv1d; }

// Activations as [batch, steps, width] (steps 1 after `last` or pooling).
struct Activations {
  size_t batch = 0, steps = 0, width = 0;
  std::vector<float> x;
  const float* at(size_t b, size_t t) const { return x.data() + (b * steps + t) * width; }
};

// `y` in the model's layout ([B,T,F] batch-first, [T,B,F] time-major,
// [B,F,T] channels-first; [B,F] when not a sequence) as [B,T,F].
Activations to_btf(std::vector<float> y, size_t batch, size_t width, bool sequence, const ModelPlan& plan) {
  Activations a;
  a.batch = batch;
  a.width = width;
  a.steps = sequence ? y.size() / (batch * width) : 1;
  if (a.batch * a.steps * a.width != y.size()) throw Error("internal: calibration activations of an odd size");
  if (!sequence || a.steps == 1 || (plan.batch_first && !plan.channels_first)) {
    a.x = std::move(y);
    return a;
  }
  a.x.resize(y.size());
  const size_t T = a.steps, B = batch, F = width;
  for (size_t b = 0; b < B; ++b)
    for (size_t t = 0; t < T; ++t)
      for (size_t f = 0; f < F; ++f)
        a.x[(b * T + t) * F + f] = plan.channels_first ? y[(b * F + f) * T + t] : y[(t * B + b) * F + f];
  return a;
}

// The fp32 activations after layers [0, layer) and, when sub_layers > 0,
// after the first `sub_layers` stacked layers of recurrent layer `layer`.
Activations activations(const ModelPlan& plan, size_t layer, uint32_t sub_layers, const EvalInput& in) {
  bool only_saves = sub_layers == 0;
  for (size_t i = 0; i < layer && only_saves; ++i) only_saves = plan.layers[i].op == LayerOp::Save;
  if (only_saves) {  // the chain's input itself
    return to_btf(in.x, in.batch, plan.input_size, true, plan);
  }
  ModelPlan p = plan;
  for (TensorPlan& t : p.tensors) {
    t.dtype = DType::F32;
    t.rounded.reset();
  }
  p.layers.resize(layer + (sub_layers > 0 ? 1 : 0));
  if (sub_layers > 0) {
    LayerPlan& l = p.layers.back();
    const uint32_t D = l.bidirectional ? 2 : 1;
    l.num_layers = sub_layers;
    l.cells.resize(size_t{sub_layers} * D);
    l.output_size = D * (l.proj_size ? l.proj_size : l.hidden_size);
  }
  bool time_axis = plan.time_axis || plan.channels_first || plan.input_is_tokens, collapsed = false, implied = false;
  for (const LayerPlan& l : plan.layers) time_axis = time_axis || implies_time(l.op);
  for (const LayerPlan& l : p.layers) {
    collapsed = collapsed || collapses(l.op);
    implied = implied || implies_time(l.op);
  }
  p.output_size = p.layers.back().output_size;
  p.output_is_sequence = time_axis && !collapsed;
  p.time_axis = time_axis && !implied && !plan.channels_first && !plan.input_is_tokens;
  p.selftest = SelfTestPlan();
  return to_btf(run_plan(p, in), in.batch, p.output_size, p.output_is_sequence, p);
}

std::vector<float> values(const TensorPlan& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  t.fill(v.data(), 0, v.size());
  return v;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// w_hr's inputs, o_t * tanh(c_t), of direction d of an LSTM cell with a
// projection, from its inputs `x` and its projected outputs `r` (the
// runtime's), PyTorch's equations (gates i, f, g, o).
void add_unprojected(const LayerPlan& l, const CellPlan& c, uint32_t d, const ModelPlan& plan, const Activations& x,
                     const Activations& r, InputMoments& m) {
  const Eigen::Index H = l.hidden_size, P = l.proj_size, I = static_cast<Eigen::Index>(x.width);
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const std::vector<float> wih = values(plan.tensors.at(c.w_ih)), whh = values(plan.tensors.at(c.w_hh));
  const std::vector<float> bias = c.bias >= 0 ? values(plan.tensors.at(c.bias)) : std::vector<float>(4 * H, 0.0f);
  const Eigen::MatrixXd Wih = Eigen::Map<const RowMajor>(wih.data(), 4 * H, I).cast<double>();
  const Eigen::MatrixXd Whh = Eigen::Map<const RowMajor>(whh.data(), 4 * H, P).cast<double>();
  const Eigen::VectorXd b = Eigen::Map<const Eigen::VectorXf>(bias.data(), 4 * H).cast<double>();
  Eigen::VectorXd gates(4 * H), cell(H), rp(P);
  std::vector<float> h(static_cast<size_t>(H));
  for (size_t s = 0; s < x.batch; ++s) {
    cell.setZero();
    rp.setZero();
    for (size_t n = 0; n < x.steps; ++n) {
      const size_t t = d == 0 ? n : x.steps - 1 - n;
      gates = Wih * Eigen::Map<const Eigen::VectorXf>(x.at(s, t), I).cast<double>() + Whh * rp + b;
      for (Eigen::Index u = 0; u < H; ++u) {
        cell(u) = sigmoid(gates(H + u)) * cell(u) + sigmoid(gates(u)) * std::tanh(gates(2 * H + u));
        h[static_cast<size_t>(u)] = static_cast<float>(sigmoid(gates(3 * H + u)) * std::tanh(cell(u)));
      }
      m.add(h.data(), 1, static_cast<uint64_t>(H));
      rp = Eigen::Map<const Eigen::VectorXf>(r.at(s, t) + d * P, P).cast<double>();
    }
  }
}

}  // namespace

std::map<int, InputMoments> collect_moments(const ModelPlan& plan, const EvalInput& in, const std::vector<int>& layers) {
  std::map<int, InputMoments> out;
  const auto moments = [&](int tensor, uint64_t cols) -> InputMoments& {
    auto it = out.find(tensor);
    if (it == out.end()) it = out.emplace(tensor, InputMoments(static_cast<uint32_t>(cols))).first;
    return it->second;
  };
  for (int li : layers) {
    const LayerPlan& l = plan.layers.at(static_cast<size_t>(li));
    if (l.op == LayerOp::Linear && l.weight >= 0) {
      const Activations a = activations(plan, static_cast<size_t>(li), 0, in);
      moments(l.weight, a.width).add(a.x.data(), a.batch * a.steps, a.width);
      continue;
    }
    if (!is_recurrent(l.op)) continue;
    const uint32_t D = l.bidirectional ? 2 : 1;
    const uint64_t out_width = l.proj_size ? l.proj_size : l.hidden_size;
    Activations x = activations(plan, static_cast<size_t>(li), 0, in);
    for (uint32_t k = 0; k < l.num_layers; ++k) {
      Activations h = activations(plan, static_cast<size_t>(li), k + 1, in);
      for (uint32_t d = 0; d < D; ++d) {
        const CellPlan& c = l.cells.at(size_t{k} * D + d);
        if (c.w_ih >= 0) moments(c.w_ih, x.width).add(x.x.data(), x.batch * x.steps, x.width);
        if (c.w_hh >= 0) {
          InputMoments& m = moments(c.w_hh, out_width);  // all zero for one step: no input drives W_hh
          // h_{t-1}: steps 0..T-2 forward; the backward direction's previous state is step t+1.
          for (size_t s = 0; s < h.batch && h.steps > 1; ++s) m.add(h.at(s, d == 0 ? 0 : 1) + d * out_width, h.steps - 1, h.width);
        }
        if (c.w_hr >= 0) add_unprojected(l, c, d, plan, x, h, moments(c.w_hr, l.hidden_size));
      }
      x = std::move(h);
    }
  }
  return out;
}

}  // namespace ferry::conv
