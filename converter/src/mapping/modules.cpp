#include "mapping/modules.h"

#include <algorithm>
#include <initializer_list>
#include <set>
#include <sstream>

#include "error.h"
#include "mapping/reparametrize.h"
#include "mapping/wrapper_prefixes.h"

namespace ferry::conv {
namespace {

void expect_shape(const Module& m, const std::string& name, std::vector<int64_t> want) {
  auto it = m.params.find(name);
  if (it == m.params.end()) {
    throw Error("module '" + m.path + "' (" + m.describe() + ") lacks tensor '" + m.path + "." +
                name + "' of shape " + dims_text(want));
  }
  if (it->second->shape != want) {
    throw Error("tensor '" + it->second->name + "' has shape " + dims_text(it->second->shape) +
                ", but module '" + m.path + "' (" + m.describe() + ") needs " + dims_text(want));
  }
}

uint32_t dim(const TensorRef* t, size_t i) {
  if (t->shape.size() <= i || t->shape[i] <= 0 || t->shape[i] > (1 << 24)) {
    throw Error("tensor '" + t->name + "' has shape " + dims_text(t->shape) +
                ", not a usable layer weight");
  }
  return static_cast<uint32_t>(t->shape[i]);
}

void classify_recurrent(Module& m) {
  const bool cell = m.params.count("weight_ih") != 0;
  m.type = ModuleType::Recurrent;
  m.is_cell = cell;
  const auto get = [&](const std::string& n) -> const TensorRef* {
    auto it = m.params.find(n);
    return it == m.params.end() ? nullptr : it->second;
  };
  const TensorRef* w_ih = get(cell ? "weight_ih" : "weight_ih_l0");
  const TensorRef* w_hh = get(cell ? "weight_hh" : "weight_hh_l0");
  const TensorRef* w_hr = cell ? nullptr : get("weight_hr_l0");
  if (!w_hh) throw Error("module '" + m.path + "' has weight_ih but no weight_hh");
  if (w_ih->shape.size() != 2 || w_hh->shape.size() != 2) {
    throw Error("module '" + m.path + "': weight_ih " + dims_text(w_ih->shape) + " and weight_hh " +
                dims_text(w_hh->shape) + " must be 2-D");
  }
  uint32_t hr_shape[2] = {0, 0};  // weight_hr_l0 [P, H]
  if (w_hr) {
    hr_shape[1] = dim(w_hr, 1);
    hr_shape[0] = dim(w_hr, 0);
  }
  const HiddenSizes sizes = hidden_sizes(w_hr ? 0 : dim(w_hh, 1), w_hr ? hr_shape : nullptr);
  m.hidden_size = sizes.hidden;
  m.proj_size = sizes.proj;
  const uint32_t rows = dim(w_ih, 0);
  if (rows % m.hidden_size != 0) {
    throw Error("module '" + m.path + "': weight_ih has " + std::to_string(rows) +
                " rows, not a multiple of hidden_size " + std::to_string(m.hidden_size));
  }
  m.kind = kind_from_gates(rows / m.hidden_size, m.path);
  m.input_size = dim(w_ih, 1);
  m.has_bias = get(cell ? "bias_ih" : "bias_ih_l0") != nullptr;
  if (m.proj_size && m.kind != CellKind::kLstm) {
    throw Error("module '" + m.path + "': weight_hr (proj_size) exists only for LSTM");
  }

  std::set<std::string> expected;
  const auto expect = [&](const std::string& base, uint32_t layer, bool reverse) {
    const std::string name = base + recurrent_param_suffix(cell, layer, reverse);
    expected.insert(name);
    expect_shape(m, name, recurrent_param_shape(m.kind, base, m.input_size, sizes, layer, m.bidirectional));
  };
  if (cell) {
    m.num_layers = 1;
    m.bidirectional = false;
    expect("weight_ih", 0, false);
    expect("weight_hh", 0, false);
    if (m.has_bias) {
      expect("bias_ih", 0, false);
      expect("bias_hh", 0, false);
    }
  } else {
    uint32_t layers = 0;
    bool reverse = false;
    for (const auto& [name, t] : m.params) {
      RecurrentParamName p;
      if (parse_recurrent_param(name, &p)) {
        layers = std::max(layers, p.layer + 1);
        reverse = reverse || p.reverse;
      }
    }
    m.num_layers = layers;
    m.bidirectional = reverse;
    const uint32_t dirs = reverse ? 2 : 1;
    for (uint32_t k = 0; k < layers; ++k) {
      for (uint32_t d = 0; d < dirs; ++d) {
        expect("weight_ih", k, d == 1);
        expect("weight_hh", k, d == 1);
        if (m.has_bias) {
          expect("bias_ih", k, d == 1);
          expect("bias_hh", k, d == 1);
        }
        if (m.proj_size) expect("weight_hr", k, d == 1);
      }
    }
  }
  for (const auto& [name, t] : m.params) {
    if (!expected.count(name)) {
      throw Error("tensor '" + t->name + "' does not belong to module '" + m.path + "' (" +
                  m.describe() + ")");
    }
  }
}

void classify_linear(Module& m) {
  m.type = ModuleType::Linear;
  const TensorRef* w = m.params.at("weight");
  if (w->shape.size() != 2) {
    throw Error("tensor '" + w->name + "' has shape " + dims_text(w->shape) +
                ": module '" + m.path + "' is not a Linear layer (needs a 2-D weight)");
  }
  m.out_features = dim(w, 0);
  m.in_features = dim(w, 1);
  m.has_bias = m.params.count("bias") != 0;
  if (m.has_bias) expect_shape(m, "bias", {m.out_features});
  for (const auto& [name, t] : m.params) {
    if (name != "weight" && name != "bias") {
      throw Error("tensor '" + t->name + "' does not belong to Linear module '" + m.path + "'");
    }
  }
}

// Parameters other than `allowed` are an error naming the module kind.
void expect_only(const Module& m, const char* kind, std::initializer_list<const char*> allowed) {
  for (const auto& [name, t] : m.params) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || name == a;
    if (!ok) throw Error("tensor '" + t->name + "' does not belong to " + kind + " module '" + m.path + "'");
  }
}

// nn.Conv1d: weight [out, in/groups, kernel], bias [out]. groups (so the
// input width) is decided by the chain (plan/planner.cpp).
void classify_conv(Module& m) {
  m.type = ModuleType::Conv1d;
  const TensorRef* w = m.params.at("weight");
  m.out_features = dim(w, 0);
  m.in_per_group = dim(w, 1);
  m.kernel_size = dim(w, 2);
  m.has_bias = m.params.count("bias") != 0;
  if (m.has_bias) expect_shape(m, "bias", {m.out_features});
  expect_only(m, "Conv1d", {"weight", "bias"});
}

// nn.BatchNorm1d: running_mean, running_var [F]; weight, bias [F] when affine.
void classify_batchnorm(Module& m) {
  m.type = ModuleType::BatchNorm;
  m.features = dim(m.params.at("running_mean"), 0);
  m.has_weight = m.params.count("weight") != 0;
  m.has_bias = m.params.count("bias") != 0;
  if (m.has_weight != m.has_bias) {
    throw Error("module '" + m.path + "' (BatchNorm1d): has " + (m.has_weight ? "weight" : "bias") +
                " without " + (m.has_weight ? "bias" : "weight"));
  }
  expect_shape(m, "running_mean", {m.features});
  expect_shape(m, "running_var", {m.features});
  if (m.has_weight) {
    expect_shape(m, "weight", {m.features});
    expect_shape(m, "bias", {m.features});
  }
  expect_only(m, "BatchNorm1d", {"weight", "bias", "running_mean", "running_var"});
}

// nn.LayerNorm over the last axis: weight, bias [F]; nn.PReLU: weight [1] or [F].
void classify_per_feature(Module& m, ModuleType type) {
  m.type = type;
  const TensorRef* w = m.param("weight");
  const TensorRef* b = m.param("bias");
  m.features = dim(w ? w : b, 0);
  m.has_weight = w != nullptr;
  m.has_bias = b != nullptr;
  if (w) expect_shape(m, "weight", {m.features});
  if (b) expect_shape(m, "bias", {m.features});
  if (type == ModuleType::PReLU) {
    if (!w) throw Error("module '" + m.path + "' (PReLU) lacks its weight");
    expect_only(m, "PReLU", {"weight"});
  } else {
    expect_only(m, "LayerNorm", {"weight", "bias"});
  }
}

bool has_only_1d(const Module& m) {
  if (m.params.empty()) return false;
  for (const auto& [name, t] : m.params)
    if ((name != "weight" && name != "bias") || t->shape.size() != 1) return false;
  return true;
}

// A Linear module has exactly a 2-D `weight` and optionally `bias`; anything
// else with a `weight` (BatchNorm, LayerNorm, ...) is not a layer ferry runs.
bool looks_linear(const Module& m) {
  auto w = m.params.find("weight");
  if (w == m.params.end() || w->second->shape.size() != 2) return false;
  for (const auto& [name, t] : m.params)
    if (name != "weight" && name != "bias") return false;
  return true;
}

}  // namespace

const TensorRef* Module::param(const std::string& name) const {
  auto it = params.find(name);
  return it == params.end() ? nullptr : it->second;
}

uint32_t Module::output_size() const {
  if (type == ModuleType::Linear || type == ModuleType::Conv1d) return out_features;
  if (type == ModuleType::BatchNorm || type == ModuleType::LayerNorm) return features;
  if (type == ModuleType::PReLU) return 0;  // the chain's width
  return (bidirectional ? 2 : 1) * (proj_size ? proj_size : hidden_size);
}

std::string Module::describe() const {
  std::ostringstream s;
  if (type == ModuleType::Linear) {
    s << "Linear(" << in_features << ", " << out_features << (has_bias ? "" : ", bias=False") << ")";
    return s.str();
  }
  switch (type) {
    case ModuleType::Conv1d:
      s << "Conv1d(" << out_features << " out, " << in_per_group << " in per group, kernel_size=" << kernel_size
        << (has_bias ? "" : ", bias=False") << ")";
      return s.str();
    case ModuleType::BatchNorm:
      s << "BatchNorm1d(" << features << (has_weight ? "" : ", affine=False") << ")";
      return s.str();
    case ModuleType::LayerNorm:
      s << "LayerNorm(" << features << (has_weight ? "" : ", no weight") << (has_bias ? "" : ", no bias") << ")";
      return s.str();
    case ModuleType::PReLU:
      s << "PReLU(" << features << ")";
      return s.str();
    default:
      break;
  }
  s << pytorch_class_name(kind) << (is_cell ? "Cell(" : "(") << input_size << ", " << hidden_size;
  if (!is_cell && num_layers != 1) s << ", num_layers=" << num_layers;
  if (bidirectional) s << ", bidirectional=True";
  if (proj_size) s << ", proj_size=" << proj_size;
  if (!has_bias) s << ", bias=False";
  s << ")";
  return s.str();
}

const Module* ModuleSet::find(const std::string& path) const {
  // The root module (tensors with no module path) is named `root` in --graph.
  const std::string wanted = path == kRootModuleName ? "" : path;
  for (const Module& m : modules)
    if (m.path == wanted) return &m;
  for (const auto& [p, why] : unreadable)
    if (p == wanted) throw Error(why);
  return nullptr;
}

ModuleSet group_modules(const Checkpoint& checkpoint) {
  ModuleSet set;
  set.ignored = checkpoint.ignored;
  std::map<std::string, size_t> index;  // path → modules[i]
  std::set<std::string> seen_keys;
  Reparametrized folded = fold_reparametrizations(checkpoint);
  set.folded = std::move(folded.folded);
  for (const TensorRef* tp : folded.tensors) {
    const TensorRef& t = *tp;
    const std::string key = strip_wrapper_prefixes(t.name);
    if (!seen_keys.insert(key).second) {
      throw Error("tensor '" + t.name + "': key '" + key +
                  "' appears twice once wrapper prefixes (module., _orig_mod.) are stripped");
    }
    if (!is_float(t.dtype)) {
      set.ignored.emplace_back(t.name, std::string("non-floating buffer (") + dtype_name(t.dtype) + ")");
      continue;
    }
    const size_t dot = key.rfind('.');
    const std::string path = dot == std::string::npos ? "" : key.substr(0, dot);
    const std::string name = dot == std::string::npos ? key : key.substr(dot + 1);
    auto it = index.find(path);
    if (it == index.end()) {
      it = index.emplace(path, set.modules.size()).first;
      set.modules.emplace_back();
      set.modules.back().path = path;
    }
    set.modules[it->second].params[name] = &t;
  }
  std::vector<Module> kept;
  for (Module& m : set.modules) {
    auto cls = checkpoint.attributes.find(attribute_key(m.path, kClassAttribute));
    if (cls != checkpoint.attributes.end()) m.class_name = cls->second;
    // torch.nn.utils.parametrize renames a module's class Parametrized<Class>.
    if (m.class_name.rfind("Parametrized", 0) == 0) m.class_name = m.class_name.substr(12);
    const auto ignore_all = [&](const std::string& why) {
      for (const auto& [name, t] : m.params) {
        if (t->sources.empty()) set.ignored.emplace_back(t->name, why);
        for (const std::string& source : t->sources) set.ignored.emplace_back(source, why);
      }
    };
    const TensorRef* w = m.param("weight");
    try {
      if (m.params.count("weight_ih_l0") || m.params.count("weight_ih")) {
        classify_recurrent(m);
      } else if (looks_linear(m)) {
        classify_linear(m);
      } else if (w && w->shape.size() == 3) {
        classify_conv(m);
      } else if (m.params.count("running_mean") && m.params.count("running_var")) {
        classify_batchnorm(m);
      } else if (has_only_1d(m)) {
        // weight + bias: LayerNorm; a weight alone: PReLU (a LayerNorm(bias=False)
        // is told apart only by its recorded class).
        const bool prelu = m.class_name.empty() ? !m.params.count("bias") : m.class_name == "PReLU";
        classify_per_feature(m, prelu ? ModuleType::PReLU : ModuleType::LayerNorm);
      } else {
        // Not a layer ferry runs (e.g. BatchNorm running stats, an embedding
        // table without a weight name we know): listed, never silently dropped.
        ignore_all("module '" + m.path + "' is not a Linear or recurrent layer");
        continue;
      }
    } catch (const Error& e) {
      // Decided by the chain: an error if it uses the module (find()), else
      // a module it leaves out, listed with why it could not be read.
      set.unreadable.emplace_back(m.path, e.what());
      ignore_all("module '" + m.path + "' is not read as a layer (" + e.what() + ")");
      continue;
    }
    kept.push_back(std::move(m));
  }
  set.modules = std::move(kept);
  return set;
}

}  // namespace ferry::conv
