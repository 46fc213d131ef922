// End to end against PyTorch for the format 1.2 ops (tests/fixtures/ops,
// made by make_op_fixtures.py with torch): every entry is converted with
// `ferry convert` (its --graph, or none where the chain is read from
// TorchScript code), run on every CPU backend this build has, and compared
// with PyTorch's output within the entry's tolerance. Causal entries also run
// step by step (ferry_step), which must equal the whole-sequence run bit for
// bit; a model whose conv looks ahead must refuse to stream, saying why.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "io/npy.h"

namespace {

using ferry::conv::NpyArray;
using ferry::conv::read_npy;
using ferry::test::run_ferry;
using ferry::test::shell_quote;
using ferry::test::TempDir;

const std::string kOps = std::string(FERRY_FIXTURES_DIR) + "/ops/";

struct OpFixture {
  std::string name, pt, input, output, form, layout, key;
  std::optional<std::string> graph;          // null: read from TorchScript
  std::optional<std::string> expect_chain;   // what ferry must print when it reads the chain
  bool causal = false;
  double tolerance = 1e-5;
  std::vector<int> lengths;
  std::vector<std::string> ops;
};

void PrintTo(const OpFixture& f, std::ostream* os) { *os << f.name; }

std::vector<OpFixture> load_manifest() {
  std::ifstream in(kOps + "manifest.json");
  if (!in) return {};
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<OpFixture> out;
  for (const auto& e : j) {
    OpFixture f;
    f.name = e.at("name");
    f.pt = e.at("pt");
    f.input = e.at("input");
    f.output = e.at("output");
    f.form = e.at("form");
    f.layout = e.at("layout");
    f.key = e.value("key", nlohmann::json()).is_string() ? e.at("key").get<std::string>() : "";
    if (e.at("graph").is_string()) f.graph = e.at("graph").get<std::string>();
    if (e.contains("expect_chain") && e.at("expect_chain").is_string()) f.expect_chain = e.at("expect_chain").get<std::string>();
    f.causal = e.value("causal", false);
    f.tolerance = e.at("tolerance");
    if (e.contains("lengths")) f.lengths = e.at("lengths").get<std::vector<int>>();
    f.ops = e.value("ops", std::vector<std::string>{});
    out.push_back(f);
  }
  return out;
}

// A state dict does not record the groups of a conv that is the model's first
// layer (its input width is in_per_group x groups, and nothing before it says
// the width): the user writes groups= in --graph. These entries' manifest
// graphs leave it out, so the test adds it.
const std::map<std::string, std::string> kGroupsGiven = {
    {"conv_groups2", "conv(padding=1,groups=2)"},
    {"conv_depthwise_nobias", "conv(padding=2,groups=8)"},
    {"conv_depthwise_mult2", "conv(padding=1,groups=4)"},
};

std::string layout_flag(const std::string& layout) {
  if (layout == "batch_first") return "btf";
  if (layout == "channels_first") return "bft";
  return "tbf";
}

std::string convert_command(const OpFixture& f, const std::string& fb) {
  std::string c = "convert " + shell_quote(kOps + f.pt) + " " + shell_quote(fb) + " --layout " + layout_flag(f.layout);
  auto given = kGroupsGiven.find(f.name);
  if (given != kGroupsGiven.end()) c += " --graph " + shell_quote(given->second);
  else if (f.graph) c += " --graph " + shell_quote(*f.graph);
  if (!f.key.empty()) c += " --key " + shell_quote(f.key);
  return c;
}

double max_abs_diff(const NpyArray& a, const NpyArray& b) {
  double worst = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    const double e = std::fabs(double{a.data[i]} - double{b.data[i]});
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

std::string lengths_flag(const OpFixture& f) {
  if (f.lengths.empty()) return "";
  std::string l;
  for (int v : f.lengths) l += (l.empty() ? "" : ",") + std::to_string(v);
  return " --lengths " + l;
}

// The CPU backends this build runs: reference and simd always, xnnpack where built.
std::vector<std::string> backends(const std::string& fb, const TempDir& dir, const OpFixture& f) {
  std::vector<std::string> out = {"reference", "simd"};
  const auto x = run_ferry("run " + shell_quote(fb) + " --input " + shell_quote(kOps + f.input) + " --output " +
                               shell_quote(dir / "probe.npy") + " --quiet --backend xnnpack" + lengths_flag(f),
                           dir);
  if (x.status == 0) out.push_back("xnnpack");
  return out;
}

class OpFixtureTest : public ::testing::TestWithParam<OpFixture> {};

TEST_P(OpFixtureTest, MatchesPyTorchOnEveryBackend) {
  const OpFixture& f = GetParam();
  TempDir dir;
  const std::string fb = dir / "model.fb";
  const auto c = run_ferry(convert_command(f, fb), dir);
  if (!f.graph && !f.expect_chain) {
    // Not a straight line: ferry must refuse to guess and suggest --graph.
    EXPECT_NE(c.status, 0) << c.out;
    EXPECT_NE(c.err.find("--graph"), std::string::npos) << c.err;
    return;
  }
  ASSERT_EQ(c.status, 0) << c.err << c.out;
  if (!f.graph) {
    EXPECT_NE(c.out.find("graph    " + *f.expect_chain + "  (inferred)"), std::string::npos) << c.out;
  }
  const NpyArray want = read_npy(kOps + f.output);
  for (const std::string& backend : backends(fb, dir, f)) {
    const std::string y = dir / ("y_" + backend + ".npy");
    const auto r = run_ferry("run " + shell_quote(fb) + " --input " + shell_quote(kOps + f.input) + " --output " +
                                 shell_quote(y) + " --quiet --backend " + backend + lengths_flag(f),
                             dir);
    ASSERT_EQ(r.status, 0) << backend << ": " << r.err << r.out;
    const NpyArray got = read_npy(y);
    ASSERT_EQ(got.shape, want.shape) << backend;
    EXPECT_LE(max_abs_diff(got, want), f.tolerance) << f.name << " on " << backend;
  }
}

TEST_P(OpFixtureTest, StreamingEqualsWholeSequence) {
  const OpFixture& f = GetParam();
  if (!f.graph && !f.expect_chain) GTEST_SKIP() << "no chain";
  if (!f.lengths.empty()) GTEST_SKIP() << "variable lengths";
  TempDir dir;
  const std::string fb = dir / "model.fb";
  ASSERT_EQ(run_ferry(convert_command(f, fb), dir).status, 0);
  const std::string io = " --input " + shell_quote(kOps + f.input) + " --quiet --output ";
  bool has_conv = false;
  for (const std::string& op : f.ops) has_conv = has_conv || op == "conv1d";
  for (const std::string backend : {"reference", "simd"}) {
    const std::string b = " --backend " + backend;
    const auto s = run_ferry("run " + shell_quote(fb) + io + shell_quote(dir / "stream.npy") + " --stream" + b, dir);
    if (!f.causal) {
      if (has_conv && s.status != 0) {
        // A conv that looks ahead (or changes the step count) cannot stream: a clear refusal.
        EXPECT_TRUE(s.err.find("only a causal conv streams") != std::string::npos ||
                    s.err.find("output steps for") != std::string::npos)
            << s.err;
      }
      continue;
    }
    ASSERT_EQ(s.status, 0) << backend << ": " << s.err;
    ASSERT_EQ(run_ferry("run " + shell_quote(fb) + io + shell_quote(dir / "whole.npy") + b, dir).status, 0);
    const NpyArray whole = read_npy(dir / "whole.npy");
    const NpyArray stream = read_npy(dir / "stream.npy");
    ASSERT_EQ(whole.shape, stream.shape);
    for (size_t i = 0; i < whole.data.size(); ++i) {
      ASSERT_EQ(whole.data[i], stream.data[i]) << backend << ": element " << i << " differs between run and step";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PyTorch, OpFixtureTest, ::testing::ValuesIn(load_manifest()),
                         [](const ::testing::TestParamInfo<OpFixture>& info) { return info.param.name; });

TEST(OpFixtures, ManifestIsPresent) { EXPECT_GE(load_manifest().size(), 70u); }

// A first-layer grouped conv from a state dict: converted with groups 1 (the
// PyTorch default) and a note saying what to write.
TEST(OpFixtures, FirstLayerGroupsAssumedWithANote) {
  TempDir dir;
  const auto c = run_ferry("convert " + shell_quote(kOps + "conv_groups2.pt") + " " + shell_quote(dir / "m.fb") +
                               " --layout btf --graph 'conv(padding=1)'",
                           dir);
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.err.find("conv(groups=N)"), std::string::npos) << c.err;
}

// Options that cannot be right are refused, naming what is wrong.
TEST(OpFixtures, BadOptionsAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"conv(stride=0)", "stride 0 must be a positive integer"},
      {"conv(dilation=-1)", "dilation -1 must be a positive integer"},
      {"conv(padding=same,stride=2)", "padding=same needs stride 1"},
      {"conv(padding=wide)", "padding=wide (from --graph) is not an integer"},
      {"conv(padding_mode=circular)", "padding_mode 'circular'"},
      {"conv(groups=5)", "groups 5 does not divide the 7 output channels"},
      {"conv(eps=1)", "a Conv1d module takes stride=, padding=, dilation=, groups=, padding_mode= (not eps=)"},
  };
  for (const auto& [graph, message] : cases) {
    TempDir dir;
    const auto c = run_ferry("convert " + shell_quote(kOps + "conv_k3_pad1.pt") + " " + shell_quote(dir / "m.fb") +
                                 " --layout btf --graph " + shell_quote(graph),
                             dir);
    EXPECT_NE(c.status, 0) << graph;
    EXPECT_NE(c.err.find(message), std::string::npos) << graph << ": " << c.err;
    EXPECT_FALSE(std::ifstream(dir / "m.fb").good()) << graph << ": a partial output was left";
  }
}

TEST(OpFixtures, ResidualShapesMustAgree) {
  TempDir dir;
  // proj maps 5 -> 6 features; adding the model's 5-wide input to it cannot work.
  const auto c = run_ferry("convert " + shell_quote(kOps + "residual_inner_tm.pt") + " " + shell_quote(dir / "m.fb") +
                               " --layout tbf --graph '(proj > lstm > fc) + input'",
                           dir);
  EXPECT_NE(c.status, 0);
  EXPECT_NE(c.err.find("the shapes differ"), std::string::npos) << c.err;
}

}  // namespace
