// End to end against PyTorch: every fixture in tests/fixtures/models (made by
// make_fixtures.py with torch 1.13, saved as a GPU machine saves them) and in
// tests/fixtures/torch2 (made by make_gpu_fixtures.py: saved by torch 2.x on
// a real GPU) is converted with `ferry convert` and run with `ferry run`,
// whole-sequence and step by step, and compared with the output PyTorch
// computed.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "dot_check.h"
#include "io/npy.h"
#include "npy_compare.h"

namespace {

using ferry::conv::NpyArray;
using ferry::conv::read_npy;
using ferry::test::max_abs_diff;
using ferry::test::run_ferry;
using ferry::test::shell_quote;
using ferry::test::TempDir;

const std::string kModels = std::string(FERRY_FIXTURES_DIR) + "/models/";
const std::string kTorch2 = std::string(FERRY_FIXTURES_DIR) + "/torch2/";

struct Fixture {
  std::string name, pt, input, output, graph, form, nonlinearity;  // pt, input, output: full paths
  bool batch_first = false;
  double tolerance = 1e-5;
  std::vector<int> lengths;
};

// gtest prints the parameter in test names and failures: the fixture's name.
void PrintTo(const Fixture& f, std::ostream* os) { *os << f.name; }

std::vector<Fixture> load_manifest(const std::string& dir) {
  std::ifstream f(dir + "manifest.json");
  if (!f) return {};
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<Fixture> out;
  for (const auto& e : j) {
    Fixture x;
    x.name = e.at("name");
    x.pt = dir + e.at("pt").get<std::string>();
    x.input = dir + e.at("input").get<std::string>();
    x.output = dir + e.at("output").get<std::string>();
    x.graph = e.at("graph");
    x.form = e.value("form", "state_dict");
    x.batch_first = e.at("batch_first");
    x.tolerance = e.at("tolerance");
    x.nonlinearity = e.value("nonlinearity", "");
    if (e.contains("lengths")) x.lengths = e.at("lengths").get<std::vector<int>>();
    out.push_back(x);
  }
  return out;
}

std::vector<Fixture> all_fixtures() {
  std::vector<Fixture> all = load_manifest(kModels);
  for (Fixture& f : load_manifest(kTorch2)) all.push_back(std::move(f));
  return all;
}

bool records_hyperparameters(const std::string& form) {
  return form == "whole_module" || form == "torchscript";
}

// The --graph a user passes: a state dict does not record an RNN's relu.
std::string graph_for(const Fixture& f) {
  std::string g = f.graph;
  if (f.nonlinearity == "relu" && !records_hyperparameters(f.form)) {
    const size_t pos = g.find("rnn");
    if (pos != std::string::npos) g.replace(pos, 3, "rnn(relu)");
  }
  return g;
}

class FixtureTest : public ::testing::TestWithParam<Fixture> {};

TEST_P(FixtureTest, ConvertsAndMatchesPyTorch) {
  const Fixture& f = GetParam();
  TempDir dir;
  const std::string fb = dir / "model.fb";
  std::string convert = "convert " + shell_quote(f.pt) + " " + shell_quote(fb) + " --graph " +
                        shell_quote(graph_for(f));
  // Forms that record batch_first are converted without the flag: ferry must read it.
  if (f.batch_first && !records_hyperparameters(f.form)) convert += " --batch-first";
  const auto c = run_ferry(convert, dir);
  ASSERT_EQ(c.status, 0) << c.err << c.out;
  EXPECT_EQ(c.err.find("error"), std::string::npos) << c.err;
  ferry::test::expect_dot_renders(fb, dir);  // `inspect --dot`: Graphviz renders it, a node per layer

  std::string run = "run " + shell_quote(fb) + " --input " + shell_quote(f.input) + " --output " +
                    shell_quote(dir / "y.npy") + " --quiet";
  if (!f.lengths.empty()) {
    std::string l;
    for (int v : f.lengths) l += (l.empty() ? "" : ",") + std::to_string(v);
    run += " --lengths " + l;
  }
  const auto r = run_ferry(run, dir);
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  const NpyArray got = read_npy(dir / "y.npy");
  const NpyArray want = read_npy(f.output);
  ASSERT_EQ(got.shape, want.shape);
  EXPECT_LE(max_abs_diff(got, want), f.tolerance) << f.name;
}

// ferry run --stream drives ferry_step one time step at a time: the result
// must equal the whole-sequence run exactly (same backend), and so PyTorch.
TEST_P(FixtureTest, StreamingEqualsWholeSequence) {
  const Fixture& f = GetParam();
  const NpyArray x = read_npy(f.input);
  if (!f.lengths.empty() || x.shape.size() != 3) GTEST_SKIP() << "variable lengths or no time axis";
  TempDir dir;
  const std::string fb = dir / "model.fb";
  std::string convert = "convert " + shell_quote(f.pt) + " " + shell_quote(fb) + " --graph " +
                        shell_quote(graph_for(f));
  if (f.batch_first && !records_hyperparameters(f.form)) convert += " --batch-first";
  ASSERT_EQ(run_ferry(convert, dir).status, 0);
  const std::string io = " --input " + shell_quote(f.input) + " --quiet --output ";
  ASSERT_EQ(run_ferry("run " + shell_quote(fb) + io + shell_quote(dir / "whole.npy"), dir).status, 0);
  const auto s = run_ferry("run " + shell_quote(fb) + io + shell_quote(dir / "stream.npy") + " --stream", dir);
  if (s.err.find("bidirectional") != std::string::npos) {
    EXPECT_NE(s.status, 0);  // ferry_step refuses a bidirectional model, with a message
    EXPECT_NE(s.err.find("ferry: error:"), std::string::npos);
    return;
  }
  ASSERT_EQ(s.status, 0) << s.err;
  const NpyArray whole = read_npy(dir / "whole.npy");
  const NpyArray stream = read_npy(dir / "stream.npy");
  ASSERT_EQ(whole.shape, stream.shape);
  for (size_t i = 0; i < whole.data.size(); ++i) {
    ASSERT_EQ(whole.data[i], stream.data[i]) << "element " << i << " differs between run and step";
  }
  const NpyArray want = read_npy(f.output);
  EXPECT_LE(max_abs_diff(stream, want), f.tolerance);
}

INSTANTIATE_TEST_SUITE_P(PyTorch, FixtureTest, ::testing::ValuesIn(all_fixtures()),
                         [](const ::testing::TestParamInfo<Fixture>& info) { return info.param.name; });

TEST(Fixtures, ManifestIsPresent) {
  // Guards against a suite that silently runs nothing.
  EXPECT_GE(load_manifest(kModels).size(), 20u);
}

TEST(Fixtures, Torch2ManifestIsPresent) {
  // The files a real torch 2.x wrote on a real GPU (make_gpu_fixtures.py).
  EXPECT_GE(load_manifest(kTorch2).size(), 10u);
}

}  // namespace
