#include "mapping/script_chain.h"

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "error.h"
#include "mapping/graph.h"

namespace ferry::conv {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// A value of the forward code, as far as the chain is concerned.
struct Val {
  enum Kind { kTensor, kModule, kTuple, kFunction, kLiteral } kind = kLiteral;
  std::vector<GraphElement> chain;  // kTensor: the ops from the input to it
  bool hidden = false;              // kTensor: a recurrent module's final state h_n
  std::string text;                 // kModule: path; kFunction: name; kLiteral: as written
  std::vector<Val> items;           // kTuple
};

class Reader {
 public:
  Reader(const Checkpoint& c, const ModuleSet& m) : checkpoint_(c), modules_(m) {}

  std::string run() {
    const std::vector<std::string>& lines = checkpoint_.script_forward;
    if (lines.empty()) throw Error("no forward code");
    // def forward(self: ..., \n    x: Tensor) -> Tensor:   the input is the parameter after self.
    std::string signature;
    size_t i = 0;
    for (; i < lines.size(); ++i) {
      signature += lines[i];
      if (trim(lines[i]).back() == ':' && signature.find(')') != std::string::npos) break;
    }
    const size_t self = signature.find("self");
    const size_t comma = signature.find(',', self);
    if (self == std::string::npos || comma == std::string::npos) throw Error("forward takes no input besides self");
    std::string input = trim(signature.substr(comma + 1));
    input = input.substr(0, input.find_first_of(":,)"));
    vars_[trim(input)] = Val{Val::kTensor, {}, false, "", {}};
    for (++i; i < lines.size(); ++i) {
      const std::string line = trim(lines[i]);
      if (line.empty()) continue;
      line_ = line;
      if (line.rfind("return ", 0) == 0) {
        const Val v = expr(line.substr(7));
        if (v.kind != Val::kTensor || v.hidden) fail("the return value is not one tensor on the chain");
        if (v.chain.empty()) fail("forward returns its input");
        return format_graph(v.chain);
      }
      const size_t eq = line.find(" = ");
      if (eq == std::string::npos || line.rfind("for ", 0) == 0 || line.rfind("if ", 0) == 0) {
        fail("not a straight-line assignment");
      }
      std::string lhs = trim(line.substr(0, eq));
      if (lhs.find(':') != std::string::npos) lhs = trim(lhs.substr(0, lhs.find(':')));  // `h : T = ...`
      const Val v = expr(line.substr(eq + 3));
      if (lhs.find(',') == std::string::npos) {
        vars_[lhs] = v;
        continue;
      }
      std::vector<std::string> names;
      size_t p = 0;
      while (p < lhs.size()) {
        size_t c = lhs.find(',', p);
        if (c == std::string::npos) c = lhs.size();
        const std::string n = trim(lhs.substr(p, c - p));
        if (!n.empty()) names.push_back(n);
        p = c + 1;
      }
      if (v.kind != Val::kTuple || v.items.size() != names.size()) fail("unpacks a value that is not a matching tuple");
      for (size_t k = 0; k < names.size(); ++k) vars_[names[k]] = v.items[k];
    }
    fail("no return");
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw Error("line '" + line_.substr(0, 120) + "': " + why);
  }

  // Splits "a, b, )" style argument text at top-level commas.
  std::vector<std::string> split_args(const std::string& s) const {
    std::vector<std::string> out;
    int depth = 0;
    std::string cur;
    for (char c : s) {
      if (c == '(' || c == '[') ++depth;
      if (c == ')' || c == ']') --depth;
      if (c == ',' && depth == 0) {
        if (!trim(cur).empty()) out.push_back(trim(cur));
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (!trim(cur).empty()) out.push_back(trim(cur));
    return out;
  }

  Val tensor_arg(const std::vector<std::string>& args, size_t i, const char* what) {
    if (args.size() <= i) fail(std::string(what) + " without its argument");
    Val v = expr(args[i]);
    if (v.kind != Val::kTensor) fail(std::string(what) + " of something other than a tensor on the chain");
    return v;
  }

  static Val with(Val v, OpKind op) {
    GraphElement e;
    e.op = op;
    v.chain.push_back(e);
    return v;
  }

  // Time axis of the recurrent layer before (batch_first: 1, else 0).
  std::string time_dim(const Val& v) const {
    for (auto it = v.chain.rbegin(); it != v.chain.rend(); ++it) {
      if (it->op != OpKind::Module) continue;
      auto bf = checkpoint_.attributes.find(attribute_key(it->module, "batch_first"));
      if (bf != checkpoint_.attributes.end()) return bf->second == "true" ? "1" : "0";
    }
    return "";
  }

  Val call_module(const std::string& path, const Val& x) {
    const Module* m = modules_.find(path);
    Val out = x;
    if (m) {
      GraphElement e;
      e.module = path;
      out.chain.push_back(e);
      if (m->type == ModuleType::Recurrent) {
        if (m->is_cell) fail("a recurrent Cell is stepped by the code around it, not one chain element");
        Val hidden = out;
        hidden.hidden = true;
        Val t;
        t.kind = Val::kTuple;
        if (m->kind == CellKind::kLstm) {
          // (output, (h_n, c_n)): c_n is not on any chain ferry runs.
          Val state;
          state.kind = Val::kTuple;
          state.items = {hidden, Val{}};
          t.items = {out, state};
        } else {
          t.items = {out, hidden};
        }
        return t;
      }
      return out;
    }
    if (auto act = recorded_activation(checkpoint_, path)) {
      out.chain.push_back(*act);
      return out;
    }
    // A container (nn.Sequential): its numbered children in order.
    std::map<int, std::string> children;
    const std::string prefix = path + ".";
    for (const auto& [key, value] : checkpoint_.attributes) {
      if (key.rfind(prefix, 0) != 0) continue;
      const std::string rest = key.substr(prefix.size());
      const size_t dot = rest.find('.');
      if (dot == std::string::npos || rest.substr(dot + 1) != kClassAttribute) continue;
      const std::string index = rest.substr(0, dot);
      if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos) fail("calls '" + path + "', a module ferry does not know");
      children[std::stoi(index)] = prefix + index;
    }
    if (children.empty()) fail("calls '" + path + "', a module ferry does not know");
    for (const auto& [k, child] : children) {
      out = call_module(child, out);
      if (out.kind != Val::kTensor) fail("a recurrent module inside '" + path + "'");
    }
    return out;
  }

  Val expr(const std::string& text) {
    const std::string s = trim(text);
    if (s.empty()) fail("an empty expression");
    if (s.rfind("self.", 0) == 0 && s.find('(') == std::string::npos) {
      return Val{Val::kModule, {}, false, s.substr(5), {}};
    }
    const size_t open = s.find('(');
    if (open == std::string::npos || s.back() != ')') {
      auto it = vars_.find(s);
      if (it != vars_.end()) return it->second;
      if (s.rfind("__torch__.", 0) == 0) return Val{Val::kFunction, {}, false, s, {}};
      return Val{Val::kLiteral, {}, false, s, {}};
    }
    // (m).forward(args) / (m).forward__0(args)
    if (open == 0) {
      const size_t close = s.find(')');
      const std::string target = s.substr(1, close - 1);
      const std::string rest = s.substr(close + 1);
      if (rest.rfind(".forward", 0) != 0) fail("a call ferry does not read");
      const Val m = expr(target);
      if (m.kind != Val::kModule) fail("'.forward' of something other than a module");
      const size_t a = rest.find('(');
      const auto args = split_args(rest.substr(a + 1, rest.size() - a - 2));
      return call_module(m.text, tensor_arg(args, 0, "a module call"));
    }
    std::string fn = s.substr(0, open);
    const auto args = split_args(s.substr(open + 1, s.size() - open - 2));
    if (auto it = vars_.find(fn); it != vars_.end() && it->second.kind == Val::kFunction) fn = it->second.text;
    const std::string functional = "__torch__.torch.nn.functional.";
    if (fn.rfind(functional, 0) == 0) fn = "torch." + fn.substr(functional.size());
    if (fn == "torch.relu") return with(tensor_arg(args, 0, fn.c_str()), OpKind::ReLU);
    if (fn == "torch.tanh") return with(tensor_arg(args, 0, fn.c_str()), OpKind::Tanh);
    if (fn == "torch.sigmoid") return with(tensor_arg(args, 0, fn.c_str()), OpKind::Sigmoid);
    if (fn == "torch.softmax" || fn == "torch.log_softmax") {
      if (args.size() < 2 || args[1] != "-1") fail(fn + " over an axis other than the last (dim=-1)");
      return with(tensor_arg(args, 0, fn.c_str()), fn == "torch.softmax" ? OpKind::Softmax : OpKind::LogSoftmax);
    }
    if (fn == "torch.slice") {
      // x[:, :]: no start or end, a view of everything.
      if (args.size() > 2) fail("a slice with bounds");
      return tensor_arg(args, 0, "torch.slice");
    }
    if (fn == "torch.transpose") {
      if (args.size() != 3 || args[1] != "1" || args[2] != "2") fail("a transpose other than (1, 2)");
      return tensor_arg(args, 0, "torch.transpose");
    }
    if (fn == "torch.select") {
      Val x = tensor_arg(args, 0, "torch.select");
      if (args.size() != 3 || args[2] != "-1") fail("indexing other than the last step ([-1])");
      if (x.hidden) {
        if (args[1] != "0") fail("h_n indexed on an axis other than the layers");
        for (auto it = x.chain.rbegin(); it != x.chain.rend(); ++it) {
          const Module* m = it->op == OpKind::Module ? modules_.find(it->module) : nullptr;
          if (m && m->bidirectional) fail("h_n[-1] of a bidirectional module (the backward direction's first step)");
          if (m) break;
        }
        x.hidden = false;
        return with(x, OpKind::Last);
      }
      if (args[1] != time_dim(x)) fail("indexing an axis that is not the recurrent layer's time axis");
      return with(x, OpKind::Last);
    }
    if (fn == "torch.mean") {
      Val x = tensor_arg(args, 0, "torch.mean");
      if (args.size() != 2 || args[1] != "[" + time_dim(x) + "]") fail("a mean over an axis other than time");
      return with(x, OpKind::Mean);
    }
    if (fn == "torch.add") {
      Val y = tensor_arg(args, 0, "torch.add");
      const Val x = tensor_arg(args, 1, "torch.add");
      if (args.size() > 2) fail("torch.add with alpha");
      const size_t n = x.chain.size();
      if (n >= y.chain.size() || !std::equal(x.chain.begin(), x.chain.end(), y.chain.begin(),
                                             [](const GraphElement& a, const GraphElement& b) {
                                               return format_graph({a}) == format_graph({b});
                                             })) {
        fail("an add of two values that are not a chain and its own input");
      }
      GraphElement begin, end;
      begin.op = OpKind::SkipBegin;
      end.op = OpKind::SkipEnd;
      std::vector<GraphElement> chain(x.chain.begin(), x.chain.end());
      chain.push_back(begin);
      chain.insert(chain.end(), y.chain.begin() + static_cast<long>(n), y.chain.end());
      chain.push_back(end);
      y.chain = chain;
      return y;
    }
    fail("a call to '" + fn.substr(0, 60) + "', which ferry does not read as a chain element");
  }

  const Checkpoint& checkpoint_;
  const ModuleSet& modules_;
  std::map<std::string, Val> vars_;
  std::string line_;
};

}  // namespace

std::string script_chain(const Checkpoint& checkpoint, const ModuleSet& modules) {
  return Reader(checkpoint, modules).run();
}

}  // namespace ferry::conv
