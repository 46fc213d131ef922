// ferry.hpp, the C++ wrapper: RAII model and session over the C API, spans
// for input and output, Status carrying the C API's message. Checked on a
// PyTorch fixture (GRU, time-major, a sequence output), against PyTorch's
// output and against the C API's own behaviour.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "convert.h"
#include "ferry/ferry.hpp"
#include "io/npy.h"

namespace {

using namespace ferry::conv;

const std::string kModels = std::string(FERRY_FIXTURES_DIR) + "/models/";

// The fixture gru_seq_tanh_fc_sigmoid: GRU > tanh > fc > sigmoid, [T,B,F].
std::vector<uint8_t> fixture_model() {
  ConvertRequest request;
  request.input = kModels + "gru_seq_tanh_fc_sigmoid.pt";
  request.graph = "gru > tanh > fc > sigmoid";
  return convert(request).bytes.to_vector();
}

TEST(CppWrapper, RunMatchesPyTorchAndStepMatchesRun) {
  const std::vector<uint8_t> bytes = fixture_model();
  ferry::Model model;
  ASSERT_TRUE(ferry::Model::load(bytes.data(), bytes.size(), &model).ok());
  ASSERT_TRUE(model);
  const NpyArray x = read_npy(kModels + "gru_seq_tanh_fc_sigmoid.in.npy");
  const NpyArray want = read_npy(kModels + "gru_seq_tanh_fc_sigmoid.out.npy");
  ASSERT_EQ(x.shape.size(), 3u);
  const size_t T = x.shape[0], B = x.shape[1], I = x.shape[2];
  ASSERT_EQ(model.info().input_size, I);

  ferry::Session whole;
  const ferry::Status created = ferry::Session::create(model, ferry::SessionOptions().batch(B).seq(T), &whole);
  ASSERT_TRUE(created.ok()) << created.message;
  std::vector<float> y(model.output_floats(B, T));
  ASSERT_EQ(y.size(), want.data.size());
  const ferry::Status ran = whole.run(x.data, B, T, y);
  ASSERT_TRUE(ran.ok()) << ran.message;
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want.data[i], 1e-5) << i;

  // Streaming, in a caller-owned arena: bit-identical to the whole run.
  size_t bytes_needed = 0;
  const ferry::SessionOptions stream_options = ferry::SessionOptions().batch(B).seq(1);
  ASSERT_TRUE(ferry::Session::arena_size(model, stream_options, &bytes_needed).ok());
  std::vector<uint8_t> storage(bytes_needed + FERRY_ALIGNMENT);
  uint8_t* aligned = storage.data() + (FERRY_ALIGNMENT - reinterpret_cast<uintptr_t>(storage.data()) % FERRY_ALIGNMENT);
  ferry::Session stream;
  ASSERT_TRUE(ferry::Session::create_in(model, stream_options, ferry::Span<uint8_t>(aligned, bytes_needed), &stream).ok());
  const size_t F = model.info().output_size;
  std::vector<float> yt(B * F);
  for (size_t t = 0; t < T; ++t) {
    ASSERT_TRUE(stream.step(ferry::Span<const float>(x.data.data() + t * B * I, B * I), B, yt).ok());
    EXPECT_EQ(std::memcmp(yt.data(), y.data() + t * B * F, B * F * sizeof(float)), 0) << "step " << t;
  }

  // The state round-trips and resets.
  std::vector<float> state(B * model.info().state_floats), again(state.size());
  ASSERT_TRUE(stream.state_get(B, state).ok());
  ASSERT_TRUE(stream.state_reset().ok());
  ASSERT_TRUE(stream.state_set(B, state).ok());
  ASSERT_TRUE(stream.state_get(B, again).ok());
  EXPECT_EQ(state, again);
}

TEST(CppWrapper, FailuresCarryTheCApisStatusAndMessage) {
  const std::vector<uint8_t> bytes = fixture_model();
  ferry::Model model;
  ASSERT_TRUE(ferry::Model::load(bytes.data(), bytes.size(), &model).ok());

  ferry::Session session;
  ASSERT_TRUE(ferry::Session::create(model, ferry::SessionOptions(), &session).ok());
  std::vector<float> x(2 * model.info().input_size), y(2 * model.info().output_size);
  const ferry::Status too_big = session.step(x, 2, y);  // max_batch is 1
  EXPECT_EQ(too_big.code, FERRY_INVALID_STATE);
  EXPECT_NE(too_big.message.find("max_batch"), std::string::npos) << too_big.message;
  EXPECT_STREQ(too_big.name(), "FERRY_INVALID_STATE");

  const ferry::Status short_input = session.step(ferry::Span<const float>(x.data(), 1), 1, y);
  EXPECT_EQ(short_input.code, FERRY_INVALID_ARGUMENT);

  std::vector<uint8_t> junk(64, 0);
  ferry::Model bad;
  const ferry::Status refused = ferry::Model::load(junk.data(), junk.size(), &bad);
  EXPECT_EQ(refused.code, FERRY_INVALID_MODEL);
  EXPECT_NE(refused.message.find("file identifier"), std::string::npos) << refused.message;
  EXPECT_FALSE(bad);

  ferry::Session small;
  uint8_t* arena = static_cast<uint8_t*>(std::aligned_alloc(FERRY_ALIGNMENT, 128));
  const ferry::Status no_room =
      ferry::Session::create_in(model, ferry::SessionOptions(), ferry::Span<uint8_t>(arena, 128), &small);
  EXPECT_EQ(no_room.code, FERRY_ARENA_TOO_SMALL);
  EXPECT_FALSE(small);
  std::free(arena);
}

}  // namespace
