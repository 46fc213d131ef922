#include "mapping/python_source.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "error.h"
#include "io/bounded_json.h"
#include "io/mapped_file.h"
#include "text.h"

namespace ferry::conv::python {
namespace {

struct Token {
  enum Kind { kName, kNumber, kString, kOp };
  Kind kind = kName;
  std::string text;  // kString: the value, escapes resolved
};

// One logical line: its tokens, its indentation (columns, tabs to the next
// multiple of 8) and the number of its first line. `why` says why it cannot
// be read (too long, too deep, a bad token); such a line is refused only
// where it is needed.
struct Logical {
  size_t indent = 0;
  size_t number = 0;
  std::vector<Token> tokens;
  std::string why;
};

bool name_start(unsigned char c) { return std::isalpha(c) || c == '_' || c >= 0x80; }
bool name_char(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

class Tokenizer {
 public:
  Tokenizer(const std::string& text, const SourceFile& file) : s_(text), file_(file) {}

  std::vector<Logical> run() {
    while (i_ < s_.size()) {
      if (at_line_start_) {
        start_line();
        continue;
      }
      const char c = s_[i_];
      if (c == '\n') {
        ++i_;
        ++line_;
        if (depth_ == 0) end_line();
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\r' || c == '\f') {
        ++i_;
        continue;
      }
      if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
        continue;
      }
      if (c == '\\') {
        size_t j = i_ + 1;
        if (j < s_.size() && s_[j] == '\r') ++j;
        if (j < s_.size() && s_[j] == '\n') {
          i_ = j + 1;
          ++line_;
          continue;
        }
        bad("a backslash outside a string that does not end its line");
        ++i_;
        continue;
      }
      if (string_start()) continue;
      if (name_start(static_cast<unsigned char>(c))) {
        const size_t b = i_;
        while (i_ < s_.size() && name_char(static_cast<unsigned char>(s_[i_]))) ++i_;
        push(Token::kName, s_.substr(b, i_ - b));
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c)) ||
          (c == '.' && i_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_ + 1])))) {
        number();
        continue;
      }
      op();
    }
    if (depth_ > 0)
      throw Error(file_.where(bracket_line_) + ": a bracket opened here is never closed (the rest of the file is "
                  "inside it)");
    end_line();
    return std::move(lines_);
  }

 private:
  void start_line() {
    // Indentation of a line that is not blank or a comment alone.
    size_t col = 0, j = i_;
    for (; j < s_.size(); ++j) {
      if (s_[j] == ' ') ++col;
      else if (s_[j] == '\t') col = (col / 8 + 1) * 8;
      else if (s_[j] == '\f') col = 0;
      else break;
    }
    if (j >= s_.size()) {
      i_ = j;
      return;
    }
    if (s_[j] == '\n' || s_[j] == '\r' || s_[j] == '#') {
      while (j < s_.size() && s_[j] != '\n') ++j;
      if (j < s_.size()) ++line_;
      i_ = j + 1;
      return;
    }
    at_line_start_ = false;
    current_ = Logical{};
    current_.indent = col;
    current_.number = line_;
    open_ = true;
    i_ = j;
  }

  void end_line() {
    if (open_ && (!current_.tokens.empty() || !current_.why.empty())) lines_.push_back(std::move(current_));
    current_ = Logical{};
    open_ = false;
    at_line_start_ = true;
  }

  void bad(const std::string& why) {
    if (current_.why.empty()) current_.why = why + " (line " + std::to_string(line_) + ")";
  }

  void push(Token::Kind kind, std::string text) {
    if (!open_) {  // `a; b`: a second statement on the line
      current_ = Logical{};
      current_.indent = semicolon_indent_;
      current_.number = line_;
      open_ = true;
    }
    if (current_.tokens.size() >= kMaxLineTokens) {
      bad("a statement of more than " + std::to_string(kMaxLineTokens) + " tokens");
      return;
    }
    current_.tokens.push_back(Token{kind, std::move(text)});
  }

  // A string literal at i_ (with its prefix): true when one was read.
  bool string_start() {
    size_t j = i_;
    bool raw = false;
    while (j < s_.size() && j - i_ < 2 && std::strchr("rRbBuUfF", s_[j]) && s_[j] != '\0') {
      if (s_[j] == 'r' || s_[j] == 'R') raw = true;
      ++j;
    }
    if (j >= s_.size() || (s_[j] != '"' && s_[j] != '\'')) return false;
    const char q = s_[j];
    const bool triple = j + 2 < s_.size() && s_[j + 1] == q && s_[j + 2] == q;
    const size_t start_line = line_;
    i_ = j + (triple ? 3 : 1);
    std::string value;
    for (;;) {
      if (i_ >= s_.size()) {
        if (triple)
          throw Error(file_.where(start_line) + ": a string opened with " + std::string(3, q) +
                      " is never closed (the rest of the file is inside it)");
        bad("a string without its closing quote");
        break;
      }
      const char c = s_[i_];
      if (c == '\n') {
        if (!triple) {
          bad("a string without its closing quote");
          break;
        }
        ++line_;
        value += c;
        ++i_;
        continue;
      }
      if (c == q && (!triple || (i_ + 2 < s_.size() && s_[i_ + 1] == q && s_[i_ + 2] == q))) {
        i_ += triple ? 3 : 1;
        break;
      }
      if (c == '\\' && i_ + 1 < s_.size()) {
        const char d = s_[i_ + 1];
        i_ += 2;
        if (d == '\n') {
          ++line_;
          if (raw) value += "\\\n";
          continue;
        }
        if (raw) {
          value += '\\';
          value += d;
          continue;
        }
        switch (d) {
          case 'n': value += '\n'; break;
          case 't': value += '\t'; break;
          case 'r': value += '\r'; break;
          case '0': value += '\0'; break;
          case '\\': case '\'': case '"': value += d; break;
          default: value += '\\'; value += d; break;
        }
        continue;
      }
      value += c;
      ++i_;
      if (value.size() > script::kMaxStatementChars) {
        // Keep scanning to the closing quote, holding no more.
        value.resize(script::kMaxStatementChars);
        bad("a string longer than " + std::to_string(script::kMaxStatementChars) + " characters");
      }
    }
    push(Token::kString, std::move(value));
    return true;
  }

  // 1_000 -> 1000, 0x10 -> 16, .5 -> 0.5, 1e-3, 2j (refused).
  void number() {
    const size_t b = i_;
    while (i_ < s_.size() && (name_char(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                              ((s_[i_] == '+' || s_[i_] == '-') && (s_[i_ - 1] == 'e' || s_[i_ - 1] == 'E') &&
                               !(s_[b] == '0' && b + 1 < s_.size() && std::strchr("xXoObB", s_[b + 1])))))
      ++i_;
    std::string t;
    for (size_t k = b; k < i_; ++k)
      if (s_[k] != '_') t += s_[k];
    if (t[0] == '.') t = "0" + t;
    if (t.size() > 1 && t[0] == '0' && std::strchr("xXoObB", t[1])) {
      const int base = (t[1] == 'x' || t[1] == 'X') ? 16 : (t[1] == 'o' || t[1] == 'O') ? 8 : 2;
      errno = 0;
      char* end = nullptr;
      const unsigned long long v = std::strtoull(t.c_str() + 2, &end, base);
      if (*end != '\0' || errno != 0 || t.size() == 2) {
        bad("a number that cannot be read ('" + t.substr(0, 40) + "')");
        push(Token::kName, "None");
        return;
      }
      push(Token::kNumber, std::to_string(v));
      return;
    }
    if (t.back() == 'j' || t.back() == 'J') {
      bad("a complex number");
      push(Token::kName, "None");
      return;
    }
    for (char c : t)
      if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-') {
        bad("a number that cannot be read ('" + t.substr(0, 40) + "')");
        push(Token::kName, "None");
        return;
      }
    push(Token::kNumber, t);
  }

  void op() {
    static const char* const kThree[] = {"**=", "//=", ">>=", "<<=", "..."};
    static const char* const kTwo[] = {"->", "==", "!=", "<=", ">=", "**", "//", "<<", ">>", "+=", "-=", "*=",
                                       "/=", "%=", "@=", "&=", "|=", "^=", ":="};
    std::string t;
    for (const char* three : kThree)
      if (s_.compare(i_, 3, three) == 0) t = three;
    for (const char* two : kTwo)
      if (t.empty() && s_.compare(i_, 2, two) == 0) t = two;
    const char c = s_[i_];
    if (t.empty()) {
      if (!std::strchr("()[]{}.,:;=+-*/%@&|^~<>!", c) || c == '\0') {
        bad("a character Python does not read here ('" + escaped(std::string(1, c)) + "')");
        ++i_;
        return;
      }
      t = std::string(1, c);
    }
    i_ += t.size();
    if (t == ";" && depth_ == 0) {
      semicolon_indent_ = current_.indent;
      if (open_ && !current_.tokens.empty()) lines_.push_back(std::move(current_));
      current_ = Logical{};
      open_ = false;
      return;
    }
    if (t == "(" || t == "[" || t == "{") {
      if (depth_ == 0) bracket_line_ = line_;
      if (++depth_ > script::kMaxNesting) bad("brackets nested deeper than " + std::to_string(script::kMaxNesting));
    } else if ((t == ")" || t == "]" || t == "}") && depth_ > 0) {
      --depth_;
    }
    push(Token::kOp, std::move(t));
  }

  const std::string& s_;
  const SourceFile& file_;
  size_t i_ = 0, line_ = 1, depth_ = 0, bracket_line_ = 0, semicolon_indent_ = 0;
  bool at_line_start_ = true, open_ = false;
  Logical current_;
  std::vector<Logical> lines_;
};

// The tokens spelled again as one line for script::parse_statement: a
// string in double quotes with its backslashes, quotes and line ends escaped.
std::string spelled(const std::vector<Token>& tokens, size_t from = 0, size_t to = SIZE_MAX) {
  std::string out;
  to = std::min(to, tokens.size());
  auto tight_after = [](const Token& t) {
    return t.kind == Token::kOp && (t.text == "(" || t.text == "[" || t.text == "{" || t.text == ".");
  };
  auto tight_before = [](const Token& t) {
    return t.kind == Token::kOp && (t.text == ")" || t.text == "]" || t.text == "}" || t.text == "." ||
                                    t.text == "," || t.text == ":");
  };
  int depth = 0;
  bool unary = false;  // the previous token was a unary minus, plus or ~
  for (size_t k = from; k < to; ++k) {
    const Token& t = tokens[k];
    if (k > from) {
      const Token& prev = tokens[k - 1];
      const bool call = t.kind == Token::kOp && (t.text == "(" || t.text == "[") &&
                        (prev.kind != Token::kOp || prev.text == ")" || prev.text == "]");
      const bool keyword = depth > 0 && ((t.kind == Token::kOp && t.text == "=") || (prev.kind == Token::kOp && prev.text == "="));
      if (!tight_after(prev) && !tight_before(t) && !call && !unary && !keyword) out += ' ';
    }
    if (t.kind == Token::kOp && (t.text == "(" || t.text == "[" || t.text == "{")) ++depth;
    if (t.kind == Token::kOp && (t.text == ")" || t.text == "]" || t.text == "}")) --depth;
    const bool operand_before = k > from && (tokens[k - 1].kind != Token::kOp || tokens[k - 1].text == ")" ||
                                             tokens[k - 1].text == "]" || tokens[k - 1].text == "}");
    const bool keyword_before = k > from && tokens[k - 1].kind == Token::kName &&
                                (tokens[k - 1].text == "return" || tokens[k - 1].text == "in" ||
                                 tokens[k - 1].text == "and" || tokens[k - 1].text == "or" || tokens[k - 1].text == "not" ||
                                 tokens[k - 1].text == "if" || tokens[k - 1].text == "else");
    unary = t.kind == Token::kOp && (t.text == "-" || t.text == "+" || t.text == "~") && (!operand_before || keyword_before);
    if (t.kind == Token::kString) {
      out += '"';
      for (char c : t.text) {
        if (c == '\\' || c == '"') out += '\\', out += c;
        else if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
        else out += c;
      }
      out += '"';
    } else {
      out += t.text;
    }
  }
  return out;
}

bool is_op(const Token& t, const char* text) { return t.kind == Token::kOp && t.text == text; }
bool is_name(const Token& t, const char* text) { return t.kind == Token::kName && t.text == text; }

// `if c: x` -> `if c:` and `x` one level deeper: the index of the header's
// colon where code follows it on the same line, else 0.
size_t inline_block(const Logical& l) {
  static const char* const kHeaders[] = {"if", "elif", "else", "for", "while", "with", "try", "except",
                                         "finally", "def", "class", "async"};
  if (l.tokens.empty() || l.tokens[0].kind != Token::kName) return 0;
  bool header = false;
  for (const char* h : kHeaders) header = header || l.tokens[0].text == h;
  if (!header) return 0;
  int depth = 0;
  for (size_t k = 1; k < l.tokens.size(); ++k) {
    const Token& t = l.tokens[k];
    if (is_name(t, "lambda") && depth == 0) return 0;
    if (t.kind != Token::kOp) continue;
    if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
    else if (t.text == ")" || t.text == "]" || t.text == "}") --depth;
    else if (t.text == ":" && depth == 0) return k + 1 < l.tokens.size() ? k : 0;
  }
  return 0;
}

std::vector<Logical> split_inline_blocks(std::vector<Logical> lines) {
  std::vector<Logical> out;
  for (Logical& l : lines) {
    const size_t colon = l.why.empty() ? inline_block(l) : 0;
    if (!colon) {
      out.push_back(std::move(l));
      continue;
    }
    Logical head, body;
    head.indent = l.indent;
    head.number = body.number = l.number;
    body.indent = l.indent + 1;
    head.tokens.assign(l.tokens.begin(), l.tokens.begin() + static_cast<long>(colon) + 1);
    body.tokens.assign(l.tokens.begin() + static_cast<long>(colon) + 1, l.tokens.end());
    out.push_back(std::move(head));
    out.push_back(std::move(body));
  }
  return out;
}

// "a.b.c" from the tokens at k (advances k); empty when there is no name.
std::string dotted(const std::vector<Token>& t, size_t& k) {
  std::string out;
  while (k < t.size() && t[k].kind == Token::kName) {
    out += t[k++].text;
    if (k + 1 < t.size() && is_op(t[k], ".") && t[k + 1].kind == Token::kName) {
      out += '.';
      ++k;
    } else {
      break;
    }
  }
  return out;
}

class Builder {
 public:
  Builder(Program& p, const SourceFile& f, std::vector<Logical> lines) : p_(p), f_(f), l_(std::move(lines)) {}

  void run() {
    size_t i = 0;
    while (i < l_.size()) {
      const Logical& l = l_[i];
      const std::vector<Token>& t = l.tokens;
      if (l.indent > 0 || t.empty()) {
        imports(l);  // an import inside a module-level block (try: import ... except: ...)
        ++i;
        continue;
      }
      if (is_name(t[0], "class")) {
        i = klass(i);
      } else if (is_name(t[0], "def") || is_op(t[0], "@")) {
        std::vector<std::string> decorators;
        while (i < l_.size() && l_[i].indent == 0 && !l_[i].tokens.empty() && is_op(l_[i].tokens[0], "@")) {
          decorators.push_back(decorator(l_[i]));
          ++i;
        }
        if (i < l_.size() && l_[i].indent == 0 && !l_[i].tokens.empty() && is_name(l_[i].tokens[0], "def")) {
          Def d;
          i = def(i, 0, std::move(decorators), &d);
          if (!d.name.empty()) p_.functions[d.name] = std::move(d);
        } else if (i < l_.size() && l_[i].indent == 0 && !l_[i].tokens.empty() && is_name(l_[i].tokens[0], "class")) {
          i = klass(i);
        }
      } else {
        imports(l);
        constant(l);
        ++i;
      }
    }
  }

 private:
  void count() {
    if (++definitions_ > kMaxDefinitions)
      throw Error(f_.name + ": more than " + std::to_string(kMaxDefinitions) + " classes and functions");
  }

  // The end of the block opened by line i: the first line after it indented
  // no deeper than `indent`.
  size_t block_end(size_t i, size_t indent) const {
    size_t j = i + 1;
    while (j < l_.size() && l_[j].indent > indent) ++j;
    return j;
  }

  static std::string decorator(const Logical& l) {
    size_t k = 1;
    return dotted(l.tokens, k);
  }

  void imports(const Logical& l) {
    const std::vector<Token>& t = l.tokens;
    if (t.empty() || !l.why.empty()) return;
    size_t k = 1;
    if (is_name(t[0], "import")) {
      while (k < t.size()) {
        const std::string module = dotted(t, k);
        if (module.empty()) return;
        if (k + 1 < t.size() && is_name(t[k], "as") && t[k + 1].kind == Token::kName) {
          p_.imports[t[k + 1].text] = module;
          k += 2;
        } else {
          const std::string first = module.substr(0, module.find('.'));
          p_.imports[first] = first;
        }
        if (k < t.size() && is_op(t[k], ",")) ++k;
        else return;
      }
    } else if (is_name(t[0], "from")) {
      std::string module;
      while (k < t.size() && (is_op(t[k], ".") || is_op(t[k], "..."))) module += t[k++].text;
      module += dotted(t, k);
      if (k >= t.size() || !is_name(t[k], "import")) return;
      ++k;
      if (k < t.size() && is_op(t[k], "(")) ++k;
      while (k < t.size() && t[k].kind == Token::kName) {
        const std::string name = t[k++].text;
        std::string alias = name;
        if (k + 1 < t.size() && is_name(t[k], "as") && t[k + 1].kind == Token::kName) {
          alias = t[k + 1].text;
          k += 2;
        }
        p_.imports[alias] = module.empty() || module.back() == '.' ? module + name : module + "." + name;
        if (k < t.size() && is_op(t[k], ",")) ++k;
        else break;
      }
    }
  }

  void constant(const Logical& l) {
    const std::vector<Token>& t = l.tokens;
    if (!l.why.empty() || t.size() < 3 || t[0].kind != Token::kName || !is_op(t[1], "=")) return;
    const std::string text = spelled(t);
    if (text.size() > script::kMaxStatementChars) return;
    script::Statement st = script::parse_statement(text);
    if (st.kind != script::Statement::kAssign || st.targets.size() != 1) return;
    Program::Constant c;
    c.value = std::move(st.value);
    c.file = &f_;
    c.line = l.number;
    p_.constants[st.targets[0]] = std::move(c);
  }

  // The def at line i (its decorators read), indented `indent`: into *d;
  // returns the line after its block.
  size_t def(size_t i, size_t indent, std::vector<std::string> decorators, Def* d) {
    count();
    const size_t end = block_end(i, indent);
    const Logical& head = l_[i];
    if (head.tokens.size() < 2 || head.tokens[1].kind != Token::kName) return end;
    d->name = head.tokens[1].text;
    d->decorators = std::move(decorators);
    d->file = &f_;
    d->line = head.number;
    for (size_t j = i; j < end; ++j) {
      const Logical& l = l_[j];
      std::string text = l.why.empty() ? spelled(l.tokens) : std::string();
      if (l.why.empty() && text.size() > script::kMaxStatementChars)
        text.clear(), d->unreadable[l.number] = "a statement longer than " + std::to_string(script::kMaxStatementChars) +
                                                " characters";
      else if (!l.why.empty())
        d->unreadable[l.number] = l.why;
      if (text.empty()) text = "pass";
      d->lines.push_back(std::string(l.indent - std::min(l.indent, indent), ' ') + text);
      d->numbers.push_back(l.number);
    }
    return end;
  }

  size_t klass(size_t i) {
    count();
    const Logical& head = l_[i];
    const size_t indent = head.indent;
    const size_t end = block_end(i, indent);
    const std::vector<Token>& t = head.tokens;
    if (t.size() < 2 || t[1].kind != Token::kName || !head.why.empty()) return end;
    ClassDef c;
    c.name = t[1].text;
    c.file = &f_;
    c.line = head.number;
    size_t k = 2;
    if (k < t.size() && is_op(t[k], "(")) {
      ++k;
      while (k < t.size() && !is_op(t[k], ")")) {
        if (t[k].kind == Token::kName && k + 1 < t.size() && is_op(t[k + 1], "=")) {  // metaclass=...
          while (k < t.size() && !is_op(t[k], ",") && !is_op(t[k], ")")) ++k;
        } else {
          const std::string base = dotted(t, k);
          if (!base.empty()) c.bases.push_back(base);
          int depth = 0;  // Generic[T] and the like
          while (k < t.size() && (depth > 0 || (!is_op(t[k], ",") && !is_op(t[k], ")")))) {
            if (is_op(t[k], "[") || is_op(t[k], "(")) ++depth;
            if (is_op(t[k], "]") || is_op(t[k], ")")) --depth;
            ++k;
          }
        }
        if (k < t.size() && is_op(t[k], ",")) ++k;
      }
    }
    size_t j = i + 1;
    const size_t body = j < end ? l_[j].indent : indent + 1;
    std::vector<std::string> decorators;
    while (j < end) {
      const Logical& l = l_[j];
      if (l.indent != body || l.tokens.empty()) {
        ++j;
        continue;
      }
      if (is_op(l.tokens[0], "@")) {
        decorators.push_back(decorator(l));
        ++j;
      } else if (is_name(l.tokens[0], "def")) {
        Def d;
        j = def(j, body, std::move(decorators), &d);
        decorators.clear();
        if (!d.name.empty()) c.methods[d.name] = std::move(d);
      } else if (is_name(l.tokens[0], "class")) {
        j = block_end(j, body);  // a nested class: not read
        decorators.clear();
      } else {
        if (l.why.empty() && l.tokens.size() >= 3 && l.tokens[0].kind == Token::kName &&
            (is_op(l.tokens[1], "=") || is_op(l.tokens[1], ":"))) {
          const std::string text = spelled(l.tokens);
          script::Statement st = text.size() <= script::kMaxStatementChars ? script::parse_statement(text)
                                                                          : script::Statement{};
          if (st.kind == script::Statement::kAssign && st.targets.size() == 1)
            c.attributes[st.targets[0]] = {std::move(st.value), l.number};
        }
        decorators.clear();
        j = block_end(j, body);
      }
    }
    p_.classes.push_back(std::move(c));
    return end;
  }

  Program& p_;
  const SourceFile& f_;
  std::vector<Logical> l_;
  size_t definitions_ = 0;
};

bool ends_with(const std::string& s, const char* suffix) {
  const std::string x = suffix;
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

void check_utf8(const std::string& text, const SourceFile& file) {
  size_t line = 1;
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    if (p[i] == '\n') ++line;
    if (p[i] == 0) throw Error(file.name + ":" + std::to_string(line) + ": a NUL byte (not Python source text)");
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8_sequence(p + i, text.size() - i);
    if (!n) throw Error(file.name + ":" + std::to_string(line) + ": bytes that are not UTF-8 (Python source is UTF-8)");
    i += n;
  }
}

// A notebook's code cells as one program: each cell's lines in turn, its
// !shell and %magic lines (and %% cells) blanked, origins recorded.
std::string notebook_program(const std::string& bytes, SourceFile& file) {
  const nlohmann::json nb =
      parse_bounded_json(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), file.name);
  if (!nb.is_object() || !nb.contains("cells") || !nb["cells"].is_array())
    throw Error(file.name + ": not a Jupyter notebook (no \"cells\" list)");
  std::string program;
  file.origins.assign(1, {0, 0});
  size_t cell_number = 0;
  for (const nlohmann::json& cell : nb["cells"]) {
    ++cell_number;
    if (!cell.is_object() || !cell.contains("cell_type") || cell["cell_type"] != "code") continue;
    std::string source;
    const nlohmann::json& s = cell.contains("source") ? cell["source"] : nlohmann::json();
    if (s.is_string()) {
      source = s.get<std::string>();
    } else if (s.is_array()) {
      for (const nlohmann::json& part : s) {
        if (!part.is_string())
          throw Error(file.name + " cell " + std::to_string(cell_number) + ": a source line that is not a string");
        source += part.get<std::string>();
      }
    } else {
      continue;
    }
    const bool cell_magic = source.compare(0, 2, "%%") == 0;
    size_t in_cell = 0, b = 0;
    while (b <= source.size()) {
      size_t e = source.find('\n', b);
      if (e == std::string::npos) e = source.size();
      std::string line = source.substr(b, e - b);
      ++in_cell;
      const size_t first = line.find_first_not_of(" \t");
      if (cell_magic || (first != std::string::npos && (line[first] == '!' || line[first] == '%'))) line.clear();
      program += line;
      program += '\n';
      file.origins.emplace_back(cell_number, in_cell);
      if (program.size() > kMaxSourceBytes)
        throw Error(file.name + ": more than " + std::to_string(kMaxSourceBytes) + " bytes of code");
      b = e + 1;
    }
  }
  return program;
}

}  // namespace

std::string last_name(const std::string& dotted) {
  const size_t dot = dotted.rfind('.');
  return dot == std::string::npos ? dotted : dotted.substr(dot + 1);
}

std::string SourceFile::where(size_t line) const {
  if (notebook && line < origins.size())
    return name + " cell " + std::to_string(origins[line].first) + ", line " + std::to_string(origins[line].second);
  return name + ":" + std::to_string(line);
}

bool Def::is_static() const {
  return std::find(decorators.begin(), decorators.end(), "staticmethod") != decorators.end();
}

const ClassDef* Program::find_class(const std::string& name) const {
  const std::string last = last_name(name);
  for (auto it = classes.rbegin(); it != classes.rend(); ++it)
    if (it->name == last) return &*it;
  return nullptr;
}

std::pair<const Def*, const ClassDef*> Program::find_method(const ClassDef& cls, const std::string& name) const {
  // Depth first through the bases defined in the program, bounded (a class
  // that inherits from itself, directly or not, is read once).
  std::vector<const ClassDef*> todo{&cls}, seen;
  while (!todo.empty() && seen.size() < 64) {
    const ClassDef* c = todo.front();
    todo.erase(todo.begin());
    if (std::find(seen.begin(), seen.end(), c) != seen.end()) continue;
    seen.push_back(c);
    if (auto m = c->methods.find(name); m != c->methods.end()) return {&m->second, c};
    for (const std::string& b : c->bases)
      if (const ClassDef* base = find_class(qualified(b)); base && base != c) todo.push_back(base);
  }
  return {nullptr, nullptr};
}

std::string Program::qualified(const std::string& name) const {
  const size_t dot = name.find('.');
  auto it = imports.find(name.substr(0, dot));
  if (it == imports.end()) return name;
  return dot == std::string::npos ? it->second : it->second + name.substr(dot);
}

void read_source_text(const std::string& name, const std::string& text, Program& program) {
  auto file = std::make_unique<SourceFile>();
  file->path = name;
  file->name = escaped(basename_of(name));
  if (text.size() > kMaxSourceBytes)
    throw Error(file->name + ": " + std::to_string(text.size()) + " bytes (a source file is read up to " +
                std::to_string(kMaxSourceBytes) + ")");
  const size_t first = text.find_first_not_of(" \t\r\n");
  std::string code;
  if (ends_with(name, ".ipynb") || (first != std::string::npos && text[first] == '{' &&
                                    text.find("\"cells\"") != std::string::npos)) {
    file->notebook = true;
    code = notebook_program(text, *file);
  } else {
    code = text;
  }
  check_utf8(code, *file);
  std::vector<Logical> lines = split_inline_blocks(Tokenizer(code, *file).run());
  const SourceFile& f = *file;
  program.files.push_back(std::move(file));
  Builder(program, f, std::move(lines)).run();
}

void read_source(const std::string& path, Program& program) {
  const MappedFile file(path);
  if (file.size() > kMaxSourceBytes)
    throw Error(escaped(basename_of(path)) + ": " + std::to_string(file.size()) + " bytes (a source file is read up to " +
                std::to_string(kMaxSourceBytes) + ")");
  read_source_text(path, std::string(reinterpret_cast<const char*>(file.data()), file.size()), program);
}

}  // namespace ferry::conv::python
