// End to end over the checkpoints torch 2.11 saved on a GPU in the forms
// current training scripts produce (tests/fixtures/torch2_forms, see its
// README and manifest.json): .pt2 exports, distributed-checkpoint
// directories, weight and spectral norm, a pickled nn.Sequential, scripted
// and traced TorchScript. One case per manifest entry:
//  - converted the way a user would: `ferry convert FILE model.fb` with no
//    flag at all where the file records the network (`records_chain`, but
//    --key where the manifest gives one: a .pt2 of two programs), else with
//    the manifest's --graph (and --layout, --key);
//  - run whole-sequence and with --stream (ferry_step), each compared with
//    PyTorch's own output (NAME.y.npy) within the manifest's tolerance, the
//    stream also bit for bit with the whole run; a model that cannot stream
//    (bidirectional, a conv that looks ahead) must say so;
//  - `expect_refusal` cases must be refused: `ferry: error:` on one line,
//    naming the file and what is wrong (`refusal_says`, where given),
//    nothing written.
// The same test runs over tests/fixtures/torch215 (made by
// make_torch2_fixtures.py, torch 2.15): every .pt2 form torch 2.15 writes,
// DCP from 2 and 4 ranks, torch.compile and AMP checkpoints, and one case per
// torch.save layout choice; and over tests/fixtures/script_branches (made by
// make_script_branch_fixtures.py, torch 1.13): scripted forwards that branch
// on what the file fixes (ranks, sizes, attributes, self.training, None
// defaults), branches the data decides (refused), and classes with
// __getstate__/__setstate__.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
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
using ferry::test::max_abs_diff;
using ferry::test::run_ferry;
using ferry::test::shell_quote;
using ferry::test::TempDir;

const std::string kForms = std::string(FERRY_FIXTURES_DIR) + "/torch2_forms/";
const std::string kBranches = std::string(FERRY_FIXTURES_DIR) + "/script_branches/";
const std::string kTorch215 = std::string(FERRY_FIXTURES_DIR) + "/torch215/";

struct Form {
  std::string dir;  // the manifest's folder
  std::string name, file, graph, layout, key, expect_refusal, refusal_says, notes;
  bool records_chain = false;
  double tol = 1e-5;
};

void PrintTo(const Form& f, std::ostream* os) { *os << f.name; }

std::vector<Form> load_manifest(const std::string& dir = kForms) {
  std::ifstream in(dir + "manifest.json");
  if (!in) return {};
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<Form> out;
  for (const auto& e : j.at("cases")) {
    Form f;
    f.dir = dir;
    f.name = e.at("name");
    f.file = e.at("file");
    f.graph = e.at("graph");
    f.layout = e.at("layout");
    f.records_chain = e.at("records_chain");
    f.tol = e.at("tol");
    f.key = e.value("key", "");
    f.expect_refusal = e.value("expect_refusal", "");
    f.refusal_says = e.value("refusal_says", "");
    f.notes = e.value("notes", "");
    out.push_back(f);
  }
  return out;
}

// The user's command: no flags where the file records the chain, but --key
// where the file holds several (a .pt2 of two programs).
std::string convert_command(const Form& f, const std::string& fb) {
  std::string c = "convert " + shell_quote(f.dir + f.file) + " " + shell_quote(fb);
  if (!f.key.empty()) c += " --key " + shell_quote(f.key);
  if (f.records_chain) return c;
  c += " --graph " + shell_quote(f.graph);
  if (f.layout == "btf" || f.layout == "tbf" || f.layout == "bft") c += " --layout " + f.layout;
  return c;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

class Torch2FormTest : public ::testing::TestWithParam<Form> {};

TEST_P(Torch2FormTest, ConvertsAndMatchesPyTorch) {
  const Form& f = GetParam();
  TempDir dir;
  const std::string fb = dir / "model.fb";
  const auto c = run_ferry(convert_command(f, fb), dir);

  if (!f.expect_refusal.empty()) {
    // "core-ATen graph: the LSTM is unrolled into per-step cells": refused
    // with one line that names the file and says so.
    EXPECT_NE(c.status, 0) << c.out;
    EXPECT_EQ(c.err.rfind("ferry: error: ", 0), 0u) << c.err;
    EXPECT_EQ(std::count(c.err.begin(), c.err.end(), '\n'), 1) << c.err;
    EXPECT_NE(c.err.find(f.file), std::string::npos) << c.err;
    // What it says besides the file's name (which may itself say "decomposed").
    std::string e = c.err;
    for (size_t at = e.find(f.file); at != std::string::npos; at = e.find(f.file)) e.erase(at, f.file.size());
    e = lower(e);
    if (!f.refusal_says.empty()) {
      EXPECT_NE(e.find(lower(f.refusal_says)), std::string::npos)
          << "the refusal does not say what is wrong (" << f.expect_refusal << "): " << c.err;
    } else {
      EXPECT_TRUE(e.find("core-aten") != std::string::npos || e.find("unrolled") != std::string::npos ||
                  e.find("decomposed") != std::string::npos)
          << "the refusal does not say what is wrong (" << f.expect_refusal << "): " << c.err;
    }
    EXPECT_FALSE(std::ifstream(fb).good()) << "a refused conversion left an output file";
    return;
  }

  ASSERT_EQ(c.status, 0) << f.name << " (" << f.notes << "): " << c.err << c.out;
  if (f.records_chain) {
    // The chain ferry read from the file, printed as inferred.
    EXPECT_NE(c.out.find("  (inferred)"), std::string::npos) << c.out;
  }
  const std::string x = f.dir + f.name + ".x.npy";
  const NpyArray want = read_npy(f.dir + f.name + ".y.npy");
  const std::string io = " --input " + shell_quote(x) + " --quiet --output ";

  const auto r = run_ferry("run " + shell_quote(fb) + io + shell_quote(dir / "whole.npy"), dir);
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  const NpyArray whole = read_npy(dir / "whole.npy");
  ASSERT_EQ(whole.shape, want.shape);
  EXPECT_LE(max_abs_diff(whole, want), f.tol) << f.name << ": whole-sequence run against PyTorch";

  const auto s = run_ferry("run " + shell_quote(fb) + io + shell_quote(dir / "stream.npy") + " --stream", dir);
  if (s.status != 0 && (s.err.find("bidirectional") != std::string::npos ||
                        s.err.find("only a causal conv streams") != std::string::npos ||
                        s.err.find("output steps for") != std::string::npos)) {
    // A model that needs the whole sequence: refused, saying why.
    EXPECT_EQ(s.err.rfind("ferry: error: ", 0), 0u) << s.err;
    return;
  }
  ASSERT_EQ(s.status, 0) << s.err << s.out;
  const NpyArray stream = read_npy(dir / "stream.npy");
  ASSERT_EQ(stream.shape, want.shape);
  EXPECT_LE(max_abs_diff(stream, want), f.tol) << f.name << ": --stream against PyTorch";
  for (size_t i = 0; i < whole.data.size(); ++i) {
    ASSERT_EQ(whole.data[i], stream.data[i]) << f.name << ": element " << i << " differs between run and --stream";
  }
}

INSTANTIATE_TEST_SUITE_P(Torch211, Torch2FormTest, ::testing::ValuesIn(load_manifest()),
                         [](const ::testing::TestParamInfo<Form>& info) { return info.param.name; });

// torch 2.15 (PyPI, CPU; storages recorded as cuda:0), made by
// make_torch2_fixtures.py: every .pt2 form it writes, DCP from 2 and 4 ranks,
// torch.compile and AMP checkpoints, and each torch.save layout choice.
INSTANTIATE_TEST_SUITE_P(Torch215, Torch2FormTest, ::testing::ValuesIn(load_manifest(kTorch215)),
                         [](const ::testing::TestParamInfo<Form>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(ScriptBranches, Torch2FormTest, ::testing::ValuesIn(load_manifest(kBranches)),
                         [](const ::testing::TestParamInfo<Form>& info) { return info.param.name; });

TEST(Torch2Forms, ManifestIsPresent) {
  // Guards against a suite that silently runs nothing: the 13 files of the set.
  EXPECT_GE(load_manifest().size(), 13u);
  EXPECT_GE(load_manifest(kBranches).size(), 12u);
  EXPECT_GE(load_manifest(kTorch215).size(), 31u);
}

}  // namespace
