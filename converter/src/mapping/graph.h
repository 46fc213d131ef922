// The layer chain: parsed from `--graph "lstm > last > fc"` or inferred from
// the state dict. An element is a module path (wrapper prefixes stripped) or
// a built-in op: last, relu, tanh, sigmoid, softmax, identity. An RNN module
// may carry its nonlinearity: `rnn(relu)` (a state dict does not record it).
#pragma once

#include <string>
#include <vector>

#include "mapping/modules.h"

namespace ferry::conv {

enum class OpKind { Module, Last, ReLU, Tanh, Sigmoid, Softmax, Identity };

struct GraphElement {
  OpKind op = OpKind::Module;
  std::string module;   // for OpKind::Module
  std::string option;   // "relu" / "tanh" for RNN modules, else empty
};

// Parses a chain spec; throws Error naming the bad element.
std::vector<GraphElement> parse_graph(const std::string& spec);

// Text form of a chain, as a user would pass it to --graph.
std::string format_graph(const std::vector<GraphElement>& chain);

// Infers the chain when --graph is absent. Only unambiguous cases are
// inferred: one module, or recurrent modules stacked directly. Whenever the
// state dict cannot say what sits between modules (`last` or not, an
// activation between Linear layers), throws an Error that lists the modules
// and suggests the --graph to pass.
std::vector<GraphElement> infer_graph(const ModuleSet& modules);

}  // namespace ferry::conv
