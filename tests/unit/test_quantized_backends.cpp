// The runtime's guarantees for quantized models (f16, int8, int4), on every
// backend (CUDA: skipped, with the reason, where it is not built or no GPU
// is visible; test_cuda_host.cpp checks its arithmetic on the CPU), the
// same checks the f32 backend test makes: results within
// float tolerance of the reference backend (the quantized products are
// bit-identical between sets; only the nonlinearities differ), ferry_step
// bit-identical to ferry_run (output and state), the same bits on 1, 2 and 3
// threads, an exact arena (grown from 0, every smaller size refused), and
// the quantized model within a loose bound of the same model in fp32 (the
// quantization's own error: catches a scale read from the wrong row).
// Models: random_models.h plans with every weight matrix in the dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "ferry/ferry.h"
#include "compare.h"
#include "session.h"
#include "plan/quantization.h"
#include "random_models.h"
#include "writer/model_writer.h"

namespace {

using ferry::test::bit_equal;
using ferry::test::session_options;
using namespace ferry::conv;
using ferry::test::LayerSpec;
using ferry::test::ModelSpec;

struct Built {
  std::vector<uint8_t> bytes;
  ferry_model* m = nullptr;
  ferry_model_info info{};
  explicit Built(const ModelBytes& b) : bytes(b.data(), b.data() + b.size()) {
    EXPECT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &m), FERRY_OK) << ferry_last_error();
    info.struct_size = sizeof info;
    if (m) ferry_model_get_info(m, &info);
  }
  ~Built() { ferry_model_free(m); }
};

// Every weighted layer of `plan` in `dtype`.
ModelPlan quantized(ModelPlan plan, DType dtype) {
  std::vector<LayerPrecision> all;
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerPlan& l = plan.layers[i];
    if (!l.cells.empty() || l.weight >= 0) all.push_back({static_cast<int>(i), dtype, ""});
  }
  apply_precisions(plan, all);
  return plan;
}

std::vector<ModelSpec> specs() {
  using ferry::conv::LayerOp;
  std::vector<ModelSpec> out = ferry::test::mixed_dtype_specs();
  ModelSpec d;  // bidirectional LSTM (runs, does not stream)
  d.input_size = 6;
  d.layers = {{LayerOp::LSTM, 16, 1, true}, {LayerOp::Linear, 4}};
  d.seed = 14;
  out.push_back(d);
  return out;
}

struct Session : ferry::test::ArenaSession {
  Session(const Built& b, const ferry_session_options& o) : ArenaSession(b.m, o) {}
};

std::vector<float> input(const Built& b, size_t B, size_t T, uint64_t seed) {
  std::vector<float> x(B * T * b.info.input_size);
  for (size_t i = 0; i < x.size(); ++i) x[i] = ferry::test::uniform_pm1(seed, 99, i);
  return x;
}

std::vector<float> run(const Built& b, Session& s, const std::vector<float>& x, size_t B, size_t T) {
  size_t n = 0;
  EXPECT_EQ(ferry_output_floats(b.m, B, T, &n), FERRY_OK);
  std::vector<float> y(n);
  EXPECT_EQ(ferry_run(s.s, x.data(), B, T, nullptr, y.data(), y.size()), FERRY_OK) << ferry_last_error();
  return y;
}

std::vector<float> run_steps(const Built& b, Session& s, const std::vector<float>& x, size_t B, size_t T) {
  return ferry::test::step_through(s.s, b.info, x.data(), B, T);
}

// The quantization's error bound against fp32 for these models (outputs of
// tanh / softmax / small Linear layers, weights U(-1/sqrt(H), 1/sqrt(H));
// measured: int8 <= 3e-4, int4 <= 0.05, so a tenfold / twofold margin).
double bound_vs_f32(DType d) { return d == DType::F16 ? 2e-3 : d == DType::I8 ? 1e-2 : 0.1; }

using Param = std::tuple<ferry_backend, DType>;

class QuantizedBackends : public ::testing::TestWithParam<Param> {};

TEST_P(QuantizedBackends, RuntimeGuaranteesHold) {
  const auto [backend, dtype] = GetParam();
  int ran = 0;
  for (const ModelSpec& spec : specs()) {
    const ModelPlan f32_plan = ferry::test::make_plan(spec);
    const Built q(build_model(quantized(f32_plan, dtype)));
    const Built f(build_model(f32_plan));
    ASSERT_NE(q.m, nullptr);
    SCOPED_TRACE("model seed " + std::to_string(spec.seed));
    const size_t B = 3, T = 7;
    Session s(q, session_options(backend, B, T));
    if (s.status == FERRY_UNSUPPORTED) GTEST_SKIP() << "backend not available here: " << ferry_last_error();
    ASSERT_EQ(s.status, FERRY_OK) << ferry_last_error();
    ++ran;
    const std::vector<float> x = input(q, B, T, spec.seed);
    const std::vector<float> y = run(q, s, x, B, T);

    // Against the reference backend (same dtype) and against fp32.
    Session ref(q, session_options(FERRY_BACKEND_REFERENCE, B, T));
    ASSERT_EQ(ref.status, FERRY_OK) << ferry_last_error();
    EXPECT_LE(ferry::test::max_abs_diff(y, run(q, ref, x, B, T)), 1e-4) << "vs the reference backend";
    Session fs(f, session_options(FERRY_BACKEND_REFERENCE, B, T));
    EXPECT_LE(ferry::test::max_abs_diff(y, run(f, fs, x, B, T)), bound_vs_f32(dtype)) << "vs fp32";

    // Step by step == run, output and final state (batch B and batch 1).
    if (q.info.streamable) {
      Session st(q, session_options(backend, B, 1));
      ASSERT_EQ(st.status, FERRY_OK) << ferry_last_error();
      EXPECT_TRUE(bit_equal(run_steps(q, st, x, B, T), y)) << "ferry_step vs ferry_run";
      std::vector<float> s1(B * q.info.state_floats), s2(s1.size());
      ASSERT_EQ(ferry_state_get(s.s, B, s1.data(), s1.size()), FERRY_OK);
      ASSERT_EQ(ferry_state_get(st.s, B, s2.data(), s2.size()), FERRY_OK);
      EXPECT_TRUE(bit_equal(s1, s2)) << "final state";
      const std::vector<float> x1(x.begin(), x.begin() + T * q.info.input_size);
      std::vector<float> x1_layout = x1;
      if (!q.info.batch_first) {  // sample 0 of a time-major input: every B-th row
        for (size_t t = 0; t < T; ++t)
          std::memcpy(&x1_layout[t * q.info.input_size], &x[t * B * q.info.input_size],
                      q.info.input_size * sizeof(float));
      }
      Session w1(q, session_options(backend, 1, T)), s1b(q, session_options(backend, 1, 1));
      EXPECT_TRUE(bit_equal(run_steps(q, s1b, x1_layout, 1, T), run(q, w1, x1_layout, 1, T))) << "batch 1 stream";
    }

    // Threads.
    for (size_t threads : {2, 3}) {
      void* pool = ferry_threadpool_create(threads);
      if (!pool) break;
      {
        Session p(q, session_options(backend, B, T, pool));
        ASSERT_EQ(p.status, FERRY_OK);
        EXPECT_TRUE(bit_equal(run(q, p, x, B, T), y)) << threads << " threads";
      }
      ferry_threadpool_destroy(pool);
    }

    // Exact arena.
    const ferry_session_options o = session_options(backend, B, T);
    size_t need = 0;
    ASSERT_EQ(ferry_session_arena_size(q.m, &o, &need), FERRY_OK);
    ferry::test::AlignedBytes arena(need);
    for (size_t size = 0; size < need; size += FERRY_ALIGNMENT) {
      ferry_session* bad = nullptr;
      ASSERT_EQ(ferry_session_init(q.m, &o, arena.data(), size, &bad), FERRY_ARENA_TOO_SMALL) << size;
    }
    ferry_session* good = nullptr;
    ASSERT_EQ(ferry_session_init(q.m, &o, arena.data(), need, &good), FERRY_OK) << ferry_last_error();
    std::vector<float> y2(y.size());
    ASSERT_EQ(ferry_run(good, x.data(), B, T, nullptr, y2.data(), y2.size()), FERRY_OK);
    EXPECT_TRUE(bit_equal(y2, y)) << "in an arena of exactly the reported size";
  }
  EXPECT_EQ(ran, static_cast<int>(specs().size()));
}

// A model after --fallback: layers in four dtypes (int4 LSTM, int8 and f16
// Linears, an fp32 Linear), on every backend: within the reference backend,
// step == run, exact arena.
TEST(QuantizedBackendsMixed, FourDtypesInOneModel) {
  using ferry::conv::LayerOp;
  ModelSpec spec;
  spec.input_size = 12;
  spec.layers = {{LayerOp::LSTM, 40}, {LayerOp::Linear, 24}, {LayerOp::Tanh}, {LayerOp::Linear, 16},
                 {LayerOp::Linear, 6}};
  spec.seed = 21;
  ModelPlan plan = ferry::test::make_plan(spec);
  apply_precisions(plan, {{0, DType::I4, ""}, {1, DType::I8, ""}, {3, DType::F16, ""}});
  const Built q(build_model(plan));
  ASSERT_NE(q.m, nullptr);
  const size_t B = 2, T = 5;
  const std::vector<float> x = input(q, B, T, 5);
  Session ref(q, session_options(FERRY_BACKEND_REFERENCE, B, T));
  ASSERT_EQ(ref.status, FERRY_OK) << ferry_last_error();
  const std::vector<float> want = run(q, ref, x, B, T);
  for (ferry_backend b : {FERRY_BACKEND_SIMD, FERRY_BACKEND_XNNPACK, FERRY_BACKEND_AUTO, FERRY_BACKEND_CUDA}) {
    SCOPED_TRACE(ferry_backend_name(b));
    Session s(q, session_options(b, B, T));
    if (s.status == FERRY_UNSUPPORTED) continue;
    ASSERT_EQ(s.status, FERRY_OK) << ferry_last_error();
    const std::vector<float> y = run(q, s, x, B, T);
    EXPECT_LE(ferry::test::max_abs_diff(y, want), 1e-4);
    Session st(q, session_options(b, B, 1));
    EXPECT_TRUE(bit_equal(run_steps(q, st, x, B, T), y));
  }
}

// One sample through stacked layers, several chunks (64, 64, then 1 step),
// on two and three threads: the same bits as one thread. Every dtype runs
// it as a wavefront over the layers (a runner per layer, chunk by chunk, in
// place; int8 and int4 quantize into a band of rows per runner), then a
// bidirectional GRU, whose directions run side by side.
TEST_P(QuantizedBackends, StackedLayersOnThreadsGiveOneThreadsBits) {
  const auto [backend, dtype] = GetParam();
  void* probe = ferry_threadpool_create(2);
  if (!probe) GTEST_SKIP() << "built without pthreadpool";
  ferry_threadpool_destroy(probe);
  using ferry::conv::LayerOp;
  ModelSpec spec;
  spec.input_size = 12;
  spec.layers = {{LayerOp::LSTM, 40, 3}, {LayerOp::GRU, 24, 1, true}, {LayerOp::Linear, 3}};
  spec.seed = 21;
  const Built q(build_model(quantized(ferry::test::make_plan(spec), dtype)));
  ASSERT_NE(q.m, nullptr);
  const size_t B = 1, T = 129;
  const std::vector<float> x = input(q, B, T, spec.seed);
  Session one(q, session_options(backend, B, T));
  if (one.status == FERRY_UNSUPPORTED) GTEST_SKIP() << "backend not available here: " << ferry_last_error();
  ASSERT_EQ(one.status, FERRY_OK) << ferry_last_error();
  const std::vector<float> y = run(q, one, x, B, T);
  for (size_t threads : {2, 3}) {
    void* pool = ferry_threadpool_create(threads);
    ASSERT_NE(pool, nullptr);
    {
      Session p(q, session_options(backend, B, T, pool));
      ASSERT_EQ(p.status, FERRY_OK) << ferry_last_error();
      EXPECT_TRUE(bit_equal(run(q, p, x, B, T), y)) << threads << " threads";
      // The reported arena (the runners' gate rows and quantized bands) is
      // exact: one alignment step less is refused, that size runs.
      const ferry_session_options o = session_options(backend, B, T, pool);
      size_t need = 0;
      ASSERT_EQ(ferry_session_arena_size(q.m, &o, &need), FERRY_OK);
      ferry::test::AlignedBytes arena(need);
      ferry_session* s = nullptr;
      EXPECT_EQ(ferry_session_init(q.m, &o, arena.data(), need - FERRY_ALIGNMENT, &s), FERRY_ARENA_TOO_SMALL);
      ASSERT_EQ(ferry_session_init(q.m, &o, arena.data(), need, &s), FERRY_OK) << ferry_last_error();
      std::vector<float> y2(y.size());
      ASSERT_EQ(ferry_run(s, x.data(), B, T, nullptr, y2.data(), y2.size()), FERRY_OK);
      EXPECT_TRUE(bit_equal(y2, y)) << threads << " threads, in an arena of exactly the reported size";
    }
    ferry_threadpool_destroy(pool);
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(ferry_backend_name(std::get<0>(info.param))) + "_" + dtype_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(, QuantizedBackends,
                         ::testing::Combine(::testing::Values(FERRY_BACKEND_REFERENCE, FERRY_BACKEND_SIMD,
                                                              FERRY_BACKEND_XNNPACK, FERRY_BACKEND_AUTO,
                                                              FERRY_BACKEND_CUDA),
                                            ::testing::Values(DType::F16, DType::I8, DType::I4)),
                         param_name);

}  // namespace
