// Runtime API behaviour, in process: verification of model bytes, the exact
// arena size, streaming against whole-sequence runs, state get/set/reset.
// Models come from the PyTorch fixtures through the converter.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "convert.h"
#include "ferry/ferry.h"
#include "io/npy.h"

namespace {

using namespace ferry::conv;

const std::string kModels = std::string(FERRY_FIXTURES_DIR) + "/models/";

std::vector<uint8_t> convert_fixture(const std::string& name, const std::string& graph, bool batch_first) {
  ConvertRequest request;
  request.input = kModels + name + ".pt";
  request.graph = graph;
  request.batch_first = batch_first;
  request.selftest = SelfTestPolicy::Never;
  return convert(request).bytes.to_vector();
}

struct AlignedBuffer {
  explicit AlignedBuffer(size_t n)
      : size(n), data(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64 + 64))) {}
  ~AlignedBuffer() { std::free(data); }
  size_t size;
  uint8_t* data;
};

struct Loaded {
  std::vector<uint8_t> bytes;
  ferry_model* model = nullptr;
  explicit Loaded(std::vector<uint8_t> b) : bytes(std::move(b)) {
    EXPECT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &model), FERRY_OK) << ferry_last_error();
  }
  ~Loaded() { ferry_model_free(model); }
};

ferry_session_options options(size_t batch, size_t seq) {
  ferry_session_options o;
  ferry_session_options_init(&o);
  o.max_batch = batch;
  o.max_seq = seq;
  return o;
}

TEST(Runtime, RejectsBytesThatAreNotAModel) {
  ferry_model* m = nullptr;
  std::vector<uint8_t> junk(256, 0xAB);
  EXPECT_EQ(ferry_model_load(junk.data(), junk.size(), nullptr, &m), FERRY_INVALID_MODEL);
  EXPECT_NE(std::strlen(ferry_last_error()), 0u);
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(ferry_model_load(nullptr, 10, nullptr, &m), FERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ferry_model_load(junk.data(), 4, nullptr, &m), FERRY_INVALID_MODEL);
}

TEST(Runtime, EveryTruncationIsRefusedCleanly) {
  const std::vector<uint8_t> bytes = convert_fixture("lstm_1l_tm", "lstm > last > fc", false);
  for (size_t n = 0; n < bytes.size(); n += 7) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    ferry_model* m = nullptr;
    EXPECT_NE(ferry_model_load(cut.data(), cut.size(), nullptr, &m), FERRY_OK) << n;
    EXPECT_EQ(m, nullptr);
  }
}

TEST(Runtime, WrongIdentifierIsNamed) {
  std::vector<uint8_t> bytes = convert_fixture("lstm_1l_tm", "lstm > last > fc", false);
  bytes[4] = 'X';
  ferry_model* m = nullptr;
  EXPECT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &m), FERRY_INVALID_MODEL);
  EXPECT_NE(std::string(ferry_last_error()).find("identifier"), std::string::npos);
}

TEST(Runtime, HandleInCallerMemory) {
  const std::vector<uint8_t> bytes = convert_fixture("lstm_1l_tm", "lstm > last > fc", false);
  AlignedBuffer handle(ferry_model_handle_size());
  ferry_model_options o{sizeof(ferry_model_options), handle.data, handle.size};
  ferry_model* m = nullptr;
  ASSERT_EQ(ferry_model_load(bytes.data(), bytes.size(), &o, &m), FERRY_OK);
  EXPECT_EQ(static_cast<void*>(m), static_cast<void*>(handle.data));
  ferry_model_free(m);  // does not free caller memory
  o.handle_memory_size = ferry_model_handle_size() - 1;
  EXPECT_EQ(ferry_model_load(bytes.data(), bytes.size(), &o, &m), FERRY_INVALID_ARGUMENT);
}

// Grows the arena from 0 in alignment steps: every size below the reported
// one is refused with FERRY_ARENA_TOO_SMALL, the reported one works. For
// every backend this machine runs (each needs its own buffers: the simd
// gate buffers, XNNPACK's packed weights), through ferry_session_arena_size;
// ferry_arena_size is the same number for the default options (auto).
TEST(Runtime, ArenaSizeIsExact) {
  for (const char* name : {"lstm_2l_bf", "gru_bi", "lstm_proj_2l"}) {
    SCOPED_TRACE(name);
    Loaded l(convert_fixture(name, std::string(name).rfind("gru", 0) == 0 ? "gru > last > fc" : "lstm > last > fc", true));
    for (ferry_backend backend : {FERRY_BACKEND_AUTO, FERRY_BACKEND_REFERENCE, FERRY_BACKEND_SIMD, FERRY_BACKEND_XNNPACK}) {
      SCOPED_TRACE(static_cast<int>(backend));
      ferry_session_options o = options(3, 9);
      o.backend = backend;
      size_t need = 0;
      const ferry_status st = ferry_session_arena_size(l.model, &o, &need);
      if (st == FERRY_UNSUPPORTED) continue;  // not on this machine or build
      ASSERT_EQ(st, FERRY_OK) << ferry_last_error();
      if (backend == FERRY_BACKEND_AUTO) {
        size_t plain = 0;
        ASSERT_EQ(ferry_arena_size(l.model, 3, 9, &plain), FERRY_OK);
        EXPECT_EQ(plain, need);
      }
      AlignedBuffer arena(need);
      for (size_t size = 0; size < need; size += FERRY_ALIGNMENT) {
        ferry_session* s = nullptr;
        ASSERT_EQ(ferry_session_init(l.model, &o, arena.data, size, &s), FERRY_ARENA_TOO_SMALL) << size;
        EXPECT_EQ(s, nullptr);
      }
      ferry_session* s = nullptr;
      EXPECT_EQ(ferry_session_init(l.model, &o, arena.data, need, &s), FERRY_OK) << ferry_last_error();
    }
  }
}

TEST(Runtime, StepByStepIsBitIdenticalToRun) {
  Loaded l(convert_fixture("lstm_2l_tm", "lstm > last > fc", false));
  const NpyArray x = read_npy(kModels + "lstm_2l_tm.in.npy");  // [T, B, I]
  const size_t T = x.shape[0], B = x.shape[1], I = x.shape[2];
  ferry_model_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(ferry_model_get_info(l.model, &info), FERRY_OK);
  size_t need = 0;
  ASSERT_EQ(ferry_arena_size(l.model, B, T, &need), FERRY_OK);
  AlignedBuffer a1(need), a2(need);
  const ferry_session_options o = options(B, T);
  ferry_session *whole = nullptr, *stream = nullptr;
  ASSERT_EQ(ferry_session_init(l.model, &o, a1.data, need, &whole), FERRY_OK);
  ASSERT_EQ(ferry_session_init(l.model, &o, a2.data, need, &stream), FERRY_OK);  // sessions share the model
  std::vector<float> y_run(B * info.output_size), y_step(B * info.output_size);
  ASSERT_EQ(ferry_run(whole, x.data.data(), B, T, nullptr, y_run.data(), y_run.size()), FERRY_OK);
  for (size_t t = 0; t < T; ++t) {
    ASSERT_EQ(ferry_step(stream, x.data.data() + t * B * I, B, y_step.data(), y_step.size()), FERRY_OK);
  }
  EXPECT_EQ(0, std::memcmp(y_run.data(), y_step.data(), y_run.size() * sizeof(float)));
  // Both sessions end in the same state.
  std::vector<float> s1(B * info.state_floats), s2(B * info.state_floats);
  ASSERT_EQ(ferry_state_get(whole, B, s1.data(), s1.size()), FERRY_OK);
  ASSERT_EQ(ferry_state_get(stream, B, s2.data(), s2.size()), FERRY_OK);
  EXPECT_EQ(0, std::memcmp(s1.data(), s2.data(), s1.size() * sizeof(float)));
}

TEST(Runtime, StateSetGetResetRoundTrip) {
  Loaded l(convert_fixture("gru_1l", "gru > last > fc", true));
  const NpyArray x = read_npy(kModels + "gru_1l.in.npy");  // [B, T, I]
  const size_t B = x.shape[0], T = x.shape[1];
  ferry_model_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(ferry_model_get_info(l.model, &info), FERRY_OK);
  size_t need = 0;
  ASSERT_EQ(ferry_arena_size(l.model, B, T, &need), FERRY_OK);
  AlignedBuffer arena(need);
  const ferry_session_options o = options(B, T);
  ferry_session* s = nullptr;
  ASSERT_EQ(ferry_session_init(l.model, &o, arena.data, need, &s), FERRY_OK);
  std::vector<float> y0(B * info.output_size), y1(B * info.output_size), y2(B * info.output_size);
  ASSERT_EQ(ferry_run(s, x.data.data(), B, T, nullptr, y0.data(), y0.size()), FERRY_OK);
  // A non-zero h0 changes the result; reset brings back the zero-state run.
  std::vector<float> h0(B * info.state_floats, 0.5f);
  ASSERT_EQ(ferry_state_set(s, B, h0.data(), h0.size()), FERRY_OK);
  std::vector<float> back(h0.size());
  ASSERT_EQ(ferry_state_get(s, B, back.data(), back.size()), FERRY_OK);
  EXPECT_EQ(h0, back);
  ASSERT_EQ(ferry_run(s, x.data.data(), B, T, nullptr, y1.data(), y1.size()), FERRY_OK);
  EXPECT_NE(y0, y1);
  ASSERT_EQ(ferry_state_reset(s), FERRY_OK);
  ASSERT_EQ(ferry_run(s, x.data.data(), B, T, nullptr, y2.data(), y2.size()), FERRY_OK);
  EXPECT_EQ(y0, y2);
  // Too small a buffer, too large a batch.
  EXPECT_EQ(ferry_state_get(s, B, back.data(), back.size() - 1), FERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ferry_state_get(s, B + 1, back.data(), back.size()), FERRY_INVALID_ARGUMENT);
}

TEST(Runtime, RunChecksItsArguments) {
  Loaded l(convert_fixture("lstm_1l_bf", "lstm > last > fc", true));
  size_t need = 0;
  ASSERT_EQ(ferry_arena_size(l.model, 2, 4, &need), FERRY_OK);
  AlignedBuffer arena(need);
  const ferry_session_options o = options(2, 4);
  ferry_session* s = nullptr;
  ASSERT_EQ(ferry_session_init(l.model, &o, arena.data, need, &s), FERRY_OK);
  ferry_model_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(ferry_model_get_info(l.model, &info), FERRY_OK);
  std::vector<float> x(3 * 5 * info.input_size, 0.1f), y(3 * info.output_size);
  EXPECT_EQ(ferry_run(s, x.data(), 3, 4, nullptr, y.data(), y.size()), FERRY_INVALID_STATE);  // batch > max
  EXPECT_EQ(ferry_run(s, x.data(), 2, 5, nullptr, y.data(), y.size()), FERRY_INVALID_STATE);  // seq > max
  EXPECT_EQ(ferry_run(s, x.data(), 2, 4, nullptr, y.data(), 1), FERRY_INVALID_ARGUMENT);      // capacity
  const int32_t bad_lengths[2] = {0, 4};
  EXPECT_EQ(ferry_run(s, x.data(), 2, 4, bad_lengths, y.data(), y.size()), FERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ferry_run(s, nullptr, 2, 4, nullptr, y.data(), y.size()), FERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ferry_run(nullptr, x.data(), 2, 4, nullptr, y.data(), y.size()), FERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ferry_run(s, x.data(), 2, 4, nullptr, y.data(), y.size()), FERRY_OK);
  // Arena misaligned.
  ferry_session* s2 = nullptr;
  EXPECT_EQ(ferry_session_init(l.model, &o, arena.data + 4, need, &s2), FERRY_INVALID_ARGUMENT);
}

// ferry_step of one sample takes a short path (four comparisons) on a model
// that streams floats with no Conv1d; whatever it does not accept goes to the
// full checks. Every refusal names what is wrong, writes nothing and leaves
// the state where it was.
TEST(Runtime, StepOfOneSampleRefusesWhatTheFullChecksRefuse) {
  Loaded l(convert_fixture("lstm_1l_tm", "lstm > last > fc", false));
  ferry_model_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(ferry_model_get_info(l.model, &info), FERRY_OK);
  size_t need = 0;
  ASSERT_EQ(ferry_arena_size(l.model, 2, 1, &need), FERRY_OK);
  AlignedBuffer a1(need), a2(need);
  const ferry_session_options o = options(2, 1);
  ferry_session *s = nullptr, *fresh = nullptr;
  ASSERT_EQ(ferry_session_init(l.model, &o, a1.data, need, &s), FERRY_OK);
  ASSERT_EQ(ferry_session_init(l.model, &o, a2.data, need, &fresh), FERRY_OK);
  std::vector<float> x(2 * info.input_size);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  const float kUntouched = -1234.5f;
  std::vector<float> y(2 * info.output_size, kUntouched);
  const auto refused = [&](ferry_status got, ferry_status want, const char* says) {
    EXPECT_EQ(got, want);
    EXPECT_NE(std::string(ferry_last_error()).find(says), std::string::npos) << ferry_last_error();
    for (float v : y) ASSERT_EQ(v, kUntouched) << "a refused step wrote output";
  };
  refused(ferry_step(s, x.data(), 1, y.data(), info.output_size - 1), FERRY_INVALID_ARGUMENT, "capacity");
  refused(ferry_step(s, nullptr, 1, y.data(), y.size()), FERRY_INVALID_ARGUMENT, "NULL");
  refused(ferry_step(s, x.data(), 1, nullptr, y.size()), FERRY_INVALID_ARGUMENT, "NULL");
  refused(ferry_step(s, x.data(), 0, y.data(), y.size()), FERRY_INVALID_ARGUMENT, "batch");
  refused(ferry_step(s, x.data(), 3, y.data(), y.size()), FERRY_INVALID_STATE, "max_batch");
  refused(ferry_step(nullptr, x.data(), 1, y.data(), y.size()), FERRY_INVALID_ARGUMENT, "session");
  const int32_t token = 0;
  refused(ferry_step_tokens(s, &token, 1, y.data(), y.size()), FERRY_INVALID_ARGUMENT, "takes floats");
  // Exactly the output's floats is enough; the refusals did not move the state.
  std::vector<float> want(info.output_size);
  ASSERT_EQ(ferry_step(fresh, x.data(), 1, want.data(), want.size()), FERRY_OK);
  ASSERT_EQ(ferry_step(s, x.data(), 1, y.data(), info.output_size), FERRY_OK) << ferry_last_error();
  EXPECT_EQ(0, std::memcmp(y.data(), want.data(), want.size() * sizeof(float)));
  EXPECT_EQ(y[info.output_size], kUntouched) << "wrote past one sample's output";
}

TEST(Runtime, StepRefusesBidirectional) {
  Loaded l(convert_fixture("lstm_bi_2l", "lstm > last > fc", false));
  size_t need = 0;
  ASSERT_EQ(ferry_arena_size(l.model, 1, 1, &need), FERRY_OK);
  AlignedBuffer arena(need);
  const ferry_session_options o = options(1, 1);
  ferry_session* s = nullptr;
  ASSERT_EQ(ferry_session_init(l.model, &o, arena.data, need, &s), FERRY_OK);
  std::vector<float> x(64, 0.f), y(64);
  EXPECT_EQ(ferry_step(s, x.data(), 1, y.data(), y.size()), FERRY_UNSUPPORTED);
  EXPECT_NE(std::string(ferry_last_error()).find("bidirectional"), std::string::npos);
}

}  // namespace
