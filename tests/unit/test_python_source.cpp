// The --code reader's first stage (mapping/python_source.h): a Python file
// or notebook read as text into imports, classes, methods, functions and
// constants, with the line of each; module-level code skipped; limits.
// The model class, its constructor and its forward are tested end to end
// against PyTorch in tests/e2e/test_code.cpp.
#include <gtest/gtest.h>

#include <string>

#include "error.h"
#include "mapping/python_source.h"
#include "mapping/script_syntax.h"

namespace {

using ferry::conv::Error;
using namespace ferry::conv::python;
namespace script = ferry::conv::script;

Program read(const std::string& name, const std::string& text) {
  Program p;
  read_source_text(name, text, p);
  return p;
}

std::string refusal(const std::string& name, const std::string& text) {
  try {
    read(name, text);
  } catch (const Error& e) {
    return e.what();
  }
  return "no refusal";
}

const char* kModel = R"PY(#!/usr/bin/env python
"""A docstring with 'quotes', a ( bracket and a # that is not a comment."""
import torch
import torch.nn as nn, numpy as np
from torch.nn import functional as F
from .layers import Encoder as Enc  # a relative import
HIDDEN = 0x20  # hex
SCALE = .5; DEPTH = 1_000
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Net(nn.Module):
    """Docstring."""
    kind = 'gru'

    def __init__(self, n_in: int = 4,
                 hidden: int = HIDDEN) -> None:
        super(Net, self).__init__()
        self.rnn = nn.GRU(n_in, hidden, \
                          batch_first=True)

    @staticmethod
    def helper(x): return x

    def forward(self, x, h=None):
        if h is None: h = torch.zeros(1, x.size(0), 32)
        out, _ = self.rnn(x, h)  # comment ( with a bracket
        return out[:, -1]


if __name__ == "__main__":
    for epoch in range(3):
        print(epoch)
)PY";

TEST(PythonSource, ReadsImportsClassesMethodsAndConstants) {
  const Program p = read("model.py", kModel);
  EXPECT_EQ(p.imports.at("nn"), "torch.nn");
  EXPECT_EQ(p.imports.at("np"), "numpy");
  EXPECT_EQ(p.imports.at("F"), "torch.nn.functional");
  EXPECT_EQ(p.imports.at("Enc"), ".layers.Encoder");
  EXPECT_EQ(p.qualified("nn.GRU"), "torch.nn.GRU");
  ASSERT_EQ(p.classes.size(), 1u);
  const ClassDef& c = p.classes[0];
  EXPECT_EQ(c.name, "Net");
  EXPECT_EQ(c.line, 12u);
  ASSERT_EQ(c.bases.size(), 1u);
  EXPECT_EQ(c.bases[0], "nn.Module");
  EXPECT_EQ(c.attributes.at("kind").first.text, "gru");
  ASSERT_TRUE(c.methods.count("__init__") && c.methods.count("forward") && c.methods.count("helper"));
  EXPECT_TRUE(c.methods.at("helper").is_static());
  // Numbers as TorchScript spells them; `a; b` is two statements.
  EXPECT_EQ(p.constants.at("HIDDEN").value.text, "32");
  EXPECT_EQ(p.constants.at("SCALE").value.text, "0.5");
  EXPECT_EQ(p.constants.at("DEPTH").value.text, "1000");
  EXPECT_EQ(p.constants.at("DEPTH").line, 8u);
  // Module-level code is skipped: the loop under __main__ defines nothing.
  EXPECT_FALSE(p.constants.count("epoch"));

  // forward: `if h is None: h = ...` split into a header and its block; the
  // continuation and comment gone; every line numbered.
  const Def& f = c.methods.at("forward");
  EXPECT_EQ(f.line, 25u);
  const script::Function fn = script::parse_function(f.lines, f.numbers);
  ASSERT_EQ(fn.parameters.size(), 3u);
  EXPECT_TRUE(fn.parameters[2].has_default);
  const std::vector<script::Line> body = script::parse_body(fn);
  ASSERT_EQ(body.size(), 3u);
  EXPECT_EQ(body[0].statement.kind, script::Statement::kIf);
  EXPECT_EQ(body[0].number, 26u);
  ASSERT_EQ(body[0].then.size(), 1u);
  EXPECT_EQ(body[0].then[0].statement.kind, script::Statement::kAssign);
  EXPECT_EQ(body[1].text, "out, _ = self.rnn(x, h)");
  EXPECT_EQ(body[1].number, 27u);
  EXPECT_EQ(body[2].text, "return out[:, -1]");
  // __init__: the signature over two lines, the call continued by a backslash.
  const Def& init = c.methods.at("__init__");
  const script::Function ifn = script::parse_function(init.lines, init.numbers);
  ASSERT_EQ(ifn.parameters.size(), 3u);
  const std::vector<script::Line> ibody = script::parse_body(ifn);
  ASSERT_EQ(ibody.size(), 2u);
  EXPECT_EQ(ibody[1].number, 19u);
  EXPECT_EQ(ibody[1].statement.target.kind, script::Expr::kAttribute);
}

TEST(PythonSource, ANotebookIsItsCodeCellsWithShellAndMagicLinesSkipped) {
  const std::string nb = R"({"cells": [
    {"cell_type": "markdown", "source": ["# Title\n", "class NotCode(nn.Module): pass"]},
    {"cell_type": "code", "source": ["!pip install torch\n", "%matplotlib inline\n", "import torch.nn as nn\n"]},
    {"cell_type": "code", "source": "%%bash\necho hi\nclass Hidden(nn.Module): pass\n"},
    {"cell_type": "code", "source": ["class Net(nn.Module):\n", "    def forward(self, x):\n", "        return x\n"]}
  ], "nbformat": 4})";
  const Program p = read("train.ipynb", nb);
  ASSERT_EQ(p.classes.size(), 1u);
  EXPECT_EQ(p.classes[0].name, "Net");
  EXPECT_EQ(p.imports.at("nn"), "torch.nn");
  EXPECT_EQ(p.classes[0].file->where(p.classes[0].line), "train.ipynb cell 4, line 1");
  // A bad line names its cell.
  const std::string bad = R"({"cells": [{"cell_type": "code", "source": ["x = 1\n", "y = '''open\n"]}]})";
  EXPECT_EQ(refusal("bad.ipynb", bad), "bad.ipynb cell 1, line 2: a string opened with ''' is never closed (the rest of "
                                       "the file is inside it)");
  EXPECT_NE(refusal("nb.ipynb", R"({"cells": 3})").find("not a Jupyter notebook"), std::string::npos);
  EXPECT_NE(refusal("nb.ipynb", "{\"cells\": [").find("not valid JSON"), std::string::npos);
}

TEST(PythonSource, HostileTextIsRefusedNamingTheLineOrSkippedWhereNotNeeded) {
  EXPECT_EQ(refusal("a.py", "x = 1\ny = (\n"), "a.py:2: a bracket opened here is never closed (the rest of the file is inside it)");
  EXPECT_EQ(refusal("a.py", "x = 1\n\x80\n"), "a.py:2: bytes that are not UTF-8 (Python source is UTF-8)");
  EXPECT_EQ(refusal("a.py", std::string("x = 1\0\n", 7)), "a.py:1: a NUL byte (not Python source text)");
  EXPECT_NE(refusal("big.py", std::string(kMaxSourceBytes + 1, '#')).find("a source file is read up to"), std::string::npos);
  // A module-level line of 10^5 tokens is skipped; in a method it is marked
  // unreadable, refused only when the method is read.
  std::string table = "T = [" ;
  for (int i = 0; i < 100000; ++i) table += "1,";
  table += "]\nclass Net:\n    def forward(self, x):\n        y = x" ;
  for (int i = 0; i < 20000; ++i) table += " + x";
  table += "\n        return y\n";
  const Program p = read("t.py", table);
  EXPECT_FALSE(p.constants.count("T"));
  const Def& f = p.classes.at(0).methods.at("forward");
  ASSERT_EQ(f.unreadable.size(), 1u);
  EXPECT_NE(f.unreadable.begin()->second.find("more than 16384 tokens"), std::string::npos);
  // Brackets 10^5 deep: counted, not recursed into.
  const std::string deep = "def f(x):\n    return " + std::string(100000, '(') + "x" + std::string(100000, ')') + "\n";
  const Program q = read("d.py", deep);
  EXPECT_NE(q.functions.at("f").unreadable.begin()->second.find("brackets nested deeper than"), std::string::npos);
  // A class that inherits from itself, and two that inherit from each other:
  // a method is looked up through each base once.
  const Program r = read("c.py", "class A(A):\n    pass\nclass B(C):\n    pass\nclass C(B):\n    pass\n");
  EXPECT_EQ(r.find_method(r.classes[0], "forward").first, nullptr);
  EXPECT_EQ(r.find_method(r.classes[1], "forward").first, nullptr);
}

TEST(PythonSyntax, OperatorsAreTheCallsTorchScriptPrints) {
  auto value = [](const std::string& line) { return script::parse_statement(line).value; };
  const script::Expr sum = value("y = a + b * c");
  ASSERT_EQ(sum.kind, script::Expr::kCall);
  EXPECT_EQ(sum.items[0].text, "torch.add");
  EXPECT_EQ(sum.items[2].items[0].text, "torch.mul");
  EXPECT_EQ(value("y = not a").items[0].text, "torch.__not__");
  EXPECT_EQ(value("y = a is not None").items[0].text, "torch.__isnot__");
  EXPECT_EQ(value("y = a and b or c").items[0].text, "__or__");
  EXPECT_EQ(value("y = 0 < a < 3").items[0].text, "__and__");
  EXPECT_EQ(value("y = -1").kind, script::Expr::kNumber);
  EXPECT_EQ(value("y = -x").items[0].text, "torch.neg");
  EXPECT_EQ(value("y = a if c else b").kind, script::Expr::kIfExp);
  EXPECT_EQ(value("y = [f(i) for i in range(3)]").kind, script::Expr::kComprehension);
  const script::Statement aug = script::parse_statement("x += y");
  EXPECT_EQ(aug.kind, script::Statement::kAssign);
  EXPECT_EQ(aug.value.items[0].text, "torch.add_");
  const script::Statement nested = script::parse_statement("out, (h, c) = self.lstm(x)");
  ASSERT_EQ(nested.target.kind, script::Expr::kTuple);
  EXPECT_EQ(nested.target.items[1].kind, script::Expr::kTuple);
  EXPECT_TRUE(nested.targets.empty());  // not names alone
  EXPECT_EQ(script::parse_statement("assert x.dim() == 3").kind, script::Statement::kPass);
  // An augmented operator the target's expression does not end at (found by fuzzing).
  EXPECT_NE(script::parse_statement("f(x) y += 1").why.find("augmented assignment's operator"), std::string::npos);
  // a + a + ... nests the tree without nesting the parser: bounded.
  std::string chain = "y = a";
  for (int i = 0; i < 2000; ++i) chain += " + a";
  EXPECT_NE(script::parse_statement(chain).why.find("in a row"), std::string::npos);
}

}  // namespace
