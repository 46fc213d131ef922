// The caller's input and output buffers as the chain's first and last
// buffers (backend/cpu/executor.cpp): a time-major run's first layer reads
// the input where it lies, and a last layer that writes whole rows writes
// the output itself, unless the output overlaps what that layer reads.
// Each case against the same run on separate buffers, bit for bit, with
// sentinels after the output: a run writes exactly ferry_output_floats
// floats, and a caller who overlaps input and output gets what separate
// buffers give where the input is consumed before the output is written.
// Models come from the PyTorch fixtures through the converter; every
// backend of the CPU runs them.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "convert.h"
#include "ferry/ferry.h"
#include "io/npy.h"
#include "session.h"

namespace {

using namespace ferry::conv;

const std::string kModels = std::string(FERRY_FIXTURES_DIR) + "/models/";
constexpr float kSentinel = -12345.0f;

struct Session {
  std::vector<uint8_t> bytes;
  ferry_model* model = nullptr;
  std::optional<ferry::test::ArenaSession> session;  // released before the model is freed
  ferry_session* s = nullptr;
  ferry_model_info info{};
  Session(const std::string& name, const std::string& graph, size_t B, size_t T, ferry_backend backend) {
    ConvertRequest request;
    request.input = kModels + name + ".pt";
    request.graph = graph;
    request.selftest = SelfTestPolicy::Never;
    bytes = convert(request).bytes.to_vector();
    EXPECT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &model), FERRY_OK) << ferry_last_error();
    info.struct_size = sizeof(info);
    EXPECT_EQ(ferry_model_get_info(model, &info), FERRY_OK);
    ferry_session_options o;
    ferry_session_options_init(&o);
    o.max_batch = B;
    o.max_seq = T;
    o.backend = backend;
    session.emplace(model, o);
    EXPECT_EQ(session->status, FERRY_OK) << session->error;
    s = session->s;
  }
  ~Session() {
    session.reset();
    ferry_model_free(model);
  }
  // Runs from a reset state; the output and final state.
  void run(const float* x, size_t B, size_t T, float* y, size_t capacity, std::vector<float>* state) {
    ASSERT_EQ(ferry_state_reset(s), FERRY_OK);
    ASSERT_EQ(ferry_run(s, x, B, T, nullptr, y, capacity), FERRY_OK) << ferry_last_error();
    state->assign(B * info.state_floats, 0.0f);
    ASSERT_EQ(ferry_state_get(s, B, state->data(), state->size()), FERRY_OK);
  }
};

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t r = seed;
  for (float& x : v) {
    r = r * 1664525u + 1013904223u;
    x = static_cast<float>(static_cast<int32_t>(r >> 8) - (1 << 23)) / static_cast<float>(1 << 23);
  }
  return v;
}

class CallerBuffers : public ::testing::TestWithParam<ferry_backend> {};

// A one-layer LSTM with its sequence output (the W3 shape of chain): the
// layer reads the caller's input and writes the caller's output; at the
// same address (input and output overlapping from the first float), it
// must fall back to its own buffers.
TEST_P(CallerBuffers, SequenceOutputOfOneRecurrentLayer) {
  const size_t B = 3, T = 5;
  Session s("lstm_1l_tm", "lstm", B, T, GetParam());
  if (!s.s) GTEST_SKIP() << ferry_last_error();
  const size_t I = s.info.input_size, F = s.info.output_size;
  size_t out = 0;
  ASSERT_EQ(ferry_output_floats(s.model, B, T, &out), FERRY_OK);
  ASSERT_EQ(out, T * B * F);
  const std::vector<float> x = random_floats(T * B * I, 3);
  // Separate buffers, a sentinel tail after the output.
  std::vector<float> y(out + 16, kSentinel), state;
  s.run(x.data(), B, T, y.data(), out, &state);
  for (size_t i = out; i < y.size(); ++i) ASSERT_EQ(y[i], kSentinel) << "wrote past the output at " << i;
  // The same run again into the same output (the previous outputs are read
  // as nothing): the same bits.
  std::vector<float> y2 = y, state2;
  s.run(x.data(), B, T, y2.data(), out, &state2);
  EXPECT_EQ(std::memcmp(y.data(), y2.data(), y.size() * sizeof(float)), 0);
  // In place: one buffer holds the input and receives the output.
  std::vector<float> buf(std::max(out, x.size()) + 16, kSentinel);
  std::memcpy(buf.data(), x.data(), x.size() * sizeof(float));
  std::vector<float> state3;
  s.run(buf.data(), B, T, buf.data(), out, &state3);
  EXPECT_EQ(std::memcmp(buf.data(), y.data(), out * sizeof(float)), 0) << "in place";
  EXPECT_EQ(state3, state);
  // The output starting inside the input.
  std::vector<float> buf2(x.size() + out + 16, kSentinel);
  std::memcpy(buf2.data(), x.data(), x.size() * sizeof(float));
  float* y_in = buf2.data() + x.size() / 2;
  std::vector<float> state4;
  s.run(buf2.data(), B, T, y_in, out, &state4);
  EXPECT_EQ(std::memcmp(y_in, y.data(), out * sizeof(float)), 0) << "output inside the input";
  for (size_t i = x.size() / 2 + out; i < buf2.size(); ++i) ASSERT_EQ(buf2[i], kSentinel);
  // Step by step into the caller's rows: what the run gave.
  ASSERT_EQ(ferry_state_reset(s.s), FERRY_OK);
  std::vector<float> ys(B * F + 8, kSentinel);
  for (size_t t = 0; t < T; ++t) {
    ASSERT_EQ(ferry_step(s.s, x.data() + t * B * I, B, ys.data(), B * F), FERRY_OK) << ferry_last_error();
    EXPECT_EQ(std::memcmp(ys.data(), y.data() + t * B * F, B * F * sizeof(float)), 0) << "step " << t;
    for (size_t i = B * F; i < ys.size(); ++i) ASSERT_EQ(ys[i], kSentinel);
  }
}

// A last Linear after `last`: it writes the caller's output; an output
// over the (consumed) input is allowed and gives the same bits.
TEST_P(CallerBuffers, LastLinearWritesTheOutput) {
  const size_t B = 2, T = 6;
  Session s("rnn_relu", "rnn > last > fc", B, T, GetParam());
  if (!s.s) GTEST_SKIP() << ferry_last_error();
  const size_t I = s.info.input_size, F = s.info.output_size;
  size_t out = 0;
  ASSERT_EQ(ferry_output_floats(s.model, B, T, &out), FERRY_OK);
  ASSERT_EQ(out, B * F);
  const std::vector<float> x = random_floats(T * B * I, 5);
  std::vector<float> y(out + 16, kSentinel), state;
  s.run(x.data(), B, T, y.data(), out, &state);
  for (size_t i = out; i < y.size(); ++i) ASSERT_EQ(y[i], kSentinel);
  std::vector<float> buf = x, state2;
  buf.resize(x.size() + 16, kSentinel);
  s.run(buf.data(), B, T, buf.data() + 3, out, &state2);
  EXPECT_EQ(std::memcmp(buf.data() + 3, y.data(), out * sizeof(float)), 0);
  EXPECT_EQ(state2, state);
}

// A two-layer recurrent module (its layers ping-pong through the first
// buffer: the input is copied), then a Linear on every step writing the
// caller's output.
TEST_P(CallerBuffers, StackedModuleThenLinear) {
  const size_t B = 16, T = 6;
  Session s("lstm_batch16_2l_fc", "lstm > fc", B, T, GetParam());
  if (!s.s) GTEST_SKIP() << ferry_last_error();
  const size_t I = s.info.input_size, F = s.info.output_size;
  size_t out = 0;
  ASSERT_EQ(ferry_output_floats(s.model, B, T, &out), FERRY_OK);
  ASSERT_EQ(out, T * B * F);
  const std::vector<float> x = random_floats(T * B * I, 7);
  std::vector<float> y(out + 16, kSentinel), state;
  s.run(x.data(), B, T, y.data(), out, &state);
  for (size_t i = out; i < y.size(); ++i) ASSERT_EQ(y[i], kSentinel);
  std::vector<float> buf(std::max(out, x.size()) + 16, kSentinel), state2;
  std::memcpy(buf.data(), x.data(), x.size() * sizeof(float));
  s.run(buf.data(), B, T, buf.data(), out, &state2);
  EXPECT_EQ(std::memcmp(buf.data(), y.data(), out * sizeof(float)), 0) << "in place";
  EXPECT_EQ(state2, state);
}

INSTANTIATE_TEST_SUITE_P(, CallerBuffers,
                         ::testing::Values(FERRY_BACKEND_REFERENCE, FERRY_BACKEND_SIMD, FERRY_BACKEND_AUTO,
                                           FERRY_BACKEND_XNNPACK),
                         [](const ::testing::TestParamInfo<ferry_backend>& i) {
                           return std::string(ferry_backend_name(i.param));
                         });

}  // namespace
