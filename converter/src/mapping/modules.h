// State-dict → modules: groups the checkpoint's tensors by module path (after
// wrapper prefixes are stripped), recognises each module as LSTM / GRU / RNN
// (or their Cell forms), Linear, Conv1d, BatchNorm1d, LayerNorm or PReLU from
// its parameter names and shapes (and the class a whole module or TorchScript
// archive records, where one of those is ambiguous), and
// checks every shape against the module's hyper-parameters. Tensors that are
// not model parameters are listed as ignored with the reason; a tensor that
// does not fit its module is an error naming both.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "mapping/pytorch_rules.h"

namespace ferry::conv {

// Embedding is not told apart here: its [num_embeddings, dim] weight looks
// like a Linear without bias, and only its place in the chain (or a recorded
// class) says which it is (plan/planner.cpp).
enum class ModuleType { Recurrent, Linear, Conv1d, BatchNorm, LayerNorm, PReLU };

// How --graph names the root module: a state dict saved from a bare layer
// (`torch.save(nn.LSTM(...).state_dict())`) has keys with no module path.
constexpr const char* kRootModuleName = "root";

// `name` under the module at `path` ("encoder" + "rnn" -> "encoder.rnn";
// the root's children are their names).
inline std::string child_path(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "." + name;
}
// A module path as messages show it: the root as kRootModuleName.
inline std::string shown_path(const std::string& path) { return path.empty() ? kRootModuleName : path; }

struct Module {
  std::string path;            // "lstm", "encoder.rnn" (prefixes stripped)
  ModuleType type = ModuleType::Linear;
  // Recurrent.
  CellKind kind = CellKind::kLstm;
  bool is_cell = false;        // LSTMCell / GRUCell / RNNCell
  uint32_t input_size = 0;
  uint32_t hidden_size = 0;
  uint32_t proj_size = 0;
  uint32_t num_layers = 0;
  bool bidirectional = false;
  // Linear.
  uint32_t in_features = 0;
  uint32_t out_features = 0;
  bool has_bias = false;
  // Conv1d: weight [out_features, in_per_group, kernel_size].
  uint32_t in_per_group = 0, kernel_size = 0;
  // BatchNorm, LayerNorm, PReLU: features (PReLU: 1 for a single weight).
  uint32_t features = 0;
  bool has_weight = false;
  // The class a whole module / TorchScript archive records ("Conv1d"), else "".
  std::string class_name;
  // Parameter name within the module ("weight_ih_l0", "weight") → tensor.
  std::map<std::string, const TensorRef*> params;

  uint32_t output_size() const;  // D * H_out, out_features, or features
  std::string describe() const;  // "LSTM(16, 64, num_layers=2)" etc.
  // The parameter `name`, or null.
  const TensorRef* param(const std::string& name) const;
};

struct ModuleSet {
  std::vector<Module> modules;  // first-appearance order in the state dict
  std::vector<std::pair<std::string, std::string>> ignored;  // key, reason
  // Modules whose tensors do not make a layer ferry reads (a LayerNorm over
  // two dimensions looks like a Linear whose bias has the wrong shape): the
  // path and the error that classifying it raised. Such a module stops the
  // conversion only if the chain uses it (find() raises its error); else
  // its tensors are in `ignored`, with that error as the reason.
  std::vector<std::pair<std::string, std::string>> unreadable;
  // Weights folded from weight norm / spectral norm parts
  // (mapping/reparametrize.h): modules' params point into them.
  std::vector<std::shared_ptr<const TensorRef>> folded;

  // The module at `path` (`root` names the root), or null. A path of
  // `unreadable` throws its error: whoever asks for a module uses it.
  const Module* find(const std::string& path) const;
};

// Folds reparametrized weights (mapping/reparametrize.h), then groups and
// validates. Throws Error naming the module and tensor at fault.
ModuleSet group_modules(const Checkpoint& checkpoint);

}  // namespace ferry::conv
