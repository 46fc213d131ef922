// What a state dict does not record: every hyper-parameter the converter
// assumes is said, with the layer, the value and the --graph option that
// overrides it (stderr, and `ferry inspect` of the model file), and modules
// the chain does not use are listed as ignored, never read into an error.
// Fixtures: tests/fixtures/make_assumption_fixtures.py (PyTorch's outputs).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "io/npy.h"
#include "npy_compare.h"

namespace ferry::test {
namespace {

std::string fixture(const std::string& name) { return std::string(FERRY_FIXTURES_DIR) + "/assumptions/" + name; }

// Converts `name`.pt with `args`, runs it on `name`.x.npy; the largest
// difference from PyTorch's `name`.y.npy. The conversion's stderr in *err.
double convert_and_run(const std::string& name, const std::string& args, const TempDir& dir, std::string* err) {
  const CommandResult c =
      run_ferry("convert " + shell_quote(fixture(name + ".pt")) + " " + shell_quote(dir / "m.fb") + " " + args, dir);
  EXPECT_EQ(c.status, 0) << c.err;
  if (err) *err = c.err;
  const CommandResult r = run_ferry("run " + shell_quote(dir / "m.fb") + " --input " +
                                        shell_quote(fixture(name + ".x.npy")) + " --output " + shell_quote(dir / "y.npy"),
                                    dir);
  EXPECT_EQ(r.status, 0) << r.err;
  return max_abs_diff(conv::read_npy(dir / "y.npy"), conv::read_npy(fixture(name + ".y.npy")));
}

TEST(Assumptions, ConvPaddingAssumedIsSaidAndTheGraphOptionMatchesPyTorch) {
  TempDir dir;
  std::string err;
  // The user's first guess: nothing in the state dict says padding=1. The
  // model converts and runs (a silent mismatch, 0.07 off), so the note is
  // the only thing that can tell: it names the layer, the value and the fix.
  const double wrong = convert_and_run("conv_pad1_mean", "--graph 'conv > relu > mean > fc' --layout bft", dir, &err);
  EXPECT_GT(wrong, 1e-2);
  EXPECT_NE(err.find("ferry: note: Conv1d 'conv': assumed"), std::string::npos) << err;
  EXPECT_NE(err.find("padding 0"), std::string::npos) << err;
  EXPECT_NE(err.find("--graph 'conv("), std::string::npos) << err;
  EXPECT_NE(err.find("padding=N"), std::string::npos) << err;
  // The same assumptions, from the model file.
  const CommandResult text = run_ferry("inspect " + shell_quote(dir / "m.fb"), dir);
  EXPECT_NE(text.out.find("assumed  Conv1d 'conv': assumed"), std::string::npos) << text.out;
  const CommandResult json = run_ferry("inspect --json " + shell_quote(dir / "m.fb"), dir);
  ASSERT_EQ(json.status, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  bool padding = false;
  for (const auto& a : j.at("assumptions")) {
    if (a.at("parameter") == "padding") {
      padding = true;
      EXPECT_EQ(a.at("layer"), "Conv1d 'conv'");
      EXPECT_EQ(a.at("value"), "0");
      EXPECT_EQ(a.at("override"), "--graph 'conv(padding=N|same|causal)'");
    }
  }
  EXPECT_TRUE(padding) << json.out;

  // Told: matches PyTorch, and padding is no longer assumed.
  const double right = convert_and_run("conv_pad1_mean", "--graph 'conv(padding=1) > relu > mean > fc' --layout bft",
                                       dir, &err);
  EXPECT_LT(right, 1e-5);
  EXPECT_EQ(err.find("padding 0"), std::string::npos) << err;
  // Every option given: nothing assumed, nothing said.
  convert_and_run("conv_pad1_mean", "--graph 'conv(padding=1, stride=1, dilation=1, padding_mode=zeros, groups=1) > "
                  "relu > mean > fc' --layout bft", dir, &err);
  EXPECT_EQ(err.find("assumed"), std::string::npos) << err;
}

// `ferry inspect CHECKPOINT` with convert's options plans without writing:
// the same assumptions, before any conversion.
TEST(Assumptions, InspectPlansACheckpointWithTheSameOptions) {
  TempDir dir;
  const std::string ckpt = shell_quote(fixture("conv_pad1_mean.pt"));
  const CommandResult json = run_ferry("inspect --json " + ckpt + " --graph 'conv > relu > mean > fc' --layout bft", dir);
  ASSERT_EQ(json.status, 0) << json.err;
  const nlohmann::json plan = nlohmann::json::parse(json.out).at("plan");
  EXPECT_EQ(plan.at("graph"), "conv > relu > mean > fc");
  EXPECT_EQ(plan.at("layout"), "bft");
  bool padding = false;
  for (const auto& a : plan.at("assumptions")) padding = padding || (a.at("parameter") == "padding" && a.at("value") == "0");
  EXPECT_TRUE(padding) << json.out;
  const CommandResult text = run_ferry("inspect " + ckpt + " --graph 'conv(padding=1) > relu > mean > fc' --layout bft", dir);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("plan     conv(padding=1) > relu > mean > fc  (--graph)"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("padding 0"), std::string::npos) << text.out;
  // No chain to plan: said, and the rest of the listing is still printed.
  const CommandResult none = run_ferry("inspect " + ckpt, dir);
  ASSERT_EQ(none.status, 0) << none.err;
  EXPECT_NE(none.out.find("plan     not planned: cannot infer the layer chain"), std::string::npos) << none.out;
  EXPECT_FALSE(std::filesystem::exists(dir / "m.fb"));
}

TEST(Assumptions, LayoutNormEpsAndActivationSlopesAreSaid) {
  TempDir dir;
  // The input layout of a recurrent model, when nothing gives it.
  CommandResult c = run_ferry("convert " + shell_quote(fixture("outside_module.pt")) + " " + shell_quote(dir / "m.fb") +
                                  " --graph 'lstm > last > leaky_relu > fc'",
                              dir);
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.err.find("ferry: note: the input: assumed layout time-major [T,B,F]"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("--batch-first, or --layout btf|tbf|bft"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("leaky_relu (--graph element 3): assumed slope 0.01"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("--graph 'leaky_relu(slope=X)'"), std::string::npos) << c.err;
  c = run_ferry("convert " + shell_quote(fixture("outside_module.pt")) + " " + shell_quote(dir / "m.fb") +
                    " --graph 'lstm > last > leaky_relu(slope=0.2) > fc' --batch-first",
                dir);
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(c.err.find("assumed"), std::string::npos) << c.err;
}

// [B,F,T] in (convolutions first) and a sequence out: nothing in a state
// dict says whether the model returns [B,F,T] or its RNN's [B,T,F].
TEST(Assumptions, TheOutputLayoutOfAChannelsFirstSequenceModelIsSaid) {
  TempDir dir;
  const std::string ops = std::string(FERRY_FIXTURES_DIR) + "/ops/";
  const std::string convert = "convert " + shell_quote(ops + "conv_gru_out_btf.pt") + " " + shell_quote(dir / "m.fb") +
                              " --layout bft --graph 'conv(padding=1, stride=1, dilation=1, groups=1, "
                              "padding_mode=zeros) > relu > gru'";
  CommandResult c = run_ferry(convert, dir);
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.err.find("ferry: note: the output: assumed layout channels-first [B,F,T], as the input (the file does "
                       "not record it); to change: --output-layout btf|tbf|bft"),
            std::string::npos)
      << c.err;
  c = run_ferry(convert + " --output-layout btf", dir);
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(c.err.find("assumed"), std::string::npos) << c.err;
}

TEST(Assumptions, ModulesOutsideTheChainAreIgnoredNotReadIntoAnError) {
  TempDir dir;
  std::string err;
  // x.ln is LayerNorm((33, 16)): weight and bias [33, 16], which no layer
  // ferry runs has. The chain does not use it: listed as ignored.
  EXPECT_LT(convert_and_run("outside_module", "--graph 'lstm > last > fc' --batch-first", dir, &err), 1e-5);
  const CommandResult inspect = run_ferry("inspect " + shell_quote(dir / "m.fb"), dir);
  EXPECT_NE(inspect.out.find("x.ln.bias"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("ignored: module 'x.ln' is not read as a layer"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("x.proj.weight"), std::string::npos) << inspect.out;
  // The checkpoint's own listing says the same, with no chain at all.
  const CommandResult ck = run_ferry("inspect " + shell_quote(fixture("outside_module.pt")), dir);
  ASSERT_EQ(ck.status, 0) << ck.err;
  EXPECT_NE(ck.out.find("ignored  x.ln.weight (module 'x.ln' is not read as a layer"), std::string::npos) << ck.out;
  // A chain that uses it: classified with every shape checked, as before.
  const CommandResult used = run_ferry("convert " + shell_quote(fixture("outside_module.pt")) + " " +
                                           shell_quote(dir / "n.fb") + " --graph 'lstm > last > x.ln' --batch-first",
                                       dir);
  EXPECT_EQ(used.status, 1);
  EXPECT_NE(used.err.find("ferry: error: tensor 'x.ln.bias' has shape [33, 16], but module 'x.ln' (Linear(16, 33)) "
                          "needs [33]"),
            std::string::npos)
      << used.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "n.fb"));
  // No --graph: every module is a candidate, so the error stands.
  const CommandResult inferred =
      run_ferry("convert " + shell_quote(fixture("outside_module.pt")) + " " + shell_quote(dir / "n.fb"), dir);
  EXPECT_EQ(inferred.status, 1);
  EXPECT_NE(inferred.err.find("module 'x.ln' (Linear(16, 33)) needs [33]"), std::string::npos) << inferred.err;
}

}  // namespace
}  // namespace ferry::test
