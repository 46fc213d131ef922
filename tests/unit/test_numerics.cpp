// Numerics that never break: NaN, ±Inf, ±FLT_MAX, ±1e4, ±89 and denormal
// inputs through every layer kind never crash (this suite also runs under
// ASan + UBSan); sigmoid stays in [0, 1] and tanh in [-1, 1] for any non-NaN
// input; finite inputs give finite outputs; ferry_state_reset clears a state
// poisoned by NaN; and a 1,000,000-step stream stays within a fixed distance
// of a double-precision LSTM written here from the same weights (a numerics
// check: no NaN, no drift; not a correctness oracle, which the PyTorch
// fixtures are). Denormal-input latency is measured by
// tests/bench/bench_denormals.cpp, not here.
#ifdef FERRY_HAVE_CONVERTER  // the models are made by the converter
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "random_models.h"

namespace {

using ferry::conv::LayerOp;
using ferry::test::LayerSpec;
using ferry::test::ModelSpec;
using ferry::test::Runner;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The values the issue names, denormals of both signs and both ends included.
const std::vector<float> kSpecials = {
    kNaN,     kInf,     -kInf,    FLT_MAX,        -FLT_MAX,       1e4f,  -1e4f, 89.0f,
    -89.0f,   FLT_MIN,  -FLT_MIN, FLT_MIN / 2,    -FLT_MIN / 2,   1e-40f, -1e-40f,
    FLT_TRUE_MIN, -FLT_TRUE_MIN, 0.0f, -0.0f, 1.0f, -1.0f};

bool is_finite_special(float v) { return std::isfinite(v); }

// Every backend; the ones this build or CPU lacks are skipped.
const ferry_backend kBackends[] = {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_AUTO, FERRY_BACKEND_SIMD,
                                   FERRY_BACKEND_XNNPACK};

// Runs `body(runner, backend)` on every available backend.
template <typename F>
void for_each_backend(const std::vector<uint8_t>& bytes, size_t batch, size_t seq, F body) {
  for (ferry_backend backend : kBackends) {
    Runner r(bytes, batch, seq, backend);
    if (r.status() == FERRY_UNSUPPORTED && backend != FERRY_BACKEND_REFERENCE) continue;
    ASSERT_EQ(r.status(), FERRY_OK) << "backend " << backend << ": " << r.last_error();
    SCOPED_TRACE("backend " + std::to_string(backend));
    body(r, backend);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

std::string describe(float v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%g (0x%08x)", double(v), [&] {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  }());
  return buf;
}

struct Case {
  std::string name;
  ModelSpec spec;
};

LayerSpec layer(LayerOp op, uint32_t size = 0) {
  LayerSpec l;
  l.op = op;
  l.size = size;
  return l;
}

// Every layer kind, alone and in the chains users build.
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  auto add = [&](const std::string& name, std::vector<LayerSpec> layers, uint32_t input = 5) {
    ModelSpec s;
    s.input_size = input;
    s.layers = std::move(layers);
    s.seed = cases.size() + 11;
    cases.push_back({name, s});
  };
  const LayerOp recurrent[] = {LayerOp::LSTM, LayerOp::GRU, LayerOp::RNN_TANH, LayerOp::RNN_RELU};
  const char* names[] = {"lstm", "gru", "rnn_tanh", "rnn_relu"};
  for (int i = 0; i < 4; ++i) {
    const LayerOp op = recurrent[i];
    add(std::string(names[i]), {layer(op, 8)});
    add(std::string(names[i]) + "_last_fc_sigmoid",
        {layer(op, 8), layer(LayerOp::Last), layer(LayerOp::Linear, 3), layer(LayerOp::Sigmoid)});
    add(std::string(names[i]) + "_fc_tanh", {layer(op, 6), layer(LayerOp::Linear, 4), layer(LayerOp::Tanh)});
    LayerSpec deep = layer(op, 7);
    deep.num_layers = 2;
    deep.bidirectional = true;
    add(std::string(names[i]) + "_bi_2l_softmax", {deep, layer(LayerOp::Linear, 3), layer(LayerOp::Softmax)});
    LayerSpec nobias = layer(op, 5);
    nobias.bias = false;
    add(std::string(names[i]) + "_nobias_relu", {nobias, layer(LayerOp::ReLU)});
  }
  LayerSpec proj = layer(LayerOp::LSTM, 9);
  proj.proj = 4;
  proj.num_layers = 2;
  add("lstm_proj_2l_identity", {proj, layer(LayerOp::Identity)});
  add("linear_sigmoid", {layer(LayerOp::Linear, 6), layer(LayerOp::Sigmoid)});
  add("linear_tanh", {layer(LayerOp::Linear, 6), layer(LayerOp::Tanh)});
  add("linear_relu_linear_softmax",
      {layer(LayerOp::Linear, 6), layer(LayerOp::ReLU), layer(LayerOp::Linear, 3), layer(LayerOp::Softmax)});
  add("linear_identity", {layer(LayerOp::Linear, 2), layer(LayerOp::Identity)});
  // Trained weights are often above 1 in magnitude: w * FLT_MAX overflows.
  for (int i = 0; i < 3; ++i) {
    add(std::string(names[i]) + "_large_weights", {layer(recurrent[i], 8), layer(LayerOp::Linear, 2)});
    cases.back().spec.weight_scale = 3.0f;
  }
  return cases;
}

// Inputs for a [T, B, I] (or [B, I]) run: `fill` gives element i.
template <typename F>
std::vector<float> make_input(size_t n, F fill) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = fill(i);
  return x;
}

class EveryLayer : public ::testing::TestWithParam<Case> {};

// Each special value as the whole input, then all of them interleaved: every
// run and every step returns FERRY_OK (and the sanitizers see nothing).
TEST_P(EveryLayer, SpecialInputsNeverCrash) {
  const Case& c = GetParam();
  const std::vector<uint8_t> bytes = ferry::test::build_model_bytes(c.spec);
  const size_t B = 2, T = 4;
  for_each_backend(bytes, B, T, [&](Runner& r, ferry_backend) {
  const size_t seq = r.info().has_time_axis ? T : 1;
  const size_t n = B * seq * r.info().input_size;
  std::vector<float> out;
  for (float v : kSpecials) {
    ASSERT_EQ(ferry_state_reset(r.session()), FERRY_OK);
    ASSERT_EQ(r.run(make_input(n, [&](size_t) { return v; }), B, seq, &out), FERRY_OK)
        << describe(v) << ": " << ferry_last_error();
  }
  ASSERT_EQ(r.run(make_input(n, [&](size_t i) { return kSpecials[i % kSpecials.size()]; }), B, seq, &out),
            FERRY_OK);
  if (r.info().has_time_axis && r.info().streamable) {
    ASSERT_EQ(ferry_state_reset(r.session()), FERRY_OK);
    for (size_t t = 0; t < kSpecials.size(); ++t) {
      const std::vector<float> x(B * r.info().input_size, kSpecials[t]);
      ASSERT_EQ(r.step(x.data(), B, &out), FERRY_OK) << describe(kSpecials[t]);
    }
  }
  });
}

// Finite inputs give finite outputs, whatever their magnitude, for every
// chain whose output is bounded by construction (a recurrent layer or a
// squashing activation first). A Linear layer fed FLT_MAX legitimately
// overflows (IEEE, as PyTorch does), so Linear-first chains are held to
// inputs up to 1e4.
TEST_P(EveryLayer, FiniteInputsGiveFiniteOutputs) {
  const Case& c = GetParam();
  const std::vector<uint8_t> bytes = ferry::test::build_model_bytes(c.spec);
  const size_t B = 2, T = 4;
  for_each_backend(bytes, B, T, [&](Runner& r, ferry_backend) {
  const bool bounded_first = ferry::test::is_recurrent(c.spec.layers[0].op) &&
                             c.spec.layers[0].op != LayerOp::RNN_RELU;
  const size_t seq = r.info().has_time_axis ? T : 1;
  const size_t n = B * seq * r.info().input_size;
  std::vector<float> out;
  for (float v : kSpecials) {
    if (!is_finite_special(v)) continue;
    if (!bounded_first && std::fabs(v) > 1e4f) continue;
    // Weights above 1 times ±FLT_MAX: see LargeWeightsTimesFltMaxStayFinite.
    if (c.spec.weight_scale > 1.0f && std::fabs(v) > 1e30f) continue;
    for (int pattern = 0; pattern < 2; ++pattern) {
      ASSERT_EQ(ferry_state_reset(r.session()), FERRY_OK);
      // All the same value, then alternating signs.
      ASSERT_EQ(r.run(make_input(n, [&](size_t i) { return pattern && i % 3 == 1 ? -v : v; }), B, seq, &out),
                FERRY_OK);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_TRUE(std::isfinite(out[i])) << c.name << ": input " << describe(v) << " (pattern " << pattern
                                           << ") gives output[" << i << "] = " << out[i];
      }
    }
  }
  });
}

INSTANTIATE_TEST_SUITE_P(Numerics, EveryLayer, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// KNOWN FAILURE, disabled until the runtime fixes it (reported): with any
// weight above 1 in magnitude, a ±FLT_MAX input makes two products of one
// gate's float sum overflow to +inf and -inf; inf - inf is NaN, and the NaN
// stays in the recurrent state until ferry_state_reset. The reference kernels
// accumulate in float (kernels/reference/reference.cpp, f32_gemv); summing in
// double (or saturating each product) would keep the gates finite, and
// sigmoid/tanh then saturate as they should.
TEST(Numerics, DISABLED_LargeWeightsTimesFltMaxStayFinite) {
  for (LayerOp op : {LayerOp::LSTM, LayerOp::GRU, LayerOp::RNN_TANH}) {
    ModelSpec s;
    s.input_size = 5;
    s.layers = {layer(op, 8)};
    s.weight_scale = 3.0f;
    Runner r(ferry::test::build_model_bytes(s), 1, 1);
    ASSERT_EQ(r.status(), FERRY_OK) << r.last_error();
    const std::vector<float> x(5, FLT_MAX);
    std::vector<float> out;
    ASSERT_EQ(r.run(x, 1, 1, &out), FERRY_OK);
    for (float v : out) EXPECT_TRUE(std::isfinite(v)) << v;
  }
}

// A one-op chain applied to `values` (no weights involved); empty when the
// backend is not available.
std::vector<float> apply_op(LayerOp op, const std::vector<float>& values, ferry_backend backend) {
  ModelSpec s;
  s.input_size = static_cast<uint32_t>(values.size());
  s.layers = {layer(op)};
  Runner r(ferry::test::build_model_bytes(s), 1, 1, backend);
  if (r.status() == FERRY_UNSUPPORTED && backend != FERRY_BACKEND_REFERENCE) return {};
  EXPECT_EQ(r.status(), FERRY_OK) << r.last_error();
  std::vector<float> out;
  EXPECT_EQ(r.run(values, 1, 1, &out), FERRY_OK) << ferry_last_error();
  return out;
}

// Every 4099th float bit pattern (about a million values: every exponent,
// both signs, NaNs, infinities and denormals), plus the specials.
std::vector<float> float_sweep() {
  std::vector<float> v(kSpecials);
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099) {
    float f;
    const uint32_t bits = static_cast<uint32_t>(u);
    std::memcpy(&f, &bits, 4);
    v.push_back(f);
  }
  return v;
}

TEST(Numerics, SigmoidStaysInUnitIntervalForAnyNonNaNInput) {
  const std::vector<float> x = float_sweep();
  for (ferry_backend backend : kBackends) {
    const std::vector<float> y = apply_op(LayerOp::Sigmoid, x, backend);
    if (y.empty()) continue;
    ASSERT_EQ(y.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) continue;
      ASSERT_TRUE(y[i] >= 0.0f && y[i] <= 1.0f)
          << "backend " << backend << ": sigmoid(" << describe(x[i]) << ") = " << describe(y[i]);
    }
  }
}

TEST(Numerics, TanhStaysInUnitRangeForAnyNonNaNInput) {
  const std::vector<float> x = float_sweep();
  for (ferry_backend backend : kBackends) {
    const std::vector<float> y = apply_op(LayerOp::Tanh, x, backend);
    if (y.empty()) continue;
    ASSERT_EQ(y.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) continue;
      ASSERT_TRUE(y[i] >= -1.0f && y[i] <= 1.0f)
          << "backend " << backend << ": tanh(" << describe(x[i]) << ") = " << describe(y[i]);
    }
  }
}

TEST(Numerics, SoftmaxOfFiniteInputsIsADistribution) {
  // Rows mixing ±FLT_MAX, ±1e4, ±89 and denormals: max-subtraction must keep
  // every exponent finite.
  const std::vector<std::vector<float>> rows = {
      {FLT_MAX, -FLT_MAX, 0.0f, 1e-40f}, {1e4f, -1e4f, 89.0f, -89.0f}, {FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX},
      {-FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX}, {FLT_TRUE_MIN, -FLT_TRUE_MIN, 0.0f, -0.0f}};
  for (const auto& row : rows) {
    const std::vector<float> y = apply_op(LayerOp::Softmax, row, FERRY_BACKEND_REFERENCE);
    float sum = 0.0f;
    for (float v : y) {
      ASSERT_TRUE(v >= 0.0f && v <= 1.0f) << v;
      sum += v;
    }
    EXPECT_NEAR(sum, 1.0f, 1e-6f);
  }
}

// The recurrent state a NaN leaves behind is NaN; ferry_state_reset clears
// it completely: the next sequence is bit-identical to a fresh session's.
TEST(Numerics, StateResetClearsAPoisonedState) {
  for (LayerOp op : {LayerOp::LSTM, LayerOp::GRU, LayerOp::RNN_TANH, LayerOp::RNN_RELU}) {
    ModelSpec s;
    s.input_size = 3;
    LayerSpec l = layer(op, 6);
    l.num_layers = 2;
    s.layers = {l, layer(LayerOp::Linear, 2)};
    const std::vector<uint8_t> bytes = ferry::test::build_model_bytes(s);
    Runner poisoned(bytes, 1, 1), fresh(bytes, 1, 1);
    ASSERT_EQ(poisoned.status(), FERRY_OK) << poisoned.last_error();
    std::vector<float> out, want;
    const std::vector<float> nan_step(3, kNaN);
    ASSERT_EQ(poisoned.step(nan_step.data(), 1, &out), FERRY_OK);
    std::vector<float> state(poisoned.info().state_floats);
    ASSERT_EQ(ferry_state_get(poisoned.session(), 1, state.data(), state.size()), FERRY_OK);
    bool any_nan = false;
    for (float v : state) any_nan = any_nan || std::isnan(v);
    EXPECT_TRUE(any_nan) << "a NaN input should reach the state (else this test proves nothing)";

    ASSERT_EQ(ferry_state_reset(poisoned.session()), FERRY_OK);
    ASSERT_EQ(ferry_state_get(poisoned.session(), 1, state.data(), state.size()), FERRY_OK);
    for (float v : state) ASSERT_EQ(v, 0.0f);
    for (int t = 0; t < 20; ++t) {
      const std::vector<float> x = {0.1f * t, -0.5f, 1.0f - 0.05f * t};
      ASSERT_EQ(poisoned.step(x.data(), 1, &out), FERRY_OK);
      ASSERT_EQ(fresh.step(x.data(), 1, &want), FERRY_OK);
      ASSERT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)), 0) << "step " << t;
    }
  }
}

// --------------------------------------------------------------- stream --

// PyTorch's LSTM equations in double precision, from the same weights.
struct LstmF64 {
  uint32_t in, hidden;
  std::vector<double> w_ih, w_hh, bias;  // [4H, I], [4H, H], [4H] (b_ih + b_hh)
  std::vector<double> h, c;

  static double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

  void step(const float* x) {
    const uint32_t H = hidden;
    std::vector<double> g(4 * H);
    for (uint32_t r = 0; r < 4 * H; ++r) {
      double acc = bias[r];
      for (uint32_t k = 0; k < in; ++k) acc += w_ih[r * in + k] * x[k];
      for (uint32_t k = 0; k < H; ++k) acc += w_hh[r * H + k] * h[k];
      g[r] = acc;
    }
    for (uint32_t j = 0; j < H; ++j) {
      const double i = sigmoid(g[j]), f = sigmoid(g[H + j]), gg = std::tanh(g[2 * H + j]),
                   o = sigmoid(g[3 * H + j]);
      c[j] = f * c[j] + i * gg;
      h[j] = o * std::tanh(c[j]);
    }
  }
};

TEST(Numerics, MillionStepStreamHasNoNaNAndNoDrift) {
  ModelSpec s;
  s.input_size = 4;
  s.layers = {layer(LayerOp::LSTM, 8)};
  s.seed = 2024;
  const ferry::conv::ModelPlan plan = ferry::test::make_plan(s);
  const std::vector<uint8_t> bytes = ferry::conv::build_model(plan).to_vector();
  Runner r(bytes, 1, 1);
  ASSERT_EQ(r.status(), FERRY_OK) << r.last_error();

  const ferry::conv::CellPlan& cell = plan.layers[0].cells[0];
  LstmF64 ref{4, 8, {}, {}, {}, std::vector<double>(8, 0.0), std::vector<double>(8, 0.0)};
  for (float v : ferry::test::tensor_values(plan, cell.w_ih)) ref.w_ih.push_back(v);
  for (float v : ferry::test::tensor_values(plan, cell.w_hh)) ref.w_hh.push_back(v);
  for (float v : ferry::test::tensor_values(plan, cell.bias)) ref.bias.push_back(v);

  constexpr uint64_t kSteps = 1000000;
  constexpr uint64_t kWindow = kSteps / 10;
  double first_window = 0, last_window = 0, worst = 0;
  std::vector<float> y;
  float x[4];
  for (uint64_t t = 0; t < kSteps; ++t) {
    // Mostly in [-1, 1], with a burst of large values every 1000 steps.
    const float amp = t % 1000 < 3 ? 50.0f : 1.0f;
    for (uint32_t k = 0; k < 4; ++k) x[k] = amp * ferry::test::uniform_pm1(77, k, t);
    ASSERT_EQ(r.step(x, 1, &y), FERRY_OK);
    ref.step(x);
    double err = 0;
    for (uint32_t j = 0; j < 8; ++j) {
      ASSERT_FALSE(std::isnan(y[j])) << "step " << t;
      err = std::max(err, std::fabs(double(y[j]) - ref.h[j]));
    }
    worst = std::max(worst, err);
    if (t < kWindow) first_window = std::max(first_window, err);
    if (t >= kSteps - kWindow) last_window = std::max(last_window, err);
  }
  // float32 against float64 on a contracting recurrence: the error stays at
  // rounding level, and the last 100k steps are no worse than the first.
  EXPECT_LT(worst, 1e-4) << "max |h32 - h64| over the stream";
  EXPECT_LE(last_window, 2 * first_window + 1e-6) << "first window " << first_window << ", last " << last_window;
  std::vector<float> state(r.info().state_floats);
  ASSERT_EQ(ferry_state_get(r.session(), 1, state.data(), state.size()), FERRY_OK);
  for (uint32_t j = 0; j < 8; ++j) EXPECT_NEAR(state[8 + j], ref.c[j], 1e-3) << "cell state " << j;
  RecordProperty("max_abs_error", std::to_string(worst));
  std::printf("[ stream   ] 1e6 steps: max |h32 - h64| = %.3g (first 100k: %.3g, last 100k: %.3g)\n", worst,
              first_window, last_window);
}

}  // namespace

#endif  // FERRY_HAVE_CONVERTER
