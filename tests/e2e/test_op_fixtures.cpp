// End to end against PyTorch for the format 1.2 ops (tests/fixtures/ops,
// made by make_op_fixtures.py with torch): every entry is converted with
// `ferry convert` (its --graph and --layout, or no flag at all where the chain
// is read from TorchScript code, traced or scripted, or from a whole pickled
// nn.Sequential), run on every backend this build and machine have (the CPU
// ones, and cuda where a GPU is visible), and compared
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

#include "../fuzz/exercise_model.h"
#include "cli_runner.h"
#include "dot_check.h"
#include "ferry/ferry.h"
#include "io/npy.h"
#include "npy_compare.h"
#include "random_models.h"

namespace {

using ferry::conv::NpyArray;
using ferry::conv::read_npy;
using ferry::test::max_abs_diff;
using ferry::test::read_bytes;
using ferry::test::run_ferry;
using ferry::test::shell_quote;
using ferry::test::TempDir;

const std::string kOps = std::string(FERRY_FIXTURES_DIR) + "/ops/";

struct OpFixture {
  std::string name, pt, input, output, form, layout, key;
  std::string output_layout;                 // a sequence output's layout where not `layout`
  std::optional<std::string> graph;          // null: read from the file (TorchScript, a Sequential)
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
    f.output_layout = e.value("output_layout", std::string());
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

// `ferry convert` of ops/<name>.pt into dir/m.fb with a layout and a graph.
ferry::test::CommandResult convert_op(const TempDir& dir, const std::string& name, const std::string& layout,
                                      const std::string& graph) {
  return run_ferry("convert " + shell_quote(kOps + name + ".pt") + " " + shell_quote(dir / "m.fb") + " --layout " +
                       layout + " --graph " + shell_quote(graph),
                   dir);
}

// Where ferry reads the chain from the file (graph null), the command has no
// flag at all: the layout is the file's to say too.
std::string convert_command(const OpFixture& f, const std::string& fb) {
  std::string c = "convert " + shell_quote(kOps + f.pt) + " " + shell_quote(fb);
  if (!f.graph) return c;
  c += " --layout " + layout_flag(f.layout);
  if (!f.output_layout.empty()) c += " --output-layout " + layout_flag(f.output_layout);
  auto given = kGroupsGiven.find(f.name);
  if (given != kGroupsGiven.end()) c += " --graph " + shell_quote(given->second);
  else if (f.graph) c += " --graph " + shell_quote(*f.graph);
  if (!f.key.empty()) c += " --key " + shell_quote(f.key);
  return c;
}

std::string lengths_flag(const OpFixture& f) {
  if (f.lengths.empty()) return "";
  std::string l;
  for (int v : f.lengths) l += (l.empty() ? "" : ",") + std::to_string(v);
  return " --lengths " + l;
}

// The backends this build and machine run: reference and simd always,
// xnnpack where built, cuda where built and a GPU is visible.
std::vector<std::string> backends(const std::string& fb, const TempDir& dir, const OpFixture& f) {
  std::vector<std::string> out = {"reference", "simd"};
  for (const char* optional : {"xnnpack", "cuda"}) {
    const auto x = run_ferry("run " + shell_quote(fb) + " --input " + shell_quote(kOps + f.input) + " --output " +
                                 shell_quote(dir / "probe.npy") + " --quiet --backend " + optional + lengths_flag(f),
                             dir);
    if (x.status == 0) out.push_back(optional);
  }
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
  ferry::test::expect_dot_renders(fb, dir);  // `inspect --dot`: Graphviz renders it, a node per layer
  // Every backend runs it, `ferry inspect` says: the CPU policies by their
  // plans here, cuda by its plan (on any machine, with or without a GPU).
  const auto inspect = run_ferry("inspect " + shell_quote(fb), dir);
  ASSERT_EQ(inspect.status, 0) << inspect.err;
  const size_t line = inspect.out.find("\nbackends  reference simd ");
  ASSERT_NE(line, std::string::npos) << inspect.out;
  const std::string backends_line = inspect.out.substr(line + 1, inspect.out.find('\n', line + 1) - line - 1);
  EXPECT_NE(backends_line.find(" cuda"), std::string::npos) << backends_line;
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
  for (const std::string& backend : backends(fb, dir, f)) {
    if (backend == "xnnpack") continue;  // its step is simd's
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
  const auto c = convert_op(dir, "conv_groups2", "btf", "conv(padding=1)");
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.err.find("Conv1d 'conv': assumed groups 1"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("--graph 'conv(groups=N"), std::string::npos) << c.err;
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
    const auto c = convert_op(dir, "conv_k3_pad1", "btf", graph);
    EXPECT_NE(c.status, 0) << graph;
    EXPECT_NE(c.err.find(message), std::string::npos) << graph << ": " << c.err;
    EXPECT_FALSE(std::ifstream(dir / "m.fb").good()) << graph << ": a partial output was left";
  }
}

TEST(OpFixtures, ResidualShapesMustAgree) {
  TempDir dir;
  // proj maps 5 -> 6 features; adding the model's 5-wide input to it cannot work.
  const auto c = convert_op(dir, "residual_inner_tm", "tbf", "(proj > lstm > fc) + input");
  EXPECT_NE(c.status, 0);
  EXPECT_NE(c.err.find("the shapes differ"), std::string::npos) << c.err;
}

}  // namespace

namespace {

// PyTorch's rule for the shortest input a Conv1d takes: L_out =
// floor((L + 2p - d(k-1) - 1) / s) + 1 must be >= 1, and reflect padding
// needs p < L. Found by trying L = 1, 2, ... (not by ferry's formula).
size_t torch_min_length(int k, int s, int p, int d, bool reflect) {
  for (int L = 1;; ++L) {
    const int num = L + 2 * p - d * (k - 1) - 1;
    if (num >= 0 && num / s + 1 >= 1 && (!reflect || p < L)) return static_cast<size_t>(L);
  }
}

}  // namespace

// ferry_model_info.min_seq is the shortest input PyTorch's Conv1d accepts:
// that many steps run, one fewer is refused with a message that says so.
TEST(OpFixtures, MinSeqIsTheShortestInputPyTorchAccepts) {
  struct Case {
    std::string name, graph;
    int k, s, p, d;
    bool reflect;
  };
  const std::vector<Case> cases = {
      {"conv_k3_valid", "conv", 3, 1, 0, 1, false},
      {"conv_k5_stride2_valid", "conv(stride=2)", 5, 2, 0, 1, false},
      {"conv_reflect", "conv(padding=1,padding_mode=reflect)", 3, 1, 1, 1, true},
      {"conv_k3_dil2", "conv(padding=2,dilation=2)", 3, 1, 2, 2, false},
      {"conv_k3_pad1", "conv(padding=1)", 3, 1, 1, 1, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    const auto conv = convert_op(dir, c.name, "btf", c.graph);
    ASSERT_EQ(conv.status, 0) << conv.err;
    std::vector<uint8_t> bytes = read_bytes(dir / "m.fb");
    ASSERT_FALSE(bytes.empty());
    ferry_model* model = nullptr;
    ASSERT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &model), FERRY_OK) << ferry_last_error();
    ferry_model_info info{};
    info.struct_size = sizeof info;
    ASSERT_EQ(ferry_model_get_info(model, &info), FERRY_OK);
    const size_t want = torch_min_length(c.k, c.s, c.p, c.d, c.reflect);
    EXPECT_EQ(info.min_seq, want);
    size_t floats = 0;
    EXPECT_EQ(ferry_output_floats(model, 2, want, &floats), FERRY_OK) << ferry_last_error();
    if (want > 1) {
      EXPECT_EQ(ferry_output_floats(model, 2, want - 1, &floats), FERRY_INVALID_ARGUMENT);
      EXPECT_NE(std::string(ferry_last_error()).find("at least " + std::to_string(want) + " input steps"),
                std::string::npos)
          << ferry_last_error();
    }
    ferry_model_free(model);
  }
}

// The fuzz targets' contract (tests/fuzz/exercise_model.h) on a model that
// needs more steps than the 3 the harness used to run: a valid model whose
// conv spans 7 steps (k=3, dilation=3) is run at its min_seq, not refused.
// This is the case CI's model_run fuzzer found (kernel 3, dilation 65547).
TEST(OpFixtures, ExerciseHarnessRunsALongKernelAtItsMinSeq) {
  TempDir dir;
  const auto conv = convert_op(dir, "conv_k3_valid", "btf", "conv(dilation=3)");
  ASSERT_EQ(conv.status, 0) << conv.err;
  const std::vector<uint8_t> bytes = read_bytes(dir / "m.fb");
  const ferry::test::AlignedBytes aligned(bytes.data(), bytes.size());
  const ferry::test::ExerciseResult r = ferry::test::exercise_model(aligned.data(), aligned.size());
  EXPECT_EQ(r.load, FERRY_OK);
  EXPECT_TRUE(r.ran);
  EXPECT_EQ(r.failure, "");
}

// A model that takes [B, C, T] and returns its GRU's [B, T, H] (a transpose
// before the return): converted from the state dict with --output-layout
// btf, ferry's output is PyTorch's; without it, the output comes out in the
// input's layout [B, H, T], which is not what the model returns.
TEST(OpFixtures, OutputLayoutFlagGivesTheModelsLayout) {
  const std::string graph = "conv(padding=1) > relu > gru";
  const NpyArray want = read_npy(kOps + "conv_gru_out_btf.out.npy");
  ASSERT_EQ(want.shape, (std::vector<size_t>{2, 9, 8}));
  const auto convert_and_run = [&](const TempDir& dir, const std::string& flags) {
    const auto c = run_ferry("convert " + shell_quote(kOps + "conv_gru_out_btf.pt") + " " + shell_quote(dir / "m.fb") +
                                 " --layout bft --graph " + shell_quote(graph) + flags,
                             dir);
    EXPECT_EQ(c.status, 0) << c.err;
    const auto r = run_ferry("run " + shell_quote(dir / "m.fb") + " --input " +
                                 shell_quote(kOps + "conv_gru_out_btf.in.npy") + " --output " + shell_quote(dir / "y.npy") +
                                 " --quiet",
                             dir);
    EXPECT_EQ(r.status, 0) << r.err;
    return c;
  };
  {
    TempDir dir;
    const auto c = convert_and_run(dir, " --output-layout btf");
    EXPECT_NE(c.out.find("layout   channels-first [B,F,T] (--layout); output batch-first [B,T,F] (--output-layout)"),
              std::string::npos)
        << c.out;
    const NpyArray got = read_npy(dir / "y.npy");
    ASSERT_EQ(got.shape, want.shape);
    EXPECT_LE(max_abs_diff(got, want), 1e-5);
    // Format 2.0, and inspect says both layouts.
    const std::vector<uint8_t> bytes = read_bytes(dir / "m.fb");
    ferry_model* model = nullptr;
    ASSERT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &model), FERRY_OK) << ferry_last_error();
    ferry_model_info info{};
    info.struct_size = sizeof info;
    ASSERT_EQ(ferry_model_get_info(model, &info), FERRY_OK);
    EXPECT_EQ(info.channels_first, 1);
    EXPECT_EQ(info.output_layout, FERRY_LAYOUT_BATCH_FIRST);
    ferry_model_free(model);
    const auto text = run_ferry("inspect " + shell_quote(dir / "m.fb"), dir);
    EXPECT_NE(text.out.find("format 2.0"), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("input    6 features, channels-first [B,F,T]"), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("output   8 features per time step, batch-first [B,T,F]"), std::string::npos) << text.out;
    const auto json = run_ferry("inspect --json " + shell_quote(dir / "m.fb"), dir);
    const nlohmann::json j = nlohmann::json::parse(json.out);
    EXPECT_EQ(j.at("layout"), "bft");
    EXPECT_EQ(j.at("output_layout"), "btf");
    EXPECT_EQ(j.at("format"), "2.0");
  }
  {
    TempDir dir;
    convert_and_run(dir, "");
    const NpyArray got = read_npy(dir / "y.npy");
    EXPECT_EQ(got.shape, (std::vector<size_t>{2, 8, 9})) << "the input's layout, [B, H, T]";
    const auto json = run_ferry("inspect --json " + shell_quote(dir / "m.fb"), dir);
    const nlohmann::json j = nlohmann::json::parse(json.out);
    EXPECT_EQ(j.at("output_layout"), "bft");
    EXPECT_EQ(j.at("format"), "1.2") << "a file whose output keeps the input's layout is as before";
  }
}

// --output-layout on a model whose output has no time axis is refused.
TEST(OpFixtures, OutputLayoutNeedsASequenceOutput) {
  TempDir dir;
  const auto c = run_ferry("convert " + shell_quote(kOps + "conv_gru_out_btf.pt") + " " + shell_quote(dir / "m.fb") +
                               " --layout bft --graph 'conv(padding=1) > relu > gru > last' --output-layout btf",
                           dir);
  EXPECT_NE(c.status, 0);
  EXPECT_NE(c.err.find("--output-layout: the model's output has no time axis"), std::string::npos) << c.err;
  EXPECT_FALSE(std::ifstream(dir / "m.fb").good());
}
