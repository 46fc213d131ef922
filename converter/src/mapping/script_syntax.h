// The syntax of TorchScript code, as torch.jit.save prints a module's
// `forward` into code/ (PYTORCH_FORMAT.md §3): read as text into a small
// tree, never run. mapping/script_chain.h gives the tree its meaning.
//
// What is read is the subset the printer emits for straight-line code and
// its branches:
//
//   statement := 'return' expr
//              | 'if' expr ':' | 'elif' expr ':' | 'else' ':'   opens a block
//              | 'pass'
//              | NAME [':' type] '=' expr                 x = ..., x : Tensor = ...
//              | NAME (',' NAME)* [','] '=' expr          a, b, = ...  (a tuple unpacked)
//              | expr                                     a call kept for its effect
//   expr      := primary ( '(' args ')' | '[' subscript ']' | '.' NAME )*
//   primary   := NAME | NUMBER | '-' NUMBER | STRING | '(' expr ')' | tuple | list
//   args      := [ (NAME '=' expr | expr) (',' ...)* [','] ]
//   subscript := (expr | [expr] ':' [expr] [':' [expr]]) (',' ...)*
//
// Anything else (for / while / with, operators, lambdas) is a statement of
// kind kOther: the reader stops there and says which line it was. A body's
// lines become blocks by their indentation (parse_body): an `if` holds the
// lines of its two branches, an `elif` is an `if` inside the `else`.
//
// Limits, so that hostile code costs little: a statement of at most
// kMaxStatementChars characters (continuation lines included), expressions
// nested at most kMaxNesting deep (the parser recurses once per level), and
// so are blocks.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ferry::conv::script {

constexpr size_t kMaxStatementChars = size_t{1} << 16;
constexpr size_t kMaxNesting = 64;

struct Expr {
  enum Kind {
    kName,       // text: an identifier (True, False, None included)
    kNumber,     // text: as written ("-1", "0.", "1.0000000000000001e-05")
    kString,     // text: the value, quotes and escapes removed
    kCall,       // items[0] the callee, items[1..] the arguments; names[i] the keyword of items[i+1] ("" positional)
    kAttribute,  // items[0].text
    kSubscript,  // items[0][items[1], ...]
    kTuple,      // (items...)
    kList,       // [items...]
    kSlice,      // start:stop:step inside a subscript, each item a kName "None" where left out
    // Python source only (TorchScript code prints none of these):
    kIfExp,          // items[1] if items[0] else items[2]
    kDict,           // {items[0]: items[1], ...}
    kComprehension,  // [items[0] for items[1] in items[2]] (one `for`, no `if`); text: "[" "(" or "{"
    kStarred,        // *items[0] (text "*") or **items[0] (text "**") in a call or a target
  };
  Kind kind = kName;
  std::string text;
  std::vector<Expr> items;
  std::vector<std::string> names;

  bool is_name(const char* s) const { return kind == kName && text == s; }
};

// Operators are read as the calls TorchScript prints for them: a + b is
// torch.add(a, b), a == b torch.eq(a, b), a is None torch.__is__(a, None),
// not a torch.__not__(a), -a torch.neg(a) (a negative number stays a
// number); `a and b` / `a or b` are calls of __and__ / __or__, which a reader
// evaluates lazily; `a < b < c` is __and__(torch.lt(a, b), torch.lt(b, c)).
struct Statement {
  enum Kind { kAssign, kReturn, kExpression, kIf, kElif, kElse, kPass, kOther, kFor };
  Kind kind = kOther;
  std::vector<std::string> targets;  // kAssign: one name, or several for a tuple unpacked
  // kAssign: the target as written (a name, a tuple of targets nested,
  // self.x, x[i]); `targets` is filled only where it is names alone. An
  // augmented assignment `x += y` is `x = torch.add_(x, y)` (the in-place
  // form of each operator).
  Expr target;  // kFor: the loop's target
  Expr value;                        // kAssign / kReturn / kExpression; kIf / kElif: the condition; kFor: what it iterates
  std::string why;                   // kOther: what it is ("a branch (if)", "a loop (for)", a syntax error)
};

struct Parameter {
  std::string name;
  std::string star;  // "*" for *args, "**" for **kwargs, "" otherwise (a bare * or / is skipped)
  bool has_default = false;
  Expr default_value;
};

// A `def forward(...)` as its code/ lines give it: the parameters (the first
// is the module itself, whatever it is called) and the body's logical lines
// (continuation lines joined), each with the indentation of its first line.
struct Function {
  std::vector<Parameter> parameters;
  std::vector<std::string> body;
  std::vector<size_t> indents;  // one per body line
  std::vector<size_t> numbers;  // one per body line: its line in the source (0: not known)
};

// A body line and, for an `if` (an `elif` becomes an `if` alone in the
// `else`), the blocks of its branches. Lines that do not fit the block
// structure (an `else` without its `if`, an indentation that matches no
// block, blocks nested deeper than kMaxNesting) are kOther lines saying so.
struct Line {
  std::string text;
  size_t number = 0;  // in the source, where known
  Statement statement;
  std::vector<Line> then, orelse;  // kIf; kFor: its block in `then`
};

// Splits the lines of a `def` into its signature and body. Throws Error when
// the signature cannot be read. `numbers`, where given, are the lines'
// numbers in the source (one per line), kept per body line for messages.
Function parse_function(const std::vector<std::string>& lines, const std::vector<size_t>& numbers = {});

// Parses one logical line of a body (leading spaces allowed). Never throws
// for what the code says: unreadable text is a kOther statement with the
// reason.
Statement parse_statement(const std::string& line);

// The body of `f` as blocks, each line parsed. Never throws.
std::vector<Line> parse_body(const Function& f);

}  // namespace ferry::conv::script
