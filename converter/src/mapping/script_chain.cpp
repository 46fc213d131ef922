#include "mapping/script_chain.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "error.h"
#include "mapping/graph.h"
#include "mapping/script_syntax.h"
#include "mapping/wrapper_prefixes.h"

namespace ferry::conv {
namespace {

using script::Expr;
using script::Statement;

constexpr size_t kMaxChainElements = 4096;
constexpr size_t kMaxValueParts = 256;  // a tuple or list, nested ones counted
constexpr size_t kMaxReadings = 16;     // readings of one forward, each branch that can go either way retried

// The ops from the input to a value, shared: values made from one another
// share the start of their chains, and copying a value copies a pointer.
struct ChainNode {
  GraphElement element;
  std::shared_ptr<const ChainNode> prev;
  size_t length = 0;
};
using Chain = std::shared_ptr<const ChainNode>;

size_t length_of(const Chain& c) { return c ? c->length : 0; }

std::vector<GraphElement> elements_of(Chain c) {
  std::vector<GraphElement> out(length_of(c));
  for (size_t i = out.size(); c; c = c->prev) out[--i] = c->element;
  return out;
}

// A value of the forward code, as far as the chain is concerned.
struct Val {
  enum Kind {
    kOpaque,    // not needed by the chain (a shape, a device); `text` says what, in case it is used
    kTensor,    // on the chain: `chain` made it from the input
    kZeros,     // torch.zeros(...): an initial state
    kModule,    // `text`: the module's path
    kParam,     // a parameter or buffer: `owner` module path, `text` its name
    kTuple,
    kList,
    kFunction,  // `text`: qualified name ("torch.relu", "__torch__.torch.nn.functional.relu")
    kLiteral,   // `text` as written; `string` for a string constant
    kStatic,    // a rank, a size or a comparison of them: `per` under each input layout where `known`
  };
  Kind kind = kOpaque;
  std::string text, owner;
  bool string = false;
  Chain chain;                      // kTensor (null: the input itself)
  Axes axes;                        // kTensor
  std::string hidden;               // kTensor: h_n of this recurrent module (not a sequence)
  std::string state_of;             // h_n, or the opaque c_n: part of this recurrent module's final state
  unsigned id = 0;                  // kTensor: the storage it views (in-place ops update every alias)
  bool partial = false;             // kTensor: a view of part of another (the last step)
  long long left_pad = 0;           // kTensor: zeros padded before the time axis (F.pad), for the Conv1d that reads it
  std::vector<Val> items;           // kTuple / kList; the tensor whose shape this is (`shape`)
  size_t parts = 1;                 // this value and the items in it, nested ones counted
  std::optional<long long> features;  // kTensor made by the chain: its feature count, where known
  bool shape = false;               // kOpaque: torch.size(x) of the tensor items[0]
  bool device = false;              // kOpaque: a device (x.device, torch.device(...), a name for one)
  std::string state_input;          // kOpaque: a root forward argument with no default (its name)
  // kStatic: a size of one axis: the axis under each layout ('B', 'T', 'F'; 0 where not known)
  std::array<char, kInputLayouts> axis{};
  bool data = false;                // kOpaque: computed from the values of a tensor
  // kStatic. Under the layouts in `symbolic`, the value is the input's
  // feature count, not known yet (a boolean: whether it is == sym_n, or !=
  // when !sym_eq); under the others outside `known`, what `text` says ("the
  // batch size").
  std::array<long long, kInputLayouts> per{};
  unsigned known = 0, symbolic = 0;
  long long sym_n = 0;
  bool sym_eq = true, boolean = false;

  static Val opaque(std::string what) {
    Val v;
    v.text = std::move(what);
    return v;
  }
  static Val literal(std::string t, bool is_string = false) {
    Val v;
    v.kind = kLiteral;
    v.text = std::move(t);
    v.string = is_string;
    return v;
  }
  static Val of(Kind k, std::string t = "") {
    Val v;
    v.kind = k;
    v.text = std::move(t);
    return v;
  }
  bool is_none() const { return kind == kLiteral && !string && text == "None"; }
  static Val truth(bool b) { return literal(b ? "True" : "False"); }
  static Val values_of_tensor(const std::string& how) {
    Val v = opaque("the values of a tensor (" + how + ")");
    v.data = true;
    return v;
  }
};

// "1", "-1" -> the integer; nullopt for anything else.
std::optional<long long> integer_of(const Val& v) {
  if (v.kind != Val::kLiteral || v.string || v.text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v.text.c_str(), &end, 10);
  if (*end != '\0' || errno != 0) return std::nullopt;
  return n;
}

std::optional<double> number_of(const Val& v) {
  if (v.kind != Val::kLiteral || v.string || v.text.empty()) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(v.text.c_str(), &end);
  if (*end != '\0' || !std::isfinite(x)) return std::nullopt;
  return x;
}

std::optional<bool> bool_of(const Val& v) {
  if (v.kind == Val::kLiteral && !v.string && (v.text == "True" || v.text == "False")) return v.text == "True";
  return std::nullopt;
}

// [3] / (3,) / 3 -> 3.
std::optional<long long> single_int(const Val& v) {
  if ((v.kind == Val::kList || v.kind == Val::kTuple) && v.items.size() == 1) return integer_of(v.items[0]);
  return integer_of(v);
}

// What a torch.nn.functional function is, when its arguments are the ATen op's.
std::string canonical(const std::string& fn) {
  for (const char* prefix : {"__torch__.torch.nn.functional.", "torch.nn.functional.", "F."}) {
    const std::string p = prefix;
    if (fn.compare(0, p.size(), p) == 0) return "F." + fn.substr(p.size());
  }
  return fn;
}

class Reader {
 public:
  // `forced`: the alternative taken at each branch that can go either way
  // (0 past its end); `steps` counts across readings.
  Reader(const Checkpoint& c, const ModuleSet& m, const python::Program* program, std::vector<size_t> forced,
         size_t& steps)
      : checkpoint_(c), modules_(m), program_(program), forced_(std::move(forced)), steps_(steps) {
    for (size_t i = 0; i < c.module_objects.size(); ++i) objects_.emplace(c.module_objects[i].path, i);
    for (const TensorRef& t : c.tensors) tensors_.insert(strip_wrapper_prefixes(t.name));
  }

  RecordedChain run() {
    const ModuleObject& root = checkpoint_.module_objects.at(0);
    Val input;
    input.kind = Val::kTensor;
    input.axes = axes_.input();
    input.id = ++ids_;
    // A scripted torch.nn module saved alone (nn.Conv1d) is what its class computes.
    Args in;
    in.pos.push_back(input);
    Val out = is_torch_nn(root) && root.final_constants ? class_semantics(root, in) : interpret(root, {input}, {}, true);
    line_.clear();
    std::vector<std::string> notes;
    if (const std::string m = sequence_with_its_state(out, program_ != nullptr); !m.empty()) {
      // A bare recurrent module (scripted or traced) returns (output, h_n)
      // or (output, (h_n, c_n)): ferry's output is the sequence, and the
      // final state is the session's (ferry_state_get).
      out = Val(out.items[0]);
      notes.push_back("forward also returns the final state of '" + m +
                      "': ferry's output is the sequence; the state is ferry_state_get's");
    }
    if (out.kind != Val::kTensor) fail("forward returns " + what(out) + ", not one tensor");
    if (!out.hidden.empty()) fail("forward returns the final state h_n of '" + shown_path(out.hidden) + "' as a whole");
    if (!out.chain) fail("forward returns its input");
    if (!axes_.require_output(out.axes)) {
      fail("forward returns a sequence whose axes are not [B, T, F], [T, B, F] or [B, F, T]");
    }
    RecordedChain r;
    if (!axes_.output_layout(out.axes, &r.output_layout)) {
      fail("forward returns its sequence transposed, and nothing in it says whether its input is " +
           layouts_text(axes_.possible()) + ": pass --graph, --layout and --output-layout");
    }
    const std::vector<GraphElement> elements = elements_of(out.chain);
    r.graph = format_graph(elements);
    if (program_)
      for (const GraphElement& e : elements) r.sources.push_back(e.source);
    r.layout = axes_.decided();
    r.notes = std::move(notes);
    r.notes.insert(r.notes.end(), notes_.begin(), notes_.end());
    return r;
  }

  // Each branch of this reading that could go either way: the alternative
  // taken and how many there were.
  const std::vector<std::pair<size_t, size_t>>& choices() const { return choices_; }

 private:
  struct Frame {
    std::string path;  // whose forward
    std::map<std::string, Val> vars;
    std::string method = "forward";              // Python source: the method (or function) read
    const python::SourceFile* file = nullptr;    // Python source: its file
  };

  // A forward (or, in Python source, any method or function), parsed once
  // however often it is called.
  struct Parsed {
    std::vector<script::Parameter> parameters;
    std::vector<script::Line> body;  // each line, what it says, and the blocks of branches
    const python::SourceFile* file = nullptr;
    bool is_static = false;
  };


  // The recurrent module whose (sequence, final state) tuple `v` is, as its
  // forward returns it; empty if `v` is anything else. The sequence must
  // come from that module, the last on the chain.
  // With `anywhere` (Python source: `return self.fc(out), hidden`), the
  // module may be anywhere on the chain of the first value.
  static std::string sequence_with_its_state(const Val& v, bool anywhere) {
    if (v.kind != Val::kTuple || v.items.size() < 2) return {};
    const Val& y = v.items[0];
    if (y.kind != Val::kTensor || !y.hidden.empty() || !y.chain || y.partial) return {};
    std::string module;
    std::vector<const Val*> rest;
    for (size_t i = 1; i < v.items.size(); ++i) rest.push_back(&v.items[i]);
    while (!rest.empty()) {
      const Val* s = rest.back();
      rest.pop_back();
      if (s->kind == Val::kTuple) {
        for (const Val& item : s->items) rest.push_back(&item);
        continue;
      }
      if (s->state_of.empty() || (!module.empty() && s->state_of != module)) return {};
      module = s->state_of;
    }
    if (module.empty()) return {};
    for (Chain c = y.chain; c; c = anywhere ? c->prev : nullptr)
      if (c->element.module == module) return module;
    return {};
  }

  // ---------------------------------------------------------------- errors --
  [[noreturn]] void fail(const std::string& why) const {
    std::string where;
    if (program_ && !frames_.empty()) {
      const Frame& f = frames_.back();
      if (f.file) where = f.file->where(number_) + ": ";
      const std::string owner = f.method.rfind("def ", 0) == 0 ? f.method.substr(4) : class_of(f.path) + "." + f.method;
      where += "in " + owner + (f.path.empty() ? "" : " of '" + f.path + "'") + ", ";
      if (!line_.empty()) where += "'" + line_.substr(0, 120) + (line_.size() > 120 ? "...'" : "'") + ": ";
      // What was read before it: the start of the --graph to write.
      const std::string so_far = furthest_ ? "; the chain read up to there: \"" + format_graph(elements_of(furthest_)) + "\""
                                           : std::string();
      throw Error(where + why + so_far);
    }
    if (!frames_.empty()) {
      auto it = objects_.find(frames_.back().path);
      const std::string& record = it == objects_.end() ? std::string() : checkpoint_.module_objects[it->second].code_record;
      if (!record.empty()) where = "record '" + record + "', ";
      if (!frames_.back().path.empty())
        where += "module '" + frames_.back().path + "' (" + class_of(frames_.back().path) + "), ";
    }
    if (!line_.empty()) where += "line '" + line_.substr(0, 120) + (line_.size() > 120 ? "...'" : "'") + ": ";
    throw Error(where + why);
  }

  std::string class_of(const std::string& path) const {
    auto it = objects_.find(path);
    if (it == objects_.end()) return "?";
    return python::last_name(checkpoint_.module_objects[it->second].class_name);
  }

  static std::string what(const Val& v) {
    switch (v.kind) {
      case Val::kOpaque: return v.text;
      case Val::kTensor: return v.hidden.empty() ? "a tensor" : "the final state h_n of '" + shown_path(v.hidden) + "'";
      case Val::kZeros: return "zeros";
      case Val::kModule: return "module '" + shown_path(v.text) + "'";
      case Val::kParam: return "parameter '" + child_path(v.owner, v.text) + "'";
      case Val::kTuple: return "a tuple of " + std::to_string(v.items.size());
      case Val::kList: return "a list of " + std::to_string(v.items.size());
      case Val::kFunction: return "the function " + v.text.substr(0, 80);
      case Val::kLiteral: return "the constant " + v.text.substr(0, 40);
      case Val::kStatic: return v.boolean ? "a comparison of sizes" : "a size";
    }
    return "?";
  }

  void step() {
    if (++steps_ > kMaxScriptSteps) fail("reading takes more than " + std::to_string(kMaxScriptSteps) + " steps");
  }

  // ------------------------------------------------------------ functions --
  // Reads `object`'s forward with `args` bound to its parameters after self.
  Val interpret(const ModuleObject& object, std::vector<Val> args, std::map<std::string, Val> keywords, bool root,
                const std::string& method = "forward") {
    if (frames_.size() >= kMaxScriptCallDepth)
      fail("modules call each other more than " + std::to_string(kMaxScriptCallDepth) + " deep");
    for (const Frame& f : frames_)
      if (f.path == object.path && f.method == method && !root)
        fail("module '" + shown_path(object.path) + "' calls " + (method == "forward" ? "itself" : "its " + method + " again"));
    const Parsed& fn = parsed(object, method);
    Frame frame;
    frame.path = object.path;
    frame.method = method;
    frame.file = fn.file;
    if (!fn.is_static) {
      if (fn.parameters.empty()) fail(method + " of '" + shown_path(object.path) + "' takes no self");
      frame.vars[fn.parameters[0].name] = Val::of(Val::kModule, object.path);
    }
    return call_def(fn, std::move(frame), fn.is_static ? 0 : 1, std::move(args), std::move(keywords), root,
                    "the " + method + " of '" + shown_path(object.path) + "'");
  }

  // A module-level function of the --code files.
  Val call_source_function(const std::string& name, std::vector<Val> args, std::map<std::string, Val> keywords) {
    if (frames_.size() >= kMaxScriptCallDepth)
      fail("functions call each other more than " + std::to_string(kMaxScriptCallDepth) + " deep");
    for (const Frame& f : frames_)
      if (f.method == "def " + name) fail("the function " + name + " calls itself");
    const Parsed& fn = parsed_function(name);
    Frame frame;
    frame.path = frames_.empty() ? std::string() : frames_.back().path;
    frame.method = "def " + name;
    frame.file = fn.file;
    return call_def(fn, std::move(frame), 0, std::move(args), std::move(keywords), false, "the function " + name);
  }

  // Binds `args` to the parameters of `fn` from `first` on and reads its body.
  Val call_def(const Parsed& fn, Frame frame, size_t first, std::vector<Val> args, std::map<std::string, Val> keywords,
               bool root, const std::string& what_fn) {
    size_t next = 0;
    for (size_t i = first; i < fn.parameters.size(); ++i) {
      const script::Parameter& p = fn.parameters[i];
      Val v;
      if (!p.star.empty()) {
        if (p.star == "*" && next < args.size()) fail("calls " + what_fn + " with arguments for its *" + p.name);
        frame.vars[p.name] = Val::opaque("*" + p.name);
        continue;
      }
      if (next < args.size()) {
        v = std::move(args[next++]);
      } else if (auto k = keywords.find(p.name); k != keywords.end()) {
        v = std::move(k->second);
        keywords.erase(k);
      } else if (p.has_default) {
        v = literal_expr(p.default_value);
      } else if (root) {
        v = Val::opaque("forward's second input '" + p.name + "'");
        v.state_input = p.name;
      } else {
        fail("calls " + what_fn + " without its argument '" + p.name + "'");
      }
      frame.vars[p.name] = std::move(v);
    }
    if (next < args.size()) fail("calls " + what_fn + " with " + std::to_string(args.size()) + " arguments");
    if (!keywords.empty()) fail("calls " + what_fn + " with the unknown argument '" + keywords.begin()->first + "'");

    const std::string caller_line = line_;
    const size_t caller_number = number_;
    frames_.push_back(std::move(frame));
    std::optional<Val> v = run_block(fn.body);
    if (!v) {
      if (!program_) fail(what_fn + " has no return statement (in the lines kept)");
      v = Val::literal("None");  // Python: falls off the end, returns None
    }
    frames_.pop_back();
    line_ = caller_line;
    number_ = caller_number;
    return std::move(*v);
  }

  // Runs the lines of a block, and of the branch each `if` takes; the
  // returned value once a `return` is reached.
  std::optional<Val> run_block(const std::vector<script::Line>& block) {
    for (const script::Line& line : block) {
      line_ = line.text;
      number_ = line.number;
      const Statement& st = line.statement;
      switch (st.kind) {
        case Statement::kOther: fail(st.why);
        case Statement::kElif: case Statement::kElse: fail("an else without its if");
        case Statement::kPass: break;
        case Statement::kReturn: return eval(st.value);
        case Statement::kIf: {
          const bool taken = branch(st.value);
          if (std::optional<Val> v = run_block(taken ? line.then : line.orelse)) return v;
          break;
        }
        case Statement::kFor: {
          if (std::optional<Val> v = loop(st, line)) return v;
          break;
        }
        case Statement::kExpression:
          if (program_ && ignored_call(st.value)) break;
          (void)eval(st.value);
          break;
        case Statement::kAssign: {
          Val v = eval(st.value);
          if (st.targets.size() == 1) {
            frames_.back().vars[st.targets[0]] = std::move(v);
            break;
          }
          if (!st.targets.empty() && v.kind == Val::kOpaque) {
            for (const std::string& t : st.targets) frames_.back().vars[t] = v;
            break;
          }
          assign(st.target, std::move(v));
          break;
        }
      }
    }
    return std::nullopt;
  }

  // `a, (b, c) = v`, or a refusal of what ferry cannot follow.
  void assign(const Expr& target, Val v) {
    step();
    switch (target.kind) {
      case Expr::kName: frames_.back().vars[target.text] = std::move(v); return;
      case Expr::kTuple: case Expr::kList: {
        if (v.kind == Val::kOpaque) {
          for (const Expr& t : target.items) assign(t, v);
          return;
        }
        if ((v.kind != Val::kTuple && v.kind != Val::kList) || v.items.size() != target.items.size())
          fail("unpacks " + what(v) + " into " + std::to_string(target.items.size()) + " names");
        for (size_t k = 0; k < target.items.size(); ++k) assign(target.items[k], std::move(v.items[k]));
        return;
      }
      case Expr::kAttribute:
        fail("stores " + what(v) + " on an object (self." + target.text + " = ...): a forward that keeps state "
             "between calls is not a chain (ferry's session carries the recurrent state: ferry_step, ferry_state_get)");
      case Expr::kSubscript: fail("assigns to part of a value (an in-place update of an element)");
      default: fail("assigns to something other than names");
    }
  }

  // print(...), logging: expression statements that change nothing.
  static bool ignored_call(const Expr& e) {
    if (e.kind != Expr::kCall) return false;
    const Expr& c = e.items[0];
    if (c.is_name("print")) return true;
    if (c.kind == Expr::kAttribute && c.items[0].kind == Expr::kName &&
        (c.items[0].text == "logging" || c.items[0].text == "logger" || c.items[0].text == "log" ||
         c.items[0].text == "warnings"))
      return true;
    if (c.kind == Expr::kAttribute && c.items[0].is_name("self") && (c.text == "log" || c.text == "log_dict")) return true;
    return false;
  }

  // A for loop: over the modules of an nn.Sequential / nn.ModuleList, or a
  // constant range, each step read in turn; any other loop is refused.
  std::optional<Val> loop(const Statement& st, const script::Line& line) {
    if (!program_) fail("a loop (for): the forward is not straight-line code");
    const Val it = eval(st.value);
    std::vector<Val> items;
    if (it.kind == Val::kModule) {
      for (const std::string& child : children_of(it.text)) items.push_back(Val::of(Val::kModule, child));
    } else if (it.kind == Val::kList || it.kind == Val::kTuple) {
      items = it.items;
    } else {
      fail("a loop over " + what(it) + ": a loop over time steps (a cell stepped by hand) or over the data is not a "
           "layer chain; an nn.LSTM / nn.GRU / nn.RNN layer runs the steps itself");
    }
    if (items.size() > 256) fail("a loop of more than 256 steps");
    for (Val& item : items) {
      const std::string saved = line_;
      const size_t saved_number = number_;
      assign(st.target, std::move(item));
      if (std::optional<Val> v = run_block(line.then)) return v;
      line_ = saved;
      number_ = saved_number;
    }
    return std::nullopt;
  }

  // The direct children of the module at `path`, in the order it holds them.
  std::vector<std::string> children_of(const std::string& path) const {
    std::vector<std::string> out;
    for (const ModuleObject& o : checkpoint_.module_objects) {
      if (o.path.empty() || o.path == path) continue;
      const size_t dot = o.path.rfind('.');
      const std::string parent = dot == std::string::npos ? std::string() : o.path.substr(0, dot);
      if (parent == path) out.push_back(o.path);
    }
    return out;
  }

  // ------------------------------------------------------------ branches --
  // Which way an `if` goes. Its condition must be known when the file is
  // read: a constant, an attribute, self.training (False: ferry runs the
  // model in eval mode), whether an argument is None, or a rank or size of a
  // value the chain made. Where it differs between the input layouts still
  // possible, or rests on the input's feature count that no layer has read
  // yet, each way is an alternative: this reading takes one (and rules the
  // other layouts out, or takes the feature count as given), and
  // script_chain() reads again with the next one if this reading fails.
  bool branch(const Expr& condition) {
    in_condition_ = true;
    const Val c = eval(condition);
    in_condition_ = false;
    return branch_on(c);
  }

  bool branch_on(const Val& c) {
    if (const auto b = bool_of(c)) return *b;
    if (c.is_none()) return false;
    if (const auto n = integer_of(c)) return *n != 0;
    if (c.kind != Val::kStatic) unknown_branch(c.kind == Val::kOpaque ? c.text : what(c), c.data);
    struct Alternative {
      bool taken;
      unsigned layouts;
      int assume;  // 0: nothing; 1: the input has sym_n features; 2: it has not
    };
    const unsigned possible = axes_.possible();
    std::vector<Alternative> alternatives;
    auto add = [&](int assume) {
      unsigned ways[2] = {0, 0};
      for (unsigned l = 0; l < kInputLayouts; ++l) {
        const unsigned bit = 1u << l;
        if (!(possible & bit)) continue;
        if (c.known & bit) ways[c.per[l] != 0] |= bit;
        else if ((c.symbolic & bit) && !c.boolean) ways[1] |= bit;  // a feature count is never 0
        else if (assume && (c.symbolic & bit)) ways[(assume == 1) == c.sym_eq] |= bit;
      }
      // The way the layouts with a time axis take first: ferry's input is a batch.
      const unsigned sequences = possible & ~(1u << static_cast<unsigned>(InputLayout::kBF));
      const bool true_first = (ways[1] & sequences) || !(ways[0] & sequences);
      for (const bool taken : {true_first, !true_first})
        if (ways[taken]) alternatives.push_back({taken, ways[taken], assume});
    };
    if ((c.symbolic & possible) && c.boolean) {
      add(1);
      add(2);
    } else {
      add(0);
    }
    if (alternatives.empty()) unknown_branch(c.text, false);
    if (alternatives.size() == 1 && alternatives[0].layouts == possible && alternatives[0].assume == 0)
      return alternatives[0].taken;
    const Alternative& a = alternatives[choose(alternatives.size())];
    if (!axes_.restrict_to(a.layouts)) fail("a branch that fits no input layout");
    if (a.assume == 1) {
      input_features_ = c.sym_n;
      bound_by_ = "the branch on line '" + line_.substr(0, 120) + "'";
      notes_.push_back("read for an input of " + std::to_string(c.sym_n) + " features: the forward branches on "
                       "its feature count (line '" + line_.substr(0, 120) + "')");
    } else if (a.assume == 2) {
      input_not_features_.push_back(c.sym_n);
      excluded_by_ = "the branch on line '" + line_.substr(0, 120) + "'";
    }
    return a.taken;
  }

  [[noreturn]] void unknown_branch(const std::string& on, bool data) {
    fail("a branch on " + on + (data ? ", which depends on the data" : "") +
         ", not known when the file is read (a branch is read only where its condition is: a rank, a feature "
         "size, a constant, an attribute, self.training, whether an argument left at its default is None)");
  }

  size_t choose(size_t n) {
    size_t k = choices_.size() < forced_.size() ? forced_[choices_.size()] : 0;
    if (k >= n) k = 0;
    choices_.emplace_back(k, n);
    return k;
  }

  // A layer reads `x` with `n` features: when x is the input, that is the
  // input's feature count, which branches before may have taken as given.
  void bind_input(const Val& x, long long n, const std::string& what_layer) {
    if (x.chain || !x.hidden.empty() || n <= 0) return;
    const bool excluded = std::find(input_not_features_.begin(), input_not_features_.end(), n) != input_not_features_.end();
    if (excluded) fail(what_layer + " reads " + std::to_string(n) + " input features, which " + excluded_by_ + " ruled out");
    if (input_features_ && *input_features_ != n)
      fail(what_layer + " reads " + std::to_string(n) + " input features, but " + bound_by_ + " took the input to have " +
           std::to_string(*input_features_));
    if (!input_features_) bound_by_ = what_layer;
    input_features_ = n;
  }

  // The features of a tensor value: its own, or the input's.
  std::optional<long long> features_of(const Val& x) const { return x.chain ? x.features : input_features_; }

  // torch.size(x, dim) under each input layout.
  Val size_of(const Val& x, long long dim) {
    Val r = Val::of(Val::kStatic);
    for (unsigned l = 0; l < kInputLayouts; ++l) {
      const std::string& axes = x.axes.under[l];
      if (axes.empty() || !(axes_.possible() & (1u << l))) continue;
      const long long rank = static_cast<long long>(axes.size());
      const long long d = dim < 0 ? dim + rank : dim;
      const unsigned bit = 1u << l;
      if (d < 0 || d >= rank) {
        r.text = "an axis the tensor does not have";
        continue;
      }
      const char axis = axes[static_cast<size_t>(d)];
      r.axis[l] = axis;
      if (axis == 'F') {
        if (const auto f = features_of(x)) {
          r.per[l] = *f;
          r.known |= bit;
        } else if (!x.chain && x.hidden.empty()) {
          r.symbolic |= bit;
        } else {
          r.text = "the feature count of a value whose width ferry does not know";
        }
      } else if (axis == 'L') {
        const Module* m = modules_.find(x.hidden);
        if (m) {
          r.per[l] = static_cast<long long>(m->num_layers) * (m->bidirectional ? 2 : 1);
          r.known |= bit;
        }
      } else {
        r.text = axis == 'B' ? "the batch size" : "the time length";
      }
    }
    if (r.text.empty()) r.text = "a size";
    return r;
  }

  Val rank_of(const Val& x) {
    Val r = Val::of(Val::kStatic);
    for (unsigned l = 0; l < kInputLayouts; ++l)
      if (!x.axes.under[l].empty() && (axes_.possible() & (1u << l))) {
        r.per[l] = static_cast<long long>(x.axes.under[l].size());
        r.known |= 1u << l;
      }
    r.text = "a rank";
    return r;
  }

  // torch.eq / ne / lt / gt / le / ge of two values the branch may rest on.
  Val compare(const std::string& fn, const Val& a, const Val& b) {
    const std::string op = fn.substr(6);
    auto holds = [](long long x, long long y, const std::string& o) {
      return o == "eq" ? x == y : o == "ne" ? x != y : o == "lt" ? x < y : o == "gt" ? x > y : o == "le" ? x <= y : x >= y;
    };
    if (a.data) return a;
    if (b.data) return b;
    if (a.kind == Val::kTensor || b.kind == Val::kTensor || a.kind == Val::kParam || b.kind == Val::kParam)
      return Val::values_of_tensor(fn);
    if (a.kind == Val::kLiteral && b.kind == Val::kLiteral) {
      if (a.string && b.string) {
        const int c = a.text.compare(b.text);
        return Val::truth(holds(c, 0, op));
      }
      const auto x = number_of(a), y = number_of(b);
      const auto bx = bool_of(a), by = bool_of(b);
      if (x && y) return Val::truth(op == "eq" ? *x == *y : op == "ne" ? *x != *y : op == "lt" ? *x < *y
                                    : op == "gt" ? *x > *y : op == "le" ? *x <= *y : *x >= *y);
      if (bx && by) return Val::truth(holds(*bx, *by, op));
      if (op == "eq" || op == "ne") return Val::truth((a.string == b.string && a.text == b.text) == (op == "eq"));
      return Val::opaque("a comparison of " + what(a) + " and " + what(b));
    }
    if (a.kind != Val::kStatic && b.kind != Val::kStatic)
      return Val::opaque("a comparison of " + what(a) + " and " + what(b));
    // 0: known (*v), 1: the input's feature count, 2: not known.
    auto state = [](const Val& v, unsigned l, long long* out) {
      if (v.kind == Val::kStatic) {
        if (v.boolean && (v.symbolic & (1u << l))) return 2;
        if (v.known & (1u << l)) return *out = v.per[l], 0;
        return (v.symbolic & (1u << l)) ? 1 : 2;
      }
      if (const auto n = integer_of(v)) return *out = *n, 0;
      if (const auto t = bool_of(v)) return *out = *t, 0;
      return 2;
    };
    Val r = Val::of(Val::kStatic);
    r.boolean = true;
    r.text = a.kind == Val::kStatic ? a.text : b.text;
    bool have_sym = false;
    for (unsigned l = 0; l < kInputLayouts; ++l) {
      long long x = 0, y = 0;
      const int sa = state(a, l, &x), sb = state(b, l, &y);
      const unsigned bit = 1u << l;
      if (sa == 0 && sb == 0) {
        r.per[l] = holds(x, y, op);
        r.known |= bit;
      } else if ((op == "eq" || op == "ne") && ((sa == 1 && sb == 0) || (sa == 0 && sb == 1))) {
        const long long n = sa == 0 ? x : y;
        if (have_sym && n != r.sym_n) continue;
        have_sym = true;
        r.symbolic |= bit;
        r.sym_n = n;
        r.sym_eq = op == "eq";
      } else if (sa == 2 && a.kind != Val::kStatic) {
        r.text = "a comparison with " + what(a);
      } else if (sb == 2 && b.kind != Val::kStatic) {
        r.text = "a comparison with " + what(b);
      }
    }
    return r;
  }

  // A scalar attribute of a TorchScript object, as ModuleObject::scalars holds it.
  static Val scalar(const std::string& text) {
    if (!text.empty() && text[0] == '\'') return Val::literal(text.substr(1, text.size() - 2), true);
    return Val::literal(text);
  }

  // A forward (or, in Python source, any method or function), parsed once
  // however often it is called.

  // The class of the files the module at `object` is (Python source), or null.
  const python::ClassDef* source_class(const ModuleObject& object) const {
    if (!program_) return nullptr;
    return program_->find_class(object.class_name);
  }

  const Parsed& parsed(const ModuleObject& object, const std::string& method = "forward") {
    const std::string key = object.path + "\n" + method;
    auto it = functions_.find(key);
    if (it != functions_.end()) return *it->second;
    if (program_) {
      const python::ClassDef* cls = source_class(object);
      const python::Def* def = cls ? program_->find_method(*cls, method).first : nullptr;
      if (!def) fail("module '" + shown_path(object.path) + "' (" + class_of(object.path) + ") has no method " + method);
      return *functions_.emplace(key, parse_def(*def)).first->second;
    }
    if (method != "forward") fail("calls '" + method + "' of module '" + shown_path(object.path) + "', a method ferry does not read");
    script::Function f;
    try {
      f = script::parse_function(object.forward);
    } catch (const Error& e) {
      fail(std::string("module '") + shown_path(object.path) + "': " + e.what());
    }
    auto p = std::make_unique<Parsed>();
    p->parameters = std::move(f.parameters);
    p->body = script::parse_body(f);
    return *functions_.emplace(key, std::move(p)).first->second;
  }

  const Parsed& parsed_function(const std::string& name) {
    const std::string key = "\ndef " + name;
    auto it = functions_.find(key);
    if (it != functions_.end()) return *it->second;
    const python::Def& def = program_->functions.at(name);
    return *functions_.emplace(key, parse_def(def)).first->second;
  }

  // A def of the --code files, its unreadable lines marked so.
  std::unique_ptr<Parsed> parse_def(const python::Def& def) {
    script::Function f;
    try {
      f = script::parse_function(def.lines, def.numbers);
    } catch (const Error& e) {
      throw Error((def.file ? def.file->where(def.line) + ": " : std::string()) + e.what());
    }
    auto p = std::make_unique<Parsed>();
    p->parameters = std::move(f.parameters);
    p->body = script::parse_body(f);
    p->file = def.file;
    p->is_static = def.is_static();
    if (!def.unreadable.empty()) mark_unreadable(p->body, def.unreadable);
    return p;
  }

  static void mark_unreadable(std::vector<script::Line>& block, const std::map<size_t, std::string>& bad) {
    for (script::Line& l : block) {
      if (auto b = bad.find(l.number); b != bad.end()) {
        l.statement = Statement{};
        l.statement.why = "cannot be read: " + b->second;
        l.text.clear();  // spelled `pass` in place of what could not be read
      }
      mark_unreadable(l.then, bad);
      mark_unreadable(l.orelse, bad);
    }
  }

  // A parameter default: a constant.
  Val literal_expr(const Expr& e) {
    if (e.kind == Expr::kName || e.kind == Expr::kNumber) return Val::literal(e.text);
    if (e.kind == Expr::kString) return Val::literal(e.text, true);
    return Val::opaque("a default value");
  }

  // -------------------------------------------------------------- values --
  Val eval(const Expr& e) {
    step();
    switch (e.kind) {
      case Expr::kNumber: return Val::literal(e.text);
      case Expr::kString: return Val::literal(e.text, true);
      case Expr::kName: {
        auto& vars = frames_.back().vars;
        if (auto it = vars.find(e.text); it != vars.end()) return it->second;
        if (e.text == "True" || e.text == "False" || e.text == "None") return Val::literal(e.text);
        if (program_) return global(e.text);
        return Val::of(Val::kFunction, e.text);  // a global: torch, ops, __torch__, annotate, ...
      }
      case Expr::kIfExp: return conditional(e);
      case Expr::kDict: return Val::opaque("a dict");
      case Expr::kComprehension: fail("a comprehension (a loop inside an expression)");
      case Expr::kStarred: fail("arguments unpacked with * or **");
      case Expr::kTuple: case Expr::kList: {
        Val v = Val::of(e.kind == Expr::kTuple ? Val::kTuple : Val::kList);
        for (const Expr& item : e.items) add_item(v, eval(item));
        return v;
      }
      case Expr::kAttribute: {
        const Val base = eval(e.items[0]);
        if (base.kind == Val::kFunction) return Val::of(Val::kFunction, base.text + "." + e.text);
        if (base.kind == Val::kModule) return member(base.text, e.text);
        if (program_ && (base.kind == Val::kTensor || base.kind == Val::kZeros)) return tensor_attribute(base, e.text);
        return Val::opaque("attribute '" + e.text + "' of " + what(base));
      }
      case Expr::kSubscript: return subscript(e);
      case Expr::kSlice: fail("a slice outside a subscript");
      case Expr::kCall: return call(e);
    }
    fail("an expression ferry does not read");
  }

  // A name no frame binds, in Python source: a module-level constant, a
  // function of the files, an import ("F" -> torch.nn.functional), a builtin.
  Val global(const std::string& name) {
    if (auto c = program_->constants.find(name); c != program_->constants.end()) {
      if (std::find(constants_in_use_.begin(), constants_in_use_.end(), name) != constants_in_use_.end() ||
          constants_in_use_.size() >= 64)
        return Val::opaque("the constant " + name);
      constants_in_use_.push_back(name);
      const std::string saved = line_;
      Val v = eval(c->second.value);
      line_ = saved;
      constants_in_use_.pop_back();
      if (holds_tensor(v)) fail("the module-level constant " + name + " holds a tensor");
      if (v.kind == Val::kOpaque && (name.find("device") != std::string::npos || name.find("DEVICE") != std::string::npos))
        v.device = true;
      return v;
    }
    if (program_->functions.count(name)) return Val::of(Val::kFunction, "__def__." + name);
    if (program_->imports.count(name)) return Val::of(Val::kFunction, program_->qualified(name));
    return Val::of(Val::kFunction, name);
  }

  // x.shape, x.device, x.dtype, x.data of a tensor (Python source).
  Val tensor_attribute(const Val& x, const std::string& name) {
    if (name == "shape") {
      Val s = Val::opaque("the shape of a tensor");
      s.shape = x.kind == Val::kTensor;
      s.items.push_back(x);
      return s;
    }
    if (name == "device" || name == "is_cuda") {
      Val d = Val::opaque("the device of a tensor");
      d.device = true;
      return d;
    }
    if (name == "data") return x;
    if (name == "dtype") return Val::opaque("the dtype of a tensor");
    fail("the attribute '" + name + "' of a tensor");
  }

  // a if c else b: the branch c takes, where c is known as a branch's is; a
  // value that is not a tensor chosen by something else (a device) is opaque.
  Val conditional(const Expr& e) {
    in_condition_ = true;
    const Val c = eval(e.items[0]);
    in_condition_ = false;
    if (c.kind == Val::kOpaque && !c.data) {
      const Val a = eval(e.items[1]), b = eval(e.items[2]);
      if (holds_tensor(a) || holds_tensor(b)) unknown_branch(c.text, false);
      Val v = Val::opaque("a value chosen by " + c.text);
      v.device = a.device || b.device || (a.kind == Val::kLiteral && a.string) || (b.kind == Val::kLiteral && b.string);
      return v;
    }
    return eval(e.items[branch_on(c) ? 1 : 2]);
  }

  void add_item(Val& tuple, Val item) {
    tuple.parts += item.parts;
    if (tuple.parts > kMaxValueParts) fail("a tuple or list of more than " + std::to_string(kMaxValueParts) + " parts");
    tuple.items.push_back(std::move(item));
  }

  // self.<name> of the module at `path`.
  Val member(const std::string& path, const std::string& name) {
    const std::string child = strip_wrapper_prefixes(child_path(path, name));
    if (objects_.count(child)) return Val::of(Val::kModule, child);
    if (tensors_.count(child)) {
      Val p = Val::of(Val::kParam, name);
      p.owner = strip_wrapper_prefixes(path);
      return p;
    }
    if (name == "training") return Val::truth(false);  // ferry runs the model in eval mode
    auto a = checkpoint_.attributes.find(attribute_key(path, name));
    if (a != checkpoint_.attributes.end() && name != kClassAttribute) {
      const bool number = !a->second.empty() && a->second.find_first_not_of("-0123456789.e+") == std::string::npos;
      if (a->second == "true" || a->second == "false") return Val::literal(a->second == "true" ? "True" : "False");
      return Val::literal(a->second, !number);
    }
    if (auto o = objects_.find(strip_wrapper_prefixes(path)); o != objects_.end()) {
      const auto& scalars = checkpoint_.module_objects[o->second].scalars;
      if (auto v = scalars.find(name); v != scalars.end()) return scalar(v->second);
      const auto& undecided = checkpoint_.module_objects[o->second].undecided;
      if (auto u = undecided.find(name); u != undecided.end())
        return Val::opaque("self." + name + " (" + u->second + ")");
    }
    return Val::opaque("'" + child_path(shown_path(path), name) + "'");
  }

  Val subscript(const Expr& e) {
    Val base = eval(e.items[0]);
    if (base.kind == Val::kTuple || base.kind == Val::kList) {
      if (e.items.size() != 2) fail("indexes " + what(base) + " with more than one index");
      const auto i = integer_of(eval(e.items[1]));
      const long long n = static_cast<long long>(base.items.size());
      if (!i || *i < -n || *i >= n) fail("indexes " + what(base) + " with something other than a constant in range");
      return base.items[static_cast<size_t>(*i < 0 ? *i + n : *i)];
    }
    if (base.kind == Val::kTensor) {
      // x[:, -1], x[-1], x[:, -1, :]: one -1, every other index a full slice.
      long dim = -1;
      for (size_t k = 1; k < e.items.size(); ++k) {
        const Expr& ix = e.items[k];
        if (ix.kind == Expr::kSlice) {
          if (!ix.items[0].is_name("None") || !ix.items[1].is_name("None") || !ix.items[2].is_name("None"))
            fail("a slice of part of an axis");
          continue;
        }
        const auto i = integer_of(eval(ix));
        if (!base.hidden.empty() && i && *i != -1)
          fail("h_n[" + std::to_string(*i) + "] of '" + shown_path(base.hidden) + "': ferry's chain reads only h_n[-1], the "
               "last layer's final state in one direction (joining both directions' final states, torch.cat((h_n[-2], "
               "h_n[-1])), is not a layer ferry runs)");
        if (!i || *i != -1 || dim >= 0) fail("indexing other than the last step ([-1])");
        dim = static_cast<long>(k - 1);
      }
      if (dim < 0) return base;
      return select(base, dim);
    }
    if (base.kind == Val::kOpaque && base.shape && e.items.size() == 2) {
      if (const auto i = integer_of(eval(e.items[1]))) return size_of(base.items[0], *i);
    }
    if (base.kind == Val::kOpaque || base.kind == Val::kFunction) return Val::opaque("an index of " + what(base));
    fail("indexes " + what(base));
  }

  // ---------------------------------------------------------------- calls --
  struct Args {
    std::vector<Val> pos;
    std::map<std::string, Val> kw;
    // Argument `i`, or keyword `name`; null when absent.
    const Val* get(size_t i, const char* name) const {
      if (i < pos.size()) return &pos[i];
      if (name) {
        auto it = kw.find(name);
        if (it != kw.end()) return &it->second;
      }
      return nullptr;
    }
  };

  Val call(const Expr& e) {
    const Expr& callee = e.items[0];
    if (program_ && callee.kind == Expr::kName && (callee.text == "__and__" || callee.text == "__or__")) return logical(e);
    // (m).forward(...) / (m).forward__0(...): a module call.
    if (callee.kind == Expr::kAttribute) {
      const Val base = eval(callee.items[0]);
      if (program_ && base.kind == Val::kModule) {
        const Val child = member(base.text, callee.text);
        if (child.kind == Val::kModule) return call_module(child.text, "forward", arguments(e));
        return module_method(base.text, callee.text, arguments(e));
      }
      if (program_ && (base.kind == Val::kTensor || base.kind == Val::kZeros || base.kind == Val::kParam))
        return tensor_method(base, callee.text, arguments(e));
      if (program_ && base.data) return base;  // x.abs().max(): still the values of a tensor
      if (base.kind == Val::kModule) {
        if (callee.text.rfind("forward", 0) != 0)
          fail("calls the method '" + callee.text + "' of module '" + shown_path(base.text) + "'");
        Args a = arguments(e);
        return call_module(base.text, callee.text, std::move(a));
      }
    }
    const Val fn = eval(callee);
    if (program_ && fn.kind == Val::kModule) return call_module(fn.text, "forward", arguments(e));
    if (program_ && fn.kind == Val::kFunction && fn.text.rfind("__def__.", 0) == 0 &&
        program_->functions.count(fn.text.substr(8))) {
      Args a = arguments(e);
      return call_source_function(fn.text.substr(8), std::move(a.pos), std::move(a.kw));
    }
    if (program_ && fn.kind == Val::kFunction && program_->find_class(fn.text) && fn.text.find("torch.") != 0)
      fail("builds a module (" + fn.text.substr(0, 60) + ") inside forward: its weights are not the checkpoint's");
    if (fn.kind != Val::kFunction) fail("calls " + what(fn));
    if (fn.text == "annotate" || fn.text == "unchecked_cast") {
      if (e.items.size() != 3) fail(fn.text + " without its two arguments");
      return eval(e.items[2]);
    }
    Args a = arguments(e);
    return call_function(fn.text, a);
  }

  // `a and b` / `a or b`, lazily, where `a` decides.
  Val logical(const Expr& e) {
    const bool is_and = e.items[0].text == "__and__";
    const Val a = eval(e.items[1]);
    if (a.data) return a;
    std::optional<bool> t = bool_of(a);
    if (!t && a.is_none()) t = false;
    if (!t && a.kind == Val::kModule) t = true;
    if (!t) {
      if (a.kind == Val::kStatic && a.boolean && a.symbolic == 0) {
        // Known under each layout still possible: decided by branch_on, its alternatives included.
        t = branch_on(a);
      } else {
        return Val::opaque("a condition on " + what(a));
      }
    }
    if (*t != is_and) return a;
    return eval(e.items[2]);
  }

  // self.x.method(...) (Python source): a module's forward, a method of its
  // class in the files, or a torch.nn method that changes nothing.
  Val module_method(const std::string& path, const std::string& method, Args a) {
    if (method == "forward") return call_module(path, method, std::move(a));
    auto it = objects_.find(path);
    if (it != objects_.end()) {
      const ModuleObject& object = checkpoint_.module_objects[it->second];
      if (const python::ClassDef* cls = source_class(object); cls && program_->find_method(*cls, method).first)
        return interpret(object, std::move(a.pos), std::move(a.kw), false, method);
    }
    if (method == "flatten_parameters" || method == "eval" || method == "train" || method == "zero_grad")
      return Val::literal("None");
    fail("calls the method '" + method + "' of module '" + shown_path(path) + "' (" + class_of(path) + "), which " +
         (it == objects_.end() ? "the model does not hold" : "ferry does not read as a chain element"));
  }

  // x.method(...) of a tensor (Python source): the torch function
  // TorchScript prints for it, with x first.
  Val tensor_method(const Val& x, const std::string& name, Args a) {
    static const char* const kSameTensor[] = {"float", "cuda", "cpu", "requires_grad_", "type_as", "float32"};
    static const char* const kOtherDtype[] = {"double", "half", "bfloat16", "long", "int", "bool", "short", "byte"};
    static const char* const kZerosStay[] = {"to", "cuda", "cpu", "float", "detach", "requires_grad_", "contiguous",
                                             "clone", "type_as", "unsqueeze", "squeeze", "view", "reshape", "expand",
                                             "repeat", "permute", "transpose", "zero_", "fill_"};
    if (x.kind == Val::kZeros) {
      for (const char* z : kZerosStay)
        if (name == z) {
          if (name == "fill_" && (a.pos.empty() || integer_of(a.pos[0]) != 0)) break;
          return x;
        }
      fail("the initial state built with ." + name + "(): only zeros are read");
    }
    if (name == "new_zeros" || name == "zero_") return Val::of(Val::kZeros);
    for (const char* same : kSameTensor)
      if (name == same) return chain_value(&x, "x." + name + "()");
    for (const char* other : kOtherDtype)
      if (name == other) fail("converts the tensor to " + name + " (ferry runs float32)");
    if (name == "unsqueeze")
      fail("x.unsqueeze(...) adds an axis: ferry's model takes its input with every axis ([B, T, F], [B, F]); feed "
           "it the unsqueezed shape and convert with the unsqueeze left out (--graph)");
    Args full;
    full.pos.push_back(x);
    if (name == "permute" && a.pos.size() != 1) {  // x.permute(1, 2, 0): torch.permute(x, [1, 2, 0])
      Val dims = Val::of(Val::kList);
      for (Val& v : a.pos) add_item(dims, std::move(v));
      a.pos.clear();
      a.pos.push_back(std::move(dims));
    }
    for (Val& v : a.pos) full.pos.push_back(std::move(v));
    full.kw = std::move(a.kw);
    return call_function("torch." + name, full);
  }

  // view / reshape: read where it keeps every axis (x.view(x.size(0), -1)
  // of a [B, F] value, x.reshape(B, T, F) of a [B, T, F] one); a view that
  // changes the axes under a layout rules that layout out.
  Val view(const std::string& fn, const Args& a) {
    const Val& x = chain_value(a.get(0, "input"), fn);
    std::vector<Val> dims;
    if (a.pos.size() == 2 && (a.pos[1].kind == Val::kList || a.pos[1].kind == Val::kTuple)) dims = a.pos[1].items;
    else dims.assign(a.pos.begin() + 1, a.pos.end());
    if (const Val* shape = a.get(99, "shape"); shape && dims.empty()) dims = shape->items;
    if (const Val* shape = a.get(99, "size"); shape && dims.empty()) dims = shape->items;
    unsigned fits = 0;
    const auto features = features_of(x);
    for (unsigned l = 0; l < kInputLayouts; ++l) {
      const std::string& axes = x.axes.under[l];
      if (axes.empty() || !(axes_.possible() & (1u << l)) || axes.size() != dims.size()) continue;
      bool ok = true;
      size_t wildcards = 0;
      for (size_t i = 0; i < dims.size() && ok; ++i) {
        const Val& d = dims[i];
        const bool known_here = d.kind == Val::kStatic && (d.known & (1u << l));
        // The size of this same axis (x.size(1)), its value agreeing where known.
        const bool same_axis = d.kind == Val::kStatic && !d.boolean && d.axis[l] == axes[i] &&
                               (axes[i] != 'F' || !features || !known_here || d.per[l] == *features);
        // The feature count, as a literal or a value known under this layout.
        const bool feature_count = axes[i] == 'F' && features &&
                                   (integer_of(d) == *features || (known_here && d.per[l] == *features));
        if (integer_of(d) == -1) ++wildcards;
        else ok = same_axis || feature_count;
      }
      if (ok && wildcards <= 1) fits |= 1u << l;
    }
    if (!fits || !axes_.restrict_to(fits))
      fail(fn + " that changes the tensor's axes: ferry keeps one layout inside a model, so only a view that keeps "
           "every axis (x.view(x.size(0), -1) of a [B, F] value) is read");
    return x;
  }

  // flatten(x, start_dim, end_dim): read where it flattens one axis alone.
  Val flatten(const std::string& fn, const Args& a) {
    const Val& x = chain_value(a.get(0, "input"), fn);
    const Val* s = a.get(1, "start_dim");
    const Val* e = a.get(2, "end_dim");
    const long long start = s ? integer_of(*s).value_or(99) : 0, end = e ? integer_of(*e).value_or(99) : -1;
    unsigned fits = 0;
    for (unsigned l = 0; l < kInputLayouts; ++l) {
      const long long rank = static_cast<long long>(x.axes.under[l].size());
      if (!rank || !(axes_.possible() & (1u << l))) continue;
      const long long a0 = start < 0 ? start + rank : start, a1 = end < 0 ? end + rank : end;
      if (a0 == a1 && a0 >= 0 && a0 < rank) fits |= 1u << l;
    }
    if (!fits || !axes_.restrict_to(fits))
      fail(fn + " that merges axes: ferry keeps one layout inside a model, so only a flatten of one axis "
           "(x.flatten(1) of a [B, F] value) is read");
    return x;
  }

  Args arguments(const Expr& e) {
    Args a;
    for (size_t i = 1; i < e.items.size(); ++i) {
      Val v = eval(e.items[i]);
      const std::string& name = e.names[i - 1];
      if (name.empty()) {
        if (!a.kw.empty()) fail("a positional argument after a keyword argument");
        a.pos.push_back(std::move(v));
      } else {
        a.kw[name] = std::move(v);
      }
    }
    return a;
  }

  // `v` must be a tensor on the chain (not h_n).
  const Val& chain_value(const Val* v, const std::string& what_call) {
    if (!v) fail(what_call + " without its input");
    if (v->kind != Val::kTensor) fail(what_call + " of " + what(*v) + ", not of a tensor made from the input");
    if (!v->hidden.empty()) fail(what_call + " of the final state h_n of '" + shown_path(v->hidden) + "' as a whole");
    return *v;
  }

  static bool holds_tensor(const Val& v) {
    if (v.kind == Val::kTensor) return true;
    for (const Val& i : v.items)
      if (holds_tensor(i)) return true;
    return false;
  }

  Val extend(const Val& x, GraphElement e) {
    if (length_of(x.chain) >= kMaxChainElements)
      fail("a chain of more than " + std::to_string(kMaxChainElements) + " elements");
    if (x.left_pad) fail("a value F.pad padded, read by other than the Conv1d that pads it causally");
    Val y = x;
    if (program_ && !frames_.empty() && frames_.back().file) e.source = frames_.back().file->where(number_);
    y.chain = std::make_shared<const ChainNode>(ChainNode{std::move(e), x.chain, length_of(x.chain) + 1});
    if (length_of(y.chain) > length_of(furthest_)) furthest_ = y.chain;
    y.id = ++ids_;
    y.partial = false;
    y.features = features_of(x);
    return y;
  }

  // Conv1d `m` reading a value F.pad padded with `left_pad` zeros before its
  // time axis: a causal conv where that is (kernel_size - 1) x dilation.
  Val causal_conv(const Val& x, GraphElement e, const Module& m, long long dilation) {
    const long long span = static_cast<long long>(m.kernel_size - 1) * dilation;
    if (x.left_pad != span)
      fail("F.pad of " + std::to_string(x.left_pad) + " steps before Conv1d '" + shown_path(m.path) + "', whose kernel spans " +
           std::to_string(span) + ": ferry's causal conv pads (kernel_size - 1) x dilation");
    e.args["padding"] = "causal";
    Val y = x;
    y.left_pad = 0;
    return through(y, std::move(e), m);
  }

  // F.pad(x, (left, 0)) / torch.constant_pad_nd(x, [left, 0]) of a [B, C, T]
  // value: zeros before the time axis, for the Conv1d that reads it next.
  Val pad(const std::string& fn, const Args& a) {
    const Val& x = chain_value(a.get(0, "input"), fn);
    const Val* widths = a.get(1, "pad");
    if (!widths || (widths->kind != Val::kList && widths->kind != Val::kTuple) || widths->items.size() != 2)
      fail(fn + " of other than the time axis, (left, right)");
    const auto left = integer_of(widths->items[0]), right = integer_of(widths->items[1]);
    if (!left || !right || *right != 0 || *left <= 0 || *left > (1 << 20))
      fail(fn + " other than zeros before the time steps, (N, 0) with N a constant (a causal conv's left padding)");
    if (fn == "F.pad") {
      const Val* mode = a.get(2, "mode");
      if (mode && !(mode->kind == Val::kLiteral && mode->string && mode->text == "constant"))
        fail(fn + " in a mode other than 'constant' (zeros)");
    }
    const Val* value = a.get(fn == "F.pad" ? 3 : 2, "value");
    if (value && !value->is_none() && number_of(*value) != 0.0) fail(fn + " with a value other than 0");
    if (!axes_.require_exactly(x.axes, "BFT", false)) fail(fn + " of a value that is not [B, C, T]");
    if (x.left_pad) fail(fn + " of a value padded already");
    Val y = x;
    y.left_pad = *left;
    y.id = ++ids_;
    y.partial = false;
    return y;
  }

  // `x` through the layer `m`: the features it reads and makes.
  Val through(const Val& x, GraphElement e, const Module& m, bool embedding = false) {
    embedding = embedding || m.class_name == "Embedding";
    long long in = 0;
    if (m.type == ModuleType::Linear && !embedding) in = m.in_features;
    if (m.type == ModuleType::Recurrent) in = m.input_size;
    if (m.type == ModuleType::BatchNorm || m.type == ModuleType::LayerNorm) in = m.features;
    bind_input(x, in, "'" + shown_path(m.path) + "'");
    if (const auto f = features_of(x); f && in > 0 && *f != in)
      fail("'" + shown_path(m.path) + "' reads " + std::to_string(in) + " features, but its input has " + std::to_string(*f));
    Val y = extend(x, std::move(e));
    if (embedding) y.features = m.in_features;
    else if (m.type != ModuleType::PReLU) y.features = m.output_size();
    return y;
  }

  static GraphElement op(OpKind k) {
    GraphElement e;
    e.op = k;
    return e;
  }

  // An in-place op made `result` out of `x`: every alias of x sees it.
  Val in_place(const Val& x, Val result) {
    if (x.partial) fail("an in-place op on part of a tensor");
    result.id = x.id;
    for (Frame& f : frames_)
      for (auto& [name, v] : f.vars) {
        step();  // every value looked at counts, so that many in-place ops over many names stay bounded
        if (v.kind == Val::kTensor && v.id == x.id && v.hidden.empty()) {
          v.chain = result.chain;
          v.partial = false;
        }
      }
    return result;
  }

  Val call_function(const std::string& raw, const Args& a) {
    const std::string fn = canonical(raw);
    const bool functional = fn.compare(0, 2, "F.") == 0;
    // A reduction in a branch's condition (`if x.mean() > 0:`) reads the values.
    if (in_condition_ && (fn == "torch.mean" || fn == "torch.amax" || fn == "torch.max")) return Val::values_of_tensor(fn);
    const std::string base = functional ? fn.substr(2) : fn;
    // torch.relu_ / F.relu(x, True): in place.
    bool inplace = !functional && !base.empty() && base.back() == '_' && base != "torch.add_";
    const std::string name = inplace ? base.substr(0, base.size() - 1) : base;

    if (auto act = activation(fn, name, functional, a, &inplace)) {
      const Val& x = chain_value(a.get(0, "input"), fn);
      if ((act->op == OpKind::Softmax || act->op == OpKind::LogSoftmax)) {
        const auto dim = integer_of(*a.get(1, "dim"));
        if (!axes_.require_axis(x.axes, static_cast<long>(*dim), 'F'))
          fail(fn + " over dim " + std::to_string(*dim) + ", which is not the features axis under any input layout");
      }
      Val y = extend(x, *act);
      return inplace ? in_place(x, std::move(y)) : y;
    }
    if (functional && (name == "linear" || name == "conv1d" || name == "prelu")) return layer("torch." + name, a);
    if (fn == "torch.linear" || fn == "torch._convolution" || fn == "torch.conv1d" || fn == "torch.batch_norm" ||
        fn == "F.batch_norm" || fn == "torch.layer_norm" || fn == "F.layer_norm" || fn == "torch.prelu" ||
        fn == "torch.embedding" || fn == "F.embedding")
      return layer(fn, a);
    if (fn == "torch.lstm" || fn == "torch.gru" || fn == "torch.rnn_tanh" || fn == "torch.rnn_relu") return recurrent_op(fn, a);

    if (fn == "torch.transpose") {
      const Val& x = chain_value(a.get(0, "input"), fn);
      const auto d0 = integer_of(*nonnull(a.get(1, "dim0"), fn)), d1 = integer_of(*nonnull(a.get(2, "dim1"), fn));
      if (!d0 || !d1) fail("a transpose of axes that are not constants");
      Val y = x;
      y.axes = axes_.transpose(x.axes, static_cast<long>(*d0), static_cast<long>(*d1));
      if (!axes_.possible()) fail("a transpose of axes the tensor does not have");
      return y;
    }
    if (fn == "torch.permute") {
      const Val& x = chain_value(a.get(0, "input"), fn);
      const Val& d = *nonnull(a.get(1, "dims"), fn);
      std::vector<long> dims;
      for (const Val& i : d.items) {
        const auto n = integer_of(i);
        if (!n) fail("a permute of axes that are not constants");
        dims.push_back(static_cast<long>(*n));
      }
      Val y = x;
      y.axes = axes_.permute(x.axes, dims);
      if (!axes_.possible()) fail("a permute that does not fit the tensor's axes");
      return y;
    }
    if (fn == "torch.contiguous" || fn == "torch.detach" || fn == "torch.clone") {
      Val y = chain_value(a.get(0, "input"), fn);
      if (fn == "torch.clone") y.id = ++ids_, y.partial = false;
      return y;
    }
    if (fn == "torch.slice") return slice(a);
    if (fn == "torch.select") {
      const Val* x = a.get(0, "input");
      const auto dim = integer_of(*nonnull(a.get(1, "dim"), fn)), index = integer_of(*nonnull(a.get(2, "index"), fn));
      if (!x || x->kind != Val::kTensor) fail("torch.select of " + (x ? what(*x) : std::string("nothing")));
      if (!dim || !index || *index != -1) fail("indexing other than the last step ([-1])");
      return select(*x, static_cast<long>(*dim));
    }
    if (fn == "torch.squeeze") {
      const Val* x = a.get(0, "input");
      const Val* d = a.get(1, "dim");
      if (x && x->kind == Val::kTensor && !x->hidden.empty() && d && integer_of(*d) == 0) {
        const Module* m = modules_.find(x->hidden);
        if (!m || m->num_layers * (m->bidirectional ? 2u : 1u) != 1)
          fail("h_n.squeeze(0) of '" + shown_path(x->hidden) + "', which has more than one layer or direction");
        return select(*x, 0);
      }
      // out.squeeze(-1) of a one-feature output (a forecaster's [B, 1] -> [B]):
      // the values are the same; ferry's output keeps the axis.
      if (program_ && x && x->kind == Val::kTensor && x->hidden.empty() && x->chain && features_of(*x) == 1) {
        const auto dim = d ? integer_of(*d) : std::optional<long long>(-1);
        if (dim && axes_.require_axis(x->axes, static_cast<long>(*dim), 'F')) {
          const std::string note = "the forward squeezes away its one output feature (line '" + line_.substr(0, 80) +
                                   "'): ferry's output keeps it, [B, 1] where PyTorch returns [B] (the same values)";
          if (std::find(notes_.begin(), notes_.end(), note) == notes_.end()) notes_.push_back(note);
          return *x;
        }
      }
      fail("torch.squeeze of " + (x ? what(*x) : std::string("nothing")) + " (only h_n.squeeze(0) of a one-layer module" +
           (program_ ? ", and the squeeze of a one-feature output," : "") + " is read)");
    }
    if (fn == "torch.mean" || fn == "torch.amax") {
      const Val& x = chain_value(a.get(0, "input"), fn);
      const Val* dims = a.get(1, "dim");
      const auto d = dims ? single_int(*dims) : std::nullopt;
      if (!d) fail(fn + " over other than one axis");
      const Val* keep = a.get(2, "keepdim");
      if (keep && bool_of(*keep) != false) fail(fn + " with keepdim");
      return reduce_time(x, static_cast<long>(*d), fn == "torch.mean" ? OpKind::Mean : OpKind::Max);
    }
    if (fn == "torch.max") {
      const Val& x = chain_value(a.get(0, "input"), fn);
      const Val* dims = a.get(1, "dim");
      const auto d = dims ? integer_of(*dims) : std::nullopt;
      if (!d) fail("torch.max other than over one axis");
      const Val* keep = a.get(2, "keepdim");
      if (keep && bool_of(*keep) != false) fail("torch.max with keepdim");
      Val t = Val::of(Val::kTuple);
      add_item(t, reduce_time(x, static_cast<long>(*d), OpKind::Max));
      add_item(t, Val::opaque("the indices of torch.max"));
      return t;
    }
    if (fn == "torch.view" || fn == "torch.reshape") return view(fn, a);
    if (fn == "F.pad" || fn == "torch.constant_pad_nd") return pad(fn, a);
    if (fn == "torch.flatten") return flatten(fn, a);
    if (program_ && (raw == "Variable" || raw == "torch.autograd.Variable") && !a.pos.empty()) return a.pos[0];
    if (program_ && (fn == "torch.add" || fn == "torch.sub" || fn == "torch.mul" || fn == "torch.div" ||
                     fn == "torch.floordiv" || fn == "torch.remainder" || fn == "torch.pow" || fn == "torch.neg")) {
      if (!std::any_of(a.pos.begin(), a.pos.end(), holds_tensor)) return number_op(fn, a);
    }
    if (fn == "torch.add" || fn == "torch.add_") return residual(fn, a);
    if (fn == "torch.zeros" || fn == "torch.zeros_like") return Val::of(Val::kZeros);
    if (fn == "torch.to" && !a.pos.empty() && a.pos[0].kind == Val::kZeros) return a.pos[0];  // zeros moved to a device
    if (fn == "torch.to" && !a.pos.empty() && a.pos[0].kind == Val::kTensor) {
      // x.float(), x.to(device): float32 stays float32 (dtype 6); any other dtype is not read.
      for (size_t i = 1; i < a.pos.size(); ++i) {
        const Val& v = a.pos[i];
        const bool device = (v.kind == Val::kOpaque && (v.text == "the result of torch.device" || v.device)) ||
                            (program_ && v.kind == Val::kLiteral && v.string &&
                             (v.text.rfind("cuda", 0) == 0 || v.text == "cpu" || v.text == "mps")) ||
                            (program_ && v.kind == Val::kFunction && (v.text == "torch.float32" || v.text == "torch.float"));
        if (!device && !bool_of(v) && !v.is_none() && integer_of(v) != 6)
          fail("torch.to with " + what(v) + " (only float32, dtype 6, or a device is read)");
      }
      for (const auto& [k, v] : a.kw)
        if (k == "dtype" ? integer_of(v) != 6 && !v.is_none() &&
                               !(v.kind == Val::kFunction && (v.text == "torch.float32" || v.text == "torch.float"))
                         : !(bool_of(v) || v.is_none() || v.kind == Val::kOpaque || (v.kind == Val::kLiteral && v.string)))
          fail("torch.to with " + k + "=" + what(v) + " (only float32, dtype 6, or a device is read)");
      return chain_value(&a.pos[0], fn);
    }
    if (fn == "getattr") {
      const Val* o = a.get(0, nullptr);
      const Val* n = a.get(1, nullptr);
      if (!o || o->kind != Val::kModule || !n || n->kind != Val::kLiteral || !n->string) fail("a getattr ferry does not read");
      return member(o->text, n->text);
    }
    // What a branch may rest on.
    if (raw == "torch.dim" && a.pos.size() == 1 && a.pos[0].kind == Val::kTensor) return rank_of(a.pos[0]);
    if ((raw == "torch.size" || raw == "len") && !a.pos.empty() && a.pos[0].kind == Val::kTensor) {
      if (raw == "len") return size_of(a.pos[0], 0);
      if (a.pos.size() == 2) {
        if (const auto d = integer_of(a.pos[1])) return size_of(a.pos[0], *d);
      }
      if (a.pos.size() == 1) {
        Val s = Val::opaque("the shape of a tensor");
        s.shape = true;
        s.items.push_back(a.pos[0]);
        return s;
      }
    }
    if (raw == "torch.eq" || raw == "torch.ne" || raw == "torch.lt" || raw == "torch.gt" || raw == "torch.le" ||
        raw == "torch.ge") {
      if (a.pos.size() != 2) fail(raw + " without two arguments");
      return compare(raw, a.pos[0], a.pos[1]);
    }
    if (raw == "torch.__is__" || raw == "torch.__isnot__") {
      if (a.pos.size() != 2) fail(raw + " without two arguments");
      const Val& v = a.pos[0].is_none() ? a.pos[1] : a.pos[0];
      const bool is = raw == "torch.__is__";
      if (!a.pos[0].is_none() && !a.pos[1].is_none()) return Val::opaque("whether two values are the same object");
      if (v.kind == Val::kOpaque) return Val::opaque("whether " + v.text + " is None");
      return Val::truth(v.is_none() == is);
    }
    if (raw == "torch.__not__" || raw == "bool" || raw == "int") {
      if (a.pos.size() != 1) fail(raw + " without its one argument");
      Val v = a.pos[0];
      if (v.data) return v;
      if (v.kind == Val::kTensor || v.kind == Val::kParam) return Val::values_of_tensor(raw);
      if (raw != "torch.__not__") {
        if (v.kind == Val::kLiteral || v.kind == Val::kStatic) return v;
      } else if (const auto b = bool_of(v)) {
        return Val::truth(!*b);
      } else if (v.kind == Val::kStatic && v.boolean) {
        for (long long& x : v.per) x = !x;
        v.sym_eq = !v.sym_eq;
        return v;
      }
      return Val::opaque("the result of " + raw + " of " + what(v));
    }
    if (raw == "ops.prim.RaiseException") {
      const Val* m = a.get(0, nullptr);
      fail(std::string("the forward raises an exception here") +
           (m && m->kind == Val::kLiteral && m->string ? " ('" + m->text.substr(0, 80) + "')" : "") +
           " for the input ferry would give it");
    }
    // Calls that only read shapes, types or devices.
    static const char* const kQueries[] = {"torch.size", "torch.dim", "torch.numel", "ops.prim.NumToTensor",
                                           "ops.prim.device", "ops.prim.dtype", "ops.prim.layout", "int", "float",
                                           "len", "torch.device", "torch.list"};
    for (const char* q : kQueries)
      if (raw == q) return Val::opaque("the result of " + raw);
    if (in_condition_ && (std::any_of(a.pos.begin(), a.pos.end(), holds_tensor) ||
                          std::any_of(a.kw.begin(), a.kw.end(), [](const auto& k) { return holds_tensor(k.second); })))
      return Val::values_of_tensor(raw.substr(0, 80));
    for (const Val& v : a.pos)
      if (holds_tensor(v)) fail("a call to '" + raw.substr(0, 80) + "', which ferry does not read as a chain element");
    for (const auto& [k, v] : a.kw)
      if (holds_tensor(v)) fail("a call to '" + raw.substr(0, 80) + "', which ferry does not read as a chain element");
    return Val::opaque("the result of " + raw.substr(0, 80));
  }

  // Arithmetic on what is not a tensor (sizes, attributes): integers
  // computed, anything else opaque.
  Val number_op(const std::string& fn, const Args& a) {
    for (const Val& v : a.pos)
      if (v.data) return v;
    if (fn == "torch.neg" && a.pos.size() == 1)
      if (const auto n = integer_of(a.pos[0])) return Val::literal(std::to_string(-*n));
    if (a.pos.size() == 2) {
      const auto x = integer_of(a.pos[0]), y = integer_of(a.pos[1]);
      if (x && y && std::llabs(*x) < (1LL << 31) && std::llabs(*y) < (1LL << 31)) {
        if (fn == "torch.add") return Val::literal(std::to_string(*x + *y));
        if (fn == "torch.sub") return Val::literal(std::to_string(*x - *y));
        if (fn == "torch.mul") return Val::literal(std::to_string(*x * *y));
      }
    }
    return Val::opaque("a number computed by " + fn);
  }

  const Val* nonnull(const Val* v, const std::string& fn) {
    if (!v) fail(fn + " without all its arguments");
    return v;
  }

  // The built-in op an activation call is, with the options it passes;
  // nullopt for a call that is not one. Sets *inplace for F.x(..., inplace=True).
  std::optional<GraphElement> activation(const std::string& fn, const std::string& name, bool functional,
                                         const Args& a, bool* inplace) {
    struct Act {
      const char* name;
      OpKind op;
      int inplace_arg;  // the F. form's `inplace` position, or -1
    };
    static const Act kActs[] = {
        {"relu", OpKind::ReLU, 1},           {"tanh", OpKind::Tanh, -1},         {"sigmoid", OpKind::Sigmoid, -1},
        {"silu", OpKind::SiLU, 1},           {"gelu", OpKind::GELU, -1},         {"leaky_relu", OpKind::LeakyReLU, 2},
        {"elu", OpKind::ELU, 2},             {"hardtanh", OpKind::Hardtanh, 3},  {"relu6", OpKind::ReLU6, 1},
        {"softmax", OpKind::Softmax, -1},    {"log_softmax", OpKind::LogSoftmax, -1},
        {"dropout", OpKind::Dropout, 3},     {"feature_dropout", OpKind::Dropout, -1},
        {"alpha_dropout", OpKind::Dropout, 3}, {"feature_alpha_dropout", OpKind::Dropout, -1},
    };
    std::string bare = name;
    if (!functional) {
      if (bare.compare(0, 6, "torch.") != 0) return std::nullopt;
      bare = bare.substr(6);
    }
    const Act* act = nullptr;
    for (const Act& k : kActs)
      if (bare == k.name) act = &k;
    if (!act) return std::nullopt;
    if (functional && act->inplace_arg >= 0) {
      const Val* ip = a.get(static_cast<size_t>(act->inplace_arg), "inplace");
      if (ip) {
        const auto b = bool_of(*ip);
        if (!b) fail(fn + " with an inplace flag that is not a constant");
        *inplace = *b;
      }
    }
    GraphElement e = op(act->op);
    auto number = [&](size_t i, const char* key, const char* graph_key) {
      const Val* v = a.get(i, key);
      if (!v) return;
      if (!number_of(*v)) fail(fn + " with a " + key + " that is not a constant");
      e.args[graph_key] = v->text;
    };
    switch (act->op) {
      case OpKind::LeakyReLU: number(1, "negative_slope", "slope"); break;
      case OpKind::ELU: {
        number(1, "alpha", "alpha");
        for (size_t i : {2u, 3u}) {
          const Val* s = a.get(i, i == 2 ? "scale" : "input_scale");
          if (s && !functional && number_of(*s) != 1.0) fail(fn + " with a scale other than 1 (a SELU/CELU)");
        }
        break;
      }
      case OpKind::Hardtanh: {
        number(1, "min_val", "min");
        number(2, "max_val", "max");
        break;
      }
      case OpKind::GELU: {
        const Val* ap = a.get(1, "approximate");
        if (ap && (ap->kind != Val::kLiteral || (ap->text != "none" && ap->text != "tanh")))
          fail(fn + " with an approximation other than 'none' or 'tanh'");
        if (ap && ap->text == "tanh") e.option = "tanh";
        break;
      }
      case OpKind::Softmax: case OpKind::LogSoftmax: {
        const Val* d = a.get(1, "dim");
        if (!d || !integer_of(*d)) fail(fn + " over an axis that is not a constant");
        break;
      }
      case OpKind::Dropout: {
        const Val* train = a.get(2, functional ? "training" : "train");
        if (train && bool_of(*train) == true) fail(fn + " in training mode (traced or called with training=True)");
        break;
      }
      default: break;
    }
    return e;
  }

  // x[full slice]: the tensor itself.
  Val slice(const Args& a) {
    const Val& x = *nonnull(a.get(0, "input"), "torch.slice");
    if (x.kind != Val::kTensor) {
      if (x.kind == Val::kOpaque) return Val::opaque("a slice of " + what(x));
      fail("torch.slice of " + what(x));
    }
    const Val* start = a.get(2, "start");
    const Val* end = a.get(3, "end");
    const Val* stepv = a.get(4, "step");
    const bool full_start = !start || start->is_none() || integer_of(*start) == 0;
    const auto e = end ? integer_of(*end) : std::nullopt;
    const bool full_end = !end || end->is_none() || (e && *e >= (int64_t{1} << 62));
    const bool unit = !stepv || integer_of(*stepv) == 1;
    if (!full_start || !full_end || !unit) fail("a slice of part of an axis");
    return x;
  }

  // The last step along `dim`, or h_n[-1].
  Val select(const Val& x, long dim) {
    if (!x.hidden.empty()) {
      if (dim != 0) fail("h_n indexed on an axis other than the layers");
      const Module* m = modules_.find(x.hidden);
      if (m && m->bidirectional) fail("h_n[-1] of a bidirectional module (the backward direction's first step)");
      Val y = extend(x, op(OpKind::Last));
      y.hidden.clear();
      for (unsigned c = 0; c < kInputLayouts; ++c)
        if (!y.axes.under[c].empty()) y.axes.under[c] = "BF";
      return y;
    }
    if (!axes_.require_axis(x.axes, dim, 'T'))
      fail("indexing axis " + std::to_string(dim) + ", which is not the time axis under any input layout the chain "
           "before allows");
    Val y = extend(x, op(OpKind::Last));
    y.axes = axes_.remove(x.axes, dim);
    y.id = x.id;
    y.partial = true;
    return y;
  }

  Val reduce_time(const Val& x, long dim, OpKind k) {
    if (!axes_.require_axis(x.axes, dim, 'T'))
      fail(std::string(k == OpKind::Mean ? "a mean" : "a max") + " over axis " + std::to_string(dim) +
           ", which is not the time axis under any input layout the chain before allows");
    Val y = extend(x, op(k));
    y.axes = axes_.remove(x.axes, dim);
    return y;
  }

  // torch.add(y, x) where x is a value y was made from: (y's tail) + input.
  Val residual(const std::string& fn, const Args& a) {
    const Val* p = a.get(0, "input");
    const Val* q = a.get(1, "other");
    if (!p || !q) fail(fn + " without two arguments");
    if (p->kind != Val::kTensor || q->kind != Val::kTensor)
      fail(fn + " of " + what(*p) + " and " + what(*q) + " (only a residual skip, two values of the chain, is read)");
    const Val& x0 = chain_value(p, fn);
    const Val& x1 = chain_value(q, fn);
    if (const Val* alpha = a.get(2, "alpha"); alpha && number_of(*alpha) != 1.0) fail(fn + " with alpha");
    const bool first_longer = length_of(x0.chain) > length_of(x1.chain);
    const Val& y = first_longer ? x0 : x1;
    const Val& x = first_longer ? x1 : x0;
    // The ops between x and y: y's chain back to x's (the same node, not an equal copy).
    std::vector<GraphElement> tail;
    Chain c = y.chain;
    for (; c && length_of(c) > length_of(x.chain); c = c->prev) tail.push_back(c->element);
    if (tail.empty() || c != x.chain) fail("an add of two values that are not a chain and its own input");
    if (!axes_.require_same(x.axes, y.axes)) fail("an add of two values whose axes differ");
    if (length_of(y.chain) + 2 > kMaxChainElements)
      fail("a chain of more than " + std::to_string(kMaxChainElements) + " elements");
    Val out = y;
    out.chain = x.chain;
    auto push = [&out](GraphElement e) {
      out.chain = std::make_shared<const ChainNode>(ChainNode{std::move(e), out.chain, length_of(out.chain) + 1});
    };
    push(op(OpKind::SkipBegin));
    for (auto it = tail.rbegin(); it != tail.rend(); ++it) push(*it);
    push(op(OpKind::SkipEnd));
    out.id = ++ids_;
    out.partial = false;
    if (fn == "torch.add_") return in_place(x0, std::move(out));
    return out;
  }

  // -------------------------------------------------------------- layers --
  // A parameter argument of a layer call: the module it belongs to.
  const Module& owner_of(const Val* w, const std::string& fn, const char* expected, ModuleType type) {
    if (!w || w->kind != Val::kParam)
      fail(fn + " with a weight that is " + (w ? what(*w) : std::string("missing")) + ", not a module's parameter");
    if (w->text != expected) fail(fn + " with '" + child_path(w->owner, w->text) + "' as its " + expected);
    const Module* m = modules_.find(w->owner.empty() ? kRootModuleName : w->owner);
    if (!m || m->type != type) fail(fn + " with the weights of '" + shown_path(w->owner) + "', which is not a layer of that kind");
    return *m;
  }

  // The optional parameter argument `v` must be the module's `name` exactly
  // when the module has one.
  void check_optional_param(const Val* v, const Module& m, const std::string& name, const std::string& fn) {
    const bool has = m.params.count(name) != 0;
    const bool given = v && !v->is_none();
    if (has != given || (given && (v->kind != Val::kParam || v->owner != m.path || v->text != name)))
      fail(fn + ": its " + name + " argument is " + (v ? what(*v) : std::string("missing")) + ", but '" +
           shown_path(m.path) + "' " + (has ? "has" : "has no") + " " + name);
  }

  static GraphElement module_element(const Module& m) {
    GraphElement e;
    e.module = m.path.empty() ? kRootModuleName : m.path;
    return e;
  }

  Val layer(const std::string& fn, const Args& a) {
    if (fn == "torch.embedding" || fn == "F.embedding") {
      const bool aten = fn == "torch.embedding";
      const Val& x = chain_value(a.get(aten ? 1 : 0, aten ? "indices" : "input"), fn);
      const Module& m = owner_of(a.get(aten ? 0 : 1, "weight"), fn, "weight", ModuleType::Linear);
      if (x.chain) fail(fn + " of a value other than the model's input (token ids)");
      if (!axes_.require_features_last(x.axes)) fail(fn + ": no input layout fits");
      return through(x, module_element(m), m, true);
    }
    const Val& x = chain_value(a.get(0, "input"), fn);
    if (fn == "torch.linear") {
      const Module& m = owner_of(a.get(1, "weight"), fn, "weight", ModuleType::Linear);
      check_optional_param(a.get(2, "bias"), m, "bias", fn);
      if (!axes_.require_features_last(x.axes))
        fail("a Linear over an axis other than the features (the axes before it do not fit any input layout)");
      return through(x, module_element(m), m);
    }
    if (fn == "torch.prelu") {
      const Module& m = owner_of(a.get(1, "weight"), fn, "weight", ModuleType::PReLU);
      if (m.features > 1 && !axes_.require_exactly(x.axes, "BFT", true))
        fail("a PReLU with one weight per channel needs the channels at dim 1");
      return through(x, module_element(m), m);
    }
    if (fn == "torch._convolution" || fn == "torch.conv1d") {
      const Module& m = owner_of(a.get(1, "weight"), fn, "weight", ModuleType::Conv1d);
      check_optional_param(a.get(2, "bias"), m, "bias", fn);
      GraphElement e = module_element(m);
      auto option = [&](size_t i, const char* key, long long fallback) {
        const Val* v = a.get(i, key);
        if (!v) {
          if (fn == "torch._convolution") fail(fn + " without its " + key);
          return;
        }
        if (std::string(key) == "padding" && v->kind == Val::kLiteral && v->string) {
          if (v->text != "same" && v->text != "valid") fail(fn + " with padding '" + v->text.substr(0, 20) + "'");
          e.args["padding"] = v->text;
          return;
        }
        const auto n = single_int(*v);
        if (!n) fail(fn + " with a " + key + " that is not one constant");
        if (*n != fallback) e.args[key] = std::to_string(*n);
      };
      option(3, "stride", 1);
      option(4, "padding", 0);
      option(5, "dilation", 1);
      if (fn == "torch._convolution") {
        const Val* transposed = a.get(6, "transposed");
        if (!transposed || bool_of(*transposed) != false) fail("a transposed convolution");
        const Val* out_pad = a.get(7, "output_padding");
        if (!out_pad || single_int(*out_pad) != 0) fail("a convolution with output padding");
      }
      const Val* g = a.get(fn == "torch._convolution" ? 8 : 6, "groups");
      const auto groups = g ? integer_of(*g) : std::optional<long long>(1);
      if (!groups || *groups < 1) fail(fn + " with groups that are not a positive constant");
      e.args["groups"] = std::to_string(*groups);
      if (!axes_.require_exactly(x.axes, "BFT", false))
        fail("a Conv1d whose input is not [B, C, T] under any input layout the chain before allows");
      if (x.left_pad) {
        const auto d = e.args.count("dilation") ? std::strtoll(e.args["dilation"].c_str(), nullptr, 10) : 1;
        if (e.args.count("padding") && e.args["padding"] != "0") fail("F.pad before a Conv1d that pads itself too");
        return causal_conv(x, std::move(e), m, d);
      }
      return through(x, std::move(e), m);
    }
    if (fn == "torch.batch_norm" || fn == "F.batch_norm") {
      // torch.batch_norm(x, weight, bias, mean, var, training, momentum, eps, cudnn)
      // F.batch_norm(x, mean, var, weight, bias, training, momentum, eps)
      const bool aten = fn == "torch.batch_norm";
      const Val* mean = a.get(aten ? 3 : 1, "running_mean");
      const Module& m = owner_of(mean, fn, "running_mean", ModuleType::BatchNorm);
      check_optional_param(a.get(aten ? 1 : 3, "weight"), m, "weight", fn);
      check_optional_param(a.get(aten ? 2 : 4, "bias"), m, "bias", fn);
      const Val* var = a.get(aten ? 4 : 2, "running_var");
      if (!var || var->kind != Val::kParam || var->owner != m.path || var->text != "running_var")
        fail(fn + " without '" + shown_path(m.path) + "'s running_var");
      const Val* training = a.get(5, "training");
      if (!training || bool_of(*training) != false) fail(fn + " in training mode (batch statistics)");
      GraphElement e = module_element(m);
      const Val* eps = a.get(7, "eps");
      if (eps) {
        const auto v = number_of(*eps);
        if (!v) fail(fn + " with an eps that is not a constant");
        if (*v != 1e-5) e.args["eps"] = eps->text;
      }
      if (!axes_.require_exactly(x.axes, "BFT", true)) fail("a BatchNorm1d needs the channels at dim 1");
      return through(x, std::move(e), m);
    }
    // layer_norm(x, normalized_shape, weight, bias, eps)
    const Val* w = a.get(2, "weight");
    if (!w || w->kind != Val::kParam) fail(fn + " without a module's weight (an elementwise_affine=False LayerNorm is not read)");
    const Module& m = owner_of(w, fn, "weight", ModuleType::LayerNorm);
    check_optional_param(a.get(3, "bias"), m, "bias", fn);
    const Val* shape = a.get(1, "normalized_shape");
    if (!shape || single_int(*shape) != static_cast<long long>(m.features))
      fail(fn + " over a shape other than the " + std::to_string(m.features) + " features");
    GraphElement e = module_element(m);
    if (const Val* eps = a.get(4, "eps")) {
      const auto v = number_of(*eps);
      if (!v) fail(fn + " with an eps that is not a constant");
      if (*v != 1e-5) e.args["eps"] = eps->text;
    }
    if (!axes_.require_features_last(x.axes)) fail("a LayerNorm over an axis other than the features");
    return through(x, std::move(e), m);
  }

  // torch.lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
  Val recurrent_op(const std::string& fn, const Args& a) {
    const Val* hx = a.get(1, "hx");
    // The packed overload: (data, batch_sizes, hx, params, ...).
    if (a.pos.size() >= 4 && a.pos[3].kind == Val::kList)
      fail(fn + " of a packed sequence (pack_padded_sequence): run it on the padded batch with --lengths instead");
    const Val& x = chain_value(a.get(0, "input"), fn);
    check_initial_state(hx, fn);
    const Val* params = a.get(2, "params");
    if (!params || params->kind != Val::kList || params->items.empty()) fail(fn + " without its parameter list");
    const Val& first = params->items[0];
    const Module& m = owner_of(&first, fn, "weight_ih_l0", ModuleType::Recurrent);
    for (const Val& p : params->items)
      if (p.kind != Val::kParam || p.owner != m.path)
        fail(fn + " with parameters that are not all '" + shown_path(m.path) + "'s");
    if (params->items.size() != m.params.size())
      fail(fn + " with " + std::to_string(params->items.size()) + " of '" + shown_path(m.path) + "'s " +
           std::to_string(m.params.size()) + " parameters");
    const CellKind kind = fn == "torch.lstm" ? CellKind::kLstm : fn == "torch.gru" ? CellKind::kGru : CellKind::kRnn;
    if (m.kind != kind || m.is_cell) fail(fn + " with the weights of '" + shown_path(m.path) + "', " + m.describe());
    auto flag = [&](size_t i, const char* name) {
      const Val* v = a.get(i, name);
      const auto b = v ? bool_of(*v) : std::nullopt;
      if (!b) fail(fn + " with a " + name + " that is not a constant");
      return *b;
    };
    const auto layers = a.get(4, "num_layers") ? integer_of(*a.get(4, "num_layers")) : std::nullopt;
    if (!layers || *layers != static_cast<long long>(m.num_layers))
      fail(fn + ": num_layers does not match '" + shown_path(m.path) + "', " + m.describe());
    if (flag(7, "bidirectional") != m.bidirectional)
      fail(fn + ": bidirectional does not match '" + shown_path(m.path) + "', " + m.describe());
    if (flag(6, "train")) fail(fn + " in training mode (dropout between layers)");
    const bool batch_first = flag(8, "batch_first");
    GraphElement e = module_element(m);
    if (kind == CellKind::kRnn) e.option = fn == "torch.rnn_relu" ? "relu" : "tanh";
    Val out = recurrent_input(x, batch_first, m);
    Val y = through(out, e, m);
    Val t = Val::of(Val::kTuple);
    add_item(t, y);
    add_item(t, final_state(y, m));
    if (kind == CellKind::kLstm) add_item(t, cell_state(m));
    return t;
  }

  void check_initial_state(const Val* hx, const std::string& fn) {
    if (!hx || hx->is_none() || hx->kind == Val::kZeros) return;
    if (program_ && hx->kind == Val::kOpaque && !hx->state_input.empty()) return state_argument(*hx, fn);
    if ((hx->kind == Val::kList || hx->kind == Val::kTuple) && !hx->items.empty()) {
      for (const Val& h : hx->items) {
        if (program_ && h.kind == Val::kOpaque && !h.state_input.empty()) {
          state_argument(h, fn);
          continue;
        }
        if (h.kind != Val::kZeros) fail(fn + " from an initial state that is " + what(h) + ", not zeros");
      }
      return;
    }
    fail(fn + " from an initial state that is " + what(*hx) + ", not zeros");
  }

  // forward(self, x, hidden): the caller's state. ferry's session starts
  // from zeros and carries the state from call to call itself.
  void state_argument(const Val& h, const std::string& fn) {
    const std::string note = "forward takes the initial state of " + fn + " as its argument '" + h.state_input +
                             "': ferry starts from zeros (ferry_state_reset) and carries the state between calls "
                             "(ferry_step; ferry_state_get / ferry_state_set to save or give one)";
    if (std::find(notes_.begin(), notes_.end(), note) == notes_.end()) notes_.push_back(note);
  }

  Val recurrent_input(const Val& x, bool batch_first, const Module& m) {
    if (!axes_.require_exactly(x.axes, batch_first ? "BTF" : "TBF", false))
      fail("'" + shown_path(m.path) + "' (batch_first=" + (batch_first ? "True" : "False") + ") takes " +
           (batch_first ? "[B, T, F]" : "[T, B, F]") + ", which the axes before it are not under any input layout");
    return x;
  }

  Val final_state(const Val& y, const Module& m) {
    Val h = y;
    h.features = m.proj_size ? m.proj_size : m.hidden_size;
    h.hidden = m.path;
    h.state_of = shown_path(m.path);
    for (unsigned c = 0; c < kInputLayouts; ++c)
      if (!h.axes.under[c].empty()) h.axes.under[c] = "LBF";
    h.id = ++ids_;
    return h;
  }

  static Val cell_state(const Module& m) {
    Val c = Val::opaque("the final cell state c_n of '" + shown_path(m.path) + "'");
    c.state_of = shown_path(m.path);
    return c;
  }

  // ------------------------------------------------------------- modules --
  static bool is_torch_nn(const ModuleObject& o) {
    return o.class_name.rfind("__torch__.torch.nn.modules.", 0) == 0 || o.class_name.rfind("torch.nn.modules.", 0) == 0;
  }

  Val call_module(const std::string& path, const std::string& method, Args a) {
    auto it = objects_.find(path);
    if (it == objects_.end()) fail("calls module '" + shown_path(path) + "', which the archive does not hold");
    const ModuleObject& object = checkpoint_.module_objects[it->second];
    // A scripted torch.nn module is what its class computes; any other
    // module's forward is read.
    if (program_ && object.forward.empty() && class_of(path) == "Sequential") {
      // An nn.Sequential: each child in turn.
      if (a.pos.size() != 1 || !a.kw.empty()) fail("calls the nn.Sequential '" + shown_path(path) + "' with other than one input");
      Val x = a.pos[0];
      for (const std::string& child : children_of(path)) {
        Args one;
        one.pos.push_back(std::move(x));
        x = call_module(child, "forward", std::move(one));
      }
      return x;
    }
    if (is_torch_nn(object) && (object.final_constants || method != "forward" || object.forward.empty()))
      return class_semantics(object, a);
    if (method != "forward") fail("calls '" + method + "' of module '" + shown_path(path) + "', a method ferry does not read");
    if (object.forward.empty()) fail("calls module '" + shown_path(path) + "', whose forward is not in the archive");
    return interpret(object, std::move(a.pos), std::move(a.kw), false);
  }

  Val class_semantics(const ModuleObject& object, const Args& a) {
    const std::string& path = object.path;
    const std::string cls = class_of(path);
    const Module* m = modules_.find(path.empty() ? kRootModuleName : path);
    if (m) {
      const Val& x = chain_value(a.get(0, "input"), "module '" + shown_path(path) + "'");
      switch (m->type) {
        case ModuleType::Recurrent: {
          if (m->is_cell) fail("a recurrent Cell is stepped by the code around it, not one chain element");
          check_initial_state(a.get(1, "hx"), "module '" + shown_path(path) + "'");
          auto bf = checkpoint_.attributes.find(attribute_key(path, "batch_first"));
          const bool batch_first = bf != checkpoint_.attributes.end() && bf->second == "true";
          Val y = through(recurrent_input(x, batch_first, *m), module_element(*m), *m);
          Val h = final_state(y, *m);
          Val t = Val::of(Val::kTuple);
          add_item(t, y);
          if (m->kind == CellKind::kLstm) {
            // (output, (h_n, c_n)): c_n is not on any chain ferry runs.
            Val state = Val::of(Val::kTuple);
            add_item(state, h);
            add_item(state, cell_state(*m));
            add_item(t, state);
          } else {
            add_item(t, h);
          }
          return t;
        }
        case ModuleType::Conv1d:
          if (!axes_.require_exactly(x.axes, "BFT", false))
            fail("Conv1d '" + shown_path(path) + "' on an input that is not [B, C, T] under any input layout the chain allows");
          if (x.left_pad) {
            auto p = checkpoint_.attributes.find(attribute_key(path, "padding"));
            if (p != checkpoint_.attributes.end() && p->second != "(0,)" && p->second != "0" && p->second != "valid")
              fail("F.pad before Conv1d '" + shown_path(path) + "', which pads itself too (padding " + p->second + ")");
            auto dl = checkpoint_.attributes.find(attribute_key(path, "dilation"));
            if (dl == checkpoint_.attributes.end())
              fail("F.pad before Conv1d '" + shown_path(path) + "', whose dilation the code does not say");
            const long long d = std::strtoll(dl->second.c_str() + (dl->second[0] == '(' ? 1 : 0), nullptr, 10);
            return causal_conv(x, module_element(*m), *m, d);
          }
          break;
        case ModuleType::BatchNorm:
          if (!axes_.require_exactly(x.axes, "BFT", true)) fail("BatchNorm1d '" + shown_path(path) + "' needs the channels at dim 1");
          break;
        case ModuleType::PReLU:
          if (m->features > 1 && !axes_.require_exactly(x.axes, "BFT", true))
            fail("PReLU '" + shown_path(path) + "' with one weight per channel needs the channels at dim 1");
          break;
        case ModuleType::Linear: case ModuleType::LayerNorm:
          if (m->class_name == "Embedding" && x.chain)
            fail("Embedding '" + shown_path(path) + "' of a value other than the model's input (token ids)");
          if (!axes_.require_features_last(x.axes))
            fail(cls + " '" + shown_path(path) + "' over an axis other than the features");
          break;
      }
      return through(x, module_element(*m), *m);
    }
    if (auto act = recorded_activation(checkpoint_, path)) {
      const Val& x = chain_value(a.get(0, "input"), "module '" + shown_path(path) + "'");
      if (act->op == OpKind::Softmax || act->op == OpKind::LogSoftmax) {
        auto dim = checkpoint_.attributes.find(attribute_key(path, "dim"));
        char* end = nullptr;
        const long d = dim == checkpoint_.attributes.end() ? 0 : std::strtol(dim->second.c_str(), &end, 10);
        if (dim == checkpoint_.attributes.end() || *end != '\0')
          fail(cls + " '" + shown_path(path) + "' without a dim (PyTorch picks the axis from the input's rank)");
        if (!axes_.require_axis(x.axes, d, 'F')) fail(cls + " '" + shown_path(path) + "' over an axis other than the features");
      }
      // nn.ReLU(inplace=True) & co. change their input for every other user of it.
      auto inplace = checkpoint_.attributes.find(attribute_key(path, "inplace"));
      if (inplace != checkpoint_.attributes.end() && inplace->second == "true") return in_place(x, extend(x, *act));
      return extend(x, *act);
    }
    fail("calls module '" + shown_path(path) + "' (" + cls + "), whose computation ferry does not know");
  }

  const Checkpoint& checkpoint_;
  const ModuleSet& modules_;
  std::unordered_map<std::string, size_t> objects_;  // path -> module_objects index
  std::unordered_set<std::string> tensors_;          // state-dict keys, prefixes stripped
  const python::Program* program_;
  std::unordered_map<std::string, std::unique_ptr<Parsed>> functions_;
  std::vector<Frame> frames_;
  std::string line_;
  size_t number_ = 0;  // the line's number in its source file (Python source)
  Chain furthest_;     // the longest chain made so far (Python source: said where reading stops)
  ChainAxes axes_;
  unsigned ids_ = 0;
  std::vector<size_t> forced_;
  std::vector<std::pair<size_t, size_t>> choices_;
  size_t& steps_;
  bool in_condition_ = false;
  std::optional<long long> input_features_;  // read by a layer, or taken as given by a branch
  std::vector<long long> input_not_features_;  // ruled out by a branch
  std::string bound_by_, excluded_by_;        // what gave input_features_ / input_not_features_, for messages
  std::vector<std::string> notes_;
  std::vector<std::string> constants_in_use_;  // module-level constants being read (one defined from itself)
};

}  // namespace

bool has_script_forward(const Checkpoint& checkpoint) {
  return !checkpoint.module_objects.empty() && !checkpoint.module_objects[0].forward.empty();
}

RecordedChain script_chain(const Checkpoint& checkpoint, const ModuleSet& modules, const python::Program* program) {
  if (!has_script_forward(checkpoint)) throw Error("no forward code");
  // A reading that fails after a branch that could go either way is read
  // again with the next alternative of the last such branch (depth first);
  // when none reads, the first reading's error is the one that says why.
  size_t steps = 0;
  std::vector<size_t> forced;
  std::optional<Error> first;
  for (size_t reading = 1;; ++reading) {
    Reader reader(checkpoint, modules, program, forced, steps);
    try {
      return reader.run();
    } catch (const Error& e) {
      if (!first) first = e;
      std::vector<std::pair<size_t, size_t>> taken = reader.choices();
      while (!taken.empty() && taken.back().first + 1 >= taken.back().second) taken.pop_back();
      if (taken.empty() || reading >= kMaxReadings) throw *first;
      forced.clear();
      for (const auto& t : taken) forced.push_back(t.first);
      ++forced.back();
    }
  }
}

}  // namespace ferry::conv
