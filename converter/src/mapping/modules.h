// State-dict → modules: groups the checkpoint's tensors by module path (after
// wrapper prefixes are stripped), recognises each module as LSTM / GRU / RNN
// (or their Cell forms) or Linear from its parameter names and shapes, and
// checks every shape against the module's hyper-parameters. Tensors that are
// not model parameters are listed as ignored with the reason; a tensor that
// does not fit its module is an error naming both.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "mapping/pytorch_rules.h"

namespace ferry::conv {

enum class ModuleType { Recurrent, Linear };

// How --graph names the root module: a state dict saved from a bare layer
// (`torch.save(nn.LSTM(...).state_dict())`) has keys with no module path.
constexpr const char* kRootModuleName = "root";

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
  // Parameter name within the module ("weight_ih_l0", "weight") → tensor.
  std::map<std::string, const TensorRef*> params;

  uint32_t output_size() const;  // D * H_out, or out_features
  std::string describe() const;  // "LSTM(16, 64, num_layers=2)" etc.
};

struct ModuleSet {
  std::vector<Module> modules;  // first-appearance order in the state dict
  std::vector<std::pair<std::string, std::string>> ignored;  // key, reason

  const Module* find(const std::string& path) const;
};

// Groups and validates. Throws Error naming the module and tensor at fault.
ModuleSet group_modules(const Checkpoint& checkpoint);

}  // namespace ferry::conv
