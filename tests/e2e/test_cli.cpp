// The ferry CLI as a user meets it: the bundled example, bad and malicious
// inputs, wrong shapes, the inferred graph, inspect, reproducible output.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"

namespace {

using ferry::test::read_text;
using ferry::test::run_ferry;
using ferry::test::shell_quote;
using ferry::test::TempDir;

const std::string kFixtures = FERRY_FIXTURES_DIR;
const std::string kExamples = std::string(FERRY_SOURCE_DIR) + "/examples/";

// One line `ferry: error: ...`, a non-zero status, nothing written.
void expect_refused(const ferry::test::CommandResult& r, const std::string& needle = "") {
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.err.rfind("ferry: error: ", 0), 0u) << r.err;
  if (!needle.empty()) EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

TEST(Cli, BundledExampleMatchesPyTorch) {
  TempDir dir;
  const auto c = run_ferry("convert " + shell_quote(kExamples + "lstm_gpu.pt") + " " + shell_quote(dir / "m.fb") +
                               " --graph 'lstm > last > fc' --batch-first",
                           dir);
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find("cuda:0"), std::string::npos) << c.out;
  const auto r = run_ferry("run " + shell_quote(dir / "m.fb") + " --input " + shell_quote(kExamples + "input.npy") +
                               " --output " + shell_quote(dir / "y.npy") + " --expect " +
                               shell_quote(kExamples + "expected.npy") + " --tolerance 1e-5",
                           dir);
  EXPECT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("max abs error"), std::string::npos);
}

TEST(Cli, ExpectFailsWhenOutputsDiffer) {
  // --expect must be able to fail: compare with another model's output.
  TempDir dir;
  ASSERT_EQ(run_ferry("convert " + shell_quote(kExamples + "lstm_gpu.pt") + " " + shell_quote(dir / "m.fb") +
                          " --graph 'lstm > last > fc'",  // without --batch-first: wrong layout
                      dir).status, 0);
  const auto r = run_ferry("run " + shell_quote(dir / "m.fb") + " --input " + shell_quote(kExamples + "input.npy") +
                               " --output " + shell_quote(dir / "y.npy") + " --expect " +
                               shell_quote(kExamples + "expected.npy"),
                           dir);
  expect_refused(r);
}

TEST(Cli, BadAndMaliciousCheckpointsAreRefused) {
  std::ifstream f(kFixtures + "/bad/manifest.json");
  ASSERT_TRUE(f);
  const auto manifest = nlohmann::json::parse(f);
  ASSERT_GE(manifest.size(), 4u);
  for (const auto& e : manifest) {
    const std::string file = e.at("file");
    SCOPED_TRACE(file);
    TempDir dir;
    std::filesystem::remove("/tmp/ferry_pwned");
    const auto r = run_ferry("convert " + shell_quote(kFixtures + "/bad/" + file) + " " + shell_quote(dir / "out.fb"), dir);
    expect_refused(r);
    EXPECT_FALSE(std::filesystem::exists(dir / "out.fb")) << "partial output left behind";
    EXPECT_FALSE(std::filesystem::exists("/tmp/ferry_pwned")) << "the pickle ran code";
    // No temporary file either.
    for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
      EXPECT_EQ(entry.path().filename().string().find("out.fb"), std::string::npos) << entry.path();
    }
  }
}

TEST(Cli, RefusalsNameTheCallable) {
  TempDir dir;
  expect_refused(run_ferry("convert " + shell_quote(kFixtures + "/bad/evil_os_system.pt") + " " + shell_quote(dir / "o.fb"), dir),
                 "system");
  expect_refused(run_ferry("convert " + shell_quote(kFixtures + "/bad/evil_eval.pt") + " " + shell_quote(dir / "o.fb"), dir),
                 "eval");
}

TEST(Cli, MissingFileIsNamed) {
  TempDir dir;
  expect_refused(run_ferry("convert /nonexistent/x.pt " + shell_quote(dir / "o.fb"), dir), "/nonexistent/x.pt");
}

TEST(Cli, GraphErrorsAreClear) {
  TempDir dir;
  const std::string pt = shell_quote(kExamples + "lstm_gpu.pt");
  expect_refused(run_ferry("convert " + pt + " " + shell_quote(dir / "o.fb") + " --graph 'lstm > last > head'", dir),
                 "no such module");
  expect_refused(run_ferry("convert " + pt + " " + shell_quote(dir / "o.fb") + " --graph 'fc > lstm'", dir));
  expect_refused(run_ferry("convert " + pt + " " + shell_quote(dir / "o.fb") + " --graph 'lstm > > fc'", dir),
                 "empty element");
  expect_refused(run_ferry("convert " + pt + " " + shell_quote(dir / "o.fb") + " --graph 'lstm > last > last > fc'", dir),
                 "`last`");
  expect_refused(run_ferry("convert " + pt + " " + shell_quote(dir / "o.fb") + " --graph 'last > lstm > fc'", dir),
                 "must start with a module");
  // Without --graph, an LSTM followed by a Linear is ambiguous: suggest the flag.
  expect_refused(run_ferry("convert " + pt + " " + shell_quote(dir / "o.fb"), dir), "--graph \"lstm > last > fc\"");
  EXPECT_FALSE(std::filesystem::exists(dir / "o.fb"));
}

TEST(Cli, SingleModuleGraphIsInferredAndPrinted) {
  TempDir dir;
  const auto c = run_ferry("convert " + shell_quote(kFixtures + "/models/linear_nobias.pt") + " " +
                               shell_quote(dir / "o.fb"),
                           dir);
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find("(inferred)"), std::string::npos) << c.out;
}

TEST(Cli, RunChecksTheInputShape) {
  TempDir dir;
  ASSERT_EQ(run_ferry("convert " + shell_quote(kExamples + "lstm_gpu.pt") + " " + shell_quote(dir / "m.fb") +
                          " --graph 'lstm > last > fc' --batch-first",
                      dir).status, 0);
  // expected.npy is [2, 8]: 2-D, where the model takes [B, T, 16].
  const auto r = run_ferry("run " + shell_quote(dir / "m.fb") + " --input " + shell_quote(kExamples + "expected.npy") +
                               " --output " + shell_quote(dir / "y.npy"),
                           dir);
  expect_refused(r, "3-D input");
  EXPECT_FALSE(std::filesystem::exists(dir / "y.npy"));
  // A model file that is not one.
  expect_refused(run_ferry("run " + shell_quote(kExamples + "input.npy") + " --input " +
                               shell_quote(kExamples + "input.npy") + " --output " + shell_quote(dir / "y.npy"),
                           dir),
                 "not a ferry model");
}

TEST(Cli, ConversionIsReproducibleAndRecordsProvenance) {
  TempDir dir;
  const std::string args = " --graph 'lstm > last > fc' --batch-first";
  ASSERT_EQ(run_ferry("convert " + shell_quote(kExamples + "lstm_gpu.pt") + " " + shell_quote(dir / "a.fb") + args, dir).status, 0);
  ASSERT_EQ(run_ferry("convert " + shell_quote(kExamples + "lstm_gpu.pt") + " " + shell_quote(dir / "b.fb") + args, dir).status, 0);
  EXPECT_EQ(read_text(dir / "a.fb"), read_text(dir / "b.fb"));
  const auto i = run_ferry("inspect " + shell_quote(dir / "a.fb"), dir);
  ASSERT_EQ(i.status, 0) << i.err;
  // The recorded hash is the source file's SHA-256 (as sha256sum computes it).
  ASSERT_EQ(std::system(("sha256sum " + shell_quote(kExamples + "lstm_gpu.pt") + " > " + shell_quote(dir / "sum.txt")).c_str()), 0);
  const std::string sum = read_text(dir / "sum.txt").substr(0, 64);
  EXPECT_NE(i.out.find("sha256 " + sum), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("lstm.weight_ih_l0"), std::string::npos);  // the mapping table
  EXPECT_NE(i.out.find("LSTM"), std::string::npos);
}

TEST(Cli, InspectCheckpointShowsTensorsAndLocations) {
  TempDir dir;
  const auto i = run_ferry("inspect " + shell_quote(kExamples + "lstm_gpu.pt"), dir);
  ASSERT_EQ(i.status, 0) << i.err;
  EXPECT_NE(i.out.find("cuda:0"), std::string::npos);
  EXPECT_NE(i.out.find("lstm.weight_hh_l1"), std::string::npos);
  EXPECT_NE(i.out.find("[256, 64]"), std::string::npos);
  EXPECT_NE(i.out.find("LSTM(16, 64, num_layers=2)"), std::string::npos);
}

TEST(Cli, UsageErrorsExitTwo) {
  TempDir dir;
  EXPECT_EQ(run_ferry("frobnicate", dir).status, 2);
  EXPECT_EQ(run_ferry("convert onlyone.pt", dir).status, 2);
  EXPECT_EQ(run_ferry("run m.fb --bogus", dir).status, 2);
}

}  // namespace
