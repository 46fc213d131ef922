// The ATen graph of a torch.export archive (`.pt2`, an ExportedProgram), as
// the .pt2 reader (checkpoint/pt2.h) read and checked it: data only, for
// mapping/export_chain.h to read the layer chain from. PYTORCH_FORMAT.md §8.
//
// What the reader guarantees (every graph it hands over):
//   - every node's target is an ATen overload torch registers, a
//     symbolic-shape op or a higher-order op (aten_schema.h:
//     export_target_kind), checked whether or not the chain is read from
//     the graph: a file torch.export.load refuses is refused;
//   - nodes are in an order where every value is made before it is used: a
//     node naming a value no graph input or earlier node makes is refused,
//     which also refuses a cycle; no value is made twice;
//   - `inputs` pairs graph.inputs[i] with signature.input_specs[i], by name;
//     every parameter and buffer they name is a tensor of the Checkpoint;
//   - the arguments of the ops listed in checkpoint/aten_schema.h come in
//     schema order with the defaults of omitted ones filled in, so a reader
//     of the graph never sees a missing argument of those ops; other ops keep
//     the arguments the file gives, in its order;
//   - every name is UTF-8 and at most kMaxExportName bytes.
// Nothing here refers to the JSON: the JSON is parsed, checked and dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry::conv {

constexpr size_t kMaxExportName = 4096;

// One argument, as the graph's one-key unions give it ({"as_int": 3},
// {"as_tensor": {"name": "x"}}, ...).
struct ExportArg {
  enum class Kind {
    None,        // as_none, or an omitted optional argument
    Tensor,      // names[0]
    Tensors,     // names (as_tensors; as_optional_tensors with "" for None)
    Int,         // ints[0] (also as_sym_int with a known value)
    Ints,        // ints (also as_sym_ints when every entry is known)
    SymInt,      // names[0]: a symbolic int made by a node (sym_size) or the graph
    SymInts,     // ints and names side by side: names[i] empty where ints[i] is known
    Float,       // reals[0]
    Floats,      // reals
    Bool,        // ints[0] 0 / 1
    Bools,       // ints
    String,      // text
    Strings,     // strings
    ScalarType,  // ints[0]: the schema's ScalarType code (7 = float32)
    Layout,      // ints[0]
    MemoryFormat,  // ints[0]
    Device,      // text: "cuda:0"
    Other,       // any other union member (as_graph, as_operator, ...): text = its key
  };
  Kind kind = Kind::None;
  std::vector<std::string> names;
  std::vector<int64_t> ints;
  std::vector<double> reals;
  std::string text;
  std::vector<std::string> strings;

  // An Int, or a Float holding an integer, or a Bool.
  bool integer(int64_t* out) const;
  // An Int or a Float.
  bool number(double* out) const;
  // A Bool (or an Int 0 / 1).
  bool boolean(bool* out) const;
  // Ints (or a single Int), every entry known.
  bool integers(std::vector<int64_t>* out) const;
  // "tensor 'x'", "int 3", "ints [1, 2]", "None", ... for messages.
  std::string describe() const;
};

struct ExportNode {
  std::string name;        // the node's name ("lstm"), else its first output's
  std::string target;      // "aten.lstm.input" ("torch.ops." dropped), "_operator.mul", "higher_order.cond"
  std::vector<std::pair<std::string, ExportArg>> args;  // (schema name, value)
  std::vector<std::string> outputs;  // value names, in order ("" for an output it does not name)
  // The innermost entry of metadata.nn_module_stack, normalised to a dotted
  // module path ("" for the root or when the node records none), and that
  // module's class as the file spells it ("torch.nn.modules.rnn.LSTM").
  std::string module_path;
  std::string module_class;
  bool has_module = false;  // metadata.nn_module_stack was present

  // The argument named `name`, or nullptr.
  const ExportArg* arg(std::string_view name) const;
  // "node 'lstm' (aten.lstm.input, module 'lstm')": how messages name it.
  std::string describe() const;
};

// graph.inputs[i] with signature.input_specs[i].
struct ExportInput {
  enum class Kind { UserInput, Parameter, Buffer, TensorConstant, ConstantInput, Token };
  Kind kind = Kind::UserInput;
  std::string name;    // the graph's value name ("p_fc_weight", "x"); empty for a non-tensor user input
  std::string target;  // Parameter / Buffer / TensorConstant: the state-dict FQN ("fc.weight")
};

struct ExportOutput {
  enum class Kind { UserOutput, BufferMutation, ParameterMutation, UserInputMutation, Other };
  Kind kind = Kind::UserOutput;
  std::string name;    // the value it returns ("" when not a tensor)
  std::string target;  // the mutated buffer / parameter / input, or the spec's key for Other
};

struct ExportGraph {
  std::string label;            // "model.pt2: record 'model/models/model.json'", for messages
  int schema_major = 0, schema_minor = 0;
  std::string torch_version;    // as recorded ("2.11.0+cu130"), may be empty
  std::vector<std::string> verifiers;  // "TRAINING" (training IR), "ATEN" (core ATen), ...
  std::vector<ExportInput> inputs;
  std::vector<ExportOutput> outputs;
  std::vector<ExportNode> nodes;
  // Sizes of the graph's tensor values that have a known rank: -1 for a
  // symbolic dimension.
  std::map<std::string, std::vector<int64_t>> sizes;
};

}  // namespace ferry::conv
