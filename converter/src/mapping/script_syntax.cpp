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
      static const char* const kThree[] = {"**=", "//=", ">>=", "<<=", "..."};
      static const char* const kTwo[] = {"->", "==", "!=", "<=", ">=", "**", "//", "<<", ">>", "+=", "-=", "*=",
                                         "/=", "%=", "@=", "&=", "|=", "^=", ":="};
      for (const char* three : kThree)
        if (s.compare(i, 3, three) == 0) t.text = three;
      for (const char* two : kTwo)
        if (t.text.empty() && s.compare(i, 2, two) == 0) t.text = two;
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

  bool at_name(const char* word) const { return peek().kind == Token::kName && peek().text == word; }
  bool eat_name(const char* word) {
    if (!at_name(word)) return false;
    ++i_;
    return true;
  }

  // expr (',' expr)* [',']: a tuple where there is a comma.
  Expr exprlist() {
    Expr first = expr();
    if (!at(",")) return first;
    Expr t;
    t.kind = Expr::kTuple;
    t.items.push_back(std::move(first));
    while (eat(",")) {
      if (at_end() || at("=") || at(")") || at(":")) break;
      t.items.push_back(expr());
    }
    return t;
  }

  // The names a `for` binds: a name, or names separated by commas.
  Expr target_list() {
    Expr first = postfix();
    if (!at(",")) return first;
    Expr t;
    t.kind = Expr::kTuple;
    t.items.push_back(std::move(first));
    while (eat(",") && !at_name("in")) t.items.push_back(postfix());
    return t;
  }

  // A conditional expression: a if c else b.
  Expr expr() {
    Depth d(*this);
    if (at_name("lambda")) throw SyntaxError{"a lambda"};
    Expr e = disjunction();
    if (!at_name("if")) return e;
    // `x if c else y` inside an expression; a statement's `if` never reaches here.
    ++i_;
    Expr c = disjunction();
    if (!eat_name("else")) throw SyntaxError{"a conditional expression without its else"};
    Expr other = expr();
    Expr r;
    r.kind = Expr::kIfExp;
    r.items.push_back(std::move(c));
    r.items.push_back(std::move(e));
    r.items.push_back(std::move(other));
    return r;
  }

  static Expr call_of(const char* fn, std::vector<Expr> args) {
    Expr callee;
    callee.text = fn;
    Expr c;
    c.kind = Expr::kCall;
    c.items.push_back(std::move(callee));
    for (Expr& a : args) {
      c.items.push_back(std::move(a));
      c.names.emplace_back();
    }
    return c;
  }

 private:
  // Operators in a row (a + b + c ...) and postfix chains (x.a.b(c)[d] ...)
  // nest the tree without nesting the parser: bounded apart, so that a
  // reader walking the tree recursively stays shallow.
  Expr linked(size_t n, Expr e) const {
    if (n >= kMaxNesting * 4)
      throw SyntaxError{"more than " + std::to_string(kMaxNesting * 4) + " operators, calls or attributes in a row"};
    return e;
  }

  Expr disjunction() {
    Depth d(*this);
    Expr e = conjunction();
    for (size_t n = 0; eat_name("or"); ++n) e = call_of("__or__", {std::move(e), linked(n, conjunction())});
    return e;
  }
  Expr conjunction() {
    Depth d(*this);
    Expr e = inversion();
    for (size_t n = 0; eat_name("and"); ++n) e = call_of("__and__", {std::move(e), linked(n, inversion())});
    return e;
  }
  Expr inversion() {
    Depth d(*this);
    if (eat_name("not")) return call_of("torch.__not__", {inversion()});
    return comparison();
  }
  // The comparison operator at the cursor, consumed; nullptr if none.
  const char* comparison_op() {
    static const struct {
      const char* token;
      const char* fn;
    } kOps[] = {{"==", "torch.eq"}, {"!=", "torch.ne"}, {"<", "torch.lt"}, {">", "torch.gt"}, {"<=", "torch.le"}, {">=", "torch.ge"}};
    for (const auto& o : kOps)
      if (eat(o.token)) return o.fn;
    if (eat_name("is")) return eat_name("not") ? "torch.__isnot__" : "torch.__is__";
    if (eat_name("in")) return "__contains__";
    if (at_name("not") && peek(1).kind == Token::kName && peek(1).text == "in") {
      skip(2);
      return "__not_contains__";
    }
    return nullptr;
  }
  Expr comparison() {
    Depth d(*this);
    Expr left = binary(0);
    const char* op = comparison_op();
    if (!op) return left;
    Expr right = binary(0);
    Expr result = call_of(op, {left, right});
    for (size_t n = 0; (op = comparison_op()); ++n) {  // a < b < c: (a < b) and (b < c)
      Expr next = linked(n, binary(0));
      result = call_of("__and__", {std::move(result), call_of(op, {right, next})});
      right = std::move(next);
    }
    return result;
  }
  // Binary operators by precedence, lowest first: | ^ & << >> + - * / // % @.
  Expr binary(int level) {
    static const struct {
      const char* token;
      const char* fn;
      int level;
    } kOps[] = {{"|", "torch.__or_", 0}, {"^", "torch.__xor_", 1}, {"&", "torch.__and_", 2},
                {"<<", "torch.__lshift__", 3}, {">>", "torch.__rshift__", 3},
                {"+", "torch.add", 4}, {"-", "torch.sub", 4},
                {"*", "torch.mul", 5}, {"/", "torch.div", 5}, {"//", "torch.floordiv", 5},
                {"%", "torch.remainder", 5}, {"@", "torch.matmul", 5}};
    constexpr int kLevels = 6;
    if (level >= kLevels) return unary();
    Depth d(*this);
    Expr e = binary(level + 1);
    for (size_t n = 0;; ++n) {
      const char* fn = nullptr;
      for (const auto& o : kOps)
        if (o.level == level && at(o.token)) fn = o.fn;
      if (!fn) return e;
      ++i_;
      e = call_of(fn, {std::move(e), linked(n, binary(level + 1))});
    }
  }
  Expr unary() {
    Depth d(*this);
    if (at("-") && peek(1).kind == Token::kNumber && !(peek(2).kind == Token::kPunct && peek(2).text == "**")) {
      ++i_;
      Expr e;
      e.kind = Expr::kNumber;
      e.text = "-" + t_[i_++].text;
      return postfix_of(std::move(e));
    }
    if (eat("-")) return call_of("torch.neg", {unary()});
    if (eat("+")) return unary();
    if (eat("~")) return call_of("torch.bitwise_not", {unary()});
    return power();
  }
  Expr power() {
    Depth d(*this);
    Expr e = postfix();
    if (eat("**")) return call_of("torch.pow", {std::move(e), unary()});
    return e;
  }

  Expr postfix() { return postfix_of(primary()); }

  // Calls, subscripts and attributes after `e`.
  Expr postfix_of(Expr e) {
    for (size_t n = 0;; ++n) {
      (void)linked(n, Expr{});
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
          Expr arg;
          if (keyword.empty() && (at("*") || at("**"))) {
            arg.kind = Expr::kStarred;
            arg.text = t_[i_++].text;
            arg.items.push_back(expr());
          } else {
            arg = expr();
          }
          if (keyword.empty() && at_name("for")) arg = comprehension(std::move(arg), "(");
          call.items.push_back(std::move(arg));
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

  // [elt for target in iterable]: one `for`, no `if`.
  Expr comprehension(Expr element, const char* bracket) {
    expect_name("for");
    Expr target = target_list();
    expect_name("in");
    Expr iterable = disjunction();
    if (at_name("for") || at_name("if")) throw SyntaxError{"a comprehension with more than one for, or an if"};
    Expr c;
    c.kind = Expr::kComprehension;
    c.text = bracket;
    c.items.push_back(std::move(element));
    c.items.push_back(std::move(target));
    c.items.push_back(std::move(iterable));
    return c;
  }

  void expect_name(const char* word) {
    if (!eat_name(word)) throw SyntaxError{"'" + std::string(word) + "' expected where '" + shown(peek()) + "' is"};
  }

  // Counts the parser's recursion: every nested expression goes through expr().
  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting * 16)
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
      static const char* const kKeywords[] = {"if", "else", "for", "in", "is", "not", "and", "or", "lambda",
                                              "return", "def", "class", "yield", "await", "import", "from"};
      for (const char* k : kKeywords)
        if (t.text == k) throw SyntaxError{"'" + t.text + "' where an expression should start"};
      e.kind = Expr::kName;
      e.text = t.text;
      ++i_;
      return e;
    }
    if (t.kind == Token::kNumber || t.kind == Token::kString) {
      e.kind = t.kind == Token::kNumber ? Expr::kNumber : Expr::kString;
      e.text = t.text;
      ++i_;
      // "a" "b": adjacent strings are one.
      while (e.kind == Expr::kString && peek().kind == Token::kString) e.text += t_[i_++].text;
      return e;
    }
    if (eat("(")) {
      if (eat(")")) {
        e.kind = Expr::kTuple;
        return e;
      }
      Expr first = starred_or_expr();
      if (at_name("for")) {
        Expr c = comprehension(std::move(first), "(");
        expect(")");
        return c;
      }
      if (eat(")")) return first;  // parentheses around one expression
      e.kind = Expr::kTuple;
      e.items.push_back(std::move(first));
      while (eat(",")) {
        if (at(")")) break;
        e.items.push_back(starred_or_expr());
      }
      expect(")");
      return e;
    }
    if (eat("[")) {
      e.kind = Expr::kList;
      while (!eat("]")) {
        e.items.push_back(starred_or_expr());
        if (e.items.size() == 1 && at_name("for")) {
          Expr c = comprehension(std::move(e.items[0]), "[");
          expect("]");
          return c;
        }
        if (!eat(",")) {
          expect("]");
          break;
        }
      }
      return e;
    }
    if (eat("{")) {
      e.kind = Expr::kDict;
      while (!eat("}")) {
        Expr key = expr();
        if (!eat(":")) throw SyntaxError{"a set (ferry reads dicts only)"};
        e.items.push_back(std::move(key));
        e.items.push_back(expr());
        if (at_name("for")) throw SyntaxError{"a dict comprehension"};
        if (!eat(",")) {
          expect("}");
          break;
        }
      }
      return e;
    }
    throw SyntaxError{"'" + shown(t) + "' where an expression should start"};
  }

  Expr starred_or_expr() {
    if (at("*")) {
      ++i_;
      Expr s;
      s.kind = Expr::kStarred;
      s.text = "*";
      s.items.push_back(postfix());
      return s;
    }
    return expr();
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
      {"while", "a loop (while)"},   {"with", "a with block"},
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

// The tree's depth, walked without recursion: readers walk it recursively.
size_t depth_of(const Expr& root) {
  size_t deepest = 0;
  std::vector<std::pair<const Expr*, size_t>> stack{{&root, 1}};
  while (!stack.empty()) {
    const auto [e, d] = stack.back();
    stack.pop_back();
    deepest = std::max(deepest, d);
    for (const Expr& item : e->items) stack.emplace_back(&item, d + 1);
  }
  return deepest;
}

constexpr size_t kMaxTreeDepth = 512;

// The names of a target that is names alone, nested tuples flattened only
// one level (a, b = ...); empty for anything else.
std::vector<std::string> flat_names(const Expr& target) {
  if (target.kind == Expr::kName) return {target.text};
  if (target.kind != Expr::kTuple && target.kind != Expr::kList) return {};
  std::vector<std::string> names;
  for (const Expr& item : target.items) {
    if (item.kind != Expr::kName) return {};
    names.push_back(item.text);
  }
  return names;
}

// Where a statement's top-level `=` (or augmented `+=`, ...) or annotation
// `:` is: the index of the token, or 0 when there is none.
size_t top_level(const std::vector<Token>& tokens, bool (*pick)(const std::string&)) {
  int depth = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    if (t.kind != Token::kPunct) continue;
    if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
    else if (t.text == ")" || t.text == "]" || t.text == "}") --depth;
    else if (depth == 0 && pick(t.text)) return i;
  }
  return 0;
}

const char* augmented_fn(const std::string& op) {
  static const struct {
    const char* op;
    const char* fn;
  } kOps[] = {{"+=", "torch.add_"}, {"-=", "torch.sub_"}, {"*=", "torch.mul_"}, {"/=", "torch.div_"},
              {"//=", "torch.floordiv_"}, {"%=", "torch.remainder_"}, {"**=", "torch.pow_"}, {"@=", "torch.matmul_"},
              {"&=", "torch.__iand__"}, {"|=", "torch.__ior__"}, {"^=", "torch.__ixor__"},
              {">>=", "torch.__irshift__"}, {"<<=", "torch.__ilshift__"}};
  for (const auto& o : kOps)
    if (op == o.op) return o.fn;
  return nullptr;
}

Statement parse_tokens(std::vector<Token> tokens) {
  Statement st;
  if (tokens.size() > 1 && tokens[0].kind == Token::kName) {
    if (tokens[0].text == "assert") {  // a check that passes for the input ferry gives changes nothing
      st.kind = Statement::kPass;
      return st;
    }
    if (const char* why = compound_statement(tokens[0].text)) {
      st.why = std::string(why) + ": the forward is not straight-line code";
      return st;
    }
  }
  const size_t assign = top_level(tokens, [](const std::string& t) { return t == "="; });
  const size_t augmented = top_level(tokens, [](const std::string& t) { return augmented_fn(t) != nullptr; });
  const size_t annotated = top_level(tokens, [](const std::string& t) { return t == ":"; });
  const std::string first = tokens[0].kind == Token::kName ? tokens[0].text : std::string();
  const bool header = first == "if" || first == "elif" || first == "else" || first == "pass" || first == "return";
  Parser p(std::move(tokens));
  if (first == "for") {
    p.name();
    st.kind = Statement::kFor;
    st.target = p.target_list();
    if (!p.eat_name("in")) throw SyntaxError{"a for without its in"};
    st.value = p.exprlist();
    p.expect(":");
  } else if (header) {
    p.name();
    if (first == "return") {
      st.kind = Statement::kReturn;
      if (p.at_end()) st.value.text = "None";
      else st.value = p.exprlist();
    } else {
      st.kind = first == "if" ? Statement::kIf : first == "elif" ? Statement::kElif
              : first == "else" ? Statement::kElse : Statement::kPass;
      if (st.kind == Statement::kIf || st.kind == Statement::kElif) st.value = p.expr();
      if (st.kind != Statement::kPass) p.expect(":");
    }
  } else if (annotated && (!assign || annotated < assign) && !augmented) {
    // x: T = v, self.x: T = v, or a bare annotation x: T (nothing to do).
    st.target = p.exprlist();
    p.expect(":");
    (void)p.expr();  // the type, not needed
    if (p.eat("=")) {
      st.kind = Statement::kAssign;
      st.value = p.exprlist();
    } else {
      st.kind = Statement::kPass;
    }
  } else if (augmented) {
    st.target = p.exprlist();
    const char* fn = p.peek().kind == Token::kPunct ? augmented_fn(p.peek().text) : nullptr;
    if (!fn) throw SyntaxError{"'" + Parser::shown(p.peek()) + "' where an augmented assignment's operator should be"};
    p.skip(1);
    st.kind = Statement::kAssign;
    st.value = Parser::call_of(fn, {st.target, p.exprlist()});
  } else if (assign) {
    st.target = p.exprlist();
    p.expect("=");
    st.value = p.exprlist();
    if (p.at("=")) throw SyntaxError{"a chained assignment (a = b = ...)"};
    st.kind = Statement::kAssign;
  } else {
    st.kind = Statement::kExpression;
    st.value = p.exprlist();
  }
  if (!p.at_end()) throw SyntaxError{"'" + Parser::shown(p.peek()) + "' after a complete statement"};
  if (depth_of(st.value) > kMaxTreeDepth || depth_of(st.target) > kMaxTreeDepth)
    throw SyntaxError{"an expression nested more than " + std::to_string(kMaxTreeDepth) + " deep"};
  if (st.kind == Statement::kAssign) st.targets = flat_names(st.target);
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
    } else if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if (c == ')' || c == ']' || c == '}') {
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

Function parse_function(const std::vector<std::string>& lines, const std::vector<size_t>& numbers) {
  Function f;
  // Logical lines: a line whose brackets are still open continues on the next.
  std::vector<std::string> logical;
  std::vector<size_t> indents, logical_numbers;
  std::string current;
  for (size_t n = 0; n < lines.size(); ++n) {
    const std::string& raw = lines[n];
    const size_t number = n < numbers.size() ? numbers[n] : 0;
    const size_t indent = std::min(raw.find_first_not_of(" \t\r"), raw.size());
    if (raw.size() > kMaxScriptLine) {
      if (!current.empty()) logical.push_back(std::move(current));  // its indent is already in
      logical.push_back(raw);  // parse_statement refuses it, naming its length
      indents.push_back(indent);
      logical_numbers.push_back(number);
      current.clear();
      continue;
    }
    const std::string line = trim(raw);
    if (line.empty() && current.empty()) continue;
    if (current.empty()) {
      indents.push_back(indent);
      logical_numbers.push_back(number);
    }
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
      if (p.eat("/") || (p.at("*") && (p.peek(1).text == "," || p.peek(1).text == ")"))) {
        if (p.at("*")) p.skip(1);  // a bare * (keyword-only from here) or / (positional-only before)
        if (!p.eat(",")) {
          p.expect(")");
          break;
        }
        continue;
      }
      if (p.at("*") || p.at("**")) {
        param.star = p.peek().text;
        p.skip(1);
      }
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
  f.numbers.assign(logical_numbers.begin() + 1, logical_numbers.end());
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
    if (!broken_ && i_ < f_.body.size()) fail(f_.body[i_], "an indentation that matches no block", number_at(i_));
    if (broken_) return {std::move(broken_line_)};
    return out;
  }

 private:
  std::vector<Line> block(size_t indent, size_t depth) {
    std::vector<Line> out;
    while (!broken_ && i_ < f_.body.size() && f_.indents[i_] >= indent) {
      if (f_.indents[i_] > indent) {
        fail(f_.body[i_], "an indented line outside a block", number_at(i_));
        break;
      }
      Line line = next();
      const Statement::Kind kind = line.statement.kind;
      if (kind == Statement::kElif || kind == Statement::kElse) {
        fail(line.text, "an else without its if", line.number);
        break;
      }
      if (kind == Statement::kIf) branches(line, indent, depth);
      if (kind == Statement::kFor) {
        if (depth + 1 >= kMaxNesting) {
          fail(line.text, "blocks nested deeper than " + std::to_string(kMaxNesting) + " levels", line.number);
          break;
        }
        line.then = opened(line.text, line.number, indent, depth + 1);
      }
      if (kind == Statement::kOther && i_ < f_.body.size() && f_.indents[i_] > indent) {
        fail(line.text, line.statement.why, line.number);  // a loop, a with block, a line that cannot be read, with its block
        break;
      }
      out.push_back(std::move(line));
    }
    return out;
  }

  size_t number_at(size_t i) const { return i < f_.numbers.size() ? f_.numbers[i] : 0; }

  Line next() {
    Line line;
    line.number = i_ < f_.numbers.size() ? f_.numbers[i_] : 0;
    line.text = f_.body[i_++];
    line.statement = parse_statement(line.text);
    return line;
  }

  void fail(const std::string& text, const std::string& why, size_t number) {
    broken_ = true;
    broken_line_.text = text;
    broken_line_.number = number;
    broken_line_.statement = Statement{};
    broken_line_.statement.why = why;
  }

  // The block of a branch opened at `indent`.
  std::vector<Line> opened(const std::string& text, size_t number, size_t indent, size_t depth) {
    if (i_ >= f_.body.size() || f_.indents[i_] <= indent) {
      fail(text, "a branch without its block", number);
      return {};
    }
    return block(f_.indents[i_], depth);
  }

  // The branches of the `if` (or `elif`) `line` at `indent`.
  void branches(Line& line, size_t indent, size_t depth) {
    if (depth + 1 >= kMaxNesting) {
      fail(line.text, "branches nested deeper than " + std::to_string(kMaxNesting) + " levels", line.number);
      return;
    }
    line.statement.kind = Statement::kIf;
    line.then = opened(line.text, line.number, indent, depth + 1);
    if (broken_ || i_ >= f_.body.size()) return;
    if (f_.indents[i_] > indent) {
      fail(f_.body[i_], "an indentation that matches no block", number_at(i_));
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
      line.orelse = opened(els.text, els.number, indent, depth + 1);
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
