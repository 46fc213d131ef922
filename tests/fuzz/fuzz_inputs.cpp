// Fuzz target: input values only, on fixed valid models of every layer kind
// (NaN, ±Inf, huge and denormal floats come straight from the fuzzer's
// bytes). Checked on every run, as invariants:
//   - ferry_run and ferry_step return FERRY_OK;
//   - a chain ending in sigmoid gives values in [0, 1], tanh in [-1, 1] and
//     softmax in [0, 1], unless NaN;
//   - finite inputs give finite outputs on chains that start with a bounded
//     recurrent layer (weights in PyTorch's default range, |w| < 1);
//   - step-by-step equals the whole-sequence run, bit for bit;
//   - a NaN input gives NaN at the same outputs on every backend as on the
//     reference (NaN propagates through any summation order, so this does
//     not depend on rounding): no backend but xnnpack (whose output clamp
//     makes a NaN -inf, as ferry.h documents) turns a NaN into a number.
// Input layout: byte 0 picks the model, byte 1 the batch (1-3), byte 2 the
// backend (reference, auto, simd, xnnpack; one this build or CPU lacks is
// skipped); the rest are float32 values, [T, B, I] time-major.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "random_models.h"

namespace {

using ferry::conv::LayerOp;
using ferry::test::LayerSpec;
using ferry::test::ModelSpec;
using ferry::test::Runner;

enum class Range { Any, Unit, Symmetric, Distribution };

struct Model {
  std::vector<uint8_t> bytes;
  Range range;
  bool bounded_first;  // finite in, finite out
  std::unique_ptr<Runner> run[4], step[4];  // kBackends
};

constexpr size_t kMaxBatch = 3, kMaxSeq = 16;
constexpr ferry_backend kBackends[4] = {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_AUTO, FERRY_BACKEND_SIMD,
                                        FERRY_BACKEND_XNNPACK};

std::vector<Model>& models() {
  static std::vector<Model> m;
  return m;
}

LayerSpec layer(LayerOp op, uint32_t size = 0) {
  LayerSpec l;
  l.op = op;
  l.size = size;
  return l;
}

void add(std::vector<LayerSpec> layers, Range range, bool bounded_first, uint32_t input = 4) {
  ModelSpec s;
  s.input_size = input;
  s.layers = std::move(layers);
  s.seed = models().size() + 100;
  Model m;
  m.bytes = ferry::test::build_model_bytes(s);
  m.range = range;
  m.bounded_first = bounded_first;
  for (int b = 0; b < 4; ++b) {
    m.run[b] = std::make_unique<Runner>(m.bytes, kMaxBatch, kMaxSeq, kBackends[b]);
    m.step[b] = std::make_unique<Runner>(m.bytes, kMaxBatch, 1, kBackends[b]);
    const ferry_status st = m.run[b]->status();
    if (st == FERRY_UNSUPPORTED && b >= 2) {  // not in this build, or not on this CPU
      m.run[b].reset();
      m.step[b].reset();
    } else if (st != FERRY_OK || m.step[b]->status() != FERRY_OK) {
      ferry::fuzz::invariant_failed("a fixed model does not load: " + m.run[b]->last_error());
    }
  }
  models().push_back(std::move(m));
}

bool same(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  add({layer(LayerOp::LSTM, 8), layer(LayerOp::Last), layer(LayerOp::Linear, 3), layer(LayerOp::Sigmoid)},
      Range::Unit, true);
  add({layer(LayerOp::GRU, 7), layer(LayerOp::Linear, 3), layer(LayerOp::Tanh)}, Range::Symmetric, true);
  add({layer(LayerOp::RNN_TANH, 6), layer(LayerOp::Linear, 4), layer(LayerOp::Softmax)}, Range::Distribution,
      true);
  add({layer(LayerOp::RNN_RELU, 5), layer(LayerOp::ReLU)}, Range::Any, false);
  LayerSpec proj = layer(LayerOp::LSTM, 9);
  proj.proj = 3;
  proj.num_layers = 2;
  add({proj, layer(LayerOp::Identity)}, Range::Symmetric, true);
  LayerSpec bi = layer(LayerOp::GRU, 4);
  bi.bidirectional = true;
  add({bi, layer(LayerOp::Last), layer(LayerOp::Linear, 2), layer(LayerOp::Sigmoid)}, Range::Unit, true);
  add({layer(LayerOp::Linear, 6), layer(LayerOp::Tanh), layer(LayerOp::Linear, 3), layer(LayerOp::Softmax)},
      Range::Distribution, false);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (models().empty()) LLVMFuzzerInitialize(nullptr, nullptr);
  if (size < 3) return 0;
  Model& m = models()[data[0] % models().size()];
  const size_t B = 1 + data[1] % kMaxBatch;
  const int backend = data[2] % 4;
  if (!m.run[backend]) return 0;
  Runner& run = *m.run[backend];
  Runner& step = *m.step[backend];
  const ferry_model_info& info = run.info();
  const size_t floats = (size - 3) / sizeof(float);
  const size_t per_step = B * info.input_size;
  size_t T = info.has_time_axis ? floats / per_step : (floats >= per_step ? 1 : 0);
  if (T == 0) return 0;
  if (T > kMaxSeq) T = kMaxSeq;
  std::vector<float> x(T * per_step);
  std::memcpy(x.data(), data + 3, x.size() * sizeof(float));

  std::vector<float> y;
  ferry_state_reset(run.session());
  if (run.run(x, B, T, &y) != FERRY_OK) ferry::fuzz::invariant_failed(std::string("run: ") + ferry_last_error());

  bool finite_in = true;
  for (float v : x) finite_in = finite_in && std::isfinite(v);
  for (size_t i = 0; i < y.size(); ++i) {
    const float v = y[i];
    if (finite_in && m.bounded_first && !std::isfinite(v))
      ferry::fuzz::invariant_failed("finite input, non-finite output " + std::to_string(v));
    if (std::isnan(v)) continue;
    if ((m.range == Range::Unit || m.range == Range::Distribution) && !(v >= 0.0f && v <= 1.0f))
      ferry::fuzz::invariant_failed("output outside [0, 1]: " + std::to_string(v));
    if (m.range == Range::Symmetric && !(v >= -1.0f && v <= 1.0f))
      ferry::fuzz::invariant_failed("output outside [-1, 1]: " + std::to_string(v));
  }

  bool nan_in = false;
  for (float v : x) nan_in = nan_in || std::isnan(v);
  // The xnnpack backend is excluded: XNNPACK's output clamp (max(x, -inf))
  // turns a NaN into -inf, a documented difference (ferry.h, FERRY_BACKEND_XNNPACK).
  if (nan_in && backend != 0 && kBackends[backend] != FERRY_BACKEND_XNNPACK) {
    Runner& ref = *m.run[0];
    std::vector<float> want;
    ferry_state_reset(ref.session());
    if (ref.run(x, B, T, &want) != FERRY_OK) ferry::fuzz::invariant_failed("reference run failed");
    for (size_t i = 0; i < y.size(); ++i) {
      if (std::isnan(want[i]) != std::isnan(y[i]))
        ferry::fuzz::invariant_failed("NaN input: output " + std::to_string(i) + " is " + std::to_string(y[i]) +
                                      " on backend " + std::to_string(kBackends[backend]) + ", " +
                                      std::to_string(want[i]) + " on the reference");
    }
  }

  if (info.has_time_axis && info.streamable) {
    ferry_state_reset(step.session());
    std::vector<float> ys;
    for (size_t t = 0; t < T; ++t) {
      if (step.step(x.data() + t * per_step, B, &ys) != FERRY_OK)
        ferry::fuzz::invariant_failed(std::string("step: ") + ferry_last_error());
      if (!info.output_is_sequence && t + 1 < T) continue;
      const float* want = y.data() + (info.output_is_sequence ? t * B * info.output_size : 0);
      for (size_t i = 0; i < ys.size(); ++i) {
        if (!same(ys[i], want[i]))
          ferry::fuzz::invariant_failed("step " + std::to_string(t) + " differs from the whole-sequence run");
      }
    }
  }
  return 0;
}
