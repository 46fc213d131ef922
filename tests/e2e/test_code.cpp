// `ferry convert CKPT --code model.py` against PyTorch. The model sources in
// tests/fixtures/code/src are written the way tutorials and repositories
// write them (init_hidden, zeros moved to a device, nn.Sequential heads,
// Lightning modules, notebooks with !pip and %magic lines, a model split
// over two files); tests/fixtures/make_code_fixtures.py runs them with
// torch 2.x and saves each checkpoint (state dict, training checkpoint dict,
// Lightning .ckpt, safetensors, a whole pickled module), an input, PyTorch's
// output and its output on every prefix of the input. Each converts with
// --code and no other flag and matches PyTorch whole and step by step
// (ferry_step, the state carried); each refused source is refused naming its
// file and line. The fixture scripts of the other fixture sets are model
// sources too: their state dicts convert with --code pointing at them.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "ferry/ferry.hpp"
#include "io/npy.h"
#include "npy_compare.h"

namespace {

using ferry::conv::NpyArray;
using ferry::conv::read_npy;
using ferry::test::max_abs_diff;
using ferry::test::read_bytes;
using ferry::test::run_ferry;
using ferry::test::shell_quote;
using ferry::test::TempDir;

const std::string kCode = std::string(FERRY_FIXTURES_DIR) + "/code/";
const std::string kFixtures = std::string(FERRY_FIXTURES_DIR) + "/";

nlohmann::json manifest() {
  std::ifstream in(kCode + "manifest.json");
  return nlohmann::json::parse(in);
}

std::string code_args(const nlohmann::json &c) {
  std::string args;
  for (const auto &file : c.at("code"))
    args += " --code " + shell_quote(kCode + file.get<std::string>());
  return args;
}

struct Case {
  nlohmann::json entry;
};
void PrintTo(const Case &c, std::ostream *os) {
  *os << c.entry.at("name").get<std::string>();
}

std::vector<Case> cases(const char *list) {
  std::vector<Case> out;
  const nlohmann::json m = manifest();
  for (const auto &e : m.at(list))
    out.push_back({e});
  return out;
}

class CodeFixture : public ::testing::TestWithParam<Case> {};
class CodeRefusal : public ::testing::TestWithParam<Case> {};

// Step by step through the session, the state carried: the output after
// each step against PyTorch's output on that prefix of the input.
void expect_streamed(const std::string &fb, const nlohmann::json &c) {
  const std::vector<uint8_t> bytes = read_bytes(fb);
  ferry::Model model;
  ASSERT_TRUE(ferry::Model::load(bytes.data(), bytes.size(), &model));
  const std::string layout = c.at("input_layout");
  const bool tokens = layout == "tokens_bt";
  const NpyArray x = read_npy(kCode + c.at("input").get<std::string>(), tokens);
  const NpyArray steps = read_npy(kCode + c.at("steps").get<std::string>());
  ASSERT_GE(x.shape.size(), 2u);
  const size_t batch = layout == "tbf" ? x.shape[1] : x.shape[0];
  const size_t seq = layout == "tbf"   ? x.shape[0]
                     : layout == "bft" ? x.shape[2]
                                       : x.shape[1];
  const size_t features = tokens            ? 1
                          : layout == "bft" ? x.shape[1]
                                            : x.shape[2];
  ASSERT_EQ(steps.shape[0], seq);
  const size_t out_per_step = steps.data.size() / seq;
  ferry::Session session;
  ASSERT_TRUE(ferry::Session::create(
      model, ferry::SessionOptions().batch(batch).seq(1), &session));
  std::vector<float> in(batch * features), out(out_per_step);
  std::vector<int32_t> ids(batch);
  double worst = 0;
  for (size_t t = 0; t < seq; ++t) {
    for (size_t b = 0; b < batch; ++b) {
      if (tokens) {
        ids[b] = x.ids[b * seq + t];
        continue;
      }
      for (size_t f = 0; f < features; ++f) {
        const size_t at = layout == "tbf"   ? (t * batch + b) * features + f
                          : layout == "bft" ? (b * features + f) * seq + t
                                            : (b * seq + t) * features + f;
        in[b * features + f] = x.data[at];
      }
    }
    const ferry_status st =
        tokens ? ferry_step_tokens(session.get(), ids.data(), batch, out.data(),
                                   out.size())
               : ferry_step(session.get(), in.data(), batch, out.data(),
                            out.size());
    if (st != FERRY_OK && t == 0 &&
        std::string(ferry_last_error()).find("only a causal conv streams") !=
            std::string::npos)
      return; // a conv padded on both sides looks ahead: it cannot stream, and
              // says so
    ASSERT_EQ(st, FERRY_OK) << "step " << t << ": " << ferry_last_error();
    for (size_t i = 0; i < out_per_step; ++i)
      worst = std::max(worst, static_cast<double>(std::fabs(
                                  out[i] - steps.data[t * out_per_step + i])));
  }
  EXPECT_LE(worst, c.at("tolerance").get<double>()) << "streamed";
}

TEST_P(CodeFixture, ConvertsWithCodeAloneAndMatchesPyTorchWholeAndStreamed) {
  const nlohmann::json &c = GetParam().entry;
  TempDir dir;
  const std::string fb = dir / "m.fb";
  const auto conv = run_ferry(
      "convert " + shell_quote(kCode + c.at("checkpoint").get<std::string>()) +
          " " + shell_quote(fb) + code_args(c),
      dir);
  ASSERT_EQ(conv.status, 0) << conv.err;
  EXPECT_NE(conv.out.find("(read from its forward)"), std::string::npos)
      << conv.out;
  const auto run =
      run_ferry("run " + shell_quote(fb) + " --quiet --input " +
                    shell_quote(kCode + c.at("input").get<std::string>()) +
                    " --output " + shell_quote(dir / "y.npy"),
                dir);
  ASSERT_EQ(run.status, 0) << run.err;
  const NpyArray y = read_npy(dir / "y.npy");
  NpyArray want = read_npy(kCode + c.at("output").get<std::string>());
  // A forward that squeezes away its one output feature returns [B]: ferry
  // keeps [B, 1] (its note says so); the values are compared.
  if (want.shape.size() + 1 == y.shape.size() && y.shape.back() == 1) {
    EXPECT_NE(conv.err.find("squeezes away its one output feature"), std::string::npos) << conv.err;
    want.shape.push_back(1);
  }
  ASSERT_EQ(y.shape, want.shape);
  EXPECT_LE(max_abs_diff(y, want), c.at("tolerance").get<double>());
  if (!c.at("steps").is_null())
    expect_streamed(fb, c);
}

INSTANTIATE_TEST_SUITE_P(Sources, CodeFixture,
                         ::testing::ValuesIn(cases("cases")),
                         [](const auto &info) {
                           return std::string(info.param.entry.at("name"));
                         });

TEST_P(CodeRefusal, NamesTheFileAndLine) {
  const nlohmann::json &c = GetParam().entry;
  TempDir dir;
  const auto conv = run_ferry(
      "convert " + shell_quote(kCode + c.at("checkpoint").get<std::string>()) +
          " " + shell_quote(dir / "m.fb") + code_args(c),
      dir);
  EXPECT_NE(conv.status, 0);
  const std::string file = c.at("file");
  const std::string where = file.substr(file.rfind('/') + 1) + ":" +
                            std::to_string(c.at("line").get<int>());
  EXPECT_NE(conv.err.find("ferry: error: " + where + ": "), std::string::npos)
      << conv.err;
  EXPECT_EQ(conv.err.find('\n'), conv.err.size() - 1)
      << "one line: " << conv.err;
  if (!c.at("asks").is_null()) {
    EXPECT_NE(conv.err.find("'" + c.at("asks").get<std::string>() + "'"),
              std::string::npos)
        << conv.err;
    EXPECT_NE(conv.err.find("--layout"), std::string::npos) << conv.err;
  } else {
    EXPECT_NE(conv.err.find("pass --graph"), std::string::npos) << conv.err;
  }
  EXPECT_FALSE(std::ifstream(dir / "m.fb").good()) << "nothing is written";
}

INSTANTIATE_TEST_SUITE_P(Sources, CodeRefusal,
                         ::testing::ValuesIn(cases("refusals")),
                         [](const auto &info) {
                           return std::string(info.param.entry.at("name"));
                         });

// The refused --batch-first question, answered: the layout given binds the
// constructor's parameter, and the model matches PyTorch.
TEST(Code, AnAskedOptionGivenConverts) {
  const nlohmann::json m = manifest();
  for (const auto &c : m.at("refusals")) {
    if (c.at("asks").is_null())
      continue;
    TempDir dir;
    const auto conv = run_ferry(
        "convert " +
            shell_quote(kCode + c.at("checkpoint").get<std::string>()) + " " +
            shell_quote(dir / "m.fb") + code_args(c) + " --layout btf",
        dir);
    ASSERT_EQ(conv.status, 0) << conv.err;
    const auto run =
        run_ferry("run " + shell_quote(dir / "m.fb") + " --quiet --input " +
                      shell_quote(kCode + c.at("input").get<std::string>()) +
                      " --output " + shell_quote(dir / "y.npy"),
                  dir);
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_LE(max_abs_diff(read_npy(dir / "y.npy"),
                           read_npy(kCode + c.at("output").get<std::string>())),
              c.at("tolerance").get<double>());
  }
}

TEST(Code, InspectShowsTheClassItsLayersAndTheLineOfEachElement) {
  TempDir dir;
  const std::string args =
      "inspect " + shell_quote(kCode + "lstm_init_hidden.pt") + " --code " +
      shell_quote(kCode + "src/lstm_classifier.py");
  const auto text = run_ferry(args, dir);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("code     class "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("lstm_classifier.py:"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("nn.LSTM("), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("chain    lstm "), std::string::npos) << text.out;
  const auto json = run_ferry(args + " --json", dir);
  ASSERT_EQ(json.status, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  const auto &code = j.at("plan").at("code");
  EXPECT_FALSE(code.at("class").get<std::string>().empty());
  ASSERT_FALSE(code.at("chain").empty());
  for (const auto &e : code.at("chain"))
    EXPECT_NE(e.at("where").get<std::string>().find("lstm_classifier.py:"),
              std::string::npos)
        << e;
  EXPECT_FALSE(code.at("layers").empty());
}

// The scripts that made the other fixture sets define their models as
// classes too. A class's defaults are not always what the script built it
// with: the flags say the rest (the assumption notes name them).
struct ScriptCase {
  const char *checkpoint; // under tests/fixtures
  const char *code;       // under tests/fixtures
  const char *flags;
  const char *input;
  const char *output;
  bool streams; // causal and one direction: `ferry run --stream` matches
                // PyTorch too
};

TEST(Code, TheFixtureScriptsAreModelSourcesToo) {
  const ScriptCase kCases[] = {
      {"models/lstm_1l_bf.pt", "make_fixtures.py:SimpleLSTM", "",
       "models/lstm_1l_bf.in.npy", "models/lstm_1l_bf.out.npy", true},
      {"models/lstm_2l_tm.pt", "make_fixtures.py", "--layout tbf",
       "models/lstm_2l_tm.in.npy", "models/lstm_2l_tm.out.npy", true},
      {"models/lstm_bi_2l.pt", "make_fixtures.py", "--layout tbf",
       "models/lstm_bi_2l.in.npy", "models/lstm_bi_2l.out.npy", false},
      {"models/lstm_proj_2l.pt", "make_fixtures.py", "--layout tbf",
       "models/lstm_proj_2l.in.npy", "models/lstm_proj_2l.out.npy", true},
      {"models/rnn_tanh.pt", "make_fixtures.py:RNNNet", "",
       "models/rnn_tanh.in.npy", "models/rnn_tanh.out.npy", true},
      {"models/ckpt_adam.pt", "make_fixtures.py", "", "models/ckpt_adam.in.npy",
       "models/ckpt_adam.out.npy", true},
      {"models/lstm_fp16.pt", "make_fixtures.py", "", "models/lstm_fp16.in.npy",
       "models/lstm_fp16.out.npy", true},
      {"ops/conv_channels_first.pt", "make_op_fixtures.py:ChannelsFirstConvNet",
       "", "ops/conv_channels_first.in.npy", "ops/conv_channels_first.out.npy",
       false},
      {"ops/bn_after_linear.pt", "make_op_fixtures.py:LSTMHeadBN", "",
       "ops/bn_after_linear.in.npy", "ops/bn_after_linear.out.npy", true},
      {"ops/bn_after_gru_tm.pt", "make_op_fixtures.py:GRUBN", "",
       "ops/bn_after_gru_tm.in.npy", "ops/bn_after_gru_tm.out.npy", true},
      {"ops/layernorm_after_lstm.pt", "make_op_fixtures.py:LSTMLayerNorm", "",
       "ops/layernorm_after_lstm.in.npy", "ops/layernorm_after_lstm.out.npy",
       true},
      {"ops/kws_crnn.pt", "make_op_fixtures.py:KwsCRNN", "",
       "ops/kws_crnn.in.npy", "ops/kws_crnn.out.npy", false},
      {"ops/char_lstm.pt", "make_op_fixtures.py:CharLSTM", "",
       "ops/char_lstm.in.npy", "ops/char_lstm.out.npy", true},
      {"ops/residual_inner_tm.pt", "make_op_fixtures.py:ResidualInner", "",
       "ops/residual_inner_tm.in.npy", "ops/residual_inner_tm.out.npy", true},
      {"ops/conv_gru_out_btf.pt", "make_op_fixtures.py:ConvGruOut", "",
       "ops/conv_gru_out_btf.in.npy", "ops/conv_gru_out_btf.out.npy", false},
      {"ops/conv_gru_conv_out_bft.pt", "make_op_fixtures.py:ConvGruConvOut", "",
       "ops/conv_gru_conv_out_bft.in.npy", "ops/conv_gru_conv_out_bft.out.npy",
       false},
      // setattr(self, rnn, cls(...)) and getattr(self, self.rnn_name)(...)
      {"ops/embed_lstm_fc.pt", "make_op_fixtures.py:EmbedRNN", "", "ops/embed_lstm_fc.in.npy",
       "ops/embed_lstm_fc.out.npy", true},
      // F.pad(x, (2, 0)) before a kernel-3 conv: a causal conv.
      {"ops/vad_causal.pt", "make_op_fixtures.py:VadNet", "",
       "ops/vad_causal.in.npy", "ops/vad_causal.out.npy", true},
  };
  for (const ScriptCase &c : kCases) {
    SCOPED_TRACE(c.checkpoint);
    TempDir dir;
    const auto conv =
        run_ferry("convert " + shell_quote(kFixtures + c.checkpoint) + " " +
                      shell_quote(dir / "m.fb") + " --code " +
                      shell_quote(kFixtures + c.code) + " " + c.flags,
                  dir);
    ASSERT_EQ(conv.status, 0) << conv.err;
    const auto run =
        run_ferry("run " + shell_quote(dir / "m.fb") + " --quiet --input " +
                      shell_quote(kFixtures + c.input) + " --output " +
                      shell_quote(dir / "y.npy"),
                  dir);
    ASSERT_EQ(run.status, 0) << run.err;
    const NpyArray y = read_npy(dir / "y.npy"),
                   want = read_npy(kFixtures + c.output);
    ASSERT_EQ(y.shape, want.shape);
    EXPECT_LE(max_abs_diff(y, want), 1e-5);
    if (!c.streams)
      continue;
    const auto stream = run_ferry(
        "run " + shell_quote(dir / "m.fb") + " --quiet --stream --input " +
            shell_quote(kFixtures + c.input) + " --output " +
            shell_quote(dir / "s.npy") + " --expect " +
            shell_quote(kFixtures + c.output),
        dir);
    EXPECT_EQ(stream.status, 0) << stream.err;
  }
}

// Options from a config object the constructor is handed: asked for, and
// taken from --layout once given (the forward's x[:, -1] then reads).
TEST(Code, AConfigObjectsOptionIsAskedForAndTakenFromTheLayout) {
  TempDir dir;
  std::ofstream(dir / "cfg.py") << R"PY(from dataclasses import dataclass
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    n_in: int = 5
    n_hidden: int = 16
    batch_first: bool = True


class Net(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.lstm = nn.LSTM(cfg.n_in, cfg.n_hidden, batch_first=cfg.batch_first)
        self.fc = nn.Linear(cfg.n_hidden, 3)

    def forward(self, x):
        out, _ = self.lstm(x)
        return F.softmax(self.fc(out[:, -1]), dim=-1)
)PY";
  const std::string convert = "convert " + shell_quote(kCode + "zoo_last.pt") + " " + shell_quote(dir / "m.fb") +
                              " --code " + shell_quote(dir / "cfg.py");
  const auto asked = run_ferry(convert, dir);
  EXPECT_NE(asked.status, 0);
  EXPECT_NE(asked.err.find("cfg.py:16: batch_first of self.lstm depends on the argument 'cfg'"), std::string::npos)
      << asked.err;
  const auto given = run_ferry(convert + " --layout btf", dir);
  ASSERT_EQ(given.status, 0) << given.err;
  const auto run = run_ferry("run " + shell_quote(dir / "m.fb") + " --quiet --input " + shell_quote(kCode + "zoo_last.x.npy") +
                                 " --output " + shell_quote(dir / "y.npy") + " --expect " + shell_quote(kCode + "zoo_last.y.npy"),
                             dir);
  EXPECT_EQ(run.status, 0) << run.err;
}

// F.pad before a Conv1d is read as a causal conv only where it pads what a
// causal conv pads, (kernel_size - 1) x dilation, and nothing after.
TEST(Code, APadBeforeAConvIsCausalOnlyWhereItPadsTheKernelSpan) {
  TempDir dir;
  const std::string model = R"PY(import torch
import torch.nn as nn
import torch.nn.functional as F


class VadNet(nn.Module):
    def __init__(self, n_feats=8, channels=16, hidden=24):
        super().__init__()
        self.enc = nn.Conv1d(n_feats, channels, 3)
        self.lstm = nn.LSTM(channels, hidden, batch_first=True)
        self.head = nn.Conv1d(hidden, 1, 1)

    def forward(self, x):
        h = torch.relu(self.enc(F.pad(x.transpose(1, 2), PAD)))
        out, _ = self.lstm(h.transpose(1, 2))
        return torch.sigmoid(self.head(torch.relu(out).transpose(1, 2))).transpose(1, 2)
)PY";
  const std::pair<const char *, const char *> kPads[] = {
      {"(1, 0)", "F.pad of 1 steps before Conv1d 'enc', whose kernel spans 2"},
      {"(2, 1)", "other than zeros before the time steps"},
      {"(2, 0), mode='reflect'", "in a mode other than 'constant'"},
  };
  for (const auto &[pad, expect] : kPads) {
    std::string text = model;
    text.replace(text.find("PAD"), 3, pad);
    std::ofstream(dir / "vad.py") << text;
    const auto r =
        run_ferry("convert " + shell_quote(kFixtures + "ops/vad_causal.pt") +
                      " " + shell_quote(dir / "m.fb") + " --code " +
                      shell_quote(dir / "vad.py"),
                  dir);
    EXPECT_NE(r.status, 0) << pad;
    EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
    EXPECT_EQ(r.err.rfind("ferry: error: vad.py:14: in VadNet.forward, ", 0),
              0u)
        << r.err;
  }
}

// A time-major model read at its class's default batch_first=True: the
// assumption is said, and stored in the file.
TEST(Code, AConstructorDefaultTakenIsAnAssumption) {
  TempDir dir;
  const auto conv =
      run_ferry("convert " + shell_quote(kFixtures + "models/lstm_1l_tm.pt") +
                    " " + shell_quote(dir / "m.fb") + " --code " +
                    shell_quote(kFixtures + "make_fixtures.py"),
                dir);
  ASSERT_EQ(conv.status, 0) << conv.err;
  EXPECT_NE(conv.err.find("batch_first True (the default of SimpleLSTM's "
                          "argument 'batch_first')"),
            std::string::npos)
      << conv.err;
  EXPECT_NE(conv.err.find("--layout btf|tbf"), std::string::npos) << conv.err;
  const auto inspect = run_ferry("inspect " + shell_quote(dir / "m.fb"), dir);
  EXPECT_NE(inspect.out.find("assumed  LSTM 'lstm': assumed batch_first True"),
            std::string::npos)
      << inspect.out;
}

TEST(Code, BadArgumentsAreClearErrors) {
  TempDir dir;
  const std::string ckpt = shell_quote(kCode + "lstm_init_hidden.pt");
  const std::string out = shell_quote(dir / "m.fb");
  struct Bad {
    std::string args, expect;
  } kBad[] = {
      {"--code " + shell_quote(dir / "missing.py"), "missing.py"},
      {"--code " + shell_quote(kCode + "src/lstm_classifier.py:NoSuchClass"),
       "no class 'NoSuchClass'"},
      {"--code " + shell_quote(kCode + "src/gru_classifier.py"),
       "no class matches the checkpoint's modules"},
  };
  for (const Bad &b : kBad) {
    const auto r = run_ferry("convert " + ckpt + " " + out + " " + b.args, dir);
    EXPECT_NE(r.status, 0) << b.args;
    EXPECT_NE(r.err.find(b.expect), std::string::npos) << r.err;
    EXPECT_FALSE(std::ifstream(dir / "m.fb").good());
  }
  // Two classes of one file with the same layers: the user names one.
  const auto two = run_ferry("convert " + shell_quote(kFixtures + "ops/embed_lstm_fc.pt") + " " + out + " --code " +
                                 shell_quote(kFixtures + "make_op_fixtures.py"),
                             dir);
  EXPECT_NE(two.status, 0);
  EXPECT_NE(two.err.find("several classes match the checkpoint's modules: EmbedRNN (make_op_fixtures.py:535), "
                         "CharLSTM (make_op_fixtures.py:622); name one with --code FILE:ClassName"),
            std::string::npos)
      << two.err;
  // A TorchScript archive records its forward: --code is refused, not mixed in.
  const auto ts = run_ferry(
      "convert " + shell_quote(kFixtures + "models/lstm_torchscript.pt") + " " +
          out + " --code " + shell_quote(kFixtures + "make_fixtures.py"),
      dir);
  EXPECT_NE(ts.status, 0);
  EXPECT_NE(ts.err.find("records its forward itself"), std::string::npos)
      << ts.err;
}

} // namespace
