#include "mapping/graph.h"

#include "error.h"
#include "mapping/wrapper_prefixes.h"

namespace ferry::conv {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::vector<GraphElement> parse_graph(const std::string& spec) {
  std::vector<GraphElement> chain;
  size_t start = 0;
  while (true) {
    const size_t gt = spec.find('>', start);
    const std::string item = trim(spec.substr(start, gt == std::string::npos ? std::string::npos : gt - start));
    if (item.empty()) {
      throw Error("--graph \"" + spec + "\": empty element at character " + std::to_string(start) +
                  " (elements are separated by '>')");
    }
    GraphElement e;
    if (item == "last") e.op = OpKind::Last;
    else if (item == "relu") e.op = OpKind::ReLU;
    else if (item == "tanh") e.op = OpKind::Tanh;
    else if (item == "sigmoid") e.op = OpKind::Sigmoid;
    else if (item == "softmax") e.op = OpKind::Softmax;
    else if (item == "identity") e.op = OpKind::Identity;
    else {
      e.op = OpKind::Module;
      std::string name = item;
      const size_t paren = item.find('(');
      if (paren != std::string::npos) {
        if (item.back() != ')') throw Error("--graph: element '" + item + "' lacks a closing ')'");
        name = trim(item.substr(0, paren));
        e.option = trim(item.substr(paren + 1, item.size() - paren - 2));
        if (e.option != "relu" && e.option != "tanh") {
          throw Error("--graph: element '" + item + "': the option must be (relu) or (tanh), for an RNN");
        }
      }
      for (char c : name) {
        if (!(isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) {
          throw Error("--graph: element '" + item + "' is neither a module path nor one of "
                      "last, relu, tanh, sigmoid, softmax, identity");
        }
      }
      e.module = strip_wrapper_prefixes(name);
    }
    chain.push_back(e);
    if (gt == std::string::npos) break;
    start = gt + 1;
  }
  return chain;
}

std::string format_graph(const std::vector<GraphElement>& chain) {
  std::string s;
  for (const GraphElement& e : chain) {
    if (!s.empty()) s += " > ";
    switch (e.op) {
      case OpKind::Module:
        s += (e.module.empty() ? std::string(kRootModuleName) : e.module) + (e.option.empty() ? "" : "(" + e.option + ")");
        break;
      case OpKind::Last: s += "last"; break;
      case OpKind::ReLU: s += "relu"; break;
      case OpKind::Tanh: s += "tanh"; break;
      case OpKind::Sigmoid: s += "sigmoid"; break;
      case OpKind::Softmax: s += "softmax"; break;
      case OpKind::Identity: s += "identity"; break;
    }
  }
  return s;
}

std::vector<GraphElement> infer_graph(const ModuleSet& set) {
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

  // Suggest the common shape: recurrent > last > linear ... (widths permitting).
  std::vector<GraphElement> suggestion;
  bool taken_last = false;
  std::string listing;
  for (size_t i = 0; i < set.modules.size(); ++i) {
    const Module& m = set.modules[i];
    listing += (listing.empty() ? " " : ", ") + m.path + " " + m.describe();
    if (i > 0 && m.type == ModuleType::Linear && set.modules[i - 1].type == ModuleType::Recurrent &&
        !taken_last) {
      suggestion.push_back({OpKind::Last, "", ""});
      taken_last = true;
    } else if (i > 0 && m.type == ModuleType::Linear && set.modules[i - 1].type == ModuleType::Linear) {
      suggestion.push_back({OpKind::ReLU, "", ""});
    }
    suggestion.push_back(chain[i]);
  }
  throw Error("cannot infer the layer chain: a state dict does not record what sits between "
              "modules (the last time step or every step, activations); modules in state-dict order:" +
              listing + "; pass --graph, for example --graph \"" + format_graph(suggestion) + "\"");
}

}  // namespace ferry::conv
