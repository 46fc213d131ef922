#include "mapping/script_syntax.h"

#include <algorithm>
#include <cctype>

#include "checkpoint/checkpoint.h"
#include "error.h"

namespace ferry::conv::script {
namespace {

struct Token {
  enum Kind { kName, kNumber, kString, kPunct, kEnd };
  Kind kind = kEnd;
  std::string text;  // kPunct: "(", ")", "[", "]", ",", ":", "=", ".", "->", "-", or another operator
};

// Thrown inside this file only: becomes a kOther statement or an Error.
struct SyntaxError {
  std::string why;
};

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::vector<Token> tokenize(const std::string& s) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    Token t;
    if (is_name_start(c)) {
      const size_t b = i;
      while (i < s.size() && is_name_char(s[i])) ++i;
      t.kind = Token::kName;
      t.text = s.substr(b, i - b);
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      // 1, 0., 9223372036854775807, 1.0000000000000001e-05
      const size_t b = i;
      while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
      if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
        ++i;
        if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      }
      if (i < s.size() && is_name_char(s[i])) throw SyntaxError{"a number followed by '" + std::string(1, s[i]) + "'"};
      t.kind = Token::kNumber;
      t.text = s.substr(b, i - b);
    } else if (c == '"' || c == '\'') {
      ++i;
      t.kind = Token::kString;
      bool closed = false;
      while (i < s.size()) {
        char d = s[i++];
        if (d == c) {
          closed = true;
          break;
        }
        if (d == '\\' && i < s.size()) {
          d = s[i++];
          if (d == 'n') d = '\n';
          else if (d == 't') d = '\t';
        }
        t.text += d;
      }
      if (!closed) throw SyntaxError{"a string without its closing quote"};
    } else {
      t.kind = Token::kPunct;
      static const char* const kTwo[] = {"->", "==", "!=", "<=", ">=", "**", "//", "<<", ">>", "+=", "-=", "*=", "/="};
      for (const char* two : kTwo)
        if (s.compare(i, 2, two) == 0) t.text = two;
      if (t.text.empty()) t.text = std::string(1, c);
      i += t.text.size();
    }
    out.push_back(std::move(t));
  }
  out.push_back(Token{});
  return out;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  bool at(const char* punct) const { return peek().kind == Token::kPunct && peek().text == punct; }
  bool at_end() const { return peek().kind == Token::kEnd; }
  bool eat(const char* punct) {
    if (!at(punct)) return false;
    ++i_;
    return true;
  }
  void expect(const char* punct) {
    if (!eat(punct)) throw SyntaxError{"'" + std::string(punct) + "' expected where '" + shown(peek()) + "' is"};
  }
  void skip(size_t n) { i_ = std::min(i_ + n, t_.size() - 1); }
  std::string name() {
    if (peek().kind != Token::kName) throw SyntaxError{"a name expected where '" + shown(peek()) + "' is"};
    return t_[i_++].text;
  }
  static std::string shown(const Token& t) { return t.kind == Token::kEnd ? "the end of the line" : t.text.substr(0, 40); }

  Expr expr() {
    Depth d(*this);
    Expr e = primary();
    for (;;) {
      if (eat("(")) {
        Expr call;
        call.kind = Expr::kCall;
        call.items.push_back(std::move(e));
        while (!eat(")")) {
          std::string keyword;
          if (peek().kind == Token::kName && peek(1).kind == Token::kPunct && peek(1).text == "=") {
            keyword = name();
            expect("=");
          }
          call.items.push_back(expr());
          call.names.push_back(keyword);
          if (!eat(",")) {
            expect(")");
            break;
          }
        }
        e = std::move(call);
      } else if (eat("[")) {
        Expr sub;
        sub.kind = Expr::kSubscript;
        sub.items.push_back(std::move(e));
        do {
          if (at("]")) break;
          sub.items.push_back(subscript_item());
        } while (eat(","));
        expect("]");
        if (sub.items.size() < 2) throw SyntaxError{"an empty subscript"};
        e = std::move(sub);
      } else if (eat(".")) {
        Expr attr;
        attr.kind = Expr::kAttribute;
        attr.text = name();
        attr.items.push_back(std::move(e));
        e = std::move(attr);
      } else {
        return e;
      }
    }
  }

 private:
  // Counts the parser's recursion: every nested expression goes through expr().
  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting)
        throw SyntaxError{"expressions nested deeper than " + std::to_string(kMaxNesting) + " levels"};
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  static Expr none() {
    Expr e;
    e.text = "None";
    return e;
  }

  Expr subscript_item() {
    Expr start = (at(":") ? none() : expr());
    if (!eat(":")) return start;
    Expr slice;
    slice.kind = Expr::kSlice;
    slice.items.push_back(std::move(start));
    slice.items.push_back(at(":") || at(",") || at("]") ? none() : expr());
    slice.items.push_back(eat(":") && !at(",") && !at("]") ? expr() : none());
    return slice;
  }

  Expr primary() {
    const Token& t = peek();
    Expr e;
    if (t.kind == Token::kName) {
      e.kind = Expr::kName;
      e.text = t.text;
      ++i_;
      return e;
    }
    if (t.kind == Token::kNumber || t.kind == Token::kString) {
      e.kind = t.kind == Token::kNumber ? Expr::kNumber : Expr::kString;
      e.text = t.text;
      ++i_;
      return e;
    }
    if (eat("-")) {
      if (peek().kind != Token::kNumber) throw SyntaxError{"a '-' before something other than a number"};
      e.kind = Expr::kNumber;
      e.text = "-" + t_[i_++].text;
      return e;
    }
    if (eat("(")) {
      if (eat(")")) {
        e.kind = Expr::kTuple;
        return e;
      }
      Expr first = expr();
      if (eat(")")) return first;  // parentheses around one expression
      e.kind = Expr::kTuple;
      e.items.push_back(std::move(first));
      while (eat(",")) {
        if (at(")")) break;
        e.items.push_back(expr());
      }
      expect(")");
      return e;
    }
    if (eat("[")) {
      e.kind = Expr::kList;
      while (!eat("]")) {
        e.items.push_back(expr());
        if (!eat(",")) {
          expect("]");
          break;
        }
      }
      return e;
    }
    throw SyntaxError{"'" + shown(t) + "' where an expression should start"};
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  size_t depth_ = 0;
};

// The first word when it opens a statement that is not straight-line code.
const char* compound_statement(const std::string& word) {
  static const struct {
    const char* word;
    const char* why;
  } kWords[] = {
      {"for", "a loop (for)"},      {"while", "a loop (while)"},   {"with", "a with block"},
      {"try", "a try block"},       {"except", "a try block"},     {"finally", "a try block"},
      {"raise", "a raise"},         {"assert", "an assert"},       {"del", "a del"},
      {"break", "a break"},          {"continue", "a continue"},
      {"def", "a nested def"},      {"class", "a nested class"},   {"lambda", "a lambda"},
      {"global", "a global"},       {"nonlocal", "a nonlocal"},    {"import", "an import"},
      {"from", "an import"},        {"yield", "a yield"},          {"await", "an await"},
      {"async", "an async block"},
  };
  for (const auto& k : kWords)
    if (word == k.word) return k.why;
  return nullptr;
}

Statement parse_tokens(std::vector<Token> tokens) {
  Statement st;
  if (tokens.size() > 1 && tokens[0].kind == Token::kName) {
    if (const char* why = compound_statement(tokens[0].text)) {
      st.why = std::string(why) + ": the forward is not straight-line code";
      return st;
    }
  }
  Parser p(std::move(tokens));
  const std::string first = p.peek().kind == Token::kName ? p.peek().text : std::string();
  if (first == "if" || first == "elif" || first == "else" || first == "pass") {
    p.name();
    st.kind = first == "if" ? Statement::kIf : first == "elif" ? Statement::kElif
            : first == "else" ? Statement::kElse : Statement::kPass;
    if (st.kind == Statement::kIf || st.kind == Statement::kElif) st.value = p.expr();
    if (st.kind != Statement::kPass) p.expect(":");
    if (!p.at_end()) throw SyntaxError{"'" + Parser::shown(p.peek()) + "' after a complete statement"};
    return st;
  }
  if (first == "return") {
    p.name();
    st.kind = Statement::kReturn;
    st.value = p.expr();
  } else {
    // NAME [':' type] '=' | NAME (',' NAME)* [','] '='
    size_t k = 0;
    std::vector<std::string> names;
    bool typed = false;
    while (p.peek(k).kind == Token::kName) {
      names.push_back(p.peek(k).text);
      ++k;
      if (p.peek(k).kind != Token::kPunct || p.peek(k).text != ",") break;
      ++k;
    }
    if (names.size() == 1 && p.peek(k).kind == Token::kPunct && p.peek(k).text == ":") typed = true;
    const bool assign = !names.empty() && (typed || (p.peek(k).kind == Token::kPunct && p.peek(k).text == "="));
    if (assign) {
      p.skip(k);
      if (typed) {
        p.expect(":");
        (void)p.expr();  // the type, not needed
      }
      p.expect("=");
      st.kind = Statement::kAssign;
      st.targets = std::move(names);
    } else {
      st.kind = Statement::kExpression;
    }
    st.value = p.expr();
  }
  if (!p.at_end()) throw SyntaxError{"'" + Parser::shown(p.peek()) + "' after a complete statement"};
  return st;
}

// Bracket depth at the end of `s` (strings skipped), to join continuation lines.
int open_brackets(const std::string& s) {
  int depth = 0;
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '(' || c == '[') {
      ++depth;
    } else if (c == ')' || c == ']') {
      --depth;
    }
  }
  return depth;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

Statement parse_statement(const std::string& line) {
  Statement st;
  if (line.size() > kMaxStatementChars || line.size() > kMaxScriptLine) {
    st.why = "a line longer than " + std::to_string(std::min(kMaxStatementChars, kMaxScriptLine)) + " characters";
    return st;
  }
  try {
    return parse_tokens(tokenize(line));
  } catch (const SyntaxError& e) {
    st = Statement{};
    st.why = "cannot be read (" + e.why + ")";
    return st;
  }
}

Function parse_function(const std::vector<std::string>& lines) {
  Function f;
  // Logical lines: a line whose brackets are still open continues on the next.
  std::vector<std::string> logical;
  std::vector<size_t> indents;
  std::string current;
  for (const std::string& raw : lines) {
    const size_t indent = std::min(raw.find_first_not_of(" \t\r"), raw.size());
    if (raw.size() > kMaxScriptLine) {
      if (!current.empty()) logical.push_back(std::move(current));  // its indent is already in
      logical.push_back(raw);  // parse_statement refuses it, naming its length
      indents.push_back(indent);
      current.clear();
      continue;
    }
    const std::string line = trim(raw);
    if (line.empty() && current.empty()) continue;
    if (current.empty()) indents.push_back(indent);
    current += (current.empty() ? "" : " ") + line;
    if (current.size() > kMaxStatementChars || open_brackets(current) <= 0) {
      logical.push_back(std::move(current));
      current.clear();
    }
  }
  if (!current.empty()) logical.push_back(std::move(current));
  if (logical.empty()) throw Error("no forward code");

  // def forward(self: T, x: Tensor, hx: Optional[...]=None) -> T:
  const std::string& def = logical[0];
  if (def.size() > kMaxStatementChars) throw Error("the signature of forward is longer than " +
                                                   std::to_string(kMaxStatementChars) + " characters");
  try {
    Parser p(tokenize(def));
    if (p.name() != "def") throw SyntaxError{"not a def"};
    (void)p.name();
    p.expect("(");
    while (!p.eat(")")) {
      Parameter param;
      param.name = p.name();
      if (p.eat(":")) (void)p.expr();
      if (p.eat("=")) {
        param.has_default = true;
        param.default_value = p.expr();
      }
      f.parameters.push_back(std::move(param));
      if (!p.eat(",")) {
        p.expect(")");
        break;
      }
    }
    if (p.eat("->")) (void)p.expr();
    p.expect(":");
    if (!p.at_end()) throw SyntaxError{"text after the signature's ':'"};
  } catch (const SyntaxError& e) {
    throw Error("the signature of forward cannot be read (" + e.why + ")");
  }
  f.body.assign(logical.begin() + 1, logical.end());
  f.indents.assign(indents.begin() + 1, indents.end());
  return f;
}

namespace {

// Builds the blocks of parse_body: block() reads the lines from the current
// one on whose indentation is `indent`, up to the first line indented less.
// The first line that breaks the structure ends the reading (broken_).
class BlockReader {
 public:
  explicit BlockReader(const Function& f) : f_(f) {}

  std::vector<Line> body() {
    std::vector<Line> out = f_.body.empty() ? std::vector<Line>{} : block(f_.indents[0], 0);
    if (!broken_ && i_ < f_.body.size()) fail(f_.body[i_], "an indentation that matches no block");
    if (broken_) return {std::move(broken_line_)};
    return out;
  }

 private:
  std::vector<Line> block(size_t indent, size_t depth) {
    std::vector<Line> out;
    while (!broken_ && i_ < f_.body.size() && f_.indents[i_] >= indent) {
      if (f_.indents[i_] > indent) {
        fail(f_.body[i_], "an indented line outside a block");
        break;
      }
      Line line = next();
      const Statement::Kind kind = line.statement.kind;
      if (kind == Statement::kElif || kind == Statement::kElse) {
        fail(line.text, "an else without its if");
        break;
      }
      if (kind == Statement::kIf) branches(line, indent, depth);
      if (kind == Statement::kOther && i_ < f_.body.size() && f_.indents[i_] > indent) {
        fail(line.text, line.statement.why);  // a loop, a with block, a line that cannot be read, with its block
        break;
      }
      out.push_back(std::move(line));
    }
    return out;
  }

  Line next() {
    Line line;
    line.text = f_.body[i_++];
    line.statement = parse_statement(line.text);
    return line;
  }

  void fail(const std::string& text, const std::string& why) {
    broken_ = true;
    broken_line_.text = text;
    broken_line_.statement = Statement{};
    broken_line_.statement.why = why;
  }

  // The block of a branch opened at `indent`.
  std::vector<Line> opened(const std::string& text, size_t indent, size_t depth) {
    if (i_ >= f_.body.size() || f_.indents[i_] <= indent) {
      fail(text, "a branch without its block");
      return {};
    }
    return block(f_.indents[i_], depth);
  }

  // The branches of the `if` (or `elif`) `line` at `indent`.
  void branches(Line& line, size_t indent, size_t depth) {
    if (depth + 1 >= kMaxNesting) {
      fail(line.text, "branches nested deeper than " + std::to_string(kMaxNesting) + " levels");
      return;
    }
    line.statement.kind = Statement::kIf;
    line.then = opened(line.text, indent, depth + 1);
    if (broken_ || i_ >= f_.body.size()) return;
    if (f_.indents[i_] > indent) {
      fail(f_.body[i_], "an indentation that matches no block");
      return;
    }
    if (f_.indents[i_] < indent) return;
    const Statement::Kind kind = parse_statement(f_.body[i_]).kind;
    if (kind == Statement::kElif) {
      Line elif = next();
      branches(elif, indent, depth + 1);
      line.orelse.push_back(std::move(elif));
    } else if (kind == Statement::kElse) {
      const Line els = next();
      line.orelse = opened(els.text, indent, depth + 1);
    }
  }

  const Function& f_;
  size_t i_ = 0;
  bool broken_ = false;
  Line broken_line_;
};

}  // namespace

std::vector<Line> parse_body(const Function& f) { return BlockReader(f).body(); }

}  // namespace ferry::conv::script
