// `ferry selftest --backend cuda` and `ferry run --backend cuda`, as a user on
// a Jetson or a GPU server drives them. Where the CUDA backend cannot run
// (a build without FERRY_CUDA, no GPU visible) the CLI must refuse cleanly:
// exit status 1 and one `ferry: error:` line naming the reason; the tests
// then check that and skip the rest with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

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

}  // namespace
