// The chains a file records: TorchScript code read as text
// (mapping/script_syntax.h, mapping/script_chain.h) and a whole pickled
// nn.Sequential (mapping/sequential_chain.h), on checkpoints described here
// module by module: tensor names and shapes, module objects with their code.
// The forwards are written as torch.jit prints them (scripted and traced, as
// in tests/fixtures/torch2_forms), then varied one construct at a time.
// What PyTorch computes for real files is checked end to end
// (tests/e2e/test_torch2_forms.cpp, test_op_fixtures.cpp).
#ifdef FERRY_HAVE_CONVERTER

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "error.h"
#include "mapping/graph.h"
#include "mapping/modules.h"
#include "mapping/script_chain.h"
#include "mapping/script_syntax.h"
#include "mapping/sequential_chain.h"

namespace ferry::conv {
namespace {

using script::Expr;
using script::Statement;

// ------------------------------------------------------------------ syntax --
TEST(ScriptSyntax, StatementsAsTheJitPrintsThem) {
  Statement s = script::parse_statement("    _0 = torch.slice(((lstm).forward__0(x, None, ))[0])");
  ASSERT_EQ(s.kind, Statement::kAssign) << s.why;
  EXPECT_EQ(s.targets, std::vector<std::string>{"_0"});
  ASSERT_EQ(s.value.kind, Expr::kCall);
  const Expr& arg = s.value.items.at(1);
  ASSERT_EQ(arg.kind, Expr::kSubscript);
  EXPECT_EQ(arg.items.at(0).kind, Expr::kCall);  // (lstm).forward__0(...)
  EXPECT_EQ(arg.items.at(1).text, "0");

  s = script::parse_statement("_21, _22, _23 = torch.lstm(input0, [_19, _20], _flat_weights, True, 1, 0., training, False, True)");
  ASSERT_EQ(s.kind, Statement::kAssign) << s.why;
  EXPECT_EQ(s.targets.size(), 3u);
  EXPECT_EQ(s.value.items.at(6).text, "0.");

  s = script::parse_statement("out, h, = (gru).forward__0(y0, None, )");
  ASSERT_EQ(s.kind, Statement::kAssign) << s.why;
  EXPECT_EQ(s.targets, (std::vector<std::string>{"out", "h"}));

  s = script::parse_statement("hx = torch.zeros([1, _0, 28], dtype=6, layout=None, device=torch.device(\"cuda:0\"), pin_memory=False)");
  ASSERT_EQ(s.kind, Statement::kAssign) << s.why;
  EXPECT_EQ(s.value.names.at(1), "dtype");
  EXPECT_EQ(s.value.items.at(4).items.at(1).text, "cuda:0");

  s = script::parse_statement("_1 : Tensor = x[:, -1, :]");
  ASSERT_EQ(s.kind, Statement::kAssign) << s.why;
  ASSERT_EQ(s.value.kind, Expr::kSubscript);
  EXPECT_EQ(s.value.items.at(1).kind, Expr::kSlice);
  EXPECT_EQ(s.value.items.at(2).text, "-1");

  s = script::parse_statement("return torch.softmax(_1, -1)");
  EXPECT_EQ(s.kind, Statement::kReturn);
  s = script::parse_statement("ops.prim.RaiseException(_6, \"builtins.ValueError\")");
  EXPECT_EQ(s.kind, Statement::kExpression);
}

TEST(ScriptSyntax, WhatIsNotStraightLineIsNamed) {
  const std::string tail = ": the forward is not straight-line code";
  EXPECT_EQ(script::parse_statement("if _5:").kind, Statement::kIf);
  EXPECT_EQ(script::parse_statement("else:").kind, Statement::kElse);
  EXPECT_EQ(script::parse_statement("pass").kind, Statement::kPass);
  EXPECT_EQ(script::parse_statement("if _5").kind, Statement::kOther);  // no ':'
  // A for loop is a block (the walker refuses it unless it runs over modules
  // or a constant range, in Python source); a while loop is not read.
  EXPECT_EQ(script::parse_statement("for t in range(torch.size(x, 1)):").kind, Statement::kFor);
  EXPECT_EQ(script::parse_statement("while True:").why, "a loop (while)" + tail);
  // Operators are the calls TorchScript prints for them; x[0] = y is an
  // assignment the walker refuses.
  const Statement add = script::parse_statement("y = x + 1");
  ASSERT_EQ(add.kind, Statement::kAssign);
  EXPECT_EQ(add.value.kind, Expr::kCall);
  EXPECT_EQ(add.value.items[0].text, "torch.add");
  EXPECT_EQ(script::parse_statement("x[0] = y").target.kind, Expr::kSubscript);
  for (const char* bad : {"y = (x", "y = f(x))", "y = 'open", "= x", "y = 1x", "y = lambda t: t", "a = b = c"}) {
    const Statement s = script::parse_statement(bad);
    EXPECT_EQ(s.kind, Statement::kOther) << bad;
    EXPECT_NE(s.why.find("cannot be read"), std::string::npos) << bad << ": " << s.why;
  }
}

TEST(ScriptSyntax, NestingAndLengthAreBounded) {
  std::string deep = "y = ";
  for (int i = 0; i < 200; ++i) deep += "torch.relu(";
  deep += "x";
  for (int i = 0; i < 200; ++i) deep += ")";
  Statement s = script::parse_statement(deep);
  EXPECT_EQ(s.kind, Statement::kOther);
  EXPECT_NE(s.why.find("nested deeper than 64"), std::string::npos) << s.why;

  std::string ok = "y = ";
  for (int i = 0; i < 40; ++i) ok += "torch.relu(";
  ok += "x";
  for (int i = 0; i < 40; ++i) ok += ")";
  EXPECT_EQ(script::parse_statement(ok).kind, Statement::kAssign);

  s = script::parse_statement("y = [" + std::string(kMaxScriptLine, '1') + "]");
  EXPECT_EQ(s.kind, Statement::kOther);
  EXPECT_NE(s.why.find("a line longer than"), std::string::npos) << s.why;
}

TEST(ScriptSyntax, SignatureOverLines) {
  const script::Function f = script::parse_function(
      {"  def forward(self: __torch__.torch.nn.modules.rnn.LSTM,", "    input: Tensor,",
       "    hx: Optional[Tuple[Tensor, Tensor]]=None) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:",
       "    _0 = torch.relu(", "        input)", "    return _0"});
  ASSERT_EQ(f.parameters.size(), 3u);
  EXPECT_EQ(f.parameters[0].name, "self");
  EXPECT_TRUE(f.parameters[2].has_default);
  EXPECT_TRUE(f.parameters[2].default_value.is_name("None"));
  ASSERT_EQ(f.body.size(), 2u);
  EXPECT_EQ(f.body[0], "_0 = torch.relu( input)");
  EXPECT_THROW(script::parse_function({"  def forward(self, x"}), Error);
}

// `if c: ... else: ...` blocks as torch.jit.script prints a Python if, and an
// elif as an if inside the else.
TEST(ScriptSyntax, BranchesAreBlocksByIndentation) {
  const script::Function f = script::parse_function(
      {"  def forward(self: T,", "    x: Tensor) -> Tensor:", "    if torch.eq(torch.dim(x), 3):",
       "      _0 = torch.relu(", "          x)", "    elif _1:", "      _0 = x", "    else:", "      if _2:",
       "        pass", "      else:", "        _0 = x", "    return _0"});
  ASSERT_EQ(f.indents.size(), f.body.size());
  const std::vector<script::Line> body = script::parse_body(f);
  ASSERT_EQ(body.size(), 2u);
  EXPECT_EQ(body[0].statement.kind, Statement::kIf);
  ASSERT_EQ(body[0].then.size(), 1u);
  EXPECT_EQ(body[0].then[0].text, "_0 = torch.relu( x)");
  ASSERT_EQ(body[0].orelse.size(), 1u);
  const script::Line& elif = body[0].orelse[0];
  EXPECT_EQ(elif.statement.kind, Statement::kIf);
  EXPECT_TRUE(elif.statement.value.is_name("_1"));
  ASSERT_EQ(elif.orelse.size(), 1u);
  ASSERT_EQ(elif.orelse[0].then.size(), 1u);
  EXPECT_EQ(elif.orelse[0].then[0].statement.kind, Statement::kPass);
  EXPECT_EQ(body[1].statement.kind, Statement::kReturn);

  // A broken structure is one kOther line that says what is wrong.
  const std::vector<std::pair<std::vector<std::string>, std::string>> broken = {
      {{"else:", "  pass", "return x"}, "an else without its if"},
      {{"y = x", "  z = y", "return z"}, "an indented line outside a block"},
      {{"if c:", "return x"}, "a branch without its block"},
      {{"if c:", "    y = x", "  z = x", "return y"}, "an indentation that matches no block"},
  };
  for (const auto& [lines, why] : broken) {
    std::vector<std::string> code = {"  def forward(self, x):"};
    for (const std::string& l : lines) code.push_back("    " + l);
    const std::vector<script::Line> b = script::parse_body(script::parse_function(code));
    ASSERT_EQ(b.size(), 1u) << why;
    EXPECT_EQ(b[0].statement.kind, Statement::kOther) << why;
    EXPECT_NE(b[0].statement.why.find(why), std::string::npos) << b[0].statement.why;
  }
  // Nesting is bounded: no recursion past kMaxNesting.
  std::vector<std::string> deep = {"  def forward(self, x):"};
  for (size_t i = 0; i < 200; ++i) deep.push_back(std::string(4 + 2 * i, ' ') + "if c:");
  deep.push_back(std::string(4 + 400, ' ') + "pass");
  const std::vector<script::Line> b = script::parse_body(script::parse_function(deep));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_NE(b[0].statement.why.find("nested deeper than"), std::string::npos) << b[0].statement.why;
}

// ------------------------------------------------- checkpoints by description --
struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
};

struct Object {
  std::string path, class_name;
  std::vector<std::string> forward;  // lines; empty for a pickled module
  bool finals = false;
  std::vector<std::pair<std::string, std::string>> attributes;  // name -> value
};

struct Described {
  Checkpoint ck;
  ModuleSet modules;
};

Described describe(const std::vector<Tensor>& tensors, const std::vector<Object>& objects) {
  Described d;
  for (const Tensor& t : tensors) {
    TensorRef r;
    r.name = t.name;
    r.dtype = DType::F32;
    r.shape = t.shape;
    d.ck.tensors.push_back(r);
  }
  for (const Object& o : objects) {
    ModuleObject m;
    m.path = o.path;
    m.class_name = o.class_name;
    m.forward = o.forward;
    m.final_constants = o.finals;
    d.ck.module_objects.push_back(m);
    const size_t dot = o.class_name.rfind('.');
    d.ck.attributes[attribute_key(o.path, kClassAttribute)] = o.class_name.substr(dot + 1);
    for (const auto& [k, v] : o.attributes) d.ck.attributes[attribute_key(o.path, k)] = v;
  }
  d.modules = group_modules(d.ck);
  return d;
}

// "def forward(self: T,\n x: Tensor) -> Tensor:" + body lines, as code/ holds them.
std::vector<std::string> forward(const std::vector<std::string>& body, const std::string& self = "self",
                                 const std::string& input = "x: Tensor") {
  std::vector<std::string> lines = {"  def forward(" + self + ": __torch__.Net,", "    " + input + ") -> Tensor:"};
  for (const std::string& b : body) lines.push_back("    " + b);
  return lines;
}

std::vector<Tensor> lstm_tensors(const std::string& p, int in, int h, bool bidirectional = false) {
  std::vector<Tensor> t;
  for (const char* sfx : bidirectional ? std::vector<const char*>{"", "_reverse"} : std::vector<const char*>{""}) {
    t.push_back({p + ".weight_ih_l0" + sfx, {4 * h, in}});
    t.push_back({p + ".weight_hh_l0" + sfx, {4 * h, h}});
    t.push_back({p + ".bias_ih_l0" + sfx, {4 * h}});
    t.push_back({p + ".bias_hh_l0" + sfx, {4 * h}});
  }
  return t;
}

std::vector<Tensor> gru_tensors(const std::string& p, int in, int h) {
  return {{p + ".weight_ih_l0", {3 * h, in}}, {p + ".weight_hh_l0", {3 * h, h}}, {p + ".bias_ih_l0", {3 * h}},
          {p + ".bias_hh_l0", {3 * h}}};
}

std::vector<Tensor> linear_tensors(const std::string& p, int in, int out) {
  return {{p + ".weight", {out, in}}, {p + ".bias", {out}}};
}

std::vector<Tensor> operator+(std::vector<Tensor> a, const std::vector<Tensor>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A traced nn.LSTM's forward, returning `ret` of (y, h, c).
Object traced_lstm(const std::string& path, const std::string& ret, bool batch_first = true) {
  return {path, "__torch__.torch.nn.modules.rnn.___torch_mangle_0.LSTM",
          {"  def forward(self: __torch__.torch.nn.modules.rnn.___torch_mangle_0.LSTM,", "    x: Tensor) -> Tensor:",
           "    bias_hh_l0 = self.bias_hh_l0", "    bias_ih_l0 = self.bias_ih_l0",
           "    weight_hh_l0 = self.weight_hh_l0", "    weight_ih_l0 = self.weight_ih_l0",
           "    max_batch_size = ops.prim.NumToTensor(torch.size(x, 0))", "    _0 = int(max_batch_size)",
           "    hx = torch.zeros([1, int(max_batch_size), 8], dtype=6, layout=None, device=torch.device(\"cuda:0\"), pin_memory=False)",
           "    hx0 = torch.zeros([1, _0, 8], dtype=6, layout=None, device=torch.device(\"cuda:0\"), pin_memory=False)",
           "    _1 = [hx, hx0]", "    _2 = [weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0]",
           std::string("    y, _3, _4 = torch.lstm(x, _1, _2, True, 1, 0., False, False, ") + (batch_first ? "True" : "False") + ")",
           "    return " + ret},
          false,
          {}};
}

Object traced_linear(const std::string& path) {
  return {path, "__torch__.torch.nn.modules.linear.___torch_mangle_1.Linear",
          {"  def forward(self: __torch__.torch.nn.modules.linear.___torch_mangle_1.Linear,", "    input: Tensor) -> Tensor:",
           "    bias = self.bias", "    weight = self.weight", "    return torch.linear(input, weight, bias)"},
          false,
          {}};
}

// A scripted library module: its class records Finals, its forward is the library's.
Object scripted(const std::string& path, const std::string& cls, std::vector<std::pair<std::string, std::string>> attrs = {}) {
  return {path, "__torch__.torch.nn.modules." + cls, {"  def forward(self: T,", "    input: Tensor) -> Tensor:", "    if torch.dim(input):", "      pass", "    return input"}, true, std::move(attrs)};
}

RecordedChain chain_of(const Described& d) { return script_chain(d.ck, d.modules); }

std::string refusal(const Described& d) {
  try {
    const RecordedChain r = script_chain(d.ck, d.modules);
    return "no refusal: " + r.graph;
  } catch (const Error& e) {
    return e.what();
  }
}

// ----------------------------------------------------------- TorchScript --
TEST(ScriptChain, TracedNestedModuleCalls) {
  // torch.jit.trace of LSTMHead (tests/fixtures/torch2_forms/traced_ts.pt).
  const Described d = describe(lstm_tensors("lstm", 7, 8) + linear_tensors("head", 8, 4),
                               {{"", "__torch__.LSTMHead",
                                 forward({"head = self.head", "lstm = self.lstm",
                                          "_0 = torch.slice((lstm).forward(x, ), 0, 0, 9223372036854775807)",
                                          "input = torch.select(_0, 1, -1)", "return (head).forward(input, )"}),
                                 false, {}},
                                traced_lstm("lstm", "y"), traced_linear("head")});
  const RecordedChain r = chain_of(d);
  EXPECT_EQ(r.graph, "lstm > last > head");
  ASSERT_TRUE(r.layout);
  EXPECT_EQ(*r.layout, InputLayout::kBTF);
}

TEST(ScriptChain, ScriptedOneNestedExpressionWithIndexAndSelfNamedS) {
  // torch.jit.script on torch 2.11 (scripted_ts.pt): `s` for self, [0] on a call.
  const Described d = describe(lstm_tensors("lstm", 6, 8) + linear_tensors("fc", 8, 3),
                               {{"", "__torch__.Scripted",
                                 forward({"fc = s.fc", "lstm = s.lstm", "_0 = torch.slice(((lstm).forward__0(x, None, ))[0])",
                                          "_1 = (fc).forward(torch.select(_0, 1, -1), )", "return torch.softmax(_1, -1)"},
                                         "s"),
                                 false, {}},
                                scripted("lstm", "rnn.LSTM", {{"batch_first", "true"}}), scripted("fc", "linear.Linear")});
  const RecordedChain r = chain_of(d);
  EXPECT_EQ(r.graph, "lstm > last > fc > softmax");
  EXPECT_EQ(r.layout, InputLayout::kBTF);
}

TEST(ScriptChain, TheIssueForm) {
  // torch.tanh((fc).forward((gru).forward(x, ), )): the traced GRU returns its output alone.
  Object gru = {"gru", "__torch__.torch.nn.modules.rnn.___torch_mangle_2.GRU",
                {"  def forward(self: T,", "    input: Tensor) -> Tensor:", "    hx = torch.zeros([1, 2, 8])",
                 "    _0 = [self.weight_ih_l0, self.weight_hh_l0, self.bias_ih_l0, self.bias_hh_l0]",
                 "    input0, _1 = torch.gru(input, hx, _0, True, 1, 0., False, False, False)", "    return input0"},
                false,
                {}};
  const Described d = describe(gru_tensors("gru", 5, 8) + linear_tensors("fc", 8, 2),
                               {{"", "__torch__.Net", forward({"fc = self.fc", "gru = self.gru",
                                                               "return torch.tanh((fc).forward((gru).forward(x, ), ))"}),
                                 false, {}},
                                gru, traced_linear("fc")});
  const RecordedChain r = chain_of(d);
  EXPECT_EQ(r.graph, "gru > fc > tanh");
  EXPECT_EQ(r.layout, InputLayout::kTBF);  // the GRU's batch_first=False, and the sequence comes out as it went in
}

TEST(ScriptChain, TupleOutputsAndHiddenState) {
  // Traced: the LSTM returns (y, (h, c)); the caller unpacks and takes h_n[-1].
  const Described d = describe(
      lstm_tensors("lstm", 5, 8) + linear_tensors("fc", 8, 2),
      {{"", "__torch__.Net",
        forward({"fc = self.fc", "lstm = self.lstm", "_0, _1, = (lstm).forward(x, )", "_2, _3, = _1",
                 "return (fc).forward(torch.select(_2, 0, -1), )"}),
        false, {}},
       traced_lstm("lstm", "(y, (_3, _4))"), traced_linear("fc")});
  EXPECT_EQ(chain_of(d).graph, "lstm > last > fc");
}

TEST(ScriptChain, ASequenceReturnedWithItsOwnFinalStateIsTheSequence) {
  // A module whose forward returns what its LSTM returns, (y, (h_n, c_n)),
  // as a traced bare nn.LSTM does: the chain is the sequence's, with a note.
  const auto tensors = lstm_tensors("lstm", 5, 8) + linear_tensors("fc", 8, 2);
  const auto net = [&](std::vector<std::string> body, const std::string& lstm_returns) {
    body.insert(body.begin(), "lstm = self.lstm");
    return describe(tensors, {{"", "__torch__.Net", forward(body), false, {}}, traced_lstm("lstm", lstm_returns),
                              traced_linear("fc")});
  };
  RecordedChain r = chain_of(net({"return (lstm).forward(x, )"}, "(y, (_3, _4))"));
  EXPECT_EQ(r.graph, "lstm");
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("forward also returns the final state of 'lstm'"), std::string::npos) << r.notes[0];
  EXPECT_TRUE(chain_of(net({"_0, _1, = (lstm).forward(x, )", "return (_0, _1)"}, "(y, _3)")).graph == "lstm");
  // Not the sequence's own state, not a state at all, or the sequence
  // carried on after the state was taken: refused as before.
  EXPECT_NE(refusal(net({"_0, _1, = (lstm).forward(x, )", "return (_1, _0)"}, "(y, _3)")).find("forward returns a tuple of 2"),
            std::string::npos);
  EXPECT_NE(refusal(net({"_0, _1, = (lstm).forward(x, )", "return (_0, x)"}, "(y, _3)")).find("forward returns a tuple of 2"),
            std::string::npos);
  EXPECT_NE(refusal(net({"_0, _1, = (lstm).forward(x, )", "return ((self.fc).forward(_0, ), _1)"}, "(y, _3)"))
                .find("forward returns a tuple of 2"),
            std::string::npos);
  EXPECT_EQ(chain_of(net({"return (lstm).forward(x, )"}, "y")).notes.size(), 0u);
}

TEST(ScriptChain, ResidualInEitherOrderAndInPlace) {
  const auto tensors = lstm_tensors("lstm", 8, 8) + linear_tensors("fc", 8, 8);
  const std::vector<std::string> heads[] = {
      {"_0 = (lstm).forward(x, )", "return torch.add((fc).forward(_0, ), _0)"},
      {"_0 = (lstm).forward(x, )", "return torch.add(_0, (fc).forward(_0, ))"},
      {"_0 = (lstm).forward(x, )", "_1 = (fc).forward(_0, )", "_2 = torch.add_(_1, _0)", "return _1"},
  };
  for (const auto& head : heads) {
    std::vector<std::string> body = {"fc = self.fc", "lstm = self.lstm"};
    body.insert(body.end(), head.begin(), head.end());
    const Described d = describe(tensors, {{"", "__torch__.Net", forward(body), false, {}},
                                           traced_lstm("lstm", "y"), traced_linear("fc")});
    EXPECT_EQ(chain_of(d).graph, "lstm > (fc) + input") << head.back();
  }
}

TEST(ScriptChain, InPlaceOpsReachEveryAlias) {
  const Described d = describe(
      linear_tensors("fc", 4, 4),
      {{"", "__torch__.Net",
        forward({"fc = self.fc", "y = (fc).forward(x, )", "z = torch.transpose(y, 0, 1)", "_0 = torch.relu_(z)",
                 "return y"}),
        false, {}},
       traced_linear("fc")});
  // y and z view one tensor: relu_ on z changes y.
  EXPECT_EQ(chain_of(d).graph, "fc > relu");
}

TEST(ScriptChain, ScriptedInPlaceActivationModule) {
  // act = nn.ReLU(inplace=True): relu(h) + h is 2 relu(h) in PyTorch.
  for (const char* inplace : {"true", "false"}) {
    const Described d = describe(
        lstm_tensors("lstm", 4, 8),
        {{"", "__torch__.Net",
          forward({"_0, _1, = (self.lstm).forward__0(x, None, )", "y = (self.act).forward(_0, )", "return torch.add(y, _0)"}),
          false, {}},
         scripted("lstm", "rnn.LSTM", {{"batch_first", "true"}}),
         scripted("act", "activation.ReLU", {{"inplace", inplace}})});
    if (std::string(inplace) == "false") {
      EXPECT_EQ(chain_of(d).graph, "lstm > (relu) + input");
    } else {
      EXPECT_NE(refusal(d).find("an add of two values that are not a chain and its own input"), std::string::npos)
          << refusal(d);
    }
  }
}

TEST(ScriptChain, ConvFrontEndDecidesTheInputLayout) {
  Object conv = {"conv", "__torch__.torch.nn.modules.conv.___torch_mangle_3.Conv1d",
                 {"  def forward(self: T,", "    x: Tensor) -> Tensor:", "    bias = self.bias", "    weight = self.weight",
                  "    input = torch._convolution(x, weight, bias, [2], [1], [1], False, [0], 1, False, False, True, True)",
                  "    return input"},
                 false,
                 {}};
  const Described d = describe(
      std::vector<Tensor>{{"conv.weight", {6, 4, 3}}, {"conv.bias", {6}}} + gru_tensors("gru", 6, 8) +
          linear_tensors("fc", 8, 2),
      {{"", "__torch__.Net",
        forward({"fc = self.fc", "gru = self.gru", "conv = self.conv",
                 "input = torch.transpose(torch.relu((conv).forward(x, )), 1, 2)", "_0, _1, = (gru).forward__0(input, None, )",
                 "return (fc).forward(torch.select(_0, 1, -1), )"}),
        false, {}},
       conv, scripted("gru", "rnn.GRU", {{"batch_first", "true"}}), traced_linear("fc")});
  const RecordedChain r = chain_of(d);
  EXPECT_EQ(r.graph, "conv(groups=1,padding=1,stride=2) > relu > gru > last > fc");
  EXPECT_EQ(r.layout, InputLayout::kBFT);
}

TEST(ScriptChain, TransposeBeforeATimeMajorLstmMeansBatchFirstInput) {
  const Described d = describe(lstm_tensors("lstm", 5, 8),
                               {{"", "__torch__.Net",
                                 forward({"lstm = self.lstm", "_0 = (lstm).forward(torch.transpose(x, 0, 1), )",
                                          "return torch.transpose(_0, 0, 1)"}),
                                 false, {}},
                                traced_lstm("lstm", "y", false)});
  const RecordedChain r = chain_of(d);
  EXPECT_EQ(r.graph, "lstm");
  EXPECT_EQ(r.layout, InputLayout::kBTF);
}

TEST(ScriptChain, ASequenceReturnedTransposedRecordsTheOutputLayout) {
  // The time-major LSTM's [T, B, H] returned as it is from a [B, T, F] input:
  // the output's layout is tbf, not the input's.
  const auto net = [](const std::string& ret) {
    return describe(lstm_tensors("lstm", 5, 8),
                    {{"", "__torch__.Net",
                      forward({"lstm = self.lstm", "_0 = (lstm).forward(torch.transpose(x, 0, 1), )", "return " + ret}),
                      false, {}},
                     traced_lstm("lstm", "y", false)});
  };
  RecordedChain r = chain_of(net("_0"));
  EXPECT_EQ(r.graph, "lstm");
  EXPECT_EQ(r.layout, InputLayout::kBTF);
  EXPECT_EQ(r.output_layout, InputLayout::kTBF);
  r = chain_of(net("torch.transpose(_0, 0, 1)"));
  EXPECT_EQ(r.output_layout, std::nullopt) << "back in the input's layout";
  // A Linear (per step) does not say where the batch is: a transposed
  // return then means different layouts for [B, T, F] and [T, B, F].
  const Described d = describe(linear_tensors("fc", 5, 3),
                               {{"", "__torch__.Net",
                                 forward({"fc = self.fc", "return torch.transpose((fc).forward(x, ), 0, 1)"}), false, {}},
                                traced_linear("fc")});
  EXPECT_NE(refusal(d).find("forward returns its sequence transposed, and nothing in it says whether its input is "
                            "[B, T, F] or [T, B, F]: pass --graph, --layout and --output-layout"),
            std::string::npos)
      << refusal(d);
  // Axes in no layout ferry writes ([T, F, B]): refused.
  const Described p = describe(lstm_tensors("lstm", 5, 8),
                               {{"", "__torch__.Net",
                                 forward({"lstm = self.lstm", "_0 = (lstm).forward(torch.transpose(x, 0, 1), )",
                                          "return torch.permute(_0, [0, 2, 1])"}),
                                 false, {}},
                                traced_lstm("lstm", "y", false)});
  EXPECT_NE(refusal(p).find("forward returns a sequence whose axes are not [B, T, F], [T, B, F] or [B, F, T]"),
            std::string::npos)
      << refusal(p);
}

TEST(ScriptChain, RefusalsNameTheLineAndWhy) {
  const auto tensors = lstm_tensors("lstm", 5, 8) + linear_tensors("fc", 8, 2);
  const std::vector<Object> children = {traced_lstm("lstm", "y"), traced_linear("fc")};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"_0 = (self.lstm).forward(x, )", "for i in range(3):", "  _0 = torch.relu(_0)", "return _0"},
       "line 'for i in range(3):': a loop (for): the forward is not straight-line code"},
      {{"_0 = (self.lstm).forward(x, )", "if bool(torch.gt(torch.mean(_0), 0)):", "  pass", "return _0"},
       "line 'if bool(torch.gt(torch.mean(_0), 0)):': a branch on the values of a tensor (torch.mean), which "
       "depends on the data"},
      {{"_0 = torch.cumsum((self.lstm).forward(x, ), 1)", "return _0"},
       "a call to 'torch.cumsum', which ferry does not read as a chain element"},
      {{"_0 = (self.fc).forward(torch.select((self.lstm).forward(x, ), 1, -2), )", "return _0"},
       "indexing other than the last step ([-1])"},
      {{"_0 = (self.lstm).forward(x, )", "return (self.fc).forward(torch.select(_0, 2, -1), )"},
       "not the time axis"},
      {{"a = torch.relu(a)", "return a"}, "torch.relu of the function a, not of a tensor made from the input"},
      {{"_0 = (self.lstm).forward(x, )", "return (_0, _0)"}, "forward returns a tuple of 2, not one tensor"},
      {{"_0 = (self.fc).forward((self.lstm).forward(x, ), )", "return torch.dropout(_0, 0.5, True)"},
       "in training mode"},
      {{"_0 = (self.lstm).forward(x, )", "return torch.add(_0, 1)"}, "only a residual skip"},
      {{"_0 = (self.lstm).forward(x, )", "_1 = (self.fc).forward(_0, )", "return torch.add(_1, torch.relu(_0))"},
       "not a chain and its own input"},
      {{"return (self.lstm).forward(x, )", "return x"}, ""},
      {{"_0 = (self.lstm).forward(x, )"}, "has no return statement"},
      {{"_0 = (self.missing).forward(x, )", "return _0"}, "calls attribute 'forward' of 'root.missing'"},
      {{"_0 = (self.lstm)._flat(x, )", "return _0"}, "calls the method '_flat' of module 'lstm'"},
      {{"_0 = y + x", "return _0"}, "torch.add of the function y"},
      {{"_0 = (self.lstm).forward(x, )", "_0[0] = x", "return _0"}, "assigns to part of a value"},
      {{"for t in range(3):", "  x = (self.lstm).forward(x, )", "return x"}, "a loop (for)"},
      {{"_0 = torch.to((self.lstm).forward(x, ), 5)", "return _0"},
       "torch.to with the constant 5 (only float32, dtype 6, or a device is read)"},
      {{"_0 = torch.to(x, 6, False, False, None)", "_1 = torch.to((self.lstm).forward(_0, ), torch.device(\"cpu\"))",
        "return _1"},
       ""},
  };
  for (const auto& [body, expect] : cases) {
    std::vector<Object> objects = {{"", "__torch__.Net", forward(body), false, {}}};
    objects.insert(objects.end(), children.begin(), children.end());
    const std::string err = refusal(describe(tensors, objects));
    if (expect.empty()) {
      EXPECT_EQ(err.rfind("no refusal", 0), 0u) << body[0] << ": " << err;  // code after a return is never read
      continue;
    }
    EXPECT_NE(err.find(expect), std::string::npos) << body[0] << ": " << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  }
}

TEST(ScriptChain, InitialStatesMustBeZeros) {
  // forward(self, x, h): the user's state, which ferry cannot know.
  const Described given = describe(
      lstm_tensors("lstm", 5, 8),
      {{"", "__torch__.Net",
        forward({"_0, _1, = (self.lstm).forward__0(x, (h, h), )", "return _0"}, "self", "x: Tensor, h: Tensor"), false,
        {}},
       scripted("lstm", "rnn.LSTM", {{"batch_first", "true"}})});
  EXPECT_NE(refusal(given).find("from an initial state that is forward's second input 'h', not zeros"), std::string::npos)
      << refusal(given);
  const Described zeros = describe(
      lstm_tensors("lstm", 5, 8),
      {{"", "__torch__.Net",
        forward({"h = torch.zeros([1, torch.size(x, 0), 8])", "_0, _1, = (self.lstm).forward__0(x, (h, torch.to(h, 6)), )",
                 "return _0"}),
        false, {}},
       scripted("lstm", "rnn.LSTM", {{"batch_first", "true"}})});
  EXPECT_EQ(chain_of(zeros).graph, "lstm");
}

TEST(ScriptChain, HostileModuleGraphsAreBounded) {
  // A module whose forward calls itself.
  const Described self_call = describe(linear_tensors("fc", 4, 4),
                                       {{"", "__torch__.Net", forward({"return (self.a).forward(x, )"}), false, {}},
                                        {"a", "__torch__.A", forward({"return (self).forward(x, )"}), false, {}}});
  EXPECT_NE(refusal(self_call).find("module 'a' calls itself"), std::string::npos) << refusal(self_call);

  // 40 modules each calling the next.
  std::vector<Object> objects = {{"", "__torch__.Net", forward({"return (self.m).forward(x, )"}), false, {}}};
  std::string path = "m";
  for (int i = 0; i < 40; ++i) {
    objects.push_back({path, "__torch__.M", forward({"return (self.m).forward(x, )"}), false, {}});
    path += ".m";
  }
  const std::string deep = refusal(describe({}, objects));
  EXPECT_NE(deep.find("more than 32 deep"), std::string::npos) << deep;

  // Each module calls the next one twice: 2^25 calls without a step cap.
  objects = {{"", "__torch__.Net", forward({"return (self.m).forward(x, )"}), false, {}}};
  path = "m";
  for (int i = 0; i < 25; ++i) {
    objects.push_back({path, "__torch__.M", forward({"_0 = (self.m).forward(x, )", "return (self.m).forward(x, )"}), false, {}});
    path += ".m";
  }
  objects.push_back({path, "__torch__.Leaf", forward({"return x"}), false, {}});
  const std::string wide = refusal(describe({}, objects));
  EXPECT_NE(wide.find("reading takes more than 262144 steps"), std::string::npos) << wide;

  // Tuples of tuples: each line doubles the value.
  std::vector<std::string> body = {"a0 = (x, x)"};
  for (int i = 1; i < 40; ++i) body.push_back("a" + std::to_string(i) + " = (a" + std::to_string(i - 1) + ", a" + std::to_string(i - 1) + ")");
  body.push_back("return x");
  const std::string doubled = refusal(describe({}, {{"", "__torch__.Net", forward(body), false, {}}}));
  EXPECT_NE(doubled.find("a tuple or list of more than 256 parts"), std::string::npos) << doubled;
}

// torch.jit.script keeps a Python `if` as an `if ... else` block; where the
// condition is fixed by the file (ranks along the chain, feature sizes, the
// module's attributes, self.training, an argument left at None) the branch
// is folded; where the data decides, it is refused naming the condition.
TEST(ScriptChain, BranchesOnWhatTheFileFixesAreFolded) {
  const auto tensors = lstm_tensors("lstm", 5, 8) + linear_tensors("fc", 8, 3);
  auto net = [&](std::vector<std::string> body, const std::string& input = "x: Tensor") {
    Described d = describe(tensors, {{"", "__torch__.Net", forward(std::move(body), "self", input), false, {}},
                                     scripted("lstm", "rnn.LSTM", {{"batch_first", "true"}}),
                                     scripted("fc", "linear.Linear")});
    d.ck.module_objects[0].scalars = {{"squash", "False"}, {"mode", "2"}, {"pool", "'last'"}, {"scale", "0.5"}};
    return d;
  };
  const std::vector<std::vector<std::string>> folded = {
      // RankLstm (make_script_branch_fixtures.py), as torch 1.13 and 2.x print it.
      {"lstm = self.lstm", "lstm_out, _0, = (lstm).forward__0(x, None, )", "if torch.eq(torch.dim(lstm_out), 3):",
       "  lstm_out1 = torch.select(torch.slice(lstm_out), 1, -1)", "  lstm_out0 = lstm_out1", "else:",
       "  lstm_out0 = lstm_out", "fc = self.fc", "return (fc).forward(lstm_out0, )"},
      // self.training is False; a plain attribute; `not` and `and` as the compiler writes them.
      {"y, _0, = (self.lstm).forward__0(x, None, )", "training = self.training", "if torch.__not__(training):",
       "  _1 = torch.eq(self.mode, 2)", "else:", "  _1 = False", "if _1:", "  y0 = torch.select(y, 1, -1)", "else:",
       "  y0 = torch.dropout(y, 0.5, True)", "squash = self.squash", "if squash:", "  y1 = torch.tanh(y0)",
       "else:", "  y1 = y0", "return (self.fc).forward(y1, )"},
      // Strings, floats, sizes on the chain (x.shape[-1] and x.size(-1)), a return inside a branch.
      {"y, _0, = (self.lstm).forward__0(x, None, )", "if torch.eq(self.pool, \"last\"):", "  y0 = torch.select(y, 1, -1)",
       "else:", "  y0 = torch.mean(y, [1])", "if torch.ne((torch.size(y0))[-1], 8):",
       "  ops.prim.RaiseException(\"bad\", \"builtins.ValueError\")", "else:", "  pass",
       "if torch.gt(self.scale, 0.25):", "  return (self.fc).forward(y0, )", "return y0"},
      // An Optional argument left at its default; the rank of the input once the LSTM fixed the layout.
      {"if torch.__is__(h, None):", "  y0, _0, = (self.lstm).forward__0(x, None, )", "  y = y0", "else:",
       "  h0 = unchecked_cast(Tensor, h)", "  y1, _1, = (self.lstm).forward__0(x, h0, )", "  y = y1",
       "if torch.eq(torch.dim(x), 2):", "  y2 = torch.unsqueeze(y, 0)", "else:", "  y2 = y",
       "return (self.fc).forward(torch.select(torch.slice(y2), 1, -1), )"},
  };
  for (size_t i = 0; i < folded.size(); ++i) {
    Described d = net(folded[i]);
    if (i == 3) {
      d.ck.module_objects[0].forward = {"  def forward(self: __torch__.Net,", "    x: Tensor,",
                                        "    h: Optional[Tensor]=None) -> Tensor:"};
      for (const std::string& b : folded[i]) d.ck.module_objects[0].forward.push_back("    " + b);
    }
    const std::string err = refusal(d);
    EXPECT_EQ(err, "no refusal: lstm > last > fc") << i;
  }
  // The feature count of the input, before any layer read it: taken as given,
  // with a note; the layer that reads it then confirms it, or this way is
  // given up and the other one read.
  {
    const RecordedChain r = chain_of(net({"if torch.eq(torch.size(x, -1), 5):", "  y, _0, = (self.lstm).forward__0(x, None, )",
                                          "else:", "  y = x", "return (self.fc).forward(torch.select(y, 1, -1), )"}));
    EXPECT_EQ(r.graph, "lstm > last > fc");
    ASSERT_EQ(r.notes.size(), 1u);
    EXPECT_NE(r.notes[0].find("read for an input of 5 features"), std::string::npos) << r.notes[0];
    const RecordedChain other = chain_of(net({"if torch.eq(torch.size(x, -1), 64):", "  y = torch.relu(x)", "else:",
                                              "  y0, _0, = (self.lstm).forward__0(x, None, )", "  y = y0",
                                              "return (self.fc).forward(torch.select(y, 1, -1), )"}));
    EXPECT_EQ(other.graph, "lstm > last > fc");
    EXPECT_TRUE(other.notes.empty());
  }
  // A size as a truth value: a feature count is never 0.
  EXPECT_EQ(chain_of(net({"if torch.size(x, -1):", "  y0, _0, = (self.lstm).forward__0(x, None, )", "else:", "  y0 = x",
                          "return (self.fc).forward(torch.select(y0, 1, -1), )"}))
                .graph,
            "lstm > last > fc");
  // Two layers that read the input must agree on its width.
  const std::string err = refusal(net({"_0 = (self.fc).forward(x, )", "y, _1, = (self.lstm).forward__0(x, None, )",
                                       "return _0"}));
  EXPECT_NE(err.find("'lstm' reads 5 input features, but 'fc' took the input to have 8"), std::string::npos) << err;
  // The rank of the input differs between the input layouts still possible:
  // the layouts with a time axis are read first, then [B, F].
  {
    const RecordedChain r = chain_of(net({"if torch.eq(torch.dim(x), 3):", "  _0 = torch.cumsum(x, 1)", "else:",
                                          "  _0 = x", "return (self.fc).forward(_0, )"}));
    EXPECT_EQ(r.graph, "fc");
  }
}

TEST(ScriptChain, BranchesTheDataDecidesAreRefused) {
  const auto tensors = lstm_tensors("lstm", 5, 8) + linear_tensors("fc", 8, 3);
  auto net = [&](std::vector<std::string> body, const std::string& input = "x: Tensor") {
    return describe(tensors, {{"", "__torch__.Net", forward(std::move(body), "self", input), false, {}},
                              scripted("lstm", "rnn.LSTM", {{"batch_first", "true"}}), scripted("fc", "linear.Linear")});
  };
  const std::string head = "y, _0, = (self.lstm).forward__0(x, None, )";
  const std::string tail = "return (self.fc).forward(torch.select(y, 1, -1), )";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{head, "if bool(torch.gt(torch.sum(y), 0)):", "  y = torch.relu(y)", "else:", "  pass", tail},
       "line 'if bool(torch.gt(torch.sum(y), 0)):': a branch on the values of a tensor (torch.sum), which depends on "
       "the data, not known when the file is read"},
      {{head, "if torch.gt(torch.size(x, 0), 1):", "  y = torch.relu(y)", "else:", "  pass", tail},
       "line 'if torch.gt(torch.size(x, 0), 1):': a branch on the batch size, not known when the file is read"},
      {{head, "_1 = torch.eq(torch.size(y, 1), 10)", "if _1:", "  y = torch.relu(y)", "else:", "  pass", tail},
       "line 'if _1:': a branch on the time length"},
      {{head, "if torch.__is__(self.missing, None):", "  pass", "else:", "  pass", tail},
       "a branch on whether 'root.missing' is None"},
      {{head, "if torch.eq(torch.size(y, -1), 8):", "  ops.prim.RaiseException(\"wrong width\")", "else:", "  pass", tail},
       "line 'ops.prim.RaiseException(\"wrong width\")': the forward raises an exception here ('wrong width')"},
  };
  for (const auto& [body, expect] : cases) {
    const std::string err = refusal(net(body));
    EXPECT_NE(err.find(expect), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  }
  // A second input with no default: ferry gives the forward one input.
  const std::string err = refusal(net({"if torch.__is__(h, None):", "  pass", "else:", "  pass", head, tail},
                                      "x: Tensor, h: Optional[Tensor]"));
  EXPECT_NE(err.find("a branch on whether forward's second input 'h' is None"), std::string::npos) << err;
}

TEST(ScriptChain, BranchesThatGoEitherWayAreReadABoundedNumberOfTimes) {
  // 40 branches on the input's rank, then a line that cannot be read: at
  // most 16 readings, each bounded, and the first reading's error.
  const auto tensors = linear_tensors("fc", 8, 3);
  std::vector<std::string> body;
  for (int i = 0; i < 40; ++i) {
    body.push_back("if torch.eq(torch.dim(x), 2):");
    body.push_back("  x = torch.relu(x)");
    body.push_back("else:");
    body.push_back("  x = torch.tanh(x)");
  }
  body.push_back("_0 = torch.cumsum(x, 1)");
  body.push_back("return _0");
  const Described d = describe(tensors, {{"", "__torch__.Net", forward(body), false, {}}, scripted("fc", "linear.Linear")});
  const std::string err = refusal(d);
  EXPECT_NE(err.find("a call to 'torch.cumsum'"), std::string::npos) << err;
}

TEST(ScriptChain, BidirectionalFinalStateAndLinearOverTime) {
  const Described bi = describe(
      lstm_tensors("lstm", 5, 8, true) + linear_tensors("fc", 8, 2),
      {{"", "__torch__.Net",
        forward({"_0, _1, = (self.lstm).forward__0(x, None, )", "_2, _3, = _1",
                 "return (self.fc).forward(torch.select(_2, 0, -1), )"}),
        false, {}},
       scripted("lstm", "rnn.LSTM", {{"batch_first", "true"}, {"bidirectional", "true"}}),
       scripted("fc", "linear.Linear")});
  EXPECT_NE(refusal(bi).find("h_n[-1] of a bidirectional module"), std::string::npos) << refusal(bi);

  // A Linear on a [B, C, T] conv output acts on time: no input layout fits.
  const Described over_time = describe(
      std::vector<Tensor>{{"conv.weight", {6, 4, 3}}, {"conv.bias", {6}}} + linear_tensors("fc", 6, 2),
      {{"", "__torch__.Net", forward({"return (self.fc).forward((self.conv).forward(x, ), )"}), false, {}},
       scripted("conv", "conv.Conv1d"), scripted("fc", "linear.Linear")});
  EXPECT_NE(refusal(over_time).find("'fc' over an axis other than the features"), std::string::npos)
      << refusal(over_time);
}

// ------------------------------------------------------------- Sequential --
Object pickled(const std::string& path, const std::string& cls, std::vector<std::pair<std::string, std::string>> attrs = {}) {
  return {path, "torch.nn.modules." + cls, {}, false, std::move(attrs)};
}

std::string sequential_refusal(const Described& d) {
  try {
    return "no refusal: " + sequential_chain(d.ck, d.modules).graph;
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(SequentialChain, ItsOrderIsTheChain) {
  const Described mlp = describe(linear_tensors("0", 12, 32) + linear_tensors("2", 32, 16) + linear_tensors("4", 16, 3),
                                 {pickled("", "container.Sequential"), pickled("0", "linear.Linear"),
                                  pickled("1", "activation.ReLU"), pickled("2", "linear.Linear"),
                                  pickled("3", "activation.Tanh"), pickled("4", "linear.Linear")});
  const RecordedChain r = sequential_chain(mlp.ck, mlp.modules);
  EXPECT_EQ(r.graph, "0 > relu > 2 > tanh > 4");
  EXPECT_FALSE(r.layout);  // [B, F] or a sequence, either way

  const Described nested = describe(
      linear_tensors("0.0", 4, 8) + linear_tensors("1", 8, 2),
      {pickled("", "container.Sequential"), pickled("0", "container.Sequential"), pickled("0.0", "linear.Linear"),
       pickled("0.1", "activation.LeakyReLU", {{"negative_slope", "0.2"}}), pickled("0.2", "dropout.Dropout"),
       pickled("1", "linear.Linear"), pickled("2", "activation.Softmax", {{"dim", "1"}})});
  EXPECT_EQ(sequential_chain(nested.ck, nested.modules).graph, "0.0 > leaky_relu(slope=0.2) > dropout > 1 > softmax");

  const Described conv = describe(
      {{"0.weight", {6, 4, 3}}, {"0.bias", {6}}, {"1.weight", {6}}, {"1.bias", {6}}, {"1.running_mean", {6}},
       {"1.running_var", {6}}},
      {pickled("", "container.Sequential"), pickled("0", "conv.Conv1d"), pickled("1", "batchnorm.BatchNorm1d"),
       pickled("2", "activation.ReLU")});
  const RecordedChain c = sequential_chain(conv.ck, conv.modules);
  EXPECT_EQ(c.graph, "0 > 1 > relu");
  EXPECT_EQ(c.layout, InputLayout::kBFT);
}

TEST(SequentialChain, WhatTheOrderCannotTellIsRefused) {
  const auto lstm = describe(lstm_tensors("0", 4, 8) + linear_tensors("1", 8, 2),
                             {pickled("", "container.Sequential"), pickled("0", "rnn.LSTM"), pickled("1", "linear.Linear")});
  EXPECT_NE(sequential_refusal(lstm).find("nn.Sequential child '0' (LSTM): it returns a tuple (output, state)"),
            std::string::npos)
      << sequential_refusal(lstm);

  const Described user = describe(linear_tensors("fc", 4, 2),
                                  {{"", "__main__.Net", {}, false, {}}, pickled("fc", "linear.Linear")});
  EXPECT_NE(sequential_refusal(user).find("whole __main__.Net module, whose forward a pickle does not record"),
            std::string::npos);

  // A user's class named like torch's: its forward is the user's.
  Described fake = describe(linear_tensors("0", 4, 4), {pickled("", "container.Sequential"), pickled("0", "linear.Linear"),
                                                        pickled("1", "activation.ReLU")});
  fake.ck.module_objects[2].class_name = "__main__.ReLU";
  EXPECT_NE(sequential_refusal(fake).find("child '1' (ReLU): neither a layer ferry runs nor an activation"),
            std::string::npos)
      << sequential_refusal(fake);

  const auto over_time = describe(std::vector<Tensor>{{"0.weight", {6, 4, 3}}, {"0.bias", {6}}} + linear_tensors("1", 6, 2),
                                  {pickled("", "container.Sequential"), pickled("0", "conv.Conv1d"), pickled("1", "linear.Linear")});
  EXPECT_NE(sequential_refusal(over_time).find("which after a Conv1d is time"), std::string::npos)
      << sequential_refusal(over_time);

  const auto no_dim = describe(linear_tensors("0", 4, 4), {pickled("", "container.Sequential"), pickled("0", "linear.Linear"),
                                                           pickled("1", "activation.Softmax")});
  EXPECT_NE(sequential_refusal(no_dim).find("no dim: PyTorch picks the axis from the input's rank"), std::string::npos);

  const auto flatten = describe(linear_tensors("1", 4, 4), {pickled("", "container.Sequential"), pickled("0", "flatten.Flatten"),
                                                            pickled("1", "linear.Linear")});
  EXPECT_NE(sequential_refusal(flatten).find("child '0' (Flatten)"), std::string::npos);

  const auto empty = describe({}, {pickled("", "container.Sequential")});
  EXPECT_NE(sequential_refusal(empty).find("an empty nn.Sequential"), std::string::npos);
}

TEST(SequentialChain, TheSuggestionKeepsTheOrderTheFileKnows) {
  // A user module around a Sequential: its forward is unknown, the Sequential's part is not.
  const Described d = describe(
      linear_tensors("features.0", 6, 8) + linear_tensors("features.2", 8, 8) + lstm_tensors("lstm", 8, 8) +
          linear_tensors("fc", 8, 2),
      {pickled("", "x.Net"), pickled("features", "container.Sequential"), pickled("features.0", "linear.Linear"),
       pickled("features.1", "activation.Tanh"), pickled("features.2", "linear.Linear"), pickled("lstm", "rnn.LSTM"),
       pickled("fc", "linear.Linear")});
  std::string err;
  try {
    infer_graph(d.modules, recorded_order(d.ck, d.modules));
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("--graph \"features.0 > tanh > features.2 > lstm > last > fc\""), std::string::npos) << err;
}

}  // namespace
}  // namespace ferry::conv

#endif  // FERRY_HAVE_CONVERTER
