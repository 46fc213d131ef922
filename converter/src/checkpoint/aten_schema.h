// The ATen operator schemas the .pt2 reader knows: for each op ferry reads a
// layer from (mapping/export_chain.h), its arguments in schema order with
// their defaults, and the hyper-parameters its arguments give the module that
// owns its weights. torch.export omits every argument left at its default
// (PYTORCH_FORMAT.md §8); the reader fills them in from here, so that the
// graph a mapping reads always has them. One row per op overload, written
// from native_functions.yaml; a new op is a new row.
#pragma once

#include <string_view>

namespace ferry::conv {

struct AtenDefault {
  enum Kind { kRequired, kNone, kInt, kInts1, kIntsEmpty, kFloat, kBool, kString };
  Kind kind = kRequired;
  double number = 0;           // kInt, kInts1 (the one entry), kFloat, kBool (0 / 1)
  const char* text = nullptr;  // kString
};

struct AtenArgSchema {
  const char* name;
  AtenDefault fallback;
};

// A hyper-parameter an argument gives the op's module: recorded in
// Checkpoint::attributes as "<module>.<attribute>" (module: the path of the
// parameter passed as `module_arg`, "lstm" for "lstm.weight_ih_l0").
struct AtenAttribute {
  const char* argument;   // the argument's schema name, or nullptr for a fixed value
  const char* attribute;  // "batch_first"
  const char* value;      // fixed value (argument nullptr), else nullptr
};

constexpr int kMaxAtenArgs = 10;
constexpr int kMaxAtenAttributes = 6;

struct AtenSchema {
  const char* target;   // "aten.lstm.input"
  AtenArgSchema args[kMaxAtenArgs];
  // The argument whose (first) parameter names the module, or nullptr.
  const char* module_arg;
  AtenAttribute attributes[kMaxAtenAttributes];
};

// The schema of `target` ("aten.linear.default"), or nullptr.
const AtenSchema* find_aten_schema(std::string_view target);

// What a graph node's target names, as the graph JSON spells it. torch.export.load
// resolves a target by walking its dotted path from `torch`, `_operator` or
// `math` (any attribute: "torch.serialization.os.system" walks to os.system)
// and its verifier then admits only operator overloads, higher-order
// operators and a few builtins; ferry admits what every torch that writes
// graph schema 8 would:
//   kAten         "torch.ops.aten.<op>.<overload>" of an overload torch
//                 registers (aten_ops.inc, made by scripts/make_aten_ops.py)
//   kSymbolic     the symbolic-shape ops of dynamic exports that the
//                 serializer writes and the verifier admits: "_operator.mul",
//                 "math.trunc", "torch.sym_max", ... (aten.sym_size.int is kAten)
//   kHigherOrder  "torch.ops.higher_order.<name>" of a registered higher-order
//                 operator (cond, wrap_with_set_grad_enabled, ...), whose
//                 subgraphs' targets are checked the same way
//   kUnknown      anything else: builtins, modules, attributes of an op
//                 ("torch.ops.aten.lstm.input.__globals__"), other op
//                 namespaces, extension operators ("#ns:op")
enum class ExportTargetKind { kUnknown, kAten, kSymbolic, kHigherOrder };
ExportTargetKind export_target_kind(std::string_view target);

}  // namespace ferry::conv
