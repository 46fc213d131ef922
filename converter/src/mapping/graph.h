// The layer chain: parsed from `--graph "lstm > last > fc"` or inferred from
// the state dict (or a TorchScript forward, mapping/script_chain.h).
//
//   chain   := element ('>' element)*
//   element := '(' chain ')' '+' 'input'        a residual skip: the sub-chain's
//                                               output plus its own input
//            | NAME ['(' arg (',' arg)* ')']    a module path or a built-in op
//   arg     := VALUE | KEY '=' VALUE
//
// Built-in ops (no weights) are listed in one table (graph.cpp, kBuiltins):
// last, relu, tanh, sigmoid, softmax, logsoftmax, identity, dropout, gelu |
// gelu(tanh), silu, elu(alpha=), leaky_relu(slope=), hardtanh(min=,max=),
// relu6, mean, max. A module takes options: an RNN its nonlinearity
// (`rnn(relu)`), a Conv1d conv(stride=, padding=N|same|valid|causal,
// dilation=, groups=, padding_mode=zeros|reflect|replicate), a BatchNorm or
// LayerNorm (eps=); hyper-parameters a file records need not be written.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mapping/modules.h"

namespace ferry::conv {

enum class OpKind {
  Module, Last, ReLU, Tanh, Sigmoid, Softmax, Identity,
  LogSoftmax, Dropout, GELU, SiLU, ELU, LeakyReLU, Hardtanh, ReLU6, Mean, Max,
  SkipBegin,  // '(' of a residual: saves the input in slot `slot`
  SkipEnd,    // ')' '+' 'input': adds slot `slot` back
};

struct GraphElement {
  OpKind op = OpKind::Module;
  std::string module;   // for OpKind::Module
  std::string option;   // a positional argument: "relu" / "tanh" for RNN modules, "tanh" for gelu
  std::map<std::string, std::string> args;  // KEY=VALUE arguments, as written
  unsigned slot = 0;    // SkipBegin / SkipEnd: nesting depth
  std::string source;   // where a chain read from code found it ("model.py:42"); not part of the --graph text
};

// The built-in op named `name` (OpKind::Module when none is).
OpKind builtin_op(const std::string& name);
// The --graph name of a built-in op.
const char* builtin_name(OpKind op);

// The built-in op a weightless module of the file stands for (its recorded
// class: a whole module's or TorchScript's nn.ReLU, nn.LeakyReLU(0.2), ...),
// with the options it records; nullopt for any other module.
std::optional<GraphElement> recorded_activation(const Checkpoint& checkpoint, const std::string& path);

// Parses a chain spec; throws Error naming the bad element.
std::vector<GraphElement> parse_graph(const std::string& spec);

// Text form of a chain, as a user would pass it to --graph.
std::string format_graph(const std::vector<GraphElement>& chain);

// Infers the chain when --graph is absent. Only unambiguous cases are
// inferred: one module, or recurrent modules stacked directly. Whenever the
// state dict cannot say what sits between modules (`last` or not, an
// activation between Linear layers), throws an Error that lists the modules
// and suggests the --graph to pass. `order`, where the file records module
// objects (mapping/sequential_chain.h, recorded_order), is the modules in the
// file's order with the activations an nn.Sequential holds between them: the
// suggestion keeps those instead of guessing a relu.
std::vector<GraphElement> infer_graph(const ModuleSet& modules, const std::vector<GraphElement>& order = {});

}  // namespace ferry::conv
