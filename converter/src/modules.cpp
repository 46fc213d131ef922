#include "modules.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "error.h"

namespace ferry::conv {
namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_float(DType d) {
  return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F64;
}

// "weight_ih_l3_reverse" → {base "weight_ih", layer 3, reverse true}.
struct RecurrentParam {
  std::string base;
  uint32_t layer = 0;
  bool reverse = false;
};

bool parse_recurrent_param(const std::string& name, RecurrentParam* out) {
  static const char* kBases[] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"};
  for (const char* base : kBases) {
    const std::string prefix = std::string(base) + "_l";
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = name.substr(prefix.size());
    bool reverse = false;
    const std::string kRev = "_reverse";
    if (rest.size() > kRev.size() && rest.compare(rest.size() - kRev.size(), kRev.size(), kRev) == 0) {
      reverse = true;
      rest.resize(rest.size() - kRev.size());
    }
    if (rest.empty() || rest.size() > 4 ||
        !std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
    out->base = base;
    out->layer = static_cast<uint32_t>(std::stoul(rest));
    out->reverse = reverse;
    return true;
  }
  return false;
}

void expect_shape(const Module& m, const std::string& name, std::vector<int64_t> want) {
  auto it = m.params.find(name);
  if (it == m.params.end()) {
    throw Error("module '" + m.path + "' (" + m.describe() + ") lacks tensor '" + m.path + "." +
                name + "' of shape " + shape_str(want));
  }
  if (it->second->shape != want) {
    throw Error("tensor '" + it->second->name + "' has shape " + shape_str(it->second->shape) +
                ", but module '" + m.path + "' (" + m.describe() + ") needs " + shape_str(want));
  }
}

uint32_t dim(const TensorRef* t, size_t i) {
  if (t->shape.size() <= i || t->shape[i] <= 0 || t->shape[i] > (1 << 24)) {
    throw Error("tensor '" + t->name + "' has shape " + shape_str(t->shape) +
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
    throw Error("module '" + m.path + "': weight_ih " + shape_str(w_ih->shape) + " and weight_hh " +
                shape_str(w_hh->shape) + " must be 2-D");
  }
  m.hidden_size = w_hr ? dim(w_hr, 1) : dim(w_hh, 1);
  m.proj_size = w_hr ? dim(w_hr, 0) : 0;
  const uint32_t rows = dim(w_ih, 0);
  if (rows % m.hidden_size != 0) {
    throw Error("module '" + m.path + "': weight_ih has " + std::to_string(rows) +
                " rows, not a multiple of hidden_size " + std::to_string(m.hidden_size));
  }
  m.kind = kind_from_gates(rows / m.hidden_size, m.path);
  m.input_size = dim(w_ih, 1);
  m.has_bias = get(cell ? "bias_ih" : "bias_ih_l0") != nullptr;
  if (m.proj_size && m.kind != RecurrentKind::LSTM) {
    throw Error("module '" + m.path + "': weight_hr (proj_size) exists only for LSTM");
  }

  std::set<std::string> expected;
  const uint32_t g = gate_count(m.kind) * m.hidden_size;
  const uint32_t h_out = m.proj_size ? m.proj_size : m.hidden_size;
  if (cell) {
    m.num_layers = 1;
    m.bidirectional = false;
    expected = {"weight_ih", "weight_hh"};
    if (m.has_bias) expected.insert({"bias_ih", "bias_hh"});
    expect_shape(m, "weight_ih", {g, m.input_size});
    expect_shape(m, "weight_hh", {g, m.hidden_size});
    if (m.has_bias) {
      expect_shape(m, "bias_ih", {g});
      expect_shape(m, "bias_hh", {g});
    }
  } else {
    uint32_t layers = 0;
    bool reverse = false;
    for (const auto& [name, t] : m.params) {
      RecurrentParam p;
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
        const std::string sfx = "_l" + std::to_string(k) + (d ? "_reverse" : "");
        const uint32_t in = k == 0 ? m.input_size : dirs * h_out;
        expected.insert({"weight_ih" + sfx, "weight_hh" + sfx});
        expect_shape(m, "weight_ih" + sfx, {g, in});
        expect_shape(m, "weight_hh" + sfx, {g, h_out});
        if (m.has_bias) {
          expected.insert({"bias_ih" + sfx, "bias_hh" + sfx});
          expect_shape(m, "bias_ih" + sfx, {g});
          expect_shape(m, "bias_hh" + sfx, {g});
        }
        if (m.proj_size) {
          expected.insert("weight_hr" + sfx);
          expect_shape(m, "weight_hr" + sfx, {m.proj_size, m.hidden_size});
        }
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
    throw Error("tensor '" + w->name + "' has shape " + shape_str(w->shape) +
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

uint32_t Module::output_size() const {
  if (type == ModuleType::Linear) return out_features;
  return (bidirectional ? 2 : 1) * (proj_size ? proj_size : hidden_size);
}

std::string Module::describe() const {
  std::ostringstream s;
  if (type == ModuleType::Linear) {
    s << "Linear(" << in_features << ", " << out_features << (has_bias ? "" : ", bias=False") << ")";
    return s.str();
  }
  s << recurrent_kind_name(kind) << (is_cell ? "Cell(" : "(") << input_size << ", " << hidden_size;
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
  return nullptr;
}

ModuleSet group_modules(const Checkpoint& checkpoint) {
  ModuleSet set;
  set.ignored = checkpoint.ignored;
  std::map<std::string, size_t> index;  // path → modules[i]
  std::set<std::string> seen_keys;
  for (const TensorRef& t : checkpoint.tensors) {
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
    if (m.params.count("weight_ih_l0") || m.params.count("weight_ih")) {
      classify_recurrent(m);
    } else if (looks_linear(m)) {
      classify_linear(m);
    } else {
      // Not a layer ferry runs (e.g. BatchNorm running stats, an embedding
      // table without a weight name we know): listed, never silently dropped.
      for (const auto& [name, t] : m.params) {
        set.ignored.emplace_back(t->name, "module '" + m.path + "' is not a Linear or recurrent layer");
      }
      continue;
    }
    kept.push_back(std::move(m));
  }
  set.modules = std::move(kept);
  return set;
}

}  // namespace ferry::conv
