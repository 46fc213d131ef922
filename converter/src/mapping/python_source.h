// The Python source a user gives with --code (a .py file or a notebook),
// read as text and never run: its imports, its classes with their methods,
// its module-level functions and constants. mapping/python_model.h finds the
// model class in it and reads its constructor; mapping/script_chain.h reads
// its forward with the same walker that reads TorchScript code (whose
// statements are parsed by the same parser, mapping/script_syntax.h).
//
// The file is tokenized once, as Python tokenizes it: comments dropped;
// strings of every form (quotes, triple quotes, r/b/f/u prefixes) and
// continuation lines (open brackets, a trailing backslash) joined into
// logical lines, each with its indentation and the number of its first
// line; `a; b` split; `if c: x` split into a header and its block; a number
// spelled as TorchScript spells it (1_000, 0x10, .5). Module-level code
// other than imports, class and def statements and NAME = value constants
// is skipped: training loops, argument parsing, `if __name__ ==
// "__main__":` blocks. A notebook's code cells are read in order as one
// program, their `!shell` and `%magic` lines (and `%%` cells) skipped;
// messages name the cell and its line.
//
// A source file is hostile input: it is read whole only up to
// kMaxSourceBytes, a logical line is at most script::kMaxStatementChars
// characters and kMaxLineTokens tokens, brackets nest at most
// script::kMaxNesting deep, a file holds at most kMaxDefinitions classes and
// functions. A line over those limits inside a class or function the reader
// needs is refused naming its file and line; elsewhere it is skipped.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mapping/script_syntax.h"

namespace ferry::conv::python {

constexpr size_t kMaxSourceBytes = size_t{8} << 20;
constexpr size_t kMaxLineTokens = size_t{1} << 14;
constexpr size_t kMaxDefinitions = size_t{1} << 14;

struct SourceFile {
  std::string path;  // as given
  std::string name;  // its last part, for messages
  bool notebook = false;
  // Notebooks: per line of the program (1-based, [0] unused), its cell
  // (1-based, counting code cells and others) and line in the cell.
  std::vector<std::pair<size_t, size_t>> origins;

  // "model.py:12", "train.ipynb cell 3, line 5".
  std::string where(size_t line) const;
};

// A def: its logical lines ("def forward(self, x):" first), each spelled
// again from its tokens with its indentation, and their line numbers.
struct Def {
  std::string name;
  std::vector<std::string> lines;
  std::vector<size_t> numbers;
  std::vector<std::string> decorators;  // "staticmethod", "torch.jit.export", ...
  // Lines that cannot be read (a bad token, too long, brackets too deep), by
  // number, and why: spelled as `pass` in `lines`, refused where reached.
  std::map<size_t, std::string> unreadable;
  const SourceFile* file = nullptr;
  size_t line = 0;  // of the def

  bool is_static() const;  // @staticmethod: no self
};

struct ClassDef {
  std::string name;
  std::vector<std::string> bases;  // as written, dotted: "nn.Module", "pl.LightningModule", "Encoder"
  std::map<std::string, Def> methods;
  std::map<std::string, std::pair<script::Expr, size_t>> attributes;  // class-level NAME = value, its line
  const SourceFile* file = nullptr;
  size_t line = 0;
};

struct Program {
  std::vector<std::unique_ptr<SourceFile>> files;
  std::vector<ClassDef> classes;  // in the order read (files in order given)
  std::map<std::string, Def> functions;  // module-level defs; a later one replaces an earlier one
  // Module-level names bound by imports: "nn" -> "torch.nn", "F" ->
  // "torch.nn.functional", "Net" -> "model.Net" (from model import Net).
  std::map<std::string, std::string> imports;
  // Module-level NAME = value (outside blocks), the last one read, and where.
  struct Constant {
    script::Expr value;
    const SourceFile* file = nullptr;
    size_t line = 0;
  };
  std::map<std::string, Constant> constants;

  // The class called `name` (the last part of a dotted name); the last one
  // read where several files define one. Null if none.
  const ClassDef* find_class(const std::string& name) const;
  // The method `name` of `cls` or of its bases defined in the program, and
  // the class defining it; {nullptr, nullptr} if none.
  std::pair<const Def*, const ClassDef*> find_method(const ClassDef& cls, const std::string& name) const;
  // `name` through the imports ("nn.LSTM" -> "torch.nn.LSTM"); as given
  // when its first part is not imported.
  std::string qualified(const std::string& name) const;
};

// The last part of a dotted name ("torch.nn.modules.rnn.LSTM" -> "LSTM").
std::string last_name(const std::string& dotted);

// Reads the file at `path` (a notebook when it ends in .ipynb or holds a
// notebook's JSON) into `program`. Throws Error naming the file (and line)
// when it cannot be read, is too large, is not UTF-8 text, or a limit is
// passed in what the reader needs.
void read_source(const std::string& path, Program& program);

// The same, from text in memory (tests, fuzzing): `name` is the file name.
void read_source_text(const std::string& name, const std::string& text, Program& program);

}  // namespace ferry::conv::python
