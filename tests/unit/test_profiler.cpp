// The per-layer profiler (ferry_session_options.profiler): each layer is
// reported once per call, in chain order, begin before end; a profiled
// session computes the same bits as a plain one on every CPU backend, for
// ferry_run and ferry_step (the step program, the general step, batch > 1);
// a profiler is refused where it cannot work (the CUDA backend, a NULL
// callback) and ignored by a caller compiled against an older header.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ferry/ferry.h"
#include "random_models.h"
#include "session.h"

namespace ferry::test {
namespace {

using conv::LayerOp;

struct Recorder {
  std::vector<std::pair<size_t, int>> calls;  // (layer, end)
  static void on_layer(void* context, size_t layer, int end) {
    static_cast<Recorder*>(context)->calls.emplace_back(layer, end);
  }
};

// Every layer kind the step program and the executor treat apart: a stacked
// LSTM (two cells, one report), an activation in place, a Linear, an
// Identity-free chain ending in softmax.
ModelSpec streaming_spec() {
  ModelSpec s;
  s.input_size = 6;
  s.layers = {{LayerOp::LSTM, 24, 2}, {LayerOp::Tanh}, {LayerOp::Linear, 9}, {LayerOp::GRU, 12},
              {LayerOp::Linear, 4}, {LayerOp::Softmax}};
  return s;
}

ModelSpec collapsing_spec() {
  ModelSpec s;
  s.input_size = 5;
  s.batch_first = true;
  s.layers = {{LayerOp::GRU, 16}, {LayerOp::Last}, {LayerOp::Linear, 3}, {LayerOp::Sigmoid}};
  return s;
}

struct Loaded {
  AlignedBytes bytes;
  ferry_model* model = nullptr;
  explicit Loaded(const std::vector<uint8_t>& b) : bytes(b.data(), b.size()) {
    EXPECT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &model), FERRY_OK) << ferry_last_error();
  }
  ~Loaded() { ferry_model_free(model); }
};

// Each call: (layer, 0) then (layer, 1) for every layer of `layers`, in order.
void expect_calls(const std::vector<std::pair<size_t, int>>& calls, const std::vector<size_t>& layers,
                  size_t repeats) {
  std::vector<std::pair<size_t, int>> want;
  for (size_t r = 0; r < repeats; ++r)
    for (size_t l : layers) {
      want.emplace_back(l, 0);
      want.emplace_back(l, 1);
    }
  EXPECT_EQ(calls, want);
}

TEST(Profiler, RunReportsEveryLayerOnceInOrder) {
  const Loaded m(build_model_bytes(collapsing_spec()));
  Recorder rec;
  const ferry_profiler profiler{&rec, &Recorder::on_layer};
  ferry_session_options o = session_options(FERRY_BACKEND_REFERENCE, 2, 7);
  o.profiler = &profiler;
  ArenaSession s(m.model, o);
  ASSERT_EQ(s.status, FERRY_OK) << s.error;
  std::vector<float> x(2 * 7 * 5, 0.5f), y(2 * 3);
  ASSERT_EQ(ferry_run(s.s, x.data(), 2, 7, nullptr, y.data(), y.size()), FERRY_OK);
  ASSERT_EQ(ferry_run(s.s, x.data(), 1, 3, nullptr, y.data(), y.size()), FERRY_OK);
  expect_calls(rec.calls, {0, 1, 2, 3}, 2);
}

TEST(Profiler, StepReportsEachLayerThatWorksOnce) {
  const Loaded m(build_model_bytes(streaming_spec()));
  for (ferry_backend backend : {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_SIMD, FERRY_BACKEND_AUTO}) {
    SCOPED_TRACE(ferry_backend_name(backend));
    Recorder rec;
    const ferry_profiler profiler{&rec, &Recorder::on_layer};
    ferry_session_options o = session_options(backend, 3, 1);
    o.profiler = &profiler;
    ArenaSession s(m.model, o);
    if (s.status == FERRY_UNSUPPORTED) continue;  // no such ISA here
    ASSERT_EQ(s.status, FERRY_OK) << s.error;
    std::vector<float> x(3 * 6, 0.25f), y(3 * 4);
    ASSERT_EQ(ferry_step(s.s, x.data(), 1, y.data(), y.size()), FERRY_OK);  // the step program
    ASSERT_EQ(ferry_step(s.s, x.data(), 3, y.data(), y.size()), FERRY_OK);  // the general path
    expect_calls(rec.calls, {0, 1, 2, 3, 4, 5}, 2);
  }
  // `last` has nothing to do in a step: the step program does not report it
  // (a session without one, on the reference kernels, runs the general path,
  // which does); every other layer is reported once, in order.
  const Loaded c(build_model_bytes(collapsing_spec()));
  for (ferry_backend backend : {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_SIMD}) {
    SCOPED_TRACE(ferry_backend_name(backend));
    Recorder rec;
    const ferry_profiler profiler{&rec, &Recorder::on_layer};
    ferry_session_options o = session_options(backend, 1, 1);
    o.profiler = &profiler;
    ArenaSession s(c.model, o);
    if (s.status == FERRY_UNSUPPORTED) continue;
    ASSERT_EQ(s.status, FERRY_OK) << s.error;
    std::vector<float> x(5, 0.25f), y(3);
    ASSERT_EQ(ferry_step(s.s, x.data(), 1, y.data(), y.size()), FERRY_OK);
    if (rec.calls.size() == 8) {
      expect_calls(rec.calls, {0, 1, 2, 3}, 1);
    } else {
      expect_calls(rec.calls, {0, 2, 3}, 1);
    }
  }
}

// A profiled session computes exactly what a plain one does.
TEST(Profiler, SameBitsAsAPlainSession) {
  void* pool = ferry_threadpool_create(2);
  for (const ModelSpec& spec : {streaming_spec(), collapsing_spec()}) {
    const Loaded m(build_model_bytes(spec));
    ferry_model_info info{};
    info.struct_size = sizeof info;
    ASSERT_EQ(ferry_model_get_info(m.model, &info), FERRY_OK);
    for (ferry_backend backend : {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_SIMD, FERRY_BACKEND_XNNPACK,
                                  FERRY_BACKEND_AUTO}) {
      for (void* threads : {static_cast<void*>(nullptr), pool}) {
        SCOPED_TRACE(std::string(ferry_backend_name(backend)) + (threads ? " threaded" : ""));
        const size_t B = 4, T = 9;
        ferry_session_options o = session_options(backend, B, T, threads);
        ArenaSession plain(m.model, o);
        if (plain.status == FERRY_UNSUPPORTED) continue;
        ASSERT_EQ(plain.status, FERRY_OK) << plain.error;
        Recorder rec;
        const ferry_profiler profiler{&rec, &Recorder::on_layer};
        o.profiler = &profiler;
        ArenaSession profiled(m.model, o);
        ASSERT_EQ(profiled.status, FERRY_OK) << profiled.error;
        std::vector<float> x(B * T * spec.input_size);
        for (size_t i = 0; i < x.size(); ++i) x[i] = uniform_pm1(7, 0, i);
        size_t out = 0;
        ASSERT_EQ(ferry_output_floats(m.model, B, T, &out), FERRY_OK);
        std::vector<float> a(out), b(out);
        const int32_t lengths[4] = {9, 3, 1, 7};
        ASSERT_EQ(ferry_run(plain.s, x.data(), B, T, lengths, a.data(), a.size()), FERRY_OK);
        ASSERT_EQ(ferry_run(profiled.s, x.data(), B, T, lengths, b.data(), b.size()), FERRY_OK);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), out * sizeof(float)), 0) << "run";
        ASSERT_EQ(ferry_state_reset(plain.s), FERRY_OK);
        ASSERT_EQ(ferry_state_reset(profiled.s), FERRY_OK);
        for (size_t batch : {size_t{1}, B}) {
          for (size_t t = 0; t < 4; ++t) {
            std::vector<float> sa(info.output_size * batch), sb(sa.size());
            ASSERT_EQ(ferry_step(plain.s, x.data() + t * batch * spec.input_size, batch, sa.data(), sa.size()), FERRY_OK);
            ASSERT_EQ(ferry_step(profiled.s, x.data() + t * batch * spec.input_size, batch, sb.data(), sb.size()),
                      FERRY_OK);
            EXPECT_EQ(std::memcmp(sa.data(), sb.data(), sa.size() * sizeof(float)), 0) << "step " << t;
          }
        }
        EXPECT_FALSE(rec.calls.empty());
      }
    }
  }
  ferry_threadpool_destroy(pool);
}

TEST(Profiler, RefusedWhereItCannotWork) {
  const Loaded m(build_model_bytes(collapsing_spec()));
  Recorder rec;
  ferry_profiler profiler{&rec, &Recorder::on_layer};
  ferry_session_options o = session_options(FERRY_BACKEND_CUDA, 1, 4);
  o.profiler = &profiler;
  size_t need = 0;
  EXPECT_EQ(ferry_session_arena_size(m.model, &o, &need), FERRY_UNSUPPORTED);
  EXPECT_NE(std::string(ferry_last_error()).find("profiler"), std::string::npos) << ferry_last_error();
  ArenaSession cuda(m.model, o);
  EXPECT_EQ(cuda.status, FERRY_UNSUPPORTED);
  o = session_options(FERRY_BACKEND_REFERENCE, 1, 4);
  profiler.layer = nullptr;
  o.profiler = &profiler;
  EXPECT_EQ(ferry_session_arena_size(m.model, &o, &need), FERRY_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ferry_last_error()).find("profiler"), std::string::npos) << ferry_last_error();
}

// A caller compiled against a header without the field passes a smaller
// struct_size: whatever lies beyond it is not read.
TEST(Profiler, OlderOptionsStructIgnoresTheField) {
  const Loaded m(build_model_bytes(collapsing_spec()));
  Recorder rec;
  const ferry_profiler profiler{&rec, &Recorder::on_layer};
  ferry_session_options o = session_options(FERRY_BACKEND_REFERENCE, 1, 4);
  o.profiler = &profiler;
  o.struct_size = offsetof(ferry_session_options, profiler);
  ArenaSession s(m.model, o);
  ASSERT_EQ(s.status, FERRY_OK) << s.error;
  std::vector<float> x(4 * 5, 0.5f), y(3);
  ASSERT_EQ(ferry_run(s.s, x.data(), 1, 4, nullptr, y.data(), y.size()), FERRY_OK);
  EXPECT_TRUE(rec.calls.empty());
}

}  // namespace
}  // namespace ferry::test
