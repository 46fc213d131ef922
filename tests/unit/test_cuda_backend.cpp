// The CUDA backend on a GPU, through the C API (besides the shared body of
// test_backends.cpp, which runs it against `reference` on every case):
// two sessions on two streams at once, the persistent kernel against the
// graph replay and the zero-copy path against the copy path bit for bit,
// ferry_step against ferry_run, the state round trip, the memory report and
// a caller's device allocator, the errors (no device memory, a released
// session, a device that does not exist) with the CUDA error text, and
// every kernel of every op and weight type once (EveryOpAndDtypeOnce: what
// scripts/gpu-check.sh runs under compute-sanitizer).
//
// Every test skips, with the reason, where the CUDA backend cannot run: a
// build without FERRY_CUDA, or no GPU visible (no driver, no device).
// These tests have been compiled but, at the time of writing, never run:
// no GPU was available to the author (README, "CUDA backend").
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#if defined(FERRY_TEST_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "ferry/ferry.h"
#include "compare.h"
#include "session.h"
#include "op_fixtures.h"
#include "plan/quantization.h"
#include "random_models.h"
#include "plan/selftest_plan.h"
#include "writer/model_writer.h"

namespace {

using ferry::test::bit_equal;
using ferry::test::AlignedBytes;
using ferry::test::LayerSpec;
using ferry::test::ModelSpec;
using L = ferry::conv::LayerOp;

// A model loaded from bytes the helper owns; with the golden self-test
// vectors `ferry convert` stores when asked.
struct Model {
  AlignedBytes bytes;
  ferry_model* model = nullptr;
  ferry_model_info info{};
  explicit Model(const ModelSpec& spec, bool vectors = false) {
    ferry::conv::ModelPlan plan = ferry::test::make_plan(spec);
    if (vectors) ferry::conv::plan_selftest(plan);
    // build_model runs the runtime once: the golden output is filled in.
    std::vector<uint8_t> b = ferry::conv::build_model(plan).to_vector();
    bytes = AlignedBytes(b.data(), b.size());
    EXPECT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &model), FERRY_OK) << ferry_last_error();
    info.struct_size = sizeof(info);
    if (model) ferry_model_get_info(model, &info);
  }
  ~Model() { ferry_model_free(model); }
};

ferry_session_options cuda_options(size_t batch, size_t seq) {
  return ferry::test::session_options(FERRY_BACKEND_CUDA, batch, seq);
}

// A CUDA session in its own arena, released at the end.
struct Session : ferry::test::ArenaSession {
  Session(const Model& m, const ferry_session_options& o) : ArenaSession(m.model, o) {}

  std::vector<float> run(const Model& m, const std::vector<float>& x, size_t batch, size_t seq,
                         const std::vector<int32_t>& lengths = {}) {
    size_t n = 0;
    EXPECT_EQ(ferry_output_floats(m.model, batch, seq, &n), FERRY_OK);
    std::vector<float> y(n, -7.0f);
    EXPECT_EQ(ferry_run(s, x.data(), batch, seq, lengths.empty() ? nullptr : lengths.data(), y.data(), y.size()),
              FERRY_OK)
        << ferry_last_error();
    return y;
  }
  std::vector<float> state(const Model& m, size_t batch) {
    std::vector<float> v(batch * m.info.state_floats);
    EXPECT_EQ(ferry_state_get(s, batch, v.data(), v.size()), FERRY_OK) << ferry_last_error();
    return v;
  }
};

ModelSpec lstm_spec(uint32_t in, uint32_t hidden, uint32_t layers, bool batch_first, uint64_t seed,
                    uint32_t proj = 0) {
  ModelSpec spec;
  spec.input_size = in;
  spec.batch_first = batch_first;
  spec.seed = seed;
  LayerSpec l;
  l.op = L::LSTM, l.size = hidden, l.num_layers = layers, l.proj = proj;
  LayerSpec fc;
  fc.op = L::Linear, fc.size = 5;
  spec.layers = {l, fc};
  return spec;
}

std::vector<float> inputs(size_t n, uint64_t seed) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = ferry::test::uniform_pm1(seed, 9, i);
  return x;
}

// The reason the CUDA backend cannot run here, or "" when it can.
std::string unavailable() {
  Model m(lstm_spec(4, 8, 1, false, 1));
  const ferry_session_options o = cuda_options(1, 1);
  size_t need = 0;
  if (ferry_session_arena_size(m.model, &o, &need) == FERRY_OK) return "";
  return ferry_last_error();
}

#define REQUIRE_CUDA()                                                  \
  do {                                                                  \
    const std::string why = unavailable();                              \
    if (!why.empty()) GTEST_SKIP() << "CUDA backend unavailable: " << why; \
  } while (0)

// Sets an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// Two sessions of one model on their own streams, driven at the same time
// from two threads: each gives exactly what it gives alone.
TEST(CudaBackend, TwoSessionsOnTwoStreamsAtOnce) {
  REQUIRE_CUDA();
  Model m(lstm_spec(16, 128, 2, true, 3));
  const size_t B = 4, T = 33;
  const std::vector<float> xa = inputs(B * T * 16, 1), xb = inputs(B * T * 16, 2);
  std::vector<float> want_a, want_b;
  {
    Session s(m, cuda_options(B, T));
    ASSERT_EQ(s.status, FERRY_OK) << s.error;
    want_a = s.run(m, xa, B, T);
    ASSERT_EQ(ferry_state_reset(s.s), FERRY_OK);
    want_b = s.run(m, xb, B, T);
  }
  Session a(m, cuda_options(B, T)), b(m, cuda_options(B, T));
  ASSERT_EQ(a.status, FERRY_OK) << a.error;
  ASSERT_EQ(b.status, FERRY_OK) << b.error;
  constexpr int kRounds = 20;
  int bad_a = 0, bad_b = 0;
  const auto drive = [&m, B, T](Session* s, const std::vector<float>* x, const std::vector<float>* want, int* bad) {
    for (int r = 0; r < kRounds; ++r) {
      if (ferry_state_reset(s->s) != FERRY_OK) ++*bad;
      if (!bit_equal(s->run(m, *x, B, T), *want)) ++*bad;
    }
  };
  std::thread ta(drive, &a, &xa, &want_a, &bad_a), tb(drive, &b, &xb, &want_b, &bad_b);
  ta.join();
  tb.join();
  EXPECT_EQ(bad_a, 0);
  EXPECT_EQ(bad_b, 0);
}

// The persistent kernel (default where W_hh fits) and the CUDA Graph
// replay (FERRY_CUDA_RECURRENCE=graph), copy and zero-copy paths, whole
// sequence and step by step: the same bits.
TEST(CudaBackend, PersistentGraphZeroCopyAndStepAgreeBitForBit) {
  REQUIRE_CUDA();
  for (uint32_t hidden : {64u, 256u}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden));
    Model m(lstm_spec(32, hidden, 2, false, hidden));
    const size_t B = 2, T = 40;
    const std::vector<float> x = inputs(T * B * 32, 5);
    Session base(m, cuda_options(B, T));
    ASSERT_EQ(base.status, FERRY_OK) << base.error;
    const std::vector<float> want = base.run(m, x, B, T);
    const std::vector<float> want_state = base.state(m, B);
    {
      ScopedEnv env("FERRY_CUDA_RECURRENCE", "graph");
      Session graph(m, cuda_options(B, T));
      ASSERT_EQ(graph.status, FERRY_OK) << graph.error;
      EXPECT_TRUE(bit_equal(graph.run(m, x, B, T), want)) << "graph replay";
      EXPECT_TRUE(bit_equal(graph.state(m, B), want_state));
    }
    ferry_session_options zo = cuda_options(B, T);
    zo.device_io = FERRY_DEVICE_IO_ZERO_COPY;
    Session zero(m, zo);
    if (zero.status == FERRY_UNSUPPORTED) {
      std::printf("zero copy not testable here: %s\n", zero.error.c_str());
    } else {
      ASSERT_EQ(zero.status, FERRY_OK) << zero.error;
      EXPECT_TRUE(bit_equal(zero.run(m, x, B, T), want)) << "zero copy";
    }
    Session stream(m, cuda_options(B, 1));
    ASSERT_EQ(stream.status, FERRY_OK) << stream.error;
    std::vector<float> steps;
    for (size_t t = 0; t < T; ++t) {
      const std::vector<float> xt(x.begin() + t * B * 32, x.begin() + (t + 1) * B * 32);
      const std::vector<float> yt = stream.run(m, xt, B, 1);
      steps.insert(steps.end(), yt.begin(), yt.end());
    }
    EXPECT_TRUE(bit_equal(steps, want)) << "ferry_step vs ferry_run";
    EXPECT_TRUE(bit_equal(stream.state(m, B), want_state));
  }
}

// ferry_state_get / set / reset copy the state resident on the GPU: half a
// sequence, the state moved to another session, the other half there.
TEST(CudaBackend, StateRoundTrips) {
  REQUIRE_CUDA();
  Model m(lstm_spec(8, 48, 2, true, 7, 20));
  const size_t B = 3, T = 10, I = 8;
  const std::vector<float> x = inputs(B * T * I, 8);  // batch-first [B][T][I]
  std::vector<float> first(B * T / 2 * I), second(B * T / 2 * I);
  for (size_t b = 0; b < B; ++b) {
    std::memcpy(&first[b * T / 2 * I], &x[b * T * I], T / 2 * I * sizeof(float));
    std::memcpy(&second[b * T / 2 * I], &x[(b * T + T / 2) * I], T / 2 * I * sizeof(float));
  }
  Session whole(m, cuda_options(B, T)), s1(m, cuda_options(B, T)), s2(m, cuda_options(B, T));
  ASSERT_EQ(whole.status, FERRY_OK) << whole.error;
  const std::vector<float> want = whole.run(m, x, B, T);
  s1.run(m, first, B, T / 2);
  std::vector<float> state = s1.state(m, B);
  ASSERT_EQ(ferry_state_set(s2.s, B, state.data(), state.size()), FERRY_OK) << ferry_last_error();
  const std::vector<float> tail = s2.run(m, second, B, T / 2);
  for (size_t b = 0; b < B; ++b) {
    EXPECT_EQ(std::memcmp(&tail[b * T / 2 * 5], &want[(b * T + T / 2) * 5], T / 2 * 5 * sizeof(float)), 0) << b;
  }
  EXPECT_TRUE(bit_equal(s2.state(m, B), whole.state(m, B)));
  ASSERT_EQ(ferry_state_reset(whole.s), FERRY_OK);
  EXPECT_EQ(whole.state(m, B), std::vector<float>(B * m.info.state_floats, 0.0f));
}

#if defined(FERRY_TEST_HAVE_CUDA)
struct CountingAllocator {
  int allocations = 0, deallocations = 0;
  size_t bytes = 0;
  void* last = nullptr;
  bool refuse = false;
  static void* allocate(void* ctx, size_t bytes, size_t alignment) {
    CountingAllocator* a = static_cast<CountingAllocator*>(ctx);
    ++a->allocations;
    a->bytes = bytes;
    if (a->refuse) return nullptr;
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess || reinterpret_cast<uintptr_t>(p) % alignment != 0) return nullptr;
    return a->last = p;
  }
  static void deallocate(void* ctx, void* p, size_t bytes) {
    CountingAllocator* a = static_cast<CountingAllocator*>(ctx);
    ++a->deallocations;
    EXPECT_EQ(p, a->last);
    EXPECT_EQ(bytes, a->bytes);
    cudaFree(p);
  }
};
#endif

// ferry_session_memory: the arena is ferry_session_arena_size, the device
// bytes are what a caller's allocator is asked for, once, and given back
// once by ferry_session_release; results do not depend on whose memory.
TEST(CudaBackend, MemoryIsReportedAndTheCallersAllocatorIsUsed) {
  REQUIRE_CUDA();
#if defined(FERRY_TEST_HAVE_CUDA)
  Model m(lstm_spec(12, 64, 1, false, 9));
  const size_t B = 2, T = 6;
  ferry_session_options o = cuda_options(B, T);
  size_t arena = 0, host = 0, device = 0;
  ASSERT_EQ(ferry_session_arena_size(m.model, &o, &arena), FERRY_OK);
  ASSERT_EQ(ferry_session_memory(m.model, &o, &host, &device), FERRY_OK);
  EXPECT_EQ(host, arena);
  EXPECT_GT(device, 0u);
  const std::vector<float> x = inputs(T * B * 12, 10);
  std::vector<float> want;
  {
    Session plain(m, o);
    ASSERT_EQ(plain.status, FERRY_OK) << plain.error;
    want = plain.run(m, x, B, T);
  }
  CountingAllocator counter;
  const ferry_device_allocator allocator = {&counter, CountingAllocator::allocate, CountingAllocator::deallocate};
  o.device_allocator = &allocator;
  size_t device2 = 0;
  ASSERT_EQ(ferry_session_memory(m.model, &o, nullptr, &device2), FERRY_OK);
  EXPECT_EQ(device2, device);
  {
    Session s(m, o);
    ASSERT_EQ(s.status, FERRY_OK) << s.error;
    EXPECT_EQ(counter.allocations, 1);
    EXPECT_EQ(counter.bytes, device);
    EXPECT_TRUE(bit_equal(s.run(m, x, B, T), want));
    EXPECT_EQ(counter.deallocations, 0);
  }
  EXPECT_EQ(counter.deallocations, 1);
  // An allocator that has no memory: refused at init, nothing leaks.
  counter.refuse = true;
  Session refused(m, o);
  EXPECT_EQ(refused.status, FERRY_UNSUPPORTED);
  EXPECT_NE(refused.error.find("device_allocator returned NULL"), std::string::npos) << refused.error;
  EXPECT_EQ(counter.deallocations, 1);
#endif
}

// Errors are statuses with the CUDA text, never an abort or a hang.
TEST(CudaBackend, ErrorsCarryTheCudaText) {
  REQUIRE_CUDA();
  Model m(lstm_spec(4, 16, 1, false, 11));
  {
    // More device memory than any GPU has (xproj: 2^25 rows x 2048 gates,
    // 256 GiB), with a small host arena (an input of one feature, `last`).
    ModelSpec big;
    big.input_size = 1;
    LayerSpec l, last, fc;
    l.op = L::LSTM, l.size = 512, last.op = L::Last, fc.op = L::Linear, fc.size = 1;
    big.layers = {l, last, fc};
    Model mb(big);
    size_t host = 0, device = 0;
    const ferry_session_options huge = cuda_options(size_t{1} << 10, size_t{1} << 15);
    ASSERT_EQ(ferry_session_memory(mb.model, &huge, &host, &device), FERRY_OK) << ferry_last_error();
    EXPECT_GT(device, size_t{256} << 30);
    EXPECT_LT(host, size_t{256} << 20);
    Session oom(mb, huge);
  EXPECT_EQ(oom.status, FERRY_UNSUPPORTED);
  EXPECT_NE(oom.error.find("cudaMalloc"), std::string::npos) << oom.error;
  EXPECT_NE(oom.error.find("cudaErrorMemoryAllocation"), std::string::npos) << oom.error;
  }
  // A device that does not exist.
  ferry_session_options nowhere = cuda_options(1, 1);
  nowhere.device = 1000;
  Session none(m, nowhere);
  EXPECT_EQ(none.status, FERRY_INVALID_ARGUMENT);
  EXPECT_NE(none.error.find("device"), std::string::npos) << none.error;
  // A released session refuses to run.
  Session s(m, cuda_options(1, 4));
  ASSERT_EQ(s.status, FERRY_OK) << s.error;
  ASSERT_EQ(ferry_session_release(s.s), FERRY_OK);
  std::vector<float> x(16, 0.5f), y(5 * 4);
  EXPECT_EQ(ferry_run(s.s, x.data(), 1, 4, nullptr, y.data(), y.size()), FERRY_INVALID_STATE);
  EXPECT_NE(std::string(ferry_last_error()).find("released"), std::string::npos) << ferry_last_error();
  std::vector<float> state(m.info.state_floats);
  EXPECT_EQ(ferry_state_get(s.s, 1, state.data(), state.size()), FERRY_INVALID_STATE);
  EXPECT_EQ(ferry_session_release(s.s), FERRY_OK);  // twice: harmless
}

// `ferry selftest` on the GPU: the stored golden vectors through the CUDA
// backend (the CLI's path is tests/e2e/test_cuda_cli.cpp).
TEST(CudaBackend, SelftestPasses) {
  REQUIRE_CUDA();
  Model m(lstm_spec(6, 24, 2, true, 12), /*vectors=*/true);
  size_t bytes = 0;
  ASSERT_EQ(ferry_selftest_arena_size(m.model, &bytes), FERRY_OK) << ferry_last_error();
  AlignedBytes arena(bytes);
  int passed = 0;
  float error = -1;
  ASSERT_EQ(ferry_selftest(m.model, FERRY_BACKEND_CUDA, arena.data(), bytes, &passed, &error), FERRY_OK)
      << ferry_last_error();
  EXPECT_EQ(passed, 1) << error;
}


// Every kernel of every op and weight type once, small, on the GPU (what
// scripts/gpu-check.sh runs under compute-sanitizer memcheck and racecheck):
// an op fixture per kind of op and models in f16, int8 and int4 (K past a
// split and past an int4 group, a projection, a bidirectional GRU), each
// against the reference backend (1e-5 fp32, 1e-4 quantized), persistent
// kernel and graph replay bit for bit, and, where it streams, ferry_step
// against ferry_run bit for bit.
TEST(CudaBackend, EveryOpAndDtypeOnce) {
  REQUIRE_CUDA();
  struct Case {
    std::string name;
    std::vector<uint8_t> bytes;
    std::vector<float> input;
    std::vector<int32_t> tokens;
    size_t batch, seq;
    std::vector<int32_t> lengths;
    double tolerance;
  };
  std::vector<Case> cases;
  const std::set<std::string> picked = {
      "kws_crnn", "conv_reflect", "conv_replicate_dil2", "conv_depthwise_mult2", "conv_causal_lstm_seq",
      "conv_channels_first", "layernorm_after_lstm", "bn_after_gru_tm", "act_gelu_tanh", "act_gelu", "act_prelu_channel",
      "act_logsoftmax", "act_elu", "act_hardtanh", "act_silu", "act_leaky_relu", "pool_mean_lengths",
      "pool_max_lengths_tm", "embed_gru_last_int32_tm", "residual_inner_tm", "vad_causal"};
  std::vector<std::string> errors;
  for (ferry::test::OpFixtureCase& f : ferry::test::op_fixture_cases(ferry::conv::DType::F32, &errors)) {
    if (!picked.count(f.name)) continue;
    cases.push_back({f.name, f.bytes.to_vector(), f.input, f.tokens, f.batch, f.seq, f.lengths, 1e-5});
  }
  EXPECT_EQ(cases.size(), picked.size());
  using ferry::conv::LayerOp;
  for (const ferry::conv::DType dtype : {ferry::conv::DType::F16, ferry::conv::DType::I8, ferry::conv::DType::I4}) {
    ModelSpec a;
    a.input_size = 40;
    a.layers = {{LayerOp::LSTM, 300, 1, false, 260}, {LayerOp::Linear, 5}};
    a.seed = 41;
    ModelSpec b;
    b.input_size = 9;
    b.batch_first = true;
    b.layers = {{LayerOp::GRU, 70, 1, true}, {LayerOp::Last}, {LayerOp::Linear, 5}, {LayerOp::Softmax}};
    b.seed = 42;
    for (const ModelSpec& spec : {a, b}) {
      ferry::conv::ModelPlan plan = ferry::test::make_plan(spec);
      std::vector<ferry::conv::LayerPrecision> all;
      for (size_t i = 0; i < plan.layers.size(); ++i) {
        if (!plan.layers[i].cells.empty() || plan.layers[i].weight >= 0) all.push_back({static_cast<int>(i), dtype, ""});
      }
      ferry::conv::apply_precisions(plan, all);
      const size_t B = 3, T = 5;
      cases.push_back({std::string(ferry::conv::dtype_name(dtype)) + " seed " + std::to_string(spec.seed),
                       ferry::conv::build_model(plan).to_vector(), inputs(B * T * spec.input_size, spec.seed), {}, B,
                       T, {5, 2, 4}, 1e-4});
    }
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    AlignedBytes bytes(c.bytes.data(), c.bytes.size());
    ferry_model* model = nullptr;
    ASSERT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &model), FERRY_OK) << ferry_last_error();
    ferry_model_info info{};
    info.struct_size = sizeof info;
    ferry_model_get_info(model, &info);
    const std::vector<int32_t>& lengths = c.lengths;
    const auto run = [&](ferry_backend backend, size_t seq_max) {
      ferry::test::ArenaSession s(model, ferry::test::session_options(backend, c.batch, seq_max));
      EXPECT_EQ(s.status, FERRY_OK) << s.error;
      size_t n = 0;
      ferry_output_floats(model, c.batch, c.seq, &n);
      std::vector<float> y(n, -7.0f);
      const int32_t* l = lengths.empty() ? nullptr : lengths.data();
      if (s.status != FERRY_OK) return y;
      EXPECT_EQ(c.tokens.empty() ? ferry_run(s.s, c.input.data(), c.batch, c.seq, l, y.data(), n)
                                 : ferry_run_tokens(s.s, c.tokens.data(), c.batch, c.seq, l, y.data(), n),
                FERRY_OK)
          << ferry_last_error();
      return y;
    };
    const std::vector<float> want = run(FERRY_BACKEND_REFERENCE, c.seq), got = run(FERRY_BACKEND_CUDA, c.seq);
    EXPECT_LE(ferry::test::max_abs_diff(got, want), c.tolerance);
    {
      ScopedEnv graphs("FERRY_CUDA_RECURRENCE", "graph");
      EXPECT_TRUE(bit_equal(run(FERRY_BACKEND_CUDA, c.seq), got)) << "graph replay vs persistent";
    }
    if (info.streamable && info.has_time_axis && lengths.empty()) {
      ferry::test::ArenaSession st(model, ferry::test::session_options(FERRY_BACKEND_CUDA, c.batch, 1));
      ASSERT_EQ(st.status, FERRY_OK) << st.error;
      EXPECT_TRUE(bit_equal(ferry::test::step_through(st.s, info, c.input.data(), c.batch, c.seq,
                                                      c.tokens.empty() ? nullptr : c.tokens.data()),
                            got))
          << "ferry_step vs ferry_run";
      ScopedEnv resident_steps("FERRY_CUDA_STEP", "resident_only");  // refused rather than launched steps
      ferry::test::ArenaSession rs(model, ferry::test::session_options(FERRY_BACKEND_CUDA, c.batch, 1));
      ASSERT_EQ(rs.status, FERRY_OK) << rs.error;
      EXPECT_TRUE(bit_equal(ferry::test::step_through(rs.s, info, c.input.data(), c.batch, c.seq,
                                                      c.tokens.empty() ? nullptr : c.tokens.data()),
                            got))
          << "ferry_step through the resident kernel vs ferry_run";
    }
    ferry_model_free(model);
  }
}

// FERRY_CUDA_STEP=resident: ferry_step through the resident kernel gives
// the launched steps' bits in every weight type, the batch changing from
// step to step; a ferry_run in between stops it and the next step starts
// it again; the state copies run beside it; two sessions hold a kernel
// each at once; a step of a batch past max_batch is refused by the C API
// before it reaches the kernel.
TEST(CudaBackend, ResidentStepsEqualLaunchedSteps) {
  REQUIRE_CUDA();
  using ferry::conv::LayerOp;
  for (const ferry::conv::DType dtype : {ferry::conv::DType::F32, ferry::conv::DType::F16, ferry::conv::DType::I8,
                                         ferry::conv::DType::I4}) {
    ModelSpec spec = lstm_spec(24, 256, 2, false, 61, 0);
    ModelSpec gru;
    gru.input_size = 12;
    gru.layers = {{LayerOp::GRU, 96}, {LayerOp::LSTM, 40, 1, false, 16}, {LayerOp::Linear, 6}, {LayerOp::Softmax}};
    gru.seed = 62;
    for (const ModelSpec& base : {spec, gru}) {
      SCOPED_TRACE(std::string(ferry::conv::dtype_name(dtype)) + " seed " + std::to_string(base.seed));
      ferry::conv::ModelPlan plan = ferry::test::make_plan(base);
      if (dtype != ferry::conv::DType::F32) {
        std::vector<ferry::conv::LayerPrecision> all;
        for (size_t i = 0; i < plan.layers.size(); ++i) {
          if (!plan.layers[i].cells.empty() || plan.layers[i].weight >= 0) all.push_back({static_cast<int>(i), dtype, ""});
        }
        ferry::conv::apply_precisions(plan, all);
      }
      const std::vector<uint8_t> b = ferry::conv::build_model(plan).to_vector();
      AlignedBytes bytes(b.data(), b.size());
      ferry_model* model = nullptr;
      ASSERT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &model), FERRY_OK) << ferry_last_error();
      ferry_model_info info{};
      info.struct_size = sizeof info;
      ferry_model_get_info(model, &info);
      const size_t B = 3, T = 8, I = base.input_size, F = info.output_size;
      ferry::test::ArenaSession launched(model, ferry::test::session_options(FERRY_BACKEND_CUDA, B, T));
      ASSERT_EQ(launched.status, FERRY_OK) << launched.error;
      ScopedEnv env("FERRY_CUDA_STEP", "resident_only");  // refused rather than launched steps
      ferry::test::ArenaSession resident(model, ferry::test::session_options(FERRY_BACKEND_CUDA, B, T));
      ferry::test::ArenaSession other(model, ferry::test::session_options(FERRY_BACKEND_CUDA, B, T));
      ASSERT_EQ(resident.status, FERRY_OK) << resident.error;
      ASSERT_EQ(other.status, FERRY_OK) << other.error;
      const auto step = [&](ferry_session* s, const std::vector<float>& x, size_t batch) {
        std::vector<float> y(batch * F, -7.0f);
        EXPECT_EQ(ferry_step(s, x.data(), batch, y.data(), y.size()), FERRY_OK) << ferry_last_error();
        return y;
      };
      for (int round = 0; round < 2; ++round) {
        for (size_t t = 0; t < T; ++t) {
          const size_t batch = t % 3 == 1 ? 1 : t % 3 == 2 ? 2 : B;
          const std::vector<float> x = inputs(batch * I, 100 * round + t);
          const std::vector<float> want = step(launched.s, x, batch);
          EXPECT_TRUE(bit_equal(step(resident.s, x, batch), want)) << "round " << round << " step " << t;
          EXPECT_TRUE(bit_equal(step(other.s, x, batch), want)) << "the second resident session";
        }
        // A whole sequence in between: the kernel stops, then starts again.
        const std::vector<float> seq = inputs(T * B * I, 77 + round);
        size_t n = 0;
        ferry_output_floats(model, B, T, &n);
        std::vector<float> a(n), r(n);
        ASSERT_EQ(ferry_run(launched.s, seq.data(), B, T, nullptr, a.data(), n), FERRY_OK) << ferry_last_error();
        ASSERT_EQ(ferry_run(resident.s, seq.data(), B, T, nullptr, r.data(), n), FERRY_OK) << ferry_last_error();
        EXPECT_TRUE(bit_equal(a, r)) << "ferry_run after resident steps";
      }
      // The state: read, written back changed, reset.
      std::vector<float> sa(B * info.state_floats), sr(sa.size());
      ASSERT_EQ(ferry_state_get(launched.s, B, sa.data(), sa.size()), FERRY_OK);
      ASSERT_EQ(ferry_state_get(resident.s, B, sr.data(), sr.size()), FERRY_OK);
      EXPECT_TRUE(bit_equal(sa, sr));
      for (float& v : sa) v *= 0.5f;
      ASSERT_EQ(ferry_state_set(launched.s, B, sa.data(), sa.size()), FERRY_OK);
      ASSERT_EQ(ferry_state_set(resident.s, B, sa.data(), sa.size()), FERRY_OK);
      const std::vector<float> x = inputs(B * I, 999);
      EXPECT_TRUE(bit_equal(step(resident.s, x, B), step(launched.s, x, B))) << "after ferry_state_set";
      ASSERT_EQ(ferry_state_reset(launched.s), FERRY_OK);
      ASSERT_EQ(ferry_state_reset(resident.s), FERRY_OK);
      EXPECT_TRUE(bit_equal(step(resident.s, x, B), step(launched.s, x, B))) << "after ferry_state_reset";
      std::vector<float> y((B + 1) * F);
      EXPECT_EQ(ferry_step(resident.s, inputs((B + 1) * I, 5).data(), B + 1, y.data(), y.size()), FERRY_INVALID_ARGUMENT);
      EXPECT_TRUE(bit_equal(step(resident.s, x, B), step(launched.s, x, B))) << "after a refused step";
      ferry_model_free(model);
    }
  }
}

}  // namespace
