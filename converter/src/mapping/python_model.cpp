#include "mapping/python_model.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "error.h"
#include "mapping/wrapper_prefixes.h"
#include "text.h"

namespace ferry::conv {
namespace {

using script::Expr;
using script::Line;
using script::Statement;

constexpr size_t kMaxConstructorDepth = 32;
constexpr size_t kMaxSteps = size_t{1} << 18;
constexpr size_t kMaxNodes = 4096;
constexpr size_t kMaxItems = 4096;
constexpr size_t kMaxPasses = 4;
constexpr size_t kMaxHeld = size_t{1} << 20;  // values held in lists, nested ones counted

// A value of constructor code.
struct CVal {
  enum Kind { kUnknown, kNone, kBool, kInt, kFloat, kStr, kTuple, kList, kDict, kModule, kClass, kFunction, kSuper };
  Kind kind = kUnknown;
  long long i = 0;
  double f = 0;
  std::string s;      // kStr: the text; kUnknown: what it is; kClass / kFunction: the qualified name
  std::string param;  // kUnknown: the constructor parameter it rests on
  bool bare = false;  // the parameter itself, not computed from it
  bool defaulted = false;  // known: the default of the root constructor's parameter `param`
  std::vector<CVal> items;  // kTuple / kList; kDict: key, value, key, value...
  int node = -1;            // kModule
  size_t parts = 1, depth = 0;  // this value and the values in it, nested ones counted; its nesting

  static CVal unknown(std::string what, std::string param = "", bool bare = false) {
    CVal v;
    v.s = std::move(what);
    v.param = std::move(param);
    v.bare = bare;
    return v;
  }
  static CVal integer(long long n) {
    CVal v;
    v.kind = kInt;
    v.i = n;
    return v;
  }
  static CVal boolean(bool b) {
    CVal v;
    v.kind = kBool;
    v.i = b;
    return v;
  }
  static CVal real(double x) {
    CVal v;
    v.kind = kFloat;
    v.f = x;
    return v;
  }
  static CVal str(std::string t) {
    CVal v;
    v.kind = kStr;
    v.s = std::move(t);
    return v;
  }
  static CVal of(Kind k, std::string t = "") {
    CVal v;
    v.kind = k;
    v.s = std::move(t);
    return v;
  }
  bool known() const {
    if (kind == kUnknown) return false;
    for (const CVal& i : items)
      if (!i.known()) return false;
    return true;
  }
  bool number() const { return kind == kInt || kind == kBool || kind == kFloat; }
  double as_double() const { return kind == kFloat ? f : static_cast<double>(i); }
};

// A float as %.17g writes it: every bit kept.
std::string float_text(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// Python's repr, for constructor texts and scalars.
std::string repr(const CVal& v) {
  switch (v.kind) {
    case CVal::kUnknown: return v.param.empty() ? "?" : v.param;
    case CVal::kNone: return "None";
    case CVal::kBool: return v.i ? "True" : "False";
    case CVal::kInt: return std::to_string(v.i);
    case CVal::kFloat: {
      std::string t = float_text(v.f);
      if (t.find_first_of(".eEn") == std::string::npos) t += ".0";
      return t;
    }
    case CVal::kStr: return "'" + v.s.substr(0, 80) + "'";
    case CVal::kTuple: case CVal::kList: {
      std::string t = v.kind == CVal::kTuple ? "(" : "[";
      for (size_t k = 0; k < v.items.size() && k < 16; ++k) t += (k ? ", " : "") + repr(v.items[k]);
      if (v.kind == CVal::kTuple && v.items.size() == 1) t += ",";
      return t + (v.kind == CVal::kTuple ? ")" : "]");
    }
    case CVal::kDict: return "{...}";
    case CVal::kModule: return "<module>";
    case CVal::kClass: case CVal::kFunction: return v.s;
    case CVal::kSuper: return "super()";
  }
  return "?";
}

// A torch.nn class ferry knows: its constructor's parameters, in order, with
// their defaults as Python literals ("" where there is none), and the ones
// the weights decide (their value is checked or bound from the shapes).
struct NnClass {
  const char* name;
  std::vector<std::pair<const char*, const char*>> params;
  bool weighted;
};

const std::vector<NnClass>& nn_classes() {
  static const std::vector<NnClass> kClasses = {
      {"LSTM", {{"input_size", ""}, {"hidden_size", ""}, {"num_layers", "1"}, {"bias", "True"}, {"batch_first", "False"},
                {"dropout", "0.0"}, {"bidirectional", "False"}, {"proj_size", "0"}}, true},
      {"GRU", {{"input_size", ""}, {"hidden_size", ""}, {"num_layers", "1"}, {"bias", "True"}, {"batch_first", "False"},
               {"dropout", "0.0"}, {"bidirectional", "False"}}, true},
      {"RNN", {{"input_size", ""}, {"hidden_size", ""}, {"num_layers", "1"}, {"nonlinearity", "'tanh'"}, {"bias", "True"},
               {"batch_first", "False"}, {"dropout", "0.0"}, {"bidirectional", "False"}}, true},
      {"LSTMCell", {{"input_size", ""}, {"hidden_size", ""}, {"bias", "True"}}, true},
      {"GRUCell", {{"input_size", ""}, {"hidden_size", ""}, {"bias", "True"}}, true},
      {"RNNCell", {{"input_size", ""}, {"hidden_size", ""}, {"bias", "True"}, {"nonlinearity", "'tanh'"}}, true},
      {"Linear", {{"in_features", ""}, {"out_features", ""}, {"bias", "True"}}, true},
      {"Conv1d", {{"in_channels", ""}, {"out_channels", ""}, {"kernel_size", ""}, {"stride", "1"}, {"padding", "0"},
                  {"dilation", "1"}, {"groups", "1"}, {"bias", "True"}, {"padding_mode", "'zeros'"}}, true},
      {"BatchNorm1d", {{"num_features", ""}, {"eps", "1e-05"}, {"momentum", "0.1"}, {"affine", "True"},
                       {"track_running_stats", "True"}}, true},
      {"LayerNorm", {{"normalized_shape", ""}, {"eps", "1e-05"}, {"elementwise_affine", "True"}, {"bias", "True"}}, true},
      {"PReLU", {{"num_parameters", "1"}, {"init", "0.25"}}, true},
      {"Embedding", {{"num_embeddings", ""}, {"embedding_dim", ""}, {"padding_idx", "None"}, {"max_norm", "None"},
                     {"norm_type", "2.0"}, {"scale_grad_by_freq", "False"}, {"sparse", "False"}}, true},
      {"Dropout", {{"p", "0.5"}, {"inplace", "False"}}, false},
      {"Dropout1d", {{"p", "0.5"}, {"inplace", "False"}}, false},
      {"AlphaDropout", {{"p", "0.5"}, {"inplace", "False"}}, false},
      {"ReLU", {{"inplace", "False"}}, false},
      {"ReLU6", {{"inplace", "False"}}, false},
      {"SiLU", {{"inplace", "False"}}, false},
      {"Tanh", {}, false},
      {"Sigmoid", {}, false},
      {"Identity", {}, false},
      {"GELU", {{"approximate", "'none'"}}, false},
      {"ELU", {{"alpha", "1.0"}, {"inplace", "False"}}, false},
      {"LeakyReLU", {{"negative_slope", "0.01"}, {"inplace", "False"}}, false},
      {"Hardtanh", {{"min_val", "-1.0"}, {"max_val", "1.0"}, {"inplace", "False"}}, false},
      {"Softmax", {{"dim", "None"}}, false},
      {"LogSoftmax", {{"dim", "None"}}, false},
  };
  return kClasses;
}

const NnClass* nn_class(const std::string& name) {
  for (const NnClass& c : nn_classes())
    if (name == c.name) return &c;
  return nullptr;
}

// The options a layer's weights decide, and what they say.
std::map<std::string, CVal> decided_by_weights(const std::string& cls, const Module& m) {
  std::map<std::string, CVal> d;
  const CVal bias = CVal::boolean(m.type == ModuleType::Recurrent ? m.params.count("bias_ih_l0") != 0
                                                                  : m.params.count("bias") != 0);
  if (m.type == ModuleType::Recurrent) {
    d["input_size"] = CVal::integer(m.input_size);
    d["hidden_size"] = CVal::integer(m.hidden_size);
    if (!m.is_cell) {
      d["num_layers"] = CVal::integer(m.num_layers);
      d["bidirectional"] = CVal::boolean(m.bidirectional);
      if (cls == "LSTM") d["proj_size"] = CVal::integer(m.proj_size);
    }
    d["bias"] = m.is_cell ? CVal::boolean(m.params.count("bias_ih") != 0) : bias;
  } else if (m.type == ModuleType::Linear && cls == "Embedding") {
    d["num_embeddings"] = CVal::integer(m.out_features);
    d["embedding_dim"] = CVal::integer(m.in_features);
  } else if (m.type == ModuleType::Linear) {
    d["in_features"] = CVal::integer(m.in_features);
    d["out_features"] = CVal::integer(m.out_features);
    d["bias"] = bias;
  } else if (m.type == ModuleType::Conv1d) {
    d["out_channels"] = CVal::integer(m.out_features);
    d["kernel_size"] = CVal::integer(m.kernel_size);
    d["bias"] = bias;
  } else if (m.type == ModuleType::BatchNorm) {
    d["num_features"] = CVal::integer(m.features);
  } else if (m.type == ModuleType::LayerNorm) {
    d["normalized_shape"] = CVal::integer(m.features);
  } else if (m.type == ModuleType::PReLU) {
    d["num_parameters"] = CVal::integer(m.features);
  }
  return d;
}

// Whether checkpoint module `m` can be the torch.nn class `cls`.
bool kind_fits(const std::string& cls, const Module& m) {
  if (m.type == ModuleType::Recurrent) {
    return cls == std::string(pytorch_class_name(m.kind)) + (m.is_cell ? "Cell" : "");
  }
  switch (m.type) {
    case ModuleType::Linear: return cls == "Linear" || cls == "Embedding";
    case ModuleType::Conv1d: return cls == "Conv1d";
    case ModuleType::BatchNorm: return cls == "BatchNorm1d";
    case ModuleType::LayerNorm: return cls == "LayerNorm";
    case ModuleType::PReLU: return cls == "PReLU";
    default: return false;
  }
}

// A module the constructor makes.
struct Node {
  std::string cls;  // a torch.nn class ("LSTM", "Sequential"), or a class of the files
  const python::ClassDef* user = nullptr;
  bool nn = false;       // a torch.nn class
  bool passed = false;   // passed in as an argument: its class unknown, the checkpoint's decides
  std::string argument;  // passed: the parameter
  std::map<std::string, CVal> options;  // nn: each constructor parameter bound
  std::vector<std::pair<std::string, int>> children;
  std::map<std::string, CVal> attrs;  // self.x = value (not modules)
  std::string constructor, where;
  std::string path;  // set once the tree is complete

  bool weighted() const {
    const NnClass* c = nn ? nn_class(cls) : nullptr;
    return c && c->weighted && !(cls == "LayerNorm" && options.count("elementwise_affine") &&
                                 options.at("elementwise_affine").kind == CVal::kBool &&
                                 !options.at("elementwise_affine").i);
  }
};


// Reads one class's constructor tree.
class Constructor {
 public:
  Constructor(const python::Program& p, const std::map<std::string, CVal>& decided) : p_(p), decided_(decided) {}

  // The tree of `cls` built with no arguments: its parameters' defaults, or
  // what the weights decided, or unknown.
  int build_root(const python::ClassDef& cls) {
    return instantiate(cls, {}, {}, "the model class " + cls.name);
  }

  std::vector<Node>& nodes() { return nodes_; }

 private:
  struct Frame {
    std::map<std::string, CVal> vars;
    int self = -1;
    const python::ClassDef* cls = nullptr;
    const python::SourceFile* file = nullptr;
    bool root = false;
  };

  [[noreturn]] void fail(const std::string& why) const {
    const std::string where = here();
    throw Error(where.empty() ? why : where + ": " + why);
  }

  void step() {
    if (++steps_ > kMaxSteps) fail("the constructors take more than " + std::to_string(kMaxSteps) + " steps to read");
  }

  std::string here() const {
    return !frames_.empty() && frames_.back().file ? frames_.back().file->where(line_) : std::string();
  }

  int new_node(Node n) {
    if (nodes_.size() >= kMaxNodes) fail("more than " + std::to_string(kMaxNodes) + " modules");
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size()) - 1;
  }

  // A class of the files, constructed with these arguments.
  int instantiate(const python::ClassDef& cls, std::vector<CVal> args, std::map<std::string, CVal> kw,
                  const std::string& text) {
    if (frames_.size() >= kMaxConstructorDepth)
      fail("constructors call each other more than " + std::to_string(kMaxConstructorDepth) + " deep (class " +
           cls.name + " constructs itself?)");
    Node node;
    node.cls = cls.name;
    node.user = &cls;
    node.constructor = text;
    node.where = cls.file ? cls.file->where(cls.line) : "";
    const int self = new_node(std::move(node));
    auto [init, owner] = p_.find_method(cls, "__init__");
    if (!init) return self;
    script::Function f;
    try {
      f = script::parse_function(init->lines, init->numbers);
    } catch (const Error& e) {
      throw Error(init->file->where(init->line) + ": " + e.what());
    }
    Frame frame;
    frame.self = self;
    frame.cls = owner;
    frame.file = init->file;
    frame.root = frames_.empty();
    if (f.parameters.empty()) fail("__init__ of " + cls.name + " takes no self");
    frame.vars[f.parameters[0].name] = module_val(self);
    size_t next = 0;
    for (size_t k = 1; k < f.parameters.size(); ++k) {
      const script::Parameter& prm = f.parameters[k];
      if (prm.star == "*") {
        CVal rest = CVal::of(CVal::kTuple);
        while (next < args.size()) rest.items.push_back(args[next++]);
        frame.vars[prm.name] = rest;
        continue;
      }
      if (prm.star == "**") {
        CVal rest = CVal::of(CVal::kDict);
        for (auto& [key, v] : kw) {
          rest.items.push_back(CVal::str(key));
          rest.items.push_back(v);
        }
        kw.clear();
        frame.vars[prm.name] = rest;
        continue;
      }
      CVal v;
      if (next < args.size()) {
        v = args[next++];
      } else if (auto it = kw.find(prm.name); it != kw.end()) {
        v = it->second;
        kw.erase(it);
      } else if (frame.root && decided_.count(prm.name)) {
        v = decided_.at(prm.name);
      } else if (prm.has_default) {
        frames_.push_back(Frame{});  // a default is read in the file's scope
        frames_.back().file = init->file;
        v = eval(prm.default_value);
        frames_.pop_back();
        if (frame.root && v.known()) {
          defaults_[prm.name] = v;
          v.param = prm.name;
          v.bare = true;
          v.defaulted = true;
        }
      } else {
        v = CVal::unknown("the argument '" + prm.name + "' of " + cls.name + "()", prm.name, true);
      }
      if (frame.root && v.kind == CVal::kUnknown && v.param.empty()) v.param = prm.name, v.bare = true;
      if (frame.root && !decided_.count(prm.name) && !v.known()) v.param = prm.name, v.bare = true;
      if (frame.root) root_params_[prm.name] = v;
      frame.vars[prm.name] = v;
    }
    frames_.push_back(std::move(frame));
    const std::vector<Line> body = script::parse_body(f);
    run_block(body, *init);
    frames_.pop_back();
    return self;
  }

  CVal module_val(int node) {
    CVal v = CVal::of(CVal::kModule);
    v.node = node;
    return v;
  }

  // ------------------------------------------------------------ statements --
  // Returns true once a `return` is reached.
  bool run_block(const std::vector<Line>& block, const python::Def& def) {
    for (const Line& line : block) {
      line_ = line.number;
      step();
      if (auto bad = def.unreadable.find(line.number); bad != def.unreadable.end()) fail(bad->second);
      const Statement& st = line.statement;
      switch (st.kind) {
        case Statement::kPass: break;
        case Statement::kReturn: return true;
        case Statement::kOther:
          // A raise, a with block, a while loop: the constructor does
          // something ferry does not follow. What it leaves unset stays unknown.
          if (st.why.rfind("a raise", 0) == 0) fail("the constructor raises an exception here for these arguments");
          break;
        case Statement::kElif: case Statement::kElse: break;
        case Statement::kIf: {
          const CVal c = eval(st.value);
          const std::optional<bool> t = truth(c);
          if (!t) {
            // Undecided: what either branch would make stays unknown.
            fail("the constructor branches on " + what(c) + ", which is not known: " + ask(c));
          }
          if (run_block(*t ? line.then : line.orelse, def)) return true;
          break;
        }
        case Statement::kFor: {
          const CVal it = eval(st.value);
          if (it.kind != CVal::kList && it.kind != CVal::kTuple)
            fail("a loop over " + what(it) + ", which is not known: " + ask(it));
          for (const CVal& item : it.items) {
            assign(st.target, item);
            if (run_block(line.then, def)) return true;
          }
          break;
        }
        case Statement::kExpression: (void)eval(st.value); break;
        case Statement::kAssign: assign(st.target, eval(st.value)); break;
      }
    }
    return false;
  }

  void assign(const Expr& target, const CVal& v) {
    Frame& f = frames_.back();
    switch (target.kind) {
      case Expr::kName: f.vars[target.text] = v; return;
      case Expr::kTuple: case Expr::kList: {
        if ((v.kind != CVal::kTuple && v.kind != CVal::kList) || v.items.size() != target.items.size()) {
          for (const Expr& t : target.items) assign(t, CVal::unknown("part of " + what(v)));
          return;
        }
        for (size_t k = 0; k < target.items.size(); ++k) assign(target.items[k], v.items[k]);
        return;
      }
      case Expr::kAttribute: {
        const CVal base = eval(target.items[0]);
        if (base.kind != CVal::kModule) return;  // an attribute of something else: nothing ferry needs
        set_attribute(base.node, target.text, v);
        return;
      }
      default: return;  // x[i] = ...: a list element; not followed
    }
  }

  void set_attribute(int node, const std::string& name, const CVal& v) {
    Node& n = nodes_[static_cast<size_t>(node)];
    auto& ch = n.children;
    ch.erase(std::remove_if(ch.begin(), ch.end(), [&](const auto& c) { return c.first == name; }), ch.end());
    n.attrs.erase(name);
    if (v.kind == CVal::kModule) {
      ch.emplace_back(name, v.node);
    } else if (v.kind == CVal::kUnknown && !v.param.empty() && v.bare && frames_.back().root &&
               root_params_.count(v.param) && nodes_[static_cast<size_t>(node)].user) {
      // self.conv = conv, where conv is an argument with no default: a
      // module passed in, or a plain value; the checkpoint says which.
      Node passed;
      passed.passed = true;
      passed.argument = v.param;
      passed.constructor = "the argument '" + v.param + "'";
      passed.where = here();
      const int p = new_node(std::move(passed));
      nodes_[static_cast<size_t>(node)].children.emplace_back(name, p);
      nodes_[static_cast<size_t>(node)].attrs[name] = v;
    } else {
      n.attrs[name] = v;
    }
  }

  // -------------------------------------------------------------- values --
  static std::optional<bool> truth(const CVal& c) {
    switch (c.kind) {
      case CVal::kNone: return false;
      case CVal::kBool: case CVal::kInt: return c.i != 0;
      case CVal::kFloat: return c.f != 0;
      case CVal::kStr: return !c.s.empty();
      case CVal::kTuple: case CVal::kList: case CVal::kDict: return !c.items.empty();
      case CVal::kModule: case CVal::kClass: case CVal::kFunction: return true;
      default: return std::nullopt;
    }
  }

  static std::string what(const CVal& v) {
    if (v.kind == CVal::kUnknown) return v.s.empty() ? "a value ferry does not know" : v.s;
    return repr(v);
  }

  static std::string ask(const CVal& v) {
    if (!v.param.empty())
      return "it depends on the argument '" + v.param + "', which has no default and which the weights do not show";
    return "ferry reads only what the code says with literals, defaults and the weights' shapes";
  }

  CVal eval(const Expr& e) {
    step();
    switch (e.kind) {
      case Expr::kNumber: {
        const bool real = e.text.find_first_of(".eE") != std::string::npos;
        errno = 0;
        char* end = nullptr;
        if (real) {
          const double x = std::strtod(e.text.c_str(), &end);
          return *end || !std::isfinite(x) ? CVal::unknown("the number " + e.text.substr(0, 40)) : CVal::real(x);
        }
        const long long n = std::strtoll(e.text.c_str(), &end, 10);
        return *end || errno ? CVal::unknown("the number " + e.text.substr(0, 40)) : CVal::integer(n);
      }
      case Expr::kString: return CVal::str(e.text);
      case Expr::kName: return name(e.text);
      case Expr::kTuple: case Expr::kList: {
        CVal v = CVal::of(e.kind == Expr::kTuple ? CVal::kTuple : CVal::kList);
        for (const Expr& item : e.items) {
          if (item.kind == Expr::kStarred) {
            const CVal s = eval(item.items[0]);
            if (s.kind != CVal::kList && s.kind != CVal::kTuple) return CVal::unknown("a list unpacked from " + what(s));
            for (const CVal& x : s.items) add(v, x);
            continue;
          }
          add(v, eval(item));
        }
        return v;
      }
      case Expr::kDict: {
        CVal v = CVal::of(CVal::kDict);
        for (const Expr& item : e.items) add(v, eval(item));
        return v;
      }
      case Expr::kIfExp: {
        const CVal c = eval(e.items[0]);
        const auto t = truth(c);
        if (!t) return CVal::unknown("a value chosen by " + what(c), c.param);
        return eval(e.items[*t ? 1 : 2]);
      }
      case Expr::kComprehension: {
        const CVal it = eval(e.items[2]);
        if (it.kind != CVal::kList && it.kind != CVal::kTuple) return CVal::unknown("a comprehension over " + what(it), it.param);
        CVal v = CVal::of(CVal::kList);
        for (const CVal& item : it.items) {
          assign(e.items[1], item);
          add(v, eval(e.items[0]));
        }
        return v;
      }
      case Expr::kAttribute: return attribute(eval(e.items[0]), e.text);
      case Expr::kSubscript: {
        const CVal base = eval(e.items[0]);
        if (e.items.size() != 2 || e.items[1].kind == Expr::kSlice) return CVal::unknown("a part of " + what(base), base.param);
        const CVal i = eval(e.items[1]);
        if ((base.kind == CVal::kTuple || base.kind == CVal::kList) && i.kind == CVal::kInt) {
          const long long n = static_cast<long long>(base.items.size());
          if (i.i >= -n && i.i < n) return base.items[static_cast<size_t>(i.i < 0 ? i.i + n : i.i)];
        }
        if (base.kind == CVal::kDict)
          for (size_t k = 0; k + 1 < base.items.size(); k += 2)
            if (base.items[k].kind == i.kind && base.items[k].s == i.s && base.items[k].i == i.i) return base.items[k + 1];
        if (base.kind == CVal::kModule) {
          for (const auto& [n, c] : nodes_[static_cast<size_t>(base.node)].children)
            if ((i.kind == CVal::kInt && n == std::to_string(i.i)) || (i.kind == CVal::kStr && n == i.s)) return module_val(c);
        }
        return CVal::unknown("an element of " + what(base), base.param.empty() ? i.param : base.param);
      }
      case Expr::kSlice: case Expr::kStarred: return CVal::unknown("a slice");
      case Expr::kCall: return call(e);
    }
    return CVal::unknown("an expression");
  }

  // Every value held counts, nested ones included, against one budget for
  // the whole reading: a list of lists copied many times stays bounded.
  void add(CVal& list, CVal item) {
    if (list.items.size() >= kMaxItems) fail("a list of more than " + std::to_string(kMaxItems) + " items");
    held_ += item.parts;
    if (held_ > kMaxHeld) fail("the constructors build more than " + std::to_string(kMaxHeld) + " values");
    list.parts += item.parts;
    list.depth = std::max(list.depth, item.depth + 1);
    if (list.depth > 64) fail("lists nested more than 64 deep");
    list.items.push_back(std::move(item));
  }

  CVal name(const std::string& n) {
    auto& vars = frames_.back().vars;
    if (auto it = vars.find(n); it != vars.end()) return it->second;
    if (n == "True" || n == "False") return CVal::boolean(n == "True");
    if (n == "None") return CVal::of(CVal::kNone);
    if (auto c = p_.constants.find(n); c != p_.constants.end()) {
      if (constants_in_use_.count(n)) return CVal::unknown("the constant " + n + " (defined from itself)");
      if (constants_in_use_.size() >= 64) return CVal::unknown("the constant " + n + " (defined through 64 others)");
      constants_in_use_.insert(n);
      frames_.push_back(Frame{});
      frames_.back().file = c->second.file;
      const size_t saved = line_;
      line_ = c->second.line;
      CVal v = eval(c->second.value);
      line_ = saved;
      frames_.pop_back();
      constants_in_use_.erase(n);
      return v;
    }
    const std::string q = p_.qualified(n);
    if (p_.find_class(q) && (q == n || q.find('.') != std::string::npos)) return CVal::of(CVal::kClass, q);
    return CVal::of(CVal::kFunction, q);
  }

  CVal attribute(const CVal& base, const std::string& attr) {
    if (base.kind == CVal::kClass || base.kind == CVal::kFunction) {
      const std::string q = base.s + "." + attr;
      return CVal::of(CVal::kFunction, q);
    }
    if (base.kind == CVal::kModule) {
      const Node& n = nodes_[static_cast<size_t>(base.node)];
      for (const auto& [name, c] : n.children)
        if (name == attr) return module_val(c);
      if (auto a = n.attrs.find(attr); a != n.attrs.end()) return a->second;
      if (auto o = n.options.find(attr); o != n.options.end()) {
        // A Conv1d's kernel_size, stride, padding, dilation are tuples once built.
        const CVal& v = o->second;
        if (n.nn && n.cls == "Conv1d" && v.kind == CVal::kInt &&
            (attr == "kernel_size" || attr == "stride" || attr == "padding" || attr == "dilation")) {
          CVal t = CVal::of(CVal::kTuple);
          t.items.push_back(v);
          return t;
        }
        return v;
      }
      if (n.user)
        if (auto a = n.user->attributes.find(attr); a != n.user->attributes.end()) return eval(a->second.first);
      if (attr == "training") return CVal::boolean(false);
      return CVal::unknown("'" + attr + "' of " + (n.nn ? "an nn." + n.cls : "a " + n.cls), n.argument);
    }
    return CVal::unknown("'" + attr + "' of " + what(base), base.param);
  }

  // Arithmetic and comparisons on known numbers; unknown otherwise.
  CVal arithmetic(const std::string& fn, const std::vector<CVal>& a) {
    if (a.size() != 2) return CVal::unknown("the result of " + fn);
    const CVal &x = a[0], &y = a[1];
    std::string param = x.param.empty() ? y.param : x.param;
    const std::string op = fn.substr(fn.find('.') + 1);
    if (op == "add" && x.kind == CVal::kStr && y.kind == CVal::kStr) return CVal::str(x.s + y.s);
    if ((op == "add" || op == "mul") && (x.kind == CVal::kList || x.kind == CVal::kTuple)) {
      CVal r = CVal::of(x.kind);
      if (op == "add" && y.kind == x.kind) {
        r.items = x.items;
        for (const CVal& i : y.items) add(r, i);
        return r;
      }
      if (op == "mul" && y.kind == CVal::kInt && y.i >= 0 && y.i <= static_cast<long long>(kMaxItems)) {
        for (long long k = 0; k < y.i; ++k)
          for (const CVal& i : x.items) add(r, i);
        return r;
      }
    }
    if (op == "eq" || op == "ne") {
      if (x.kind == CVal::kUnknown || y.kind == CVal::kUnknown) return CVal::unknown("a comparison", param);
      bool same;
      if (x.number() && y.number()) same = x.as_double() == y.as_double();
      else same = x.kind == y.kind && x.s == y.s && x.i == y.i;
      return CVal::boolean(same == (op == "eq"));
    }
    if (!x.number() || !y.number()) return CVal::unknown("the result of " + op + " of " + what(x) + " and " + what(y), param);
    const bool ints = x.kind != CVal::kFloat && y.kind != CVal::kFloat;
    const double u = x.as_double(), v = y.as_double();
    if (op == "lt") return CVal::boolean(u < v);
    if (op == "gt") return CVal::boolean(u > v);
    if (op == "le") return CVal::boolean(u <= v);
    if (op == "ge") return CVal::boolean(u >= v);
    auto wrap = [&](double r, long long ri) {
      if (ints && std::fabs(r) < 9e15) return CVal::integer(ri);
      return CVal::real(r);
    };
    if (op == "add") return wrap(u + v, x.i + y.i);
    if (op == "sub") return wrap(u - v, x.i - y.i);
    if (op == "mul") return wrap(u * v, x.i * y.i);
    if (op == "div") return v == 0 ? CVal::unknown("a division by zero") : CVal::real(u / v);
    if (op == "floordiv" && v != 0) {
      if (ints) {
        long long q = x.i / y.i;
        if ((x.i % y.i != 0) && ((x.i < 0) != (y.i < 0))) --q;
        return CVal::integer(q);
      }
      return CVal::real(std::floor(u / v));
    }
    if (op == "remainder" && ints && y.i != 0) {
      long long r = x.i % y.i;
      if (r != 0 && ((r < 0) != (y.i < 0))) r += y.i;
      return CVal::integer(r);
    }
    if (op == "pow" && ints && y.i >= 0 && y.i < 63) {
      long long r = 1;
      for (long long k = 0; k < y.i; ++k) r *= x.i;
      return CVal::integer(r);
    }
    return CVal::unknown("the result of " + op);
  }

  CVal call(const Expr& e) {
    const Expr& callee = e.items[0];
    // Operators and the lazy and / or.
    if (callee.kind == Expr::kName && (callee.text == "__and__" || callee.text == "__or__")) {
      const CVal x = eval(e.items[1]);
      const auto t = truth(x);
      if (!t) return CVal::unknown("a condition on " + what(x), x.param);
      if (*t == (callee.text == "__or__")) return x;
      return eval(e.items[2]);
    }
    std::vector<CVal> args;
    std::map<std::string, CVal> kw;
    auto collect = [&]() {
      for (size_t k = 1; k < e.items.size(); ++k) {
        const Expr& a = e.items[k];
        const std::string& key = e.names[k - 1];
        if (a.kind == Expr::kStarred) {
          const CVal s = eval(a.items[0]);
          if (a.text == "*" && (s.kind == CVal::kList || s.kind == CVal::kTuple)) {
            for (const CVal& x : s.items) args.push_back(x);
          } else if (a.text == "**" && s.kind == CVal::kDict) {
            for (size_t j = 0; j + 1 < s.items.size(); j += 2)
              if (s.items[j].kind == CVal::kStr) kw[s.items[j].s] = s.items[j + 1];
          } else {
            args.push_back(CVal::unknown("arguments unpacked from " + what(s), s.param));
          }
        } else if (key.empty()) {
          args.push_back(eval(a));
        } else {
          kw[key] = eval(a);
        }
      }
    };
    // Method calls on a value: list.append / extend, module.add_module.
    if (callee.kind == Expr::kAttribute) {
      const std::string& method = callee.text;
      if ((method == "append" || method == "extend") && callee.items[0].kind == Expr::kName) {
        auto& vars = frames_.back().vars;
        auto it = vars.find(callee.items[0].text);
        if (it != vars.end() && it->second.kind == CVal::kList) {
          collect();
          if (args.size() == 1) {
            if (method == "append") {
              add(it->second, args[0]);
            } else if (args[0].kind == CVal::kList || args[0].kind == CVal::kTuple) {
              for (const CVal& x : args[0].items) add(it->second, x);
            }
          }
          return CVal::of(CVal::kNone);
        }
      }
      const CVal base = eval(callee.items[0]);
      if (base.kind == CVal::kSuper) return CVal::of(CVal::kNone);  // super().__init__(...)
      if (base.kind == CVal::kModule) {
        collect();
        if (method == "add_module" || method == "register_module") {
          if (args.size() == 2 && args[0].kind == CVal::kStr) set_attribute(base.node, args[0].s, args[1]);
          return CVal::of(CVal::kNone);
        }
        if (method == "append" && nodes_[static_cast<size_t>(base.node)].nn && args.size() == 1) {
          Node& n = nodes_[static_cast<size_t>(base.node)];
          if (args[0].kind == CVal::kModule) n.children.emplace_back(std::to_string(n.children.size()), args[0].node);
          return CVal::of(CVal::kNone);
        }
        return CVal::unknown("the result of " + method + "()");
      }
    }
    const CVal fn = eval(callee);
    collect();
    if (fn.kind == CVal::kClass) {
      const python::ClassDef* cls = p_.find_class(fn.s);
      if (cls) return module_val(instantiate(*cls, std::move(args), std::move(kw), text_of(e)));
    }
    if (fn.kind != CVal::kFunction) return CVal::unknown("the result of calling " + what(fn));
    const std::string& q = fn.s;
    if (q.rfind("torch.", 0) == 0 && q.find('.', 6) == std::string::npos && q != "torch.tensor") {
      // Operators (torch.add, torch.eq, ...).
      if (q == "torch.__not__") {
        const auto t = args.size() == 1 ? truth(args[0]) : std::nullopt;
        return t ? CVal::boolean(!*t) : CVal::unknown("a negation", args.empty() ? "" : args[0].param);
      }
      if (q == "torch.__is__" || q == "torch.__isnot__") {
        if (args.size() != 2) return CVal::unknown("a comparison");
        if (!args[0].known() || !args[1].known())
          return CVal::unknown("whether " + what(args[0]) + " is None", args[0].param.empty() ? args[1].param : args[0].param);
        const bool same = args[0].kind == args[1].kind && (args[0].kind == CVal::kNone || repr(args[0]) == repr(args[1]));
        return CVal::boolean(same == (q == "torch.__is__"));
      }
      if (q == "torch.neg" && args.size() == 1 && args[0].number())
        return args[0].kind == CVal::kFloat ? CVal::real(-args[0].f) : CVal::integer(-args[0].i);
      return arithmetic(q, args);
    }
    if (q == "super") return CVal::of(CVal::kSuper);
    if (q == "setattr" && args.size() == 3 && args[0].kind == CVal::kModule && args[1].kind == CVal::kStr) {
      set_attribute(args[0].node, args[1].s, args[2]);
      return CVal::of(CVal::kNone);
    }
    if (q == "getattr" && args.size() >= 2 && args[0].kind == CVal::kModule && args[1].kind == CVal::kStr)
      return attribute(args[0], args[1].s);
    if (q == "int" || q == "float" || q == "bool") {
      if (args.size() != 1 || !args[0].number()) return CVal::unknown("the result of " + q + "()", args.empty() ? "" : args[0].param);
      if (q == "int") return CVal::integer(static_cast<long long>(args[0].as_double()));
      if (q == "float") return CVal::real(args[0].as_double());
      return CVal::boolean(args[0].as_double() != 0);
    }
    if (q == "len" && args.size() == 1 && (args[0].kind == CVal::kList || args[0].kind == CVal::kTuple))
      return CVal::integer(static_cast<long long>(args[0].items.size()));
    if ((q == "max" || q == "min") && args.size() == 2 && args[0].number() && args[1].number())
      return (args[0].as_double() < args[1].as_double()) == (q == "min") ? args[0] : args[1];
    if (q == "range") {
      long long b = 0, end = 0, st = 1;
      for (const CVal& a : args)
        if (a.kind != CVal::kInt) return CVal::unknown("a range of " + what(a), a.param);
      if (args.size() == 1) end = args[0].i;
      else if (args.size() >= 2) b = args[0].i, end = args[1].i;
      if (args.size() == 3) st = args[2].i;
      if (args.empty() || st == 0) return CVal::unknown("a range");
      CVal r = CVal::of(CVal::kList);
      for (long long k = b; st > 0 ? k < end : k > end; k += st) add(r, CVal::integer(k));
      return r;
    }
    if (q == "list" || q == "tuple") {
      if (args.empty()) return CVal::of(q == "list" ? CVal::kList : CVal::kTuple);
      if (args[0].kind == CVal::kList || args[0].kind == CVal::kTuple) {
        CVal r = args[0];
        r.kind = q == "list" ? CVal::kList : CVal::kTuple;
        return r;
      }
      return CVal::unknown("a list of " + what(args[0]), args[0].param);
    }
    if (q == "dict" && args.empty()) {
      CVal d = CVal::of(CVal::kDict);
      for (auto& [k, v] : kw) {
        add(d, CVal::str(k));
        add(d, v);
      }
      return d;
    }
    if (q == "collections.OrderedDict" || q == "OrderedDict" || q == "typing.OrderedDict") {
      CVal d = CVal::of(CVal::kDict);
      if (!args.empty() && (args[0].kind == CVal::kList || args[0].kind == CVal::kTuple)) {
        for (const CVal& pair : args[0].items) {
          if ((pair.kind != CVal::kTuple && pair.kind != CVal::kList) || pair.items.size() != 2)
            return CVal::unknown("an OrderedDict of " + what(pair));
          add(d, pair.items[0]);
          add(d, pair.items[1]);
        }
      } else if (!args.empty() && args[0].kind == CVal::kDict) {
        d = args[0];
      }
      return d;
    }
    if (q.rfind("torch.nn.", 0) == 0 && q.find('.', 9) == std::string::npos) return nn_module(q.substr(9), args, kw, e);
    if (q.rfind("torch.nn.modules.", 0) == 0) return nn_module(python::last_name(q), args, kw, e);
    if (q == "torch.device" || q.find("device") != std::string::npos) return CVal::unknown("a device");
    return CVal::unknown("the result of " + q.substr(0, 60) + "()");
  }

  static std::string text_of(const Expr& e);

  CVal nn_module(const std::string& cls, const std::vector<CVal>& args, const std::map<std::string, CVal>& kw,
                 const Expr& e) {
    Node n;
    n.cls = cls;
    n.nn = true;
    n.constructor = text_of(e);
    n.where = here();
    if (cls == "Sequential" || cls == "ModuleList" || cls == "ModuleDict") {
      const int self = new_node(std::move(n));
      std::vector<std::pair<std::string, CVal>> items;
      if (cls == "Sequential" && args.size() == 1 && args[0].kind == CVal::kDict) {
        for (size_t k = 0; k + 1 < args[0].items.size(); k += 2) items.emplace_back(args[0].items[k].s, args[0].items[k + 1]);
      } else if (cls == "Sequential") {
        for (size_t k = 0; k < args.size(); ++k) items.emplace_back(std::to_string(k), args[k]);
      } else if (cls == "ModuleList" && !args.empty() && (args[0].kind == CVal::kList || args[0].kind == CVal::kTuple)) {
        for (size_t k = 0; k < args[0].items.size(); ++k) items.emplace_back(std::to_string(k), args[0].items[k]);
      } else if (cls == "ModuleDict" && !args.empty() && args[0].kind == CVal::kDict) {
        for (size_t k = 0; k + 1 < args[0].items.size(); k += 2) items.emplace_back(args[0].items[k].s, args[0].items[k + 1]);
      } else if (!args.empty()) {
        nodes_[static_cast<size_t>(self)].attrs["__items__"] = CVal::unknown("the modules of an nn." + cls + " built from " +
                                                                                what(args[0]), args[0].param);
      }
      for (auto& [name, v] : items) {
        if (v.kind != CVal::kModule)
          fail("an nn." + cls + " holding " + what(v) + " (item " + name + "), not a module ferry can follow" +
               (v.kind == CVal::kUnknown ? std::string(": ") + ask(v) : std::string()));
        nodes_[static_cast<size_t>(self)].children.emplace_back(name, v.node);
      }
      return module_val(self);
    }
    if (const NnClass* c = nn_class(cls)) {
      size_t k = 0;
      for (const auto& [pname, dflt] : c->params) {
        CVal v;
        if (k < args.size()) {
          v = args[k++];
        } else if (auto it = kw.find(pname); it != kw.end()) {
          v = it->second;
        } else if (*dflt) {
          Expr d;
          d.kind = dflt[0] == '\'' ? Expr::kString : (std::isalpha(static_cast<unsigned char>(dflt[0])) ? Expr::kName
                                                                                                       : Expr::kNumber);
          d.text = dflt[0] == '\'' ? std::string(dflt + 1, std::strlen(dflt) - 2) : dflt;
          v = eval(d);
        } else {
          v = CVal::unknown("a required argument left out");
        }
        n.options[pname] = v;
      }
    }
    return module_val(new_node(std::move(n)));
  }

  const python::Program& p_;
  const std::map<std::string, CVal>& decided_;
  std::vector<Node> nodes_;
  std::vector<Frame> frames_;
  std::set<std::string> constants_in_use_;
  size_t line_ = 0, steps_ = 0, held_ = 0;

 public:
  std::map<std::string, CVal> root_params_, defaults_;
};

// An expression as the code wrote it, closely enough for a listing.
std::string Constructor::text_of(const Expr& e) {
  switch (e.kind) {
    case Expr::kName: case Expr::kNumber: return e.text;
    case Expr::kString: return "'" + e.text.substr(0, 40) + "'";
    case Expr::kAttribute: return text_of(e.items[0]) + "." + e.text;
    case Expr::kCall: {
      std::string t = text_of(e.items[0]) + "(";
      for (size_t k = 1; k < e.items.size() && k < 16; ++k)
        t += (k > 1 ? ", " : "") + (e.names[k - 1].empty() ? "" : e.names[k - 1] + "=") + text_of(e.items[k]);
      if (t.size() > 160) t = t.substr(0, 157) + "...";
      return t + ")";
    }
    case Expr::kTuple: case Expr::kList: {
      std::string t = e.kind == Expr::kTuple ? "(" : "[";
      for (size_t k = 0; k < e.items.size() && k < 8; ++k) t += (k ? ", " : "") + text_of(e.items[k]);
      return t + (e.kind == Expr::kTuple ? ")" : "]");
    }
    case Expr::kStarred: return e.text + text_of(e.items[0]);
    default: return "...";
  }
}

// Paths, depth first; the order of module objects.
void assign_paths(std::vector<Node>& nodes, int n, const std::string& path, std::vector<int>& order, size_t depth = 0) {
  if (depth > 64 || std::find(order.begin(), order.end(), n) != order.end()) return;  // a module held twice
  nodes[static_cast<size_t>(n)].path = path;
  order.push_back(n);
  const auto children = nodes[static_cast<size_t>(n)].children;
  for (const auto& [name, c] : children) assign_paths(nodes, c, child_path(path, name), order, depth + 1);
}

// The attribute text a pickled module records for an option.
std::optional<std::string> attribute_text(const CVal& v, bool as_tuple) {
  switch (v.kind) {
    case CVal::kBool: return std::string(v.i ? "true" : "false");
    case CVal::kInt: return as_tuple ? "(" + std::to_string(v.i) + ",)" : std::to_string(v.i);
    case CVal::kFloat: return float_text(v.f);
    case CVal::kStr: return v.s;
    case CVal::kTuple: case CVal::kList: {
      std::string t = "(";
      for (const CVal& i : v.items) {
        if (i.kind != CVal::kInt) return std::nullopt;
        t += std::to_string(i.i) + ",";
      }
      return t + ")";
    }
    default: return std::nullopt;
  }
}

// Options whose value changes what the layer computes and that the weights
// do not show: asked for when the code leaves them unknown.
const char* const kSemanticOptions[] = {"batch_first", "nonlinearity", "stride", "padding", "dilation", "groups",
                                        "padding_mode", "eps", "negative_slope", "alpha", "min_val", "max_val",
                                        "approximate", "dim", "max_norm"};

bool is_module_class(const python::Program& p, const python::ClassDef& c, size_t depth = 0) {
  if (depth > 32) return false;
  for (const std::string& b : c.bases) {
    const std::string q = p.qualified(b);
    const std::string last = python::last_name(q);
    if (last == "Module" || last == "LightningModule") return true;
    if (const python::ClassDef* base = p.find_class(q); base && base != &c && is_module_class(p, *base, depth + 1))
      return true;
  }
  return false;
}

struct Candidate {
  const python::ClassDef* cls = nullptr;
  std::string prefix;
  std::vector<Node> nodes;
  std::vector<int> order;
  std::string mismatch;  // empty: it matches
  std::map<std::string, CVal> params, defaults;
};

// The module of `modules` at `path` (null: none, or one ferry cannot read).
const Module* readable(const ModuleSet& modules, const std::string& path) {
  for (const Module& m : modules.modules)
    if (m.path == path) return &m;
  return nullptr;
}

// Whether the checkpoint has a module at `path`, unreadable ones included.
bool has_module(const ModuleSet& modules, const std::string& path) {
  return readable(modules, path) ||
         std::any_of(modules.unreadable.begin(), modules.unreadable.end(), [&](const auto& u) { return u.first == path; });
}

// Builds `cls` and compares it with the checkpoint's modules.
Candidate try_class(const python::Program& p, const python::ClassDef& cls, const std::string& prefix,
                    const ModuleSet& modules, std::optional<bool> batch_first) {
  Candidate c;
  c.cls = &cls;
  c.prefix = prefix;
  std::map<std::string, CVal> decided;
  for (size_t pass = 0; pass < kMaxPasses; ++pass) {
    Constructor ctor(p, decided);
    const int root = ctor.build_root(cls);
    c.nodes = std::move(ctor.nodes());
    c.order.clear();
    assign_paths(c.nodes, root, "", c.order);
    c.params = ctor.root_params_;
    c.defaults = ctor.defaults_;
    // Parameters the weights decide: a layer option given the bare parameter.
    bool changed = false;
    for (int n : c.order) {
      const Node& node = c.nodes[static_cast<size_t>(n)];
      if (!node.nn) continue;
      const Module* m = readable(modules, child_path(prefix, node.path));
      if (!m || !kind_fits(node.cls, *m)) continue;
      std::map<std::string, CVal> decided_here = decided_by_weights(node.cls, *m);
      if (batch_first && m->type == ModuleType::Recurrent && !m->is_cell)
        decided_here["batch_first"] = CVal::boolean(*batch_first);
      for (const auto& [opt, value] : decided_here) {
        auto o = node.options.find(opt);
        if (o == node.options.end()) continue;
        const std::string& param = o->second.param;
        if (param.empty() || !o->second.bare || decided.count(param) || !c.params.count(param)) continue;
        decided[param] = value;
        changed = true;
      }
    }
    if (!changed) break;
  }
  // Compare: every module of the checkpoint is a layer of the class, of its
  // kind; every weighted layer of the class is in the checkpoint.
  std::set<std::string> paths;
  for (int n : c.order) {
    const Node& node = c.nodes[static_cast<size_t>(n)];
    const std::string path = child_path(prefix, node.path);
    paths.insert(path);
    if (node.nn && node.weighted() && !has_module(modules, path)) {
      c.mismatch = "its layer '" + shown_path(node.path) + "' (" + node.constructor + ") has no weights in the checkpoint";
      return c;
    }
    if (node.nn && node.weighted()) {
      if (const Module* m = readable(modules, path); m && !kind_fits(node.cls, *m)) {
        c.mismatch = "its layer '" + shown_path(node.path) + "' is an nn." + node.cls + ", but the checkpoint's '" + shown_path(path) +
                     "' is " + m->describe();
        return c;
      }
    }
  }
  for (const Module& m : modules.modules) {
    if (!paths.count(m.path)) {
      c.mismatch = "the checkpoint's '" + shown_path(m.path) + "' (" + m.describe() + ") is not one of its layers";
      return c;
    }
    // A layer the class builds as something other than a torch.nn layer.
    for (int n : c.order) {
      const Node& node = c.nodes[static_cast<size_t>(n)];
      if (child_path(prefix, node.path) != m.path) continue;
      if (!node.nn && !node.passed) {
        c.mismatch = "the checkpoint's '" + shown_path(m.path) + "' (" + m.describe() + ") is its " + node.cls +
                     " module, not a layer";
        return c;
      }
    }
  }
  for (const auto& u : modules.unreadable)
    if (!paths.count(u.first)) {
      c.mismatch = "the checkpoint's '" + shown_path(u.first) + "' is not one of its layers";
      return c;
    }
  return c;
}

// The leading path component every checkpoint module shares, or "".
std::string common_prefix(const ModuleSet& modules) {
  std::string prefix;
  bool first = true;
  for (const Module& m : modules.modules) {
    const size_t dot = m.path.find('.');
    const std::string head = dot == std::string::npos ? "" : m.path.substr(0, dot);
    if (head.empty()) return "";
    if (first) prefix = head;
    else if (head != prefix) return "";
    first = false;
  }
  return prefix;
}

// The forward of `cls` (or a base's) into `object`.
void attach_forward(const python::Program& p, const python::ClassDef& cls, ModuleObject& object) {
  const python::Def* fwd = p.find_method(cls, "forward").first;
  if (!fwd) return;
  object.forward = fwd->lines;
  object.code_record = fwd->file ? fwd->file->name : std::string();
}

}  // namespace

CodeModel read_model_code(const std::vector<std::string>& code, Checkpoint& checkpoint, const ModuleSet& modules,
                          const CodeOptions& options) {
  CodeModel out;
  std::string wanted;  // :Class
  for (const std::string& arg : code) {
    std::string path = arg;
    const size_t colon = arg.rfind(':');
    if (colon != std::string::npos && colon + 1 < arg.size() && arg.find('/', colon) == std::string::npos &&
        arg.find('.', colon) == std::string::npos) {
      path = arg.substr(0, colon);
      if (!wanted.empty() && wanted != arg.substr(colon + 1))
        throw Error("--code names two model classes, '" + escaped(wanted) + "' and '" + escaped(arg.substr(colon + 1)) + "'");
      wanted = arg.substr(colon + 1);
    }
    python::read_source(path, out.program);
  }
  return match_model(std::move(out), wanted, checkpoint, modules, options);
}

CodeModel match_model(CodeModel out, const std::string& wanted, Checkpoint& checkpoint, const ModuleSet& modules,
                      const CodeOptions& options) {
  const python::Program& p = out.program;
  std::vector<const python::ClassDef*> candidates;
  for (const python::ClassDef& c : p.classes)
    if (wanted.empty() ? is_module_class(p, c) : c.name == wanted) candidates.push_back(&c);
  if (!wanted.empty() && candidates.empty()) {
    std::string names;
    for (const python::ClassDef& c : p.classes) names += (names.empty() ? "" : ", ") + c.name;
    throw Error("--code: no class '" + escaped(wanted) + "' in the files given" +
                (names.empty() ? std::string(" (they define no class)") : " (they define " + escaped(names) + ")"));
  }
  std::string files;
  for (const auto& f : p.files) files += (files.empty() ? "" : ", ") + f->name;

  // A whole pickled module: its own classes and options; the code gives the forwards.
  if (!checkpoint.module_objects.empty()) {
    const ModuleObject& root = checkpoint.module_objects[0];
    const python::ClassDef* cls = p.find_class(root.class_name);
    if (!cls || (!wanted.empty() && cls->name != wanted))
      throw Error("the checkpoint is a pickled " + escaped(root.class_name) + ", whose class " +
                  (wanted.empty() ? "is not defined in " + files : "is not the '" + escaped(wanted) + "' named"));
    out.class_name = cls->name;
    out.class_where = cls->file->where(cls->line);
    for (ModuleObject& o : checkpoint.module_objects) {
      if (o.class_name.rfind("torch.nn.", 0) == 0 || o.class_name.rfind("__torch__.", 0) == 0) {
        out.layers.push_back({o.path, python::last_name(o.class_name), "recorded in the file"});
        continue;
      }
      if (const python::ClassDef* c = p.find_class(o.class_name)) attach_forward(p, *c, o);
    }
    if (checkpoint.module_objects[0].forward.empty())
      throw Error(files + ": class " + cls->name + " (" + out.class_where + ") defines no forward");
    return out;
  }

  std::vector<Candidate> tried;
  std::vector<Candidate> matches;
  const std::string prefix = common_prefix(modules);
  std::vector<std::string> roots{""};
  if (!prefix.empty()) roots.push_back(prefix);
  for (const std::string& at : roots) {
    if (!matches.empty()) break;
    for (const python::ClassDef* c : candidates) {
      Candidate cand;
      try {
        cand = try_class(p, *c, at, modules, options.batch_first);
      } catch (const Error& e) {
        cand.cls = c;
        cand.prefix = at;
        cand.mismatch = std::string("its constructor cannot be read: ") + e.what();
      }
      if (cand.mismatch.empty()) matches.push_back(std::move(cand));
      else if (at.empty()) tried.push_back(std::move(cand));
    }
  }
  if (matches.empty()) {
    std::string why;
    for (const Candidate& c : tried) {
      why += "; class " + c.cls->name + " (" + c.cls->file->where(c.cls->line) + "): " + c.mismatch;
    }
    std::string have;
    for (const Module& m : modules.modules) have += (have.empty() ? "" : ", ") + shown_path(m.path) + " " + m.describe();
    if (candidates.empty())
      throw Error(files + ": no nn.Module class" + (wanted.empty() ? std::string() : " '" + wanted + "'") +
                  " in the files given (pass the file that defines the model, or file.py:ClassName)");
    throw Error(files + ": no class matches the checkpoint's modules (" + have + ")" + why);
  }
  // Several classes with the same layers: the one no other holds (an
  // outer wrapper) is not decidable either; the user names it.
  if (matches.size() > 1) {
    // A class that builds its layers itself says more than one handed its
    // layers as arguments (ConvLSTM(conv, lstm, fc)): the fewest passed wins.
    auto passed = [](const Candidate& c) {
      size_t n = 0;
      for (const Node& node : c.nodes) n += node.passed;
      return n;
    };
    std::stable_sort(matches.begin(), matches.end(),
                     [&](const Candidate& a, const Candidate& b) { return passed(a) < passed(b); });
    if (passed(matches[0]) < passed(matches[1])) matches.resize(1);
  }
  if (matches.size() > 1) {
    std::string names;
    for (const Candidate& c : matches) names += (names.empty() ? "" : ", ") + c.cls->name + " (" + c.cls->file->where(c.cls->line) + ")";
    throw Error(files + ": several classes match the checkpoint's modules: " + names +
                "; name one with --code FILE:ClassName");
  }
  Candidate& m = matches[0];
  // Another class that might have been the model: its constructor could not
  // be read, or it has layers at the checkpoint's paths. Then the pick is said.
  const bool rival = std::any_of(tried.begin(), tried.end(), [&](const Candidate& c) {
    if (c.nodes.empty()) return true;
    for (const Node& node : c.nodes)
      if (node.nn && node.weighted() && has_module(modules, child_path(c.prefix, node.path))) return true;
    return false;
  });
  if (wanted.empty() && rival)
    out.notes.push_back("class " + m.cls->name + " (" + m.cls->file->where(m.cls->line) + ") is the model: of the " +
                        std::to_string(candidates.size()) + " nn.Module classes in " + files +
                        ", it is the one whose layers match the checkpoint's (name it with --code FILE:" + m.cls->name +
                        " to be sure)");
  out.class_name = m.cls->name;
  out.class_where = m.cls->file->where(m.cls->line);
  out.root_path = m.prefix;

  // Options the code leaves undecided and the user did not give.
  for (int n : m.order) {
    const Node& node = m.nodes[static_cast<size_t>(n)];
    if (!node.nn) continue;
    for (const char* opt : kSemanticOptions) {
      auto o = node.options.find(opt);
      if (o == node.options.end() || o->second.known()) continue;
      if (std::string(opt) == "batch_first" && (options.layout_given || options.graph_given)) continue;
      if (std::string(opt) != "batch_first" && options.graph_given) continue;
      const std::string how = std::string(opt) == "batch_first" ? "pass --batch-first, or --layout btf|tbf"
                                                                : "pass --graph with the option";
      throw Error(node.where + ": " + opt + " of self." + node.path + " depends on " +
                  (o->second.param.empty() ? o->second.s : "the argument '" + o->second.param + "'") +
                  ", which has no default and which the weights do not show: " + how);
    }
    for (const char* opt : kSemanticOptions) {
      auto o = node.options.find(opt);
      if (o == node.options.end() || !o->second.defaulted) continue;
      if (std::string(opt) == "batch_first" && options.layout_given) continue;
      if (options.graph_given && std::string(opt) != "batch_first") continue;
      const bool bf = std::string(opt) == "batch_first";
      out.defaults.push_back({node.cls + " '" + node.path + "'", opt,
                              repr(o->second) + " (the default of " + m.cls->name + "'s argument '" + o->second.param + "')",
                              bf ? "--layout btf|tbf" : "--graph '" + node.path + "(" + opt + "=...)'"});
    }
    if (node.cls == "Embedding") {
      auto mn = node.options.find("max_norm");
      if (mn != node.options.end() && mn->second.kind != CVal::kNone)
        throw Error(node.where + ": nn.Embedding '" + node.path + "' with max_norm (it renormalizes the rows it reads): "
                    "ferry runs the stored weights as they are");
    }
  }
  // Where the weights overrode a default, other defaults may not be the
  // model's either: said.
  for (const auto& [param, v] : m.params) {
    auto d = m.defaults.find(param);
    if (d != m.defaults.end() && v.known() && repr(d->second) != repr(v))
      out.notes.push_back("the weights give " + m.cls->name + "(" + param + "=" + repr(v) + "), not its default " +
                          repr(d->second) + ": the options the weights do not show are the constructor's defaults");
  }

  // Module objects and attributes, as a whole pickled module records them.
  for (int n : m.order) {
    const Node& node = m.nodes[static_cast<size_t>(n)];
    const std::string path = child_path(m.prefix, node.path);
    ModuleObject o;
    o.path = strip_wrapper_prefixes(path);
    if (node.passed) {
      const Module* mod = readable(modules, path);
      if (!mod) continue;  // a plain value, or a module with no weights: not followed
      o.class_name = "torch.nn.modules." + std::string(mod->type == ModuleType::Recurrent ? pytorch_class_name(mod->kind) : "");
      out.layers.push_back({path, "passed to the constructor as '" + node.argument + "': " + mod->describe(), node.where});
      if (mod->type == ModuleType::Recurrent && !options.layout_given && !options.graph_given)
        throw Error(node.where + ": self." + node.path + " is the argument '" + node.argument +
                    "', a module built outside the class: its batch_first is not in the code and the weights do not "
                    "show it: pass --batch-first, or --layout btf|tbf");
      if (mod->type != ModuleType::Recurrent) o.class_name = "torch.nn.modules.Passed";
      checkpoint.module_objects.push_back(std::move(o));
      continue;
    }
    if (node.nn) {
      o.class_name = "torch.nn.modules." + node.cls;
      checkpoint.attributes[attribute_key(path, kClassAttribute)] = node.cls;
      const bool conv = node.cls == "Conv1d";
      for (const auto& [opt, v] : node.options) {
        const bool tuple = conv && (opt == "kernel_size" || opt == "stride" || opt == "padding" || opt == "dilation");
        const bool layer_norm_shape = node.cls == "LayerNorm" && opt == "normalized_shape";
        if (auto t = attribute_text(v, tuple || layer_norm_shape)) checkpoint.attributes[attribute_key(path, opt)] = *t;
        // batch_first the code leaves undecided (cfg.batch_first) and the user gave.
        else if (opt == "batch_first" && options.batch_first)
          checkpoint.attributes[attribute_key(path, opt)] = *options.batch_first ? "true" : "false";
      }
      out.layers.push_back({path, node.constructor, node.where});
    } else {
      o.class_name = node.user ? node.user->name : node.cls;
      if (node.user) attach_forward(p, *node.user, o);
      for (const auto& [name, v] : node.attrs) {
        if (v.kind == CVal::kStr) o.scalars[name] = "'" + v.s + "'";
        else if (v.kind == CVal::kBool || v.kind == CVal::kInt || v.kind == CVal::kFloat || v.kind == CVal::kNone)
          o.scalars[name] = repr(v);
        else if (v.kind == CVal::kUnknown)
          o.undecided[name] = v.param.empty() ? v.s
                                              : "the argument '" + v.param + "' of " + m.cls->name +
                                                    "(), which has no default and which the weights do not show";
      }
      if (node.user)
        for (const auto& [name, a] : node.user->attributes)
          if (!o.scalars.count(name) && (a.first.kind == Expr::kNumber || a.first.kind == Expr::kName))
            o.scalars[name] = a.first.text;
      out.layers.push_back({path, node.constructor, node.where});
    }
    checkpoint.module_objects.push_back(std::move(o));
  }
  if (checkpoint.module_objects.empty() || checkpoint.module_objects[0].forward.empty())
    throw Error(files + ": class " + m.cls->name + " (" + out.class_where + ") defines no forward");
  return out;
}

}  // namespace ferry::conv
