// `ferry selftest --backend cuda` and `ferry run --backend cuda`, as a user on
// a Jetson or a GPU server drives them. Where the CUDA backend cannot run
// (a build without FERRY_CUDA, no GPU visible) the CLI must refuse cleanly:
// exit status 1 and one `ferry: error:` line naming the reason; the tests
// then check that and skip the rest with the reason. `ferry inspect` says
// which backends run a file on any machine (its `backends` line).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/npy.h"

namespace {

using ferry::test::read_text;
using ferry::test::run_ferry;
using ferry::test::shell_quote;
using ferry::test::TempDir;

const std::string kModels = std::string(FERRY_FIXTURES_DIR) + "/models/";

// The fixture converted with its golden vectors.
void convert(const TempDir& dir) {
  const auto c = run_ferry("convert " + shell_quote(kModels + "lstm_2l_bf.pt") + " " + shell_quote(dir / "m.fb") +
                               " --graph 'lstm > last > fc' --batch-first",
                           dir);
  ASSERT_EQ(c.status, 0) << c.err;
}

TEST(CudaCli, SelftestOnTheGpu) {
  TempDir dir;
  convert(dir);
  const auto r = run_ferry("selftest " + shell_quote(dir / "m.fb") + " --backend cuda", dir);
  if (r.status != 0 && r.err.find("backend cuda") != std::string::npos) {
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_EQ(r.err.rfind("ferry: error: ", 0), 0u) << r.err;
    GTEST_SKIP() << "CUDA backend unavailable: " << r.err;
  }
  EXPECT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
}

TEST(CudaCli, RunOnTheGpuMatchesReference) {
  TempDir dir;
  convert(dir);
  const std::string x = kModels + "lstm_2l_bf.in.npy";
  const auto ref = run_ferry("run " + shell_quote(dir / "m.fb") + " --input " + shell_quote(x) + " --output " +
                                 shell_quote(dir / "ref.npy") + " --backend reference",
                             dir);
  ASSERT_EQ(ref.status, 0) << ref.err;
  const auto gpu = run_ferry("run " + shell_quote(dir / "m.fb") + " --input " + shell_quote(x) + " --output " +
                                 shell_quote(dir / "gpu.npy") + " --backend cuda",
                             dir);
  if (gpu.status != 0 && gpu.err.find("backend cuda") != std::string::npos) {
    EXPECT_EQ(gpu.status, 1) << gpu.err;
    GTEST_SKIP() << "CUDA backend unavailable: " << gpu.err;
  }
  ASSERT_EQ(gpu.status, 0) << gpu.err;
  const ferry::conv::NpyArray a = ferry::conv::read_npy(dir / "gpu.npy"), b = ferry::conv::read_npy(dir / "ref.npy");
  ASSERT_EQ(a.shape, b.shape);
  ASSERT_EQ(a.data.size(), b.data.size());
  for (size_t i = 0; i < a.data.size(); ++i) EXPECT_NEAR(a.data[i], b.data[i], 1e-5) << i;
}

// `ferry inspect MODEL.fb`: a `backends` line naming every backend that
// runs the file (fp32, int8, int4, an op chain), cuda included on a machine
// without a GPU or a CUDA build (then annotated), and the same list in
// --json; a file the CUDA plan refuses is not listed, with the reason.
TEST(CudaCli, InspectNamesTheBackendsThatRunTheFile) {
  TempDir dir;
  const std::string ops = std::string(FERRY_FIXTURES_DIR) + "/ops/";
  struct Model {
    std::string name, convert;
  } models[] = {
      {"fp32", "convert " + shell_quote(kModels + "lstm_2l_bf.pt") + " M --graph 'lstm > last > fc' --batch-first"},
      {"int8", "convert " + shell_quote(kModels + "lstm_2l_bf.pt") +
                   " M --graph 'lstm > last > fc' --batch-first --quantize int8"},
      {"int4", "convert " + shell_quote(kModels + "gru_2l.pt") + " M --graph 'gru > last > fc' --quantize int4"},
      {"crnn", "convert " + shell_quote(ops + "kws_crnn.pt") + " M --layout bft --graph " +
                   shell_quote("conv1(padding=1) > bn1 > relu > conv2(stride=2,padding=1) > bn2 > relu > gru > "
                               "last > fc")},
  };
  for (const Model& m : models) {
    SCOPED_TRACE(m.name);
    const std::string fb = dir / (m.name + ".fb");
    std::string command = m.convert;
    command.replace(command.find(" M "), 3, " " + shell_quote(fb) + " ");
    const auto c = run_ferry(command, dir);
    ASSERT_EQ(c.status, 0) << c.err;
    const auto r = run_ferry("inspect " + shell_quote(fb), dir);
    ASSERT_EQ(r.status, 0) << r.err;
    const size_t at = r.out.find("\nbackends  ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string line = r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
    EXPECT_EQ(line.rfind("backends  reference simd", 0), 0u) << line;
    const bool cuda = line.find(" cuda") != std::string::npos;
    EXPECT_TRUE(cuda) << line;
    EXPECT_TRUE(line.size() == line.find(" cuda") + 5 || line.find(" cuda (not in this build)") != std::string::npos ||
                line.find(" cuda (no GPU here)") != std::string::npos)
        << line;
    const auto j = run_ferry("inspect " + shell_quote(fb) + " --json", dir);
    ASSERT_EQ(j.status, 0) << j.err;
    const nlohmann::json backends = nlohmann::json::parse(j.out).at("backends");
    ASSERT_GE(backends.size(), 3u) << j.out;
    EXPECT_EQ(backends.front(), "reference") << j.out;
    EXPECT_EQ(backends.at(1), "simd") << j.out;
    EXPECT_EQ(backends.back(), "cuda") << j.out;
  }
  // A checkpoint's --json has no backends (only model files run).
  const auto ckpt = run_ferry("inspect " + shell_quote(kModels + "gru_2l.pt") + " --json", dir);
  EXPECT_EQ(ckpt.status, 0) << ckpt.err;
  EXPECT_EQ(ckpt.out.find("\"backends\""), std::string::npos) << ckpt.out;
}

}  // namespace
