// Every format version a runtime promises to read (docs/compatibility.md):
// tests/fixtures/formats holds a model file of each, written the way that
// version laid it out by tests/fixtures/make_format_fixtures.py's own
// FlatBuffers writer (not the converter), with PyTorch's output for its
// input. Each loads, runs on the reference and auto backends within its
// tolerance of PyTorch, streams step by step to the whole run's last output
// where it streams, and `ferry inspect` reads it; the user metadata file
// reads back its entries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "ferry/ferry.h"
#include "io/npy.h"
#include "npy_compare.h"
#include "random_models.h"
#include "session.h"

namespace {

using ferry::conv::NpyArray;
using ferry::conv::read_npy;
using ferry::test::AlignedBytes;
using ferry::test::ArenaSession;
using ferry::test::read_bytes;
using ferry::test::run_ferry;
using ferry::test::session_options;
using ferry::test::shell_quote;
using ferry::test::TempDir;

const std::string kFormats = std::string(FERRY_FIXTURES_DIR) + "/formats/";

struct Version {
  std::string name, file, input, output, format, layout;
  double tolerance = 0;
  bool streams = false;
};

void PrintTo(const Version& v, std::ostream* os) { *os << v.name; }

std::vector<Version> versions() {
  std::ifstream in(kFormats + "manifest.json");
  if (!in) return {};
  std::vector<Version> out;
  for (const auto& e : nlohmann::json::parse(in)) {
    out.push_back(Version{e.at("name"), e.at("file"), e.at("input"), e.at("output"), e.at("format"),
                          e.at("layout"), e.at("tolerance"), e.at("streams")});
  }
  return out;
}

class FormatVersion : public ::testing::TestWithParam<Version> {};

TEST_P(FormatVersion, LoadsAndMatchesPyTorch) {
  const Version& v = GetParam();
  SCOPED_TRACE(v.file + " (format " + v.format + ")");
  const std::vector<uint8_t> file = read_bytes(kFormats + v.file);
  ASSERT_FALSE(file.empty());
  const AlignedBytes bytes(file.data(), file.size());
  ferry_model* m = nullptr;
  ASSERT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &m), FERRY_OK) << ferry_last_error();
  ferry_model_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(ferry_model_get_info(m, &info), FERRY_OK);
  const NpyArray x = read_npy(kFormats + v.input), want = read_npy(kFormats + v.output);
  const bool time_major = v.layout == "tbf";
  const size_t B = x.shape[time_major ? 1 : 0], T = x.shape[v.layout == "bft" ? 2 : time_major ? 0 : 1];
  size_t out_floats = 0;
  ASSERT_EQ(ferry_output_floats(m, B, T, &out_floats), FERRY_OK);
  ASSERT_EQ(out_floats, want.data.size());
  for (ferry_backend backend : {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_AUTO}) {
    SCOPED_TRACE(ferry_backend_name(backend));
    ArenaSession s(m, session_options(backend, B, T));
    ASSERT_EQ(s.status, FERRY_OK) << s.error;
    std::vector<float> y(out_floats);
    ASSERT_EQ(ferry_run(s.s, x.data.data(), B, T, nullptr, y.data(), y.size()), FERRY_OK) << ferry_last_error();
    double worst = 0;
    for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(double{y[i]} - want.data[i]));
    EXPECT_LE(worst, v.tolerance);
    if (!v.streams) continue;
    // One step at a time (time-major: step t is x[t]), carrying the state.
    ASSERT_TRUE(info.streamable);
    ASSERT_EQ(ferry_state_reset(s.s), FERRY_OK);
    std::vector<float> step(B * info.output_size);
    for (size_t t = 0; t < T; ++t) {
      ASSERT_EQ(ferry_step(s.s, x.data.data() + t * B * info.input_size, B, step.data(), step.size()), FERRY_OK);
    }
    if (!info.output_is_sequence) EXPECT_EQ(std::memcmp(step.data(), y.data(), step.size() * sizeof(float)), 0);
  }
  ferry_model_free(m);
  TempDir dir;
  const auto inspect = run_ferry("inspect " + shell_quote(kFormats + v.file), dir);
  EXPECT_EQ(inspect.status, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("format " + v.format.substr(0, 3)), std::string::npos) << inspect.out;
}

INSTANTIATE_TEST_SUITE_P(Files, FormatVersion, ::testing::ValuesIn(versions()),
                         [](const ::testing::TestParamInfo<Version>& i) { return i.param.name; });

TEST(FormatVersions, EveryVersionIsThere) {
  std::vector<std::string> formats;
  for (const Version& v : versions()) formats.push_back(v.format.substr(0, 3));
  for (const char* f : {"1.0", "1.1", "1.2", "1.3", "2.0"}) {
    EXPECT_NE(std::find(formats.begin(), formats.end(), f), formats.end()) << "no format " << f << " file";
  }
}

TEST(FormatVersions, MetadataOfAnOlderFileReadsBack) {
  const std::vector<uint8_t> file = read_bytes(kFormats + "v1_0_metadata.fb");
  const AlignedBytes bytes(file.data(), file.size());
  ferry_model* m = nullptr;
  ASSERT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &m), FERRY_OK) << ferry_last_error();
  ASSERT_EQ(ferry_model_metadata_count(m), 3u);
  ferry_metadata e{};
  e.struct_size = sizeof e;
  ASSERT_EQ(ferry_model_metadata(m, "labels", &e), FERRY_OK);
  EXPECT_STREQ(e.text, "left\nright\n");
  double mean[3] = {};
  ASSERT_EQ(ferry_model_metadata_numbers(m, "mean", mean, 3), FERRY_OK);
  EXPECT_EQ(mean[1], -0.25);
  ferry_model_free(m);
}

}  // namespace
