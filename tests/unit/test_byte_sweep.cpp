// Byte sweep: for three models converted from the PyTorch fixtures (with
// their self-test vectors, as `ferry convert` writes them), every byte of the
// file outside the weight blob is corrupted in turn with three patterns (XOR
// 0xFF, XOR 0x80 and XOR 0x01), and in the weight blob its first and last 64
// bytes and every 16th byte between (these models' f32 weights are data the
// loader never interprets: a corrupted weight is another number, not another
// path; quantized scales, which it does check, are not among them, and the
// model fuzz targets corrupt the blob freely), and the result goes through every
// runtime entry point
// (tests/fuzz/exercise_model.h): loading fails with a status and a message,
// or the model runs to completion and every call returns a status. Under
// ASan + UBSan (scripts/test-sanitize.sh) this also proves no read or write
// outside the buffers.
#ifdef FERRY_HAVE_CONVERTER  // the models are made by the converter
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../fuzz/exercise_model.h"
#include "convert.h"
#include "ferry/ferry_generated.h"
#include "random_models.h"

namespace {

using namespace ferry::conv;

std::vector<uint8_t> convert_fixture(const std::string& name, const std::string& graph,
                                     const std::vector<std::string>& metadata) {
  ConvertRequest request;
  request.input = std::string(FERRY_FIXTURES_DIR) + "/models/" + name + ".pt";
  request.graph = graph;
  request.selftest = SelfTestPolicy::Always;
  request.metadata = metadata;
  return convert(request).bytes.to_vector();
}

struct Sweep {
  const char* name;
  const char* graph;
  std::vector<std::string> metadata;  // --meta words: the user metadata table swept too
};

class ByteSweep : public ::testing::TestWithParam<Sweep> {};

TEST_P(ByteSweep, EveryCorruptedByteIsHandled) {
  const Sweep& s = GetParam();
  const std::vector<uint8_t> original = convert_fixture(s.name, s.graph, s.metadata);
  ferry::test::AlignedBytes buf(original.data(), original.size());
  {
    const ferry::test::ExerciseResult clean = ferry::test::exercise_model(buf.data(), buf.size());
    ASSERT_EQ(clean.load, FERRY_OK) << ferry_last_error();
    ASSERT_TRUE(clean.ran);
    ASSERT_EQ(clean.failure, "");
  }
  // The weight blob's bytes in the file: sampled (above).
  const auto* weights = ferry::fb::GetModel(original.data())->weights();
  ASSERT_NE(weights, nullptr);
  const size_t blob_begin = static_cast<size_t>(weights->data() - original.data());
  const size_t blob_end = blob_begin + weights->size();
  const auto swept = [&](size_t i) {
    return i < blob_begin + 64 || i + 64 >= blob_end || (i - blob_begin) % 16 == 0;
  };
  size_t refused = 0, ran = 0, skipped = 0, bytes = 0;
  for (size_t i = 0; i < original.size(); ++i) bytes += swept(i);
  for (uint8_t pattern : {uint8_t{0xFF}, uint8_t{0x80}, uint8_t{0x01}}) {
    for (size_t i = 0; i < original.size(); ++i) {
      if (!swept(i)) continue;
      buf.data()[i] = original[i] ^ pattern;
      const ferry::test::ExerciseResult r = ferry::test::exercise_model(buf.data(), buf.size());
      buf.data()[i] = original[i];
      ASSERT_EQ(r.failure, "") << "byte " << i << " ^ 0x" << std::hex << int(pattern);
      if (r.load != FERRY_OK) {
        ASSERT_TRUE(r.load == FERRY_INVALID_MODEL || r.load == FERRY_UNSUPPORTED)
            << "byte " << i << ": " << ferry_status_string(r.load);
        ++refused;
      } else if (r.ran) {
        ++ran;
      } else {
        ++skipped;
      }
    }
  }
  std::printf("[ sweep    ] %s: %zu of %zu bytes (weight blob %zu: sampled) x 3 patterns: %zu refused, %zu ran, "
              "%zu loaded (arena above cap)\n",
              s.name, bytes, original.size(), blob_end - blob_begin, refused, ran, skipped);
  EXPECT_GT(refused, 0u);
  EXPECT_GT(ran, 0u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ByteSweep,
                         ::testing::Values(Sweep{"lstm_proj_2l", "lstm > last > fc"},
                                           Sweep{"gru_bi", "gru > last > fc"},
                                           Sweep{"mlp", "fc1 > relu > fc2 > softmax",
                                                 {"labels=text:yes\nno", "sample_rate=16000", "mean=0.5,-1,2"}}),
                         [](const ::testing::TestParamInfo<Sweep>& i) { return std::string(i.param.name); });

}  // namespace

#endif  // FERRY_HAVE_CONVERTER
