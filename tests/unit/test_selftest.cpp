// Golden self-test vectors (converter: plan/selftest_plan.h, filled by the
// writer's runtime pass; runtime: ferry_selftest) and the --c-array header
// text (writer/c_array.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "convert.h"
#include "ferry/ferry.h"
#include "ferry/ferry_generated.h"
#include "plan/selftest_plan.h"
#include "writer/c_array.h"

namespace {

using namespace ferry::conv;

const std::string kModels = std::string(FERRY_FIXTURES_DIR) + "/models/";

// A fixture converted in memory, with (or without) its golden vectors.
std::vector<uint8_t> convert(const std::string& name, const std::string& graph, bool batch_first,
                             bool vectors = true) {
  ConvertRequest request;
  request.input = kModels + name + ".pt";
  request.graph = graph;
  request.batch_first = batch_first;
  request.selftest = vectors ? SelfTestPolicy::Always : SelfTestPolicy::Never;
  return ferry::conv::convert(request).bytes.to_vector();
}

struct Loaded {
  std::vector<uint8_t> bytes;
  ferry_model* model = nullptr;
  explicit Loaded(std::vector<uint8_t> b) : bytes(std::move(b)) {
    EXPECT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &model), FERRY_OK) << ferry_last_error();
  }
  ~Loaded() { ferry_model_free(model); }
  ferry::fb::SelfTest* vectors() { return ferry::fb::GetMutableModel(bytes.data())->mutable_selftest(); }
};

struct Arena {
  explicit Arena(size_t n) : size(n), data(std::aligned_alloc(FERRY_ALIGNMENT, (n + 63) / 64 * 64 + 64)) {}
  ~Arena() { std::free(data); }
  size_t size;
  void* data;
};

struct Verdict {
  ferry_status status;
  int passed = -1;
  float max_error = -1;
};

Verdict run_selftest(const ferry_model* model, ferry_backend backend = FERRY_BACKEND_REFERENCE) {
  size_t bytes = 0;
  Verdict v{ferry_selftest_arena_size(model, &bytes)};
  if (v.status != FERRY_OK) return v;
  Arena arena(bytes);
  v.status = ferry_selftest(model, backend, arena.data, arena.size, &v.passed, &v.max_error);
  return v;
}

struct Case {
  const char* name;
  const char* graph;
  bool batch_first;
  uint32_t seq;  // stored steps: 1 without a time axis
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class SelfTestFixtures : public ::testing::TestWithParam<Case> {};

TEST_P(SelfTestFixtures, StoredVectorsPassOnEveryBackend) {
  const Case& c = GetParam();
  Loaded m(convert(c.name, c.graph, c.batch_first));
  ASSERT_NE(m.model, nullptr);
  const auto* st = m.vectors();
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->batch(), 1u);
  EXPECT_EQ(st->seq(), c.seq);
  EXPECT_GT(st->tolerance(), 0.0f);
  EXPECT_LE(st->tolerance(), 1e-2f);
  // Not all zero: the output really was filled by a run.
  float energy = 0;
  for (float y : *st->output()) energy += std::fabs(y);
  EXPECT_GT(energy, 0.0f);

  const Verdict ref = run_selftest(m.model, FERRY_BACKEND_REFERENCE);
  ASSERT_EQ(ref.status, FERRY_OK) << ferry_last_error();
  EXPECT_EQ(ref.passed, 1);
  EXPECT_EQ(ref.max_error, 0.0f) << "the vectors were made by the reference backend";
  const Verdict best = run_selftest(m.model, FERRY_BACKEND_AUTO);
  ASSERT_EQ(best.status, FERRY_OK) << ferry_last_error();
  EXPECT_EQ(best.passed, 1) << "max error " << best.max_error;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SelfTestFixtures,
                         ::testing::Values(Case{"lstm_1l_tm", "lstm > last > fc", false, 5},
                                           Case{"gru_seq_tanh_fc_sigmoid", "gru > tanh > fc > sigmoid", false, 5},
                                           Case{"lstm_2l_bf", "lstm > last > fc", true, 5},
                                           Case{"mlp", "fc1 > relu > fc2 > softmax", false, 1}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(SelfTest, CorruptedGoldenOutputFailsWithItsError) {
  Loaded m(convert("lstm_1l_tm", "lstm > last > fc", false));
  auto* out = m.vectors()->mutable_output();
  ASSERT_GE(out->size(), 3u);
  out->Mutate(2, out->Get(2) + 0.5f);
  Verdict v = run_selftest(m.model);
  ASSERT_EQ(v.status, FERRY_OK) << "a failing check is a verdict, not an error";
  EXPECT_EQ(v.passed, 0);
  EXPECT_NEAR(v.max_error, 0.5f, 1e-6f);

  out->Mutate(0, std::nanf(""));
  v = run_selftest(m.model);
  ASSERT_EQ(v.status, FERRY_OK);
  EXPECT_EQ(v.passed, 0);
  EXPECT_TRUE(std::isinf(v.max_error)) << "a NaN counts as an infinite error";
}

TEST(SelfTest, ArenaAndArguments) {
  Loaded m(convert("gru_1l", "gru > last > fc", true));
  size_t bytes = 0;
  ASSERT_EQ(ferry_selftest_arena_size(m.model, &bytes), FERRY_OK);
  Arena arena(bytes);
  int passed = -1;
  float err = -1;
  EXPECT_EQ(ferry_selftest(m.model, FERRY_BACKEND_REFERENCE, arena.data, 64, &passed, &err),
            FERRY_ARENA_TOO_SMALL);
  EXPECT_NE(std::string(ferry_last_error()).find("arena"), std::string::npos) << ferry_last_error();
  EXPECT_EQ(ferry_selftest(m.model, FERRY_BACKEND_REFERENCE, nullptr, bytes, &passed, &err),
            FERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ferry_selftest(nullptr, FERRY_BACKEND_REFERENCE, arena.data, bytes, &passed, &err),
            FERRY_INVALID_ARGUMENT);
  EXPECT_EQ(ferry_selftest_arena_size(m.model, nullptr), FERRY_INVALID_ARGUMENT);
  // The out pointers are optional.
  EXPECT_EQ(ferry_selftest(m.model, FERRY_BACKEND_REFERENCE, arena.data, bytes, nullptr, nullptr), FERRY_OK);
  // One size serves every backend this runtime runs here.
  for (ferry_backend b : {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_SIMD, FERRY_BACKEND_XNNPACK,
                          FERRY_BACKEND_CUDA, FERRY_BACKEND_AUTO}) {
    passed = -1;
    const ferry_status st = ferry_selftest(m.model, b, arena.data, bytes, &passed, &err);
    if (st == FERRY_UNSUPPORTED) continue;
    EXPECT_EQ(st, FERRY_OK) << "backend " << b << ": " << ferry_last_error();
    EXPECT_EQ(passed, 1) << "backend " << b << ", max error " << err;
  }
}

TEST(SelfTest, ModelWithoutVectorsIsUnsupported) {
  Loaded m(convert("gru_1l", "gru > last > fc", true, /*vectors=*/false));
  size_t bytes = 0;
  EXPECT_EQ(ferry_selftest_arena_size(m.model, &bytes), FERRY_UNSUPPORTED);
  EXPECT_NE(std::string(ferry_last_error()).find("no self-test vectors"), std::string::npos) << ferry_last_error();
  Arena arena(1 << 16);
  EXPECT_EQ(ferry_selftest(m.model, FERRY_BACKEND_REFERENCE, arena.data, arena.size, nullptr, nullptr),
            FERRY_UNSUPPORTED);
}

TEST(SelfTest, InconsistentVectorsAreAnInvalidModel) {
  Loaded m(convert("gru_1l", "gru > last > fc", true));
  m.vectors()->mutate_seq(4);  // the stored input holds 5 steps
  EXPECT_EQ(run_selftest(m.model).status, FERRY_INVALID_MODEL);
  m.vectors()->mutate_seq(5);
  m.vectors()->mutate_tolerance(-1.0f);
  EXPECT_EQ(run_selftest(m.model).status, FERRY_INVALID_MODEL);
  m.vectors()->mutate_tolerance(INFINITY);
  EXPECT_EQ(run_selftest(m.model).status, FERRY_INVALID_MODEL);
}

TEST(SelfTest, InputIsSeededAndTheSameOnEveryHost) {
  const std::vector<float> a = selftest_input(42, 1000), b = selftest_input(42, 1000), c = selftest_input(43, 1000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double mean = 0;
  for (float x : a) {
    EXPECT_GE(x, -1.0f);
    EXPECT_LT(x, 1.0f);
    mean += x;
  }
  EXPECT_NEAR(mean / a.size(), 0.0, 0.1);
  // Pinned: splitmix64, 24 bits per value. A change here changes every
  // stored vector (and must come with a format note).
  const std::vector<float> pinned = selftest_input(1, 3);
  for (float x : pinned) EXPECT_EQ(x, std::ldexp(std::round(std::ldexp(x, 23)), -23));
  EXPECT_EQ(pinned[0], 0.13312304019927979f);
}

TEST(CArray, NameFromThePath) {
  EXPECT_EQ(c_array_name("model_data.h"), "model_data");
  EXPECT_EQ(c_array_name("out/dir.v2/my-model.h"), "my_model");
  EXPECT_EQ(c_array_name("2net.h"), "_2net");
  EXPECT_EQ(c_array_name("/x/.h"), "_h");
}

TEST(CArray, TextHoldsTheBytesAlignedWithTheirLength) {
  std::vector<uint8_t> bytes(37);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 29 + 3);
  const std::string text = c_array_text(bytes.data(), bytes.size(), "model_data", "m.pt");
  EXPECT_NE(text.find("static const size_t model_data_len = 37u;"), std::string::npos) << text;
  EXPECT_NE(text.find("static const uint8_t model_data[37] = {"), std::string::npos) << text;
  EXPECT_NE(text.find("alignas(64)"), std::string::npos);
  EXPECT_NE(text.find("__attribute__((aligned(64)))"), std::string::npos);
  // Parse the initializer back.
  std::vector<uint8_t> back;
  for (size_t at = text.find("= {"); (at = text.find("0x", at)) != std::string::npos; at += 4) {
    back.push_back(static_cast<uint8_t>(std::stoul(text.substr(at + 2, 2), nullptr, 16)));
  }
  EXPECT_EQ(back, bytes);
}

}  // namespace
