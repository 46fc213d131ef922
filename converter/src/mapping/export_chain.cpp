// The chain of a torch.export graph: a walk over the nodes in their order
// (the reader checked it is a topological one), one table row per op ferry
// reads, tracking for every value whether it is on the chain (computed from
// the input), a parameter, a zeros state, a recurrent module's final hidden
// state, or something else, and for chain values which axis is which under
// each input layout still possible (ChainAxes, the tracker the TorchScript
// and Sequential readers use too).
#include "mapping/export_chain.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <unordered_map>

#include "checkpoint/export_graph.h"
#include "error.h"
#include "mapping/chain_axes.h"
#include "mapping/graph.h"
#include "mapping/modules.h"

namespace ferry::conv {
namespace {

// A time axis kept at length 1 (y[:, -1:], a mean with keepdim): ChainAxes
// letters are 'B', 'T', 'F' and this.
constexpr char kUnitTime = '1';

const char* axis_name(char axis) {
  switch (axis) {
    case 'B': return "batch";
    case 'T': return "time";
    case 'F': return "feature";
    case kUnitTime: return "length-1 time";
    default: break;
  }
  return "undetermined";
}

// "[B, T, F]" of "BTF", or with `names` "[batch, time, feature]".
std::string bracketed(const std::string& axes, bool names) {
  std::string s;
  for (char a : axes) s += (s.empty() ? "" : ", ") + (names ? std::string(axis_name(a)) : std::string(1, a));
  return "[" + s + "]";
}

constexpr unsigned layout_bit(InputLayout l) { return 1u << static_cast<unsigned>(l); }

ExportInputLayout export_layout(InputLayout l) {
  switch (l) {
    case InputLayout::kBTF: return ExportInputLayout::kBatchFirst;
    case InputLayout::kTBF: return ExportInputLayout::kTimeMajor;
    case InputLayout::kBFT: return ExportInputLayout::kChannelsFirst;
    case InputLayout::kBF: break;
  }
  return ExportInputLayout::kNone;
}

struct Val {
  enum Kind { kNone, kChain, kParam, kZeros, kHidden, kSym, kOpaque } kind = kNone;
  std::vector<GraphElement> chain;  // kChain; kHidden: the chain through its module
  Axes axes;                        // kChain; kHidden: [B, F] of h_n[-1]
  std::vector<std::string> path;    // kChain, kHidden: the chain values from the input to this one
  std::vector<size_t> path_len;     // the chain's length at each
  std::string text;                 // kParam: the FQN; kOpaque: what made it; kHidden: the module
  bool one_direction = false;       // kHidden
  int64_t layers = 0;               // kHidden
};

bool same_element(const GraphElement& a, const GraphElement& b) {
  return a.op == b.op && a.module == b.module && a.option == b.option && a.args == b.args;
}

// Shortest text that reads back as the same double ("0.2", not 0.2000000000000000111).
std::string number_text(double x) {
  char buf[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

GraphElement builtin(OpKind op) {
  GraphElement e;
  e.op = op;
  return e;
}

class Reader {
 public:
  explicit Reader(const Checkpoint& c) : c_(c), g_(*c.export_graph) {
    for (const TensorRef& t : c.tensors) tensors_[t.name] = &t;
  }

  ExportChain run() {
    check_decomposed();
    bind_inputs();
    for (const ExportNode& n : g_.nodes) node(n);
    const Val& out = output();
    ExportChain r;
    r.layout = resolve_layout(out, &r.output_layout);
    r.graph = format_graph(out.chain);
    r.notes = std::move(notes_);
    return r;
  }

 private:
  using Handler = void (Reader::*)(const ExportNode&);
  struct Rule {
    const char* target;
    Handler handle;
  };
  static const Rule kRules[];
  static const Rule* find_rule(const std::string& target);

  // ---------------------------------------------------------------- errors --
  std::string modules_text() const {
    std::vector<std::string> seen;
    std::string s;
    for (const ExportNode& n : g_.nodes) {
      if (!n.has_module || n.module_path.empty()) continue;
      if (std::find(seen.begin(), seen.end(), n.module_path) != seen.end()) continue;
      seen.push_back(n.module_path);
      const size_t dot = n.module_class.rfind('.');
      s += (s.empty() ? "" : ", ") + n.module_path + " (" +
           (dot == std::string::npos ? n.module_class : n.module_class.substr(dot + 1)) + ")";
      if (seen.size() >= 16) break;
    }
    return s;
  }
  std::string advice() const {
    const std::string m = modules_text();
    return "the layer chain cannot be read from this graph: pass --graph (and --layout) to convert the weights alone" +
           (m.empty() ? std::string() : " (the graph's modules: " + m + ")");
  }
  [[noreturn]] void fail(const ExportNode& n, const std::string& why) const {
    throw Error(g_.label + ": " + n.describe() + ": " + why + "; " + advice());
  }
  [[noreturn]] void fail(const std::string& why) const { throw Error(g_.label + ": " + why + "; " + advice()); }

  std::string what(const Val& v) const {
    switch (v.kind) {
      case Val::kNone: return "nothing ferry follows";
      case Val::kChain: return "a value computed from the model's input";
      case Val::kParam: return "the state-dict tensor '" + v.text + "'";
      case Val::kZeros: return "a zeros tensor";
      case Val::kHidden: return "the final hidden state of '" + v.text + "'";
      case Val::kSym: return "a symbolic size";
      case Val::kOpaque: return "the output of " + v.text;
    }
    return "";
  }

  // ------------------------------------------------- the core-ATen check --
  // After run_decompositions() an RNN module's nodes are per-step cells
  // (addmm, sigmoid, tanh, mul, ...) and no fused aten.lstm / gru / rnn op.
  void check_decomposed() const {
    struct Seen {
      const ExportNode* first_compute = nullptr;
      bool fused = false;
      std::string cls;
    };
    std::map<std::string, Seen> rnn_modules;
    std::vector<std::string> order;
    for (const ExportNode& n : g_.nodes) {
      if (!n.has_module) continue;
      const std::string& cls = n.module_class;
      const size_t dot = cls.rfind('.');
      const std::string leaf = dot == std::string::npos ? cls : cls.substr(dot + 1);
      if (leaf != "LSTM" && leaf != "GRU" && leaf != "RNN") continue;
      auto [it, fresh] = rnn_modules.emplace(n.module_path, Seen{});
      if (fresh) order.push_back(n.module_path);
      Seen& s = it->second;
      s.cls = leaf;
      const std::string& t = n.target;
      if (t == "aten.lstm.input" || t == "aten.gru.input" || t == "aten.rnn_tanh.input" || t == "aten.rnn_relu.input") {
        s.fused = true;
      } else if (!s.first_compute && t != "aten.zeros.default" && t != "aten.full.default" &&
                 t != "aten.sym_size.int" && t != "aten.zeros_like.default" && t != "aten.new_zeros.default") {
        s.first_compute = &n;
      }
    }
    for (const std::string& path : order) {
      const Seen& s = rnn_modules.at(path);
      if (s.fused || !s.first_compute) continue;
      std::string lower = s.cls == "RNN" ? "rnn_tanh / rnn_relu" : s.cls == "LSTM" ? "lstm" : "gru";
      fail(*s.first_compute, "core-ATen graph: the " + s.cls + " is unrolled into per-step cells (the program went "
           "through run_decompositions()" + (g_.verifiers.empty() ? std::string() : ", dialect " + g_.verifiers[0]) +
           "); ferry reads the fused aten." + lower + " op that torch.export.export() records: save the program "
           "before run_decompositions()");
    }
  }

  // -------------------------------------------------------------- values --
  Val& val(const std::string& name) {
    auto it = vals_.find(name);
    if (it != vals_.end()) return it->second;
    // Only the graph's own symbols go unmade (the reader checked every other name).
    Val& v = vals_[name];
    v.kind = Val::kSym;
    return v;
  }

  void bind_inputs() {
    std::vector<const ExportInput*> user;
    for (const ExportInput& in : g_.inputs) {
      Val v;
      switch (in.kind) {
        case ExportInput::Kind::Parameter:
        case ExportInput::Kind::Buffer:
          v.kind = Val::kParam;
          v.text = in.target;
          break;
        case ExportInput::Kind::TensorConstant:
          v.kind = Val::kOpaque;
          v.text = "the tensor constant '" + in.target + "'";
          break;
        case ExportInput::Kind::Token:
          v.kind = Val::kOpaque;
          v.text = "an effect token";
          break;
        case ExportInput::Kind::ConstantInput:
          continue;
        case ExportInput::Kind::UserInput:
          if (in.name.empty()) continue;  // a constant the export specialised
          if (!g_.sizes.count(in.name)) {
            v.kind = Val::kSym;  // a symbolic int input
            break;
          }
          user.push_back(&in);
          continue;
      }
      if (!in.name.empty()) vals_[in.name] = v;
    }
    if (user.size() != 1) {
      std::string names;
      for (const ExportInput* in : user) names += (names.empty() ? "'" : ", '") + in->name + "'";
      fail("the program takes " + std::to_string(user.size()) + " tensor inputs" +
           (names.empty() ? std::string() : " (" + names + ")") + "; ferry runs a chain from one input");
    }
    input_ = user[0]->name;
    const std::vector<int64_t>& sizes = g_.sizes.at(input_);
    if (sizes.size() != 2 && sizes.size() != 3)
      fail("the input '" + input_ + "' has " + std::to_string(sizes.size()) +
           " dimensions; ferry takes [B, F], [B, T, F] / [T, B, F] / [B, F, T], or token ids [B, T]");
    input_axes_ = axes_.input_of_rank(sizes.size());
    Val x;
    x.kind = Val::kChain;
    x.axes = input_axes_;
    x.path = {input_};
    x.path_len = {0};
    vals_[input_] = x;
  }

  void set(const ExportNode& n, size_t i, Val v) {
    if (i < n.outputs.size() && !n.outputs[i].empty()) vals_[n.outputs[i]] = std::move(v);
  }

  // Every chain value holds its chain and path: copying them is bounded in
  // total, so that a hostile graph (a million transposes in a row) cannot
  // make the walk quadratic.
  void charge(const ExportNode& n, const Val& v) {
    work_ += v.chain.size() + v.path.size() + 1;
    if (work_ > kMaxWork)
      fail(n, "the graph is too large to read a chain from (its chain values hold more than " +
              std::to_string(kMaxWork) + " elements in all)");
  }

  // `v` with `e` appended (when e is a module or built-in) as output 0 of n.
  Val extend(const ExportNode& n, const Val& v, const GraphElement* e) {
    charge(n, v);
    Val out = v;
    if (e) out.chain.push_back(*e);
    out.path.push_back(n.outputs.empty() ? std::string() : n.outputs[0]);
    out.path_len.push_back(out.chain.size());
    return out;
  }

  const ExportArg& arg(const ExportNode& n, const char* name) const {
    const ExportArg* a = n.arg(name);
    if (!a) fail(n, "no argument '" + std::string(name) + "'");
    return *a;
  }
  Val& tensor(const ExportNode& n, const char* name) {
    const ExportArg& a = arg(n, name);
    if (a.kind != ExportArg::Kind::Tensor || a.names.size() != 1)
      fail(n, "argument '" + std::string(name) + "' is " + a.describe() + ", not a tensor");
    return val(a.names[0]);
  }
  const Val& chain_in(const ExportNode& n, const char* name) {
    const Val& v = tensor(n, name);
    if (v.kind != Val::kChain) fail(n, "its '" + std::string(name) + "' is " + what(v) + ", not a value of the chain");
    return v;
  }
  int64_t integer(const ExportNode& n, const char* name) const {
    int64_t v;
    const ExportArg& a = arg(n, name);
    if (!a.integer(&v)) fail(n, "argument '" + std::string(name) + "' is " + a.describe() + ", not an integer");
    return v;
  }
  bool flag(const ExportNode& n, const char* name) const {
    bool v;
    const ExportArg& a = arg(n, name);
    if (!a.boolean(&v)) fail(n, "argument '" + std::string(name) + "' is " + a.describe() + ", not a bool");
    return v;
  }
  double number(const ExportNode& n, const char* name) const {
    double v;
    const ExportArg& a = arg(n, name);
    if (!a.number(&v)) fail(n, "argument '" + std::string(name) + "' is " + a.describe() + ", not a number");
    return v;
  }
  bool is_none(const ExportNode& n, const char* name) const { return arg(n, name).kind == ExportArg::Kind::None; }

  // The state-dict tensor passed as `name`, which must be a module's `leaf`
  // ("weight"): returns the module's path.
  std::string param(const ExportNode& n, const char* name, const char* leaf) {
    const Val& v = tensor(n, name);
    if (v.kind != Val::kParam)
      fail(n, "its '" + std::string(name) + "' is " + what(v) + ", not a parameter or buffer of the state dict");
    const std::string& fqn = v.text;
    const size_t dot = fqn.rfind('.');
    const std::string module = dot == std::string::npos ? "" : fqn.substr(0, dot);
    const std::string got = dot == std::string::npos ? fqn : fqn.substr(dot + 1);
    if (got != leaf) fail(n, "its '" + std::string(name) + "' is '" + fqn + "', not a module's '" + leaf + "'");
    if (!tensors_.count(fqn)) fail(n, "'" + fqn + "' is not a floating-point tensor of the state dict");
    return module;
  }
  // An optional `leaf` of `module` passed as `name`: absent (None) or that tensor.
  bool optional_param(const ExportNode& n, const char* name, const char* leaf, const std::string& module) {
    if (is_none(n, name)) return false;
    const std::string m = param(n, name, leaf);
    if (m != module)
      fail(n, "its '" + std::string(name) + "' belongs to module '" + m + "', its other tensors to '" + module + "'");
    return true;
  }
  GraphElement module_element(const std::string& module) const {
    GraphElement e;
    e.module = module.empty() ? std::string(kRootModuleName) : module;
    return e;
  }

  // --------------------------------------------------------------- axes --
  // A chain value's axes under each input layout still possible (axes_).
  // What messages and notes call known is what the graph has said: an axis
  // of the input that an op has named, or one the input does not have (an
  // Embedding's features, a length-1 time axis); the rest is '?', even where
  // ferry's layouts leave it only one place.

  // The lowest of the layouts still possible: [B, T, F], then [T, B, F],
  // [B, F, T], [B, F] (features last, then batch before time: the order in
  // which PyTorch's layers put them).
  InputLayout first_possible() const {
    unsigned c = 0;
    while (c + 1 < kInputLayouts && !(axes_.possible() & (1u << c))) ++c;
    return static_cast<InputLayout>(c);
  }
  const std::string& under_first(const Axes& a) const { return a.under[static_cast<unsigned>(first_possible())]; }
  size_t rank(const Val& v) const { return under_first(v.axes).size(); }  // the same under every layout
  bool of_input(char axis) const { return under_first(input_axes_).find(axis) != std::string::npos; }
  // The axis at `d` of `v` where the graph has said which it is.
  std::optional<char> told(const Val& v, size_t d) const {
    const std::optional<char> a = axes_.axis_at(v.axes, static_cast<long>(d));
    if (a && of_input(*a) && !axes_.named(*a)) return std::nullopt;
    return a;
  }
  std::string axes_text(const Val& v) const {
    std::string axes;
    for (size_t d = 0; d < rank(v); ++d) axes += told(v, d).value_or('?');
    return bracketed(axes, false);
  }
  // "[B, T] or [T, B] or [B, F]": the model input's axes under each layout in `possible`.
  std::string input_layouts_text(unsigned possible) const {
    std::string s;
    for (unsigned c = 0; c < kInputLayouts; ++c)
      if (possible & (1u << c)) s += (s.empty() ? "" : " or ") + bracketed(input_axes_.under[c], false);
    return s;
  }
  // Dimension `d` of `v` is `axis`: rules out the input layouts where it is not.
  void require(const ExportNode& n, const Val& v, size_t d, char axis) {
    const std::optional<char> have = told(v, d);
    const bool elsewhere = of_input(axis) && axes_.named(axis);
    const size_t at = under_first(input_axes_).find(axis);
    const std::string text = axes_text(v);
    const unsigned before = axes_.possible();
    if (axes_.require_axis(v.axes, static_cast<long>(d), axis)) return;
    const std::string takes = "it takes dimension " + std::to_string(d) + " of its input " + text + " as the " +
                              axis_name(axis) + " axis";
    if (have) fail(n, takes + ", but it is the " + axis_name(*have) + " axis");
    if (elsewhere) fail(n, takes + ", which the model's input already has at dimension " + std::to_string(at));
    fail(n, takes + ", which it is under none of the input layouts left (" + input_layouts_text(before) + ")");
  }
  size_t dim(const ExportNode& n, int64_t d, size_t ndim) const {
    const int64_t r = static_cast<int64_t>(ndim);
    if (d < -r || d >= r) fail(n, "dimension " + std::to_string(d) + " of a " + std::to_string(ndim) + "-dimensional value");
    return static_cast<size_t>(d < 0 ? d + r : d);
  }

  // -------------------------------------------------------------- nodes --
  void node(const ExportNode& n) {
    if (const Rule* rule = find_rule(n.target)) {
      (this->*rule->handle)(n);
      mark_rest(n);
      return;
    }
    // An op ferry does not run: fine off the chain (its outputs are
    // remembered as made by it), refused on it.
    for (size_t i = 0; i < n.args.size(); ++i) {
      const auto& [name, a] = n.args[i];
      for (const std::string& v : a.names) {
        if (v.empty()) continue;
        const Val& x = val(v);
        if (x.kind == Val::kChain || x.kind == Val::kHidden)
          fail(n, "ferry does not run " + n.target + " (its " +
                      (name.empty() ? "argument " + std::to_string(i) : "'" + name + "'") + " is on the chain)");
      }
    }
    mark_rest(n);
  }
  // Outputs a handler did not set are "made by n".
  void mark_rest(const ExportNode& n) {
    for (const std::string& o : n.outputs) {
      if (o.empty() || vals_.count(o)) continue;
      Val v;
      v.kind = Val::kOpaque;
      v.text = n.describe();
      vals_[o] = v;
    }
  }

  void rnn(const ExportNode& n) {
    const std::string& t = n.target;
    const bool lstm = t == "aten.lstm.input";
    const Val x = chain_in(n, "input");
    if (rank(x) != 3)
      fail(n, "an input of " + std::to_string(rank(x)) + " dimensions; ferry runs batched sequences, [B, T, F] or [T, B, F]");
    const bool batch_first = flag(n, "batch_first");
    require(n, x, batch_first ? 0 : 1, 'B');
    require(n, x, batch_first ? 1 : 0, 'T');
    require(n, x, 2, 'F');
    // Initial states: zeros.
    const ExportArg& hx = arg(n, "hx");
    const size_t states = lstm ? 2 : 1;
    if ((lstm && hx.kind != ExportArg::Kind::Tensors) || (!lstm && hx.kind != ExportArg::Kind::Tensor) ||
        hx.names.size() != states)
      fail(n, "its initial state 'hx' is " + hx.describe());
    for (const std::string& h : hx.names) {
      const Val& v = val(h);
      if (v.kind != Val::kZeros)
        fail(n, "its initial state is " + what(v) + ": ferry's recurrent layers start from zeros");
    }
    const bool has_biases = flag(n, "has_biases"), bidirectional = flag(n, "bidirectional");
    const int64_t layers = integer(n, "num_layers");
    if (layers < 1 || layers > 1024) fail(n, "num_layers " + std::to_string(layers));
    if (flag(n, "train") && number(n, "dropout") > 0)
      fail(n, "exported in training mode (train=True with dropout " + number_text(number(n, "dropout")) +
              "): call model.eval() before torch.export.export");
    // params: every one of the module's tensors, in PyTorch's order.
    const ExportArg& params = arg(n, "params");
    if (params.kind != ExportArg::Kind::Tensors || params.names.empty()) fail(n, "its params are " + params.describe());
    std::vector<std::string> fqns;
    for (const std::string& p : params.names) {
      const Val& v = val(p);
      if (v.kind != Val::kParam) fail(n, "a params entry is " + what(v) + ", not a tensor of the state dict");
      fqns.push_back(v.text);
    }
    const size_t dot = fqns[0].rfind('.');
    const std::string module = dot == std::string::npos ? "" : fqns[0].substr(0, dot);
    const size_t directions = bidirectional ? 2 : 1;
    const size_t cells = static_cast<size_t>(layers) * directions;
    const size_t per = fqns.size() / cells;
    const size_t plain = has_biases ? 4 : 2;
    if (fqns.size() % cells != 0 || (per != plain && !(lstm && per == plain + 1)))
      fail(n, std::to_string(fqns.size()) + " params for " + std::to_string(layers) + " layer(s), " +
              std::to_string(directions) + " direction(s)" + (has_biases ? " with biases" : " without biases"));
    size_t i = 0;
    for (int64_t l = 0; l < layers; ++l) {
      for (size_t d = 0; d < directions; ++d) {
        const std::string sfx = "_l" + std::to_string(l) + (d ? "_reverse" : "");
        std::vector<std::string> names = {"weight_ih" + sfx, "weight_hh" + sfx};
        if (has_biases) names.insert(names.end(), {"bias_ih" + sfx, "bias_hh" + sfx});
        if (per == plain + 1) names.push_back("weight_hr" + sfx);
        for (const std::string& leaf : names) {
          const std::string want = module.empty() ? leaf : module + "." + leaf;
          if (fqns[i] != want)
            fail(n, "params[" + std::to_string(i) + "] is '" + fqns[i] + "', where PyTorch's order has '" + want + "'");
          if (!tensors_.count(fqns[i])) fail(n, "'" + fqns[i] + "' is not a floating-point tensor of the state dict");
          ++i;
        }
      }
    }
    GraphElement e = module_element(module);
    if (t == "aten.rnn_relu.input") e.option = "relu";
    const Val y = extend(n, x, &e);
    set(n, 0, y);
    charge(n, y);
    Val h = y;
    h.kind = Val::kHidden;
    h.text = module;
    h.one_direction = !bidirectional;
    h.layers = layers;
    h.axes = axes_.remove(x.axes, batch_first ? 1 : 0);  // h_n[-1]: the sequence without its time axis
    set(n, 1, h);
    if (lstm) {
      Val c;
      c.kind = Val::kOpaque;
      c.text = "the cell state c_n of '" + module + "'";
      set(n, 2, c);
    }
  }

  void linear(const ExportNode& n) {
    const Val x = chain_in(n, "input");
    require(n, x, rank(x) - 1, 'F');
    const std::string m = param(n, "weight", "weight");
    if (!optional_param(n, "bias", "bias", m) && tensors_.count(m.empty() ? "bias" : m + ".bias"))
      fail(n, "it runs '" + m + "' without the bias the state dict holds for it");
    const GraphElement e = module_element(m);
    set(n, 0, extend(n, x, &e));
  }

  void conv(const ExportNode& n) {
    const Val x = chain_in(n, "input");
    if (rank(x) != 3) fail(n, "an input of " + std::to_string(rank(x)) + " dimensions; ferry's Conv1d takes [B, C, T]");
    if (n.target == "aten.convolution.default" && flag(n, "transposed")) fail(n, "a transposed convolution");
    require(n, x, 0, 'B');
    require(n, x, 1, 'F');
    require(n, x, 2, 'T');
    const std::string m = param(n, "weight", "weight");
    const TensorRef* w = tensors_.at(m.empty() ? "weight" : m + ".weight");
    if (w->shape.size() != 3)
      fail(n, "a " + std::to_string(w->shape.size() >= 2 ? w->shape.size() - 2 : 0) + "-D convolution; ferry runs Conv1d");
    optional_param(n, "bias", "bias", m);
    const GraphElement e = module_element(m);
    set(n, 0, extend(n, x, &e));
  }

  void batch_norm(const ExportNode& n) {
    if (n.target == "aten.batch_norm.default" && flag(n, "training"))
      fail(n, "BatchNorm in training mode (batch statistics): call model.eval() before torch.export.export");
    const Val x = chain_in(n, "input");
    if (rank(x) != 2 && rank(x) != 3)
      fail(n, "an input of " + std::to_string(rank(x)) + " dimensions; BatchNorm1d takes [B, C] or [B, C, T]");
    require(n, x, 0, 'B');
    require(n, x, 1, 'F');
    if (rank(x) == 3) require(n, x, 2, 'T');
    const std::string m = param(n, "running_mean", "running_mean");
    if (is_none(n, "running_var")) fail(n, "no running_var");
    if (param(n, "running_var", "running_var") != m) fail(n, "its running_mean and running_var belong to different modules");
    optional_param(n, "weight", "weight", m);
    optional_param(n, "bias", "bias", m);
    const GraphElement e = module_element(m);
    set(n, 0, extend(n, x, &e));
  }

  void layer_norm(const ExportNode& n) {
    const Val x = chain_in(n, "input");
    std::vector<int64_t> shape;
    if (!arg(n, "normalized_shape").integers(&shape) || shape.size() != 1)
      fail(n, "it normalizes over " + arg(n, "normalized_shape").describe() + "; ferry's LayerNorm normalizes the features alone");
    require(n, x, rank(x) - 1, 'F');
    std::string m;
    if (!is_none(n, "weight")) m = param(n, "weight", "weight");
    else if (!is_none(n, "bias")) m = param(n, "bias", "bias");
    else fail(n, "a LayerNorm without weight and bias (elementwise_affine=False) is no module of the state dict");
    optional_param(n, "weight", "weight", m);
    optional_param(n, "bias", "bias", m);
    const GraphElement e = module_element(m);
    set(n, 0, extend(n, x, &e));
  }

  void prelu(const ExportNode& n) {
    const Val x = chain_in(n, "self");
    const std::string m = param(n, "weight", "weight");
    const TensorRef* w = tensors_.at(m.empty() ? "weight" : m + ".weight");
    if (w->numel() > 1) {
      if (rank(x) < 2) fail(n, "a PReLU with one slope per channel over a 1-dimensional value");
      require(n, x, 1, 'F');  // PyTorch's channel axis is dimension 1
    }
    const GraphElement e = module_element(m);
    set(n, 0, extend(n, x, &e));
  }

  void embedding(const ExportNode& n) {
    const Val& ids = tensor(n, "indices");
    if (ids.kind != Val::kChain || !ids.chain.empty())
      fail(n, "an Embedding whose indices are " + (ids.kind == Val::kChain ? std::string("computed") : what(ids)) +
              ": ferry runs an Embedding only as the first layer, on the model's input");
    if (rank(ids) != 2) fail(n, "token ids of " + std::to_string(rank(ids)) + " dimensions; ferry takes [B, T] or [T, B]");
    const std::string m = param(n, "weight", "weight");
    const unsigned before = axes_.possible();
    if (!axes_.restrict_to(layout_bit(InputLayout::kBTF) | layout_bit(InputLayout::kTBF)))
      fail(n, "it takes the model's input as token ids [B, T] or [T, B], where the graph takes it as " +
              input_layouts_text(before));
    tokens_ = true;
    const GraphElement e = module_element(m);
    Val y = extend(n, ids, &e);
    y.axes = axes_.append(ids.axes, 'F');
    set(n, 0, y);
  }

  // y[:, -1] -> last; h_n[-1] -> last; a length-1 time axis dropped.
  void select(const ExportNode& n) {
    const Val& v = tensor(n, "self");
    const int64_t index = integer(n, "index");
    if (v.kind == Val::kHidden) {
      if (dim(n, integer(n, "dim"), 3) != 0 || index != -1)
        fail(n, "selects index " + std::to_string(index) + " of the final hidden state of '" + v.text +
                "'; ferry reads h_n[-1], the last layer's");
      hidden_last(n, v);
      return;
    }
    if (v.kind != Val::kChain) fail(n, "it selects from " + what(v));
    const size_t d = dim(n, integer(n, "dim"), rank(v));
    if (axes_.axis_at(v.axes, static_cast<long>(d)) == kUnitTime) {
      if (index != 0 && index != -1) fail(n, "index " + std::to_string(index) + " of a length-1 axis");
      Val y = extend(n, v, nullptr);
      y.axes = axes_.remove(v.axes, static_cast<long>(d));
      set(n, 0, y);
      return;
    }
    require(n, v, d, 'T');
    if (index != -1)
      fail(n, "it selects step " + std::to_string(index) + " of the time axis; ferry reads the last step (index -1)");
    const GraphElement e = builtin(OpKind::Last);
    Val y = extend(n, v, &e);
    y.axes = axes_.remove(v.axes, static_cast<long>(d));
    set(n, 0, y);
  }

  void hidden_last(const ExportNode& n, const Val& h) {
    charge(n, h);
    if (!h.one_direction)
      fail(n, "h_n[-1] of the bidirectional '" + h.text + "' is its backward direction's state after the whole "
              "sequence, which is not a chain element: take the output sequence instead");
    Val y = h;
    y.kind = Val::kChain;
    y.chain.push_back(builtin(OpKind::Last));
    y.path.push_back(n.outputs.empty() ? std::string() : n.outputs[0]);
    y.path_len.push_back(y.chain.size());
    set(n, 0, y);
  }

  void slice(const ExportNode& n) {
    const Val& v = chain_in(n, "self");
    const size_t d = dim(n, integer(n, "dim"), rank(v));
    constexpr int64_t kToEnd = int64_t{1} << 62;
    const int64_t start = is_none(n, "start") ? 0 : integer(n, "start");
    const bool to_end = is_none(n, "end") || integer(n, "end") >= kToEnd;
    if (integer(n, "step") != 1) fail(n, "a slice with step " + std::to_string(integer(n, "step")));
    if (start == 0 && to_end) {
      set(n, 0, extend(n, v, nullptr));  // the whole axis: x[:, ...]
      return;
    }
    if (start == -1 && to_end) {
      require(n, v, d, 'T');
      const GraphElement e = builtin(OpKind::Last);
      Val y = extend(n, v, &e);
      y.axes = axes_.replace(v.axes, static_cast<long>(d), kUnitTime);
      set(n, 0, y);
      return;
    }
    fail(n, "a slice of the " + std::string(axis_name(told(v, d).value_or('?'))) + " axis other than the last step");
  }

  void squeeze(const ExportNode& n) {
    const Val& v = tensor(n, "self");
    std::vector<int64_t> dims;
    if (!arg(n, "dim").integers(&dims)) fail(n, "argument 'dim' is " + arg(n, "dim").describe());
    if (v.kind == Val::kHidden) {
      if (dims.size() != 1 || dim(n, dims[0], 3) != 0 || v.layers != 1)
        fail(n, "it squeezes the final hidden state of '" + v.text + "' other than h_n.squeeze(0) of one layer");
      hidden_last(n, v);
      return;
    }
    if (v.kind != Val::kChain) fail(n, "it squeezes " + what(v));
    Val y = extend(n, v, nullptr);
    std::vector<size_t> drop;
    for (int64_t d : dims) drop.push_back(dim(n, d, rank(v)));
    std::sort(drop.rbegin(), drop.rend());
    if (std::adjacent_find(drop.begin(), drop.end()) != drop.end())
      fail(n, "dims " + arg(n, "dim").describe() + " name a dimension twice");
    for (size_t d : drop) {
      const std::optional<char> a = told(v, d);
      if (a != kUnitTime) fail(n, "it squeezes the " + std::string(axis_name(a.value_or('?'))) + " axis");
      y.axes = axes_.remove(y.axes, static_cast<long>(d));
    }
    set(n, 0, y);
  }

  void reduce(const ExportNode& n) {
    const Val& v = chain_in(n, "self");
    const bool mean = n.target == "aten.mean.dim";
    std::vector<int64_t> dims;
    if (!arg(n, "dim").integers(&dims) || dims.size() != 1)
      fail(n, "it reduces over " + arg(n, "dim").describe() + "; ferry pools over the time axis alone");
    if (mean && !is_none(n, "dtype")) fail(n, "a mean with a dtype");
    const size_t d = dim(n, dims[0], rank(v));
    require(n, v, d, 'T');
    const GraphElement e = builtin(mean ? OpKind::Mean : OpKind::Max);
    Val y = extend(n, v, &e);
    y.axes = flag(n, "keepdim") ? axes_.replace(v.axes, static_cast<long>(d), kUnitTime)
                                : axes_.remove(v.axes, static_cast<long>(d));
    set(n, 0, y);
  }

  // y + x, x an earlier value of y's chain: a residual skip.
  void add(const ExportNode& n) {
    const Val& a = tensor(n, "self");
    const Val& b = tensor(n, "other");
    if (a.kind != Val::kChain || b.kind != Val::kChain)
      fail(n, "it adds " + what(a.kind != Val::kChain ? a : b) + "; ferry adds only an earlier value of the chain (a residual skip)");
    if (number(n, "alpha") != 1) fail(n, "an add with alpha " + number_text(number(n, "alpha")));
    auto position = [](const Val& longer, const Val& shorter) -> long {
      const std::string& name = shorter.path.back();
      for (size_t i = 0; i + 1 < longer.path.size(); ++i)
        if (longer.path[i] == name) return static_cast<long>(i);
      return -1;
    };
    const Val* longer = &a;
    const Val* shorter = &b;
    long at = position(a, b);
    if (at < 0) {
      std::swap(longer, shorter);
      at = position(b, a);
    }
    if (at < 0)
      fail(n, "it adds two values that do not lie on one path from the input (two branches); ferry runs one chain, "
              "with residual skips around parts of it");
    const size_t len = longer->path_len[static_cast<size_t>(at)];
    if (len != shorter->chain.size() || len >= longer->chain.size() ||
        !std::equal(shorter->chain.begin(), shorter->chain.end(), longer->chain.begin(), same_element))
      fail(n, "a residual skip that crosses another one, or that skips no layer");
    if (rank(*longer) != rank(*shorter))
      fail(n, "it adds values of " + std::to_string(rank(*longer)) + " and " + std::to_string(rank(*shorter)) +
              " dimensions");
    std::string axes = axes_text(*longer) + " and " + axes_text(*shorter);
    if (axes_text(*longer) == axes_text(*shorter))  // the graph has not named the axes that differ
      axes += " (" + bracketed(under_first(longer->axes), false) + " and " +
              bracketed(under_first(shorter->axes), false) + " of an input " +
              bracketed(under_first(input_axes_), false) + ")";
    if (!axes_.require_same(longer->axes, shorter->axes)) fail(n, "it adds values whose axes differ, " + axes);
    charge(n, *longer);
    Val y = *longer;
    GraphElement begin = builtin(OpKind::SkipBegin), end = builtin(OpKind::SkipEnd);
    y.chain.insert(y.chain.begin() + static_cast<long>(len), begin);
    y.chain.push_back(end);
    // Values inside the skip can no longer be skipped to: their chains are
    // no prefix of the new one (the check above refuses them).
    y.path.push_back(n.outputs.empty() ? std::string() : n.outputs[0]);
    y.path_len.push_back(y.chain.size());
    set(n, 0, y);
  }

  void activation(const ExportNode& n) {
    const Val& v = chain_in(n, "self");
    std::string t = n.target.substr(5);            // "relu_.default"
    t = t.substr(0, t.find('.'));                  // "relu_"
    if (!t.empty() && t.back() == '_') t.pop_back();  // in place: the same function
    GraphElement e;
    if (t == "relu") e.op = OpKind::ReLU;
    else if (t == "tanh") e.op = OpKind::Tanh;
    else if (t == "sigmoid") e.op = OpKind::Sigmoid;
    else if (t == "silu") e.op = OpKind::SiLU;
    else if (t == "relu6") e.op = OpKind::ReLU6;
    else if (t == "gelu") {
      e.op = OpKind::GELU;
      const ExportArg& approximate = arg(n, "approximate");
      if (approximate.kind != ExportArg::Kind::String || (approximate.text != "none" && approximate.text != "tanh"))
        fail(n, "approximate=" + approximate.describe());
      if (approximate.text == "tanh") e.option = "tanh";
    } else if (t == "elu") {
      e.op = OpKind::ELU;
      if (number(n, "scale") != 1 || number(n, "input_scale") != 1)
        fail(n, "an ELU with scale or input_scale (SELU / CELU): ferry runs ELU(alpha)");
      e.args["alpha"] = number_text(number(n, "alpha"));
    } else if (t == "leaky_relu") {
      e.op = OpKind::LeakyReLU;
      e.args["slope"] = number_text(number(n, "negative_slope"));
    } else if (t == "hardtanh") {
      const double lo = number(n, "min_val"), hi = number(n, "max_val");
      if (lo == 0 && hi == 6) {
        e.op = OpKind::ReLU6;
      } else {
        e.op = OpKind::Hardtanh;
        e.args["min"] = number_text(lo);
        e.args["max"] = number_text(hi);
      }
    } else {
      fail(n, "internal: no activation for " + n.target);
    }
    for (const auto& [k, value] : e.args)
      if (!std::isfinite(std::strtod(value.c_str(), nullptr))) fail(n, k + "=" + value + " is not finite");
    set(n, 0, extend(n, v, &e));
  }

  void softmax(const ExportNode& n) {
    const Val& v = chain_in(n, "self");
    const bool log = n.target.find("log_softmax") != std::string::npos;
    if (n.arg("dtype") && !is_none(n, "dtype")) fail(n, "a softmax with a dtype");
    if (n.arg("half_to_float") && flag(n, "half_to_float")) fail(n, "a softmax with half_to_float");
    require(n, v, dim(n, integer(n, "dim"), rank(v)), 'F');
    const GraphElement e = builtin(log ? OpKind::LogSoftmax : OpKind::Softmax);
    set(n, 0, extend(n, v, &e));
  }

  void dropout(const ExportNode& n) {
    const Val& v = chain_in(n, "input");
    if (flag(n, "train") && number(n, "p") > 0)
      fail(n, "dropout in training mode (p " + number_text(number(n, "p")) + "): call model.eval() before torch.export.export");
    const GraphElement e = builtin(OpKind::Dropout);
    set(n, 0, extend(n, v, &e));
  }

  void transpose(const ExportNode& n) {
    const Val& v = chain_in(n, "self");
    const size_t a = dim(n, integer(n, "dim0"), rank(v)), b = dim(n, integer(n, "dim1"), rank(v));
    Val y = extend(n, v, nullptr);
    y.axes = axes_.transpose(v.axes, static_cast<long>(a), static_cast<long>(b));
    set(n, 0, y);
  }

  void permute(const ExportNode& n) {
    const Val& v = chain_in(n, "self");
    std::vector<int64_t> order;
    if (!arg(n, "dims").integers(&order) || order.size() != rank(v))
      fail(n, "dims " + arg(n, "dims").describe() + " for a " + std::to_string(rank(v)) + "-dimensional value");
    Val y = extend(n, v, nullptr);
    std::vector<bool> used(rank(v), false);
    std::vector<long> dims;
    for (int64_t i : order) {
      const size_t d = dim(n, i, rank(v));
      if (used[d]) fail(n, "dims " + arg(n, "dims").describe() + " is not a permutation");
      used[d] = true;
      dims.push_back(static_cast<long>(d));
    }
    y.axes = axes_.permute(v.axes, dims);
    set(n, 0, y);
  }

  void identity(const ExportNode& n) {
    const Val& v = tensor(n, "self");
    set(n, 0, v.kind == Val::kChain ? extend(n, v, nullptr) : v);
  }

  void zeros(const ExportNode& n) {
    Val v;
    v.kind = Val::kZeros;
    if (n.target == "aten.full.default") {
      double fill = 0;
      if (!arg(n, "fill_value").number(&fill) || fill != 0) {
        v.kind = Val::kOpaque;
        v.text = n.describe();
      }
    }
    set(n, 0, v);
  }

  void symbolic(const ExportNode& n) {
    Val v;
    v.kind = Val::kSym;
    set(n, 0, v);
  }

  void check_only(const ExportNode&) {}  // runtime asserts: nothing to run

  // ------------------------------------------------------------- output --
  const Val& output() {
    const Val* result = nullptr;
    for (const ExportOutput& o : g_.outputs) {
      switch (o.kind) {
        case ExportOutput::Kind::UserOutput: {
          if (result) fail("the program returns more than one value; ferry runs a chain with one output");
          if (o.name.empty()) fail("the program returns a value that is not a tensor");
          result = &val(o.name);
          break;
        }
        case ExportOutput::Kind::BufferMutation:
          fail("the program updates the buffer '" + o.target +
               "' (exported in training mode): call model.eval() before torch.export.export");
        case ExportOutput::Kind::ParameterMutation:
          fail("the program updates the parameter '" + o.target + "'");
        case ExportOutput::Kind::UserInputMutation:
          fail("the program writes into its input '" + o.target + "'");
        case ExportOutput::Kind::Other:
          fail("the program has a '" + o.target + "' output (a training program)");
      }
    }
    if (!result) fail("the program returns nothing");
    if (result->kind != Val::kChain) fail("the program returns " + what(*result) + ", not a value of the chain");
    if (result->chain.empty()) fail("the program returns its input");
    return *result;
  }

  // The input layout, and the output's where it is not the input's. Ops
  // that work per step do not tell the batch axis from the time axis: where
  // the graph leaves several layouts, the first of them is taken (features
  // last, then batch before time, as PyTorch's layers put them). A note says
  // so where, besides the features taken last, two or more of the input's
  // axes are placed by no op of the graph.
  ExportInputLayout resolve_layout(const Val& out, std::optional<ExportInputLayout>* output_layout) {
    const size_t input_rank = under_first(input_axes_).size();
    // A 2-dimensional input is [B, F] unless an Embedding reads it as token ids.
    const std::string taken = bracketed(under_first(input_axes_), true);
    if (!tokens_ && input_rank == 2 && !axes_.restrict_to(layout_bit(InputLayout::kBF)))
      fail("the graph takes its input's axes as " + taken + "; ferry takes [B, F]");
    const InputLayout layout = first_possible();
    const std::string& in = input_axes_.under[static_cast<unsigned>(layout)];
    size_t open = 0;
    for (char a : in) open += axes_.named(a) ? 0 : 1;
    // The features taken last: where no op names them nor the last axis as another.
    if (!tokens_ && input_rank == 3 && !axes_.named('F') && !axes_.named(in.back())) --open;
    if (open > 1 && !(input_rank == 2 && !tokens_))
      notes_.push_back("nothing in the graph tells the batch axis from the time axis (every op works per step): "
                       "taking the input as " + bracketed(in, true));
    axes_.restrict_to(layout_bit(layout));
    output_axes(out, output_layout);
    return export_layout(layout);
  }

  // The output's axes: [B, F] once the time axis is gone, else a sequence
  // layout: the input's own, or another (a transpose before the return).
  // A time axis kept at length 1 is dropped.
  void output_axes(const Val& out, std::optional<ExportInputLayout>* output_layout) {
    Axes got = out.axes;
    bool unit = false;
    for (size_t d = rank(out); d-- > 0;) {
      if (axes_.axis_at(got, static_cast<long>(d)) != kUnitTime) continue;
      got = axes_.remove(got, static_cast<long>(d));
      unit = true;
    }
    if (unit) notes_.push_back("the graph's output keeps a time axis of length 1; ferry's output drops it");
    const std::string returned = bracketed(under_first(got), true);
    std::optional<InputLayout> layout;
    if (!axes_.require_output(got) || !axes_.output_layout(got, &layout))
      fail("the graph returns " + returned + "; ferry's output is [batch, feature], or a sequence [batch, time, "
           "feature], [time, batch, feature] or [batch, feature, time]");
    if (layout) *output_layout = export_layout(*layout);
  }

  const Checkpoint& c_;
  const ExportGraph& g_;
  std::unordered_map<std::string, const TensorRef*> tensors_;
  std::unordered_map<std::string, Val> vals_;
  std::string input_;
  ChainAxes axes_;   // the input layouts the graph still allows
  Axes input_axes_;  // the input's axes under each
  static constexpr size_t kMaxWork = size_t{1} << 24;
  size_t work_ = 0;
  bool tokens_ = false;
  std::vector<std::string> notes_;
};

const Reader::Rule Reader::kRules[] = {
    {"aten.lstm.input", &Reader::rnn},
    {"aten.gru.input", &Reader::rnn},
    {"aten.rnn_tanh.input", &Reader::rnn},
    {"aten.rnn_relu.input", &Reader::rnn},
    {"aten.linear.default", &Reader::linear},
    {"aten.conv1d.default", &Reader::conv},
    {"aten.conv1d.padding", &Reader::conv},
    {"aten.convolution.default", &Reader::conv},
    {"aten.batch_norm.default", &Reader::batch_norm},
    {"aten._native_batch_norm_legit_no_training.default", &Reader::batch_norm},
    {"aten.layer_norm.default", &Reader::layer_norm},
    {"aten.native_layer_norm.default", &Reader::layer_norm},
    {"aten.prelu.default", &Reader::prelu},
    {"aten._prelu_kernel.default", &Reader::prelu},
    {"aten.embedding.default", &Reader::embedding},
    {"aten.select.int", &Reader::select},
    {"aten.slice.Tensor", &Reader::slice},
    {"aten.squeeze.dim", &Reader::squeeze},
    {"aten.squeeze.dims", &Reader::squeeze},
    {"aten.mean.dim", &Reader::reduce},
    {"aten.amax.default", &Reader::reduce},
    {"aten.max.dim", &Reader::reduce},
    {"aten.add.Tensor", &Reader::add},
    {"aten.relu.default", &Reader::activation},
    {"aten.relu_.default", &Reader::activation},
    {"aten.tanh.default", &Reader::activation},
    {"aten.tanh_.default", &Reader::activation},
    {"aten.sigmoid.default", &Reader::activation},
    {"aten.sigmoid_.default", &Reader::activation},
    {"aten.silu.default", &Reader::activation},
    {"aten.silu_.default", &Reader::activation},
    {"aten.relu6.default", &Reader::activation},
    {"aten.gelu.default", &Reader::activation},
    {"aten.gelu_.default", &Reader::activation},
    {"aten.elu.default", &Reader::activation},
    {"aten.elu_.default", &Reader::activation},
    {"aten.leaky_relu.default", &Reader::activation},
    {"aten.leaky_relu_.default", &Reader::activation},
    {"aten.hardtanh.default", &Reader::activation},
    {"aten.hardtanh_.default", &Reader::activation},
    {"aten.softmax.int", &Reader::softmax},
    {"aten._softmax.default", &Reader::softmax},
    {"aten.log_softmax.int", &Reader::softmax},
    {"aten._log_softmax.default", &Reader::softmax},
    {"aten.dropout.default", &Reader::dropout},
    {"aten.native_dropout.default", &Reader::dropout},
    {"aten.transpose.int", &Reader::transpose},
    {"aten.permute.default", &Reader::permute},
    {"aten.clone.default", &Reader::identity},
    {"aten.alias.default", &Reader::identity},
    {"aten.detach.default", &Reader::identity},
    {"aten.zeros.default", &Reader::zeros},
    {"aten.zeros_like.default", &Reader::zeros},
    {"aten.new_zeros.default", &Reader::zeros},
    {"aten.full.default", &Reader::zeros},
    {"aten.sym_size.int", &Reader::symbolic},
    {"aten._assert_tensor_metadata.default", &Reader::check_only},
    {"aten._assert_scalar.default", &Reader::check_only},
    {"aten.sym_constrain_range_for_size.default", &Reader::check_only},
    {"aten.sym_constrain_range.default", &Reader::check_only},
    {"aten._assert_async.msg", &Reader::check_only},
};

const Reader::Rule* Reader::find_rule(const std::string& target) {
  for (const Rule& rule : kRules)
    if (target == rule.target) return &rule;
  return nullptr;
}

}  // namespace

const char* export_layout_text(ExportInputLayout layout) {
  switch (layout) {
    case ExportInputLayout::kNone: return "[B, F]";
    case ExportInputLayout::kBatchFirst: return "[B, T, F]";
    case ExportInputLayout::kTimeMajor: return "[T, B, F]";
    case ExportInputLayout::kChannelsFirst: return "[B, F, T]";
  }
  return "";
}

ExportChain export_chain(const Checkpoint& checkpoint) {
  if (!checkpoint.export_graph) throw Error("internal: export_chain() of a checkpoint without an exported graph");
  return Reader(checkpoint).run();
}

}  // namespace ferry::conv
