#include "mapping/graph.h"

#include <cctype>

#include "error.h"
#include "mapping/wrapper_prefixes.h"

namespace ferry::conv {
namespace {

// The built-in ops: their --graph name and the arguments each takes
// (positional values, then keys). One row per op.
struct Builtin {
  const char* name;
  OpKind op;
  const char* positional;  // the one positional value accepted, or nullptr
  const char* keys[2];     // KEY=VALUE arguments accepted
};
constexpr Builtin kBuiltins[] = {
    {"last", OpKind::Last, nullptr, {}},
    {"relu", OpKind::ReLU, nullptr, {}},
    {"tanh", OpKind::Tanh, nullptr, {}},
    {"sigmoid", OpKind::Sigmoid, nullptr, {}},
    {"softmax", OpKind::Softmax, nullptr, {}},
    {"identity", OpKind::Identity, nullptr, {}},
    {"logsoftmax", OpKind::LogSoftmax, nullptr, {}},
    {"dropout", OpKind::Dropout, nullptr, {}},
    {"gelu", OpKind::GELU, "tanh", {}},
    {"silu", OpKind::SiLU, nullptr, {}},
    {"elu", OpKind::ELU, nullptr, {"alpha"}},
    {"leaky_relu", OpKind::LeakyReLU, nullptr, {"slope"}},
    {"hardtanh", OpKind::Hardtanh, nullptr, {"min", "max"}},
    {"relu6", OpKind::ReLU6, nullptr, {}},
    {"mean", OpKind::Mean, nullptr, {}},
    {"max", OpKind::Max, nullptr, {}},
};

const Builtin* find_builtin(const std::string& name) {
  for (const Builtin& b : kBuiltins)
    if (name == b.name) return &b;
  return nullptr;
}

const Builtin* find_builtin(OpKind op) {
  for (const Builtin& b : kBuiltins)
    if (op == b.op) return &b;
  return nullptr;
}

std::string builtin_list() {
  std::string s;
  for (const Builtin& b : kBuiltins) s += (s.empty() ? "" : ", ") + std::string(b.name);
  return s;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\n");
  return s.substr(b, e - b + 1);
}

constexpr unsigned kMaxSkipDepth = 4;  // the runtime's residual slots

class Parser {
 public:
  explicit Parser(const std::string& spec) : s_(spec) {}

  std::vector<GraphElement> run() {
    std::vector<GraphElement> out;
    chain(out, 0);
    skip_space();
    if (i_ != s_.size()) fail("unexpected '" + std::string(1, s_[i_]) + "'");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("--graph \"" + s_ + "\": " + what + " at character " + std::to_string(i_) +
                " (elements are separated by '>'; a residual skip is '(a > b) + input')");
  }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    skip_space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }

  void chain(std::vector<GraphElement>& out, unsigned depth) {
    while (true) {
      element(out, depth);
      if (!eat('>')) return;
    }
  }

  void element(std::vector<GraphElement>& out, unsigned depth) {
    skip_space();
    if (eat('(')) {
      if (depth >= kMaxSkipDepth) fail("residual skips nested deeper than " + std::to_string(kMaxSkipDepth));
      GraphElement begin;
      begin.op = OpKind::SkipBegin;
      begin.slot = depth;
      out.push_back(begin);
      chain(out, depth + 1);
      if (!eat(')')) fail("a '(' without its ')'");
      if (!eat('+')) fail("'(...)' must be followed by '+ input' (a residual skip)");
      skip_space();
      if (s_.compare(i_, 5, "input") != 0) fail("'(...) +' must be followed by 'input'");
      i_ += 5;
      GraphElement end = begin;
      end.op = OpKind::SkipEnd;
      out.push_back(end);
      return;
    }
    const size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_' || s_[i_] == '.')) ++i_;
    const std::string name = s_.substr(start, i_ - start);
    if (name.empty()) {
      if (i_ >= s_.size() || s_[i_] == '>' || s_[i_] == ')') fail("empty element");
      fail("'" + std::string(1, s_[i_]) + "' is neither a module path nor one of " + builtin_list());
    }
    GraphElement e;
    e.op = builtin_op(name);
    if (e.op == OpKind::Module) e.module = strip_wrapper_prefixes(name);
    skip_space();
    if (i_ < s_.size() && s_[i_] == '(') {
      ++i_;
      const size_t close = s_.find(')', i_);
      if (close == std::string::npos) fail("element '" + name + "' lacks a closing ')'");
      const std::string inside = s_.substr(i_, close - i_);
      i_ = close + 1;
      size_t p = 0;
      while (p <= inside.size()) {
        const size_t comma = inside.find(',', p);
        const std::string arg = trim(inside.substr(p, comma == std::string::npos ? std::string::npos : comma - p));
        if (arg.empty()) fail("element '" + name + "(" + inside + ")': an empty argument");
        const size_t eq = arg.find('=');
        if (eq == std::string::npos) {
          if (!e.option.empty()) fail("element '" + name + "(" + inside + ")': more than one positional argument");
          e.option = arg;
        } else {
          const std::string key = trim(arg.substr(0, eq)), value = trim(arg.substr(eq + 1));
          if (key.empty() || value.empty()) fail("element '" + name + "(" + inside + ")': argument '" + arg + "'");
          if (!e.args.emplace(key, value).second) fail("element '" + name + "': '" + key + "' given twice");
        }
        if (comma == std::string::npos) break;
        p = comma + 1;
      }
      check_builtin_args(e, name, inside);
    }
    out.push_back(e);
  }

  void check_builtin_args(const GraphElement& e, const std::string& name, const std::string& inside) const {
    const Builtin* b = find_builtin(e.op);
    if (!b) return;  // a module: its options are checked where the module is known
    if (!e.option.empty() && (!b->positional || e.option != b->positional)) {
      throw Error("--graph: element '" + name + "(" + inside + ")': " +
                  (b->positional ? std::string("the only positional option is (") + b->positional + ")"
                                 : "'" + name + "' takes no positional option"));
    }
    for (const auto& [key, value] : e.args) {
      bool ok = false;
      for (const char* k : b->keys) ok = ok || (k && key == k);
      if (!ok) {
        std::string keys;
        for (const char* k : b->keys)
          if (k) keys += (keys.empty() ? "" : ", ") + std::string(k) + "=";
        throw Error("--graph: element '" + name + "(" + inside + ")': '" + name + "' takes " +
                    (keys.empty() ? std::string("no arguments") : "only " + keys));
      }
    }
  }

  const std::string& s_;
  size_t i_ = 0;
};

GraphElement builtin(OpKind op) {
  GraphElement e;
  e.op = op;
  return e;
}

std::string format_args(const GraphElement& e) {
  std::string a = e.option;
  for (const auto& [k, v] : e.args) a += (a.empty() ? "" : ",") + k + "=" + v;
  return a.empty() ? "" : "(" + a + ")";
}

}  // namespace

namespace {

// Weightless modules named in the chain (a whole module's or TorchScript's
// nn.ReLU, nn.LeakyReLU(0.2), ...): the built-in op their class is, with the
// options they record. One row per class.
struct ActivationClass {
  const char* class_name;
  OpKind op;
  const char* attributes[2][2];  // {file attribute, --graph key}
};
constexpr ActivationClass kActivationClasses[] = {
    {"ReLU", OpKind::ReLU, {}},
    {"Tanh", OpKind::Tanh, {}},
    {"Sigmoid", OpKind::Sigmoid, {}},
    {"Softmax", OpKind::Softmax, {}},
    {"LogSoftmax", OpKind::LogSoftmax, {}},
    {"Identity", OpKind::Identity, {}},
    {"Dropout", OpKind::Dropout, {}},
    {"GELU", OpKind::GELU, {}},
    {"SiLU", OpKind::SiLU, {}},
    {"ELU", OpKind::ELU, {{"alpha", "alpha"}}},
    {"LeakyReLU", OpKind::LeakyReLU, {{"negative_slope", "slope"}}},
    {"Hardtanh", OpKind::Hardtanh, {{"min_val", "min"}, {"max_val", "max"}}},
    {"ReLU6", OpKind::ReLU6, {}},
};

}  // namespace

std::optional<GraphElement> recorded_activation(const Checkpoint& checkpoint, const std::string& path) {
  auto cls = checkpoint.attributes.find(attribute_key(path, kClassAttribute));
  if (cls == checkpoint.attributes.end()) return std::nullopt;
  for (const ActivationClass& a : kActivationClasses) {
    if (cls->second != a.class_name) continue;
    GraphElement e;
    e.op = a.op;
    for (const auto& attr : a.attributes) {
      if (!attr[0]) continue;
      auto v = checkpoint.attributes.find(attribute_key(path, attr[0]));
      if (v != checkpoint.attributes.end()) e.args[attr[1]] = v->second;
    }
    if (a.op == OpKind::GELU) {
      auto v = checkpoint.attributes.find(attribute_key(path, "approximate"));
      if (v != checkpoint.attributes.end() && v->second == "tanh") e.option = "tanh";
    }
    return e;
  }
  return std::nullopt;
}


OpKind builtin_op(const std::string& name) {
  const Builtin* b = find_builtin(name);
  return b ? b->op : OpKind::Module;
}

const char* builtin_name(OpKind op) {
  const Builtin* b = find_builtin(op);
  return b ? b->name : "";
}

std::vector<GraphElement> parse_graph(const std::string& spec) { return Parser(spec).run(); }

std::string format_graph(const std::vector<GraphElement>& chain) {
  std::string s;
  bool open = false;  // just after '(': no separator
  for (const GraphElement& e : chain) {
    if (e.op == OpKind::SkipEnd) {
      s += ") + input";
      continue;
    }
    if (!s.empty() && !open) s += " > ";
    open = false;
    switch (e.op) {
      case OpKind::Module:
        s += (e.module.empty() ? std::string(kRootModuleName) : e.module) + format_args(e);
        break;
      case OpKind::SkipBegin:
        s += "(";
        open = true;
        break;
      default:
        s += builtin_name(e.op) + format_args(e);
        break;
    }
  }
  return s;
}

std::vector<GraphElement> infer_graph(const ModuleSet& set, const std::vector<GraphElement>& order) {
  // Inferring, every module is a candidate: one that cannot be read as a
  // layer is an error here, as with --graph naming it.
  if (!set.unreadable.empty()) throw Error(set.unreadable.front().second);
  if (set.modules.empty()) {
    throw Error("the checkpoint holds no Linear, LSTM, GRU or RNN layer to convert");
  }
  std::vector<GraphElement> chain;
  bool ambiguous = false;
  for (size_t i = 0; i < set.modules.size(); ++i) {
    const Module& m = set.modules[i];
    if (i > 0) {
      const Module& prev = set.modules[i - 1];
      const bool stacked = prev.type == ModuleType::Recurrent && m.type == ModuleType::Recurrent &&
                           prev.output_size() == m.input_size;
      if (!stacked) ambiguous = true;
    }
    GraphElement e;
    e.module = m.path;
    chain.push_back(e);
  }
  if (!ambiguous) return chain;

  // Suggest the common shape: recurrent > last > linear ... (widths
  // permitting), keeping the activations the file places between modules.
  std::vector<GraphElement> suggestion;
  bool taken_last = false;
  std::string listing;
  for (const Module& m : set.modules) listing += (listing.empty() ? " " : ", ") + m.path + " " + m.describe();
  const std::vector<GraphElement>& elements = order.empty() ? chain : order;
  const Module* prev = nullptr;
  bool between = false;  // an element since `prev`
  for (const GraphElement& e : elements) {
    const Module* m = e.op == OpKind::Module ? set.find(e.module.empty() ? kRootModuleName : e.module) : nullptr;
    if (!m) {
      suggestion.push_back(e);
      between = true;
      continue;
    }
    if (prev && m->type == ModuleType::Linear && prev->type == ModuleType::Recurrent && !taken_last) {
      suggestion.push_back(builtin(OpKind::Last));
      taken_last = true;
    } else if (prev && !between && m->type == ModuleType::Linear && prev->type == ModuleType::Linear) {
      suggestion.push_back(builtin(OpKind::ReLU));
    }
    suggestion.push_back(e);
    prev = m;
    between = false;
  }
  throw Error("cannot infer the layer chain: a state dict does not record what sits between "
              "modules (the last time step or every step, activations); modules in state-dict order:" +
              listing + "; pass --graph, for example --graph \"" + format_graph(suggestion) + "\"");
}

}  // namespace ferry::conv
