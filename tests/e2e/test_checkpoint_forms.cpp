// Checkpoint forms published files still use, end to end against PyTorch:
//
//  - tests/fixtures/dcp_values (make_dcp_fixtures.py, torch 2.15): DCP
//    directories, one rank and two ranks, whose state dict holds every kind
//    of non-tensor value DCP writes (BytesStorageMetadata entries) beside
//    the model and inside it;
//  - tests/fixtures/old_torch (make_old_torch_fixtures.py): whole modules as
//    torch 0.2-0.4 saved them (the legacy stream with a thnn backend REDUCE
//    in every module's `_backend`, and the pre-0.3 tar format), with
//    torch 1.13's output for the same weights.
// Each case is converted with its manifest's --graph and --layout (and
// --key, also left out where the model's key is found alone), run on the
// reference and SIMD backends, whole and streamed, and compared with
// PyTorch's output; `ferry inspect` must list the manifest's ignored
// entries.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "io/npy.h"
#include "npy_compare.h"

namespace {

using ferry::conv::NpyArray;
using ferry::conv::read_npy;
using ferry::test::CommandResult;
using ferry::test::max_abs_diff;
using ferry::test::run_ferry;
using ferry::test::shell_quote;
using ferry::test::TempDir;

struct Form {
  std::string name, path, input, output, graph, layout, key;
  std::vector<std::string> ignored;  // names `ferry inspect` lists as ignored
  double tol = 1e-5;
};

void PrintTo(const Form& f, std::ostream* os) { *os << f.name; }

std::vector<Form> cases_of(const std::string& folder, const char* file_field) {
  const std::string dir = std::string(FERRY_FIXTURES_DIR) + "/" + folder + "/";
  std::ifstream in(dir + "manifest.json");
  if (!in) return {};
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<Form> out;
  for (const auto& e : j.at("cases")) {
    Form f;
    f.name = folder + "_" + e.at("name").get<std::string>();
    f.path = dir + e.at(file_field).get<std::string>();
    f.input = dir + e.at("name").get<std::string>() + ".x.npy";
    f.output = dir + e.at("name").get<std::string>() + ".y.npy";
    f.graph = e.at("graph");
    f.layout = e.at("layout");
    f.key = e.value("key", "");
    f.tol = e.at("tol");
    for (const auto& n : e.value("ignored", nlohmann::json::array())) f.ignored.push_back(n.get<std::string>());
    out.push_back(f);
  }
  return out;
}

std::vector<Form> all_cases() {
  std::vector<Form> out = cases_of("dcp_values", "dir");
  for (Form& f : cases_of("old_torch", "file")) out.push_back(f);
  return out;
}

void check(const Form& f, bool with_key) {
  TempDir dir;
  const std::string fb = dir / "model.fb";
  std::string args = "convert " + shell_quote(f.path) + " " + shell_quote(fb) + " --graph " + shell_quote(f.graph) +
                     " --layout " + f.layout;
  if (with_key && !f.key.empty()) args += " --key " + shell_quote(f.key);
  const CommandResult conv = run_ferry(args, dir);
  ASSERT_EQ(conv.status, 0) << conv.err << conv.out;
  const NpyArray want = read_npy(f.output);
  for (const std::string backend : {"reference", "simd"}) {
    for (const bool stream : {false, true}) {
      const std::string y = dir / ("y_" + backend + (stream ? "_stream" : "") + ".npy");
      const CommandResult r = run_ferry("run " + shell_quote(fb) + " --input " + shell_quote(f.input) + " --output " +
                                            shell_quote(y) + " --quiet --backend " + backend + (stream ? " --stream" : ""),
                                        dir);
      ASSERT_EQ(r.status, 0) << backend << (stream ? " --stream: " : ": ") << r.err;
      const NpyArray got = read_npy(y);
      ASSERT_EQ(got.shape, want.shape) << backend;
      EXPECT_LE(max_abs_diff(got, want), f.tol) << f.name << " on " << backend << (stream ? " streamed" : "");
    }
  }
}

class CheckpointForm : public ::testing::TestWithParam<Form> {};

TEST_P(CheckpointForm, MatchesPyTorch) { check(GetParam(), true); }

TEST_P(CheckpointForm, FindsTheModelWithoutKey) {
  if (GetParam().key.empty()) GTEST_SKIP() << "no --key to leave out";
  check(GetParam(), false);
}

TEST_P(CheckpointForm, InspectListsWhatIsIgnored) {
  const Form& f = GetParam();
  TempDir dir;
  const CommandResult r = run_ferry("inspect " + shell_quote(f.path), dir);
  ASSERT_EQ(r.status, 0) << r.err;
  for (const std::string& name : f.ignored)
    EXPECT_NE(r.out.find("ignored  " + name + " ("), std::string::npos) << name << "\n" << r.out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CheckpointForm, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Form>& i) { return i.param.name; });

TEST(CheckpointForm, ManifestsArePresent) { EXPECT_GE(cases_of("dcp_values", "dir").size(), 2u); }

}  // namespace
