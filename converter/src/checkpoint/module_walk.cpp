// Whole pickled modules (torch.save(model), PYTORCH_FORMAT.md §4c) and the
// hyper-parameters modules record.
//
// The unpickler turned every module into an inert Object (class name kept,
// nothing imported) whose BUILD state is the module's __dict__:
//   _parameters                  OrderedDict name -> Parameter or None
//   _buffers                     OrderedDict name -> Tensor or None
//   _non_persistent_buffers_set  set of buffer names state_dict() skips
//   _modules                     OrderedDict name -> child module or None
//   plus plain attributes (LSTM: mode, input_size, hidden_size, num_layers,
//   bias, batch_first, dropout, bidirectional, proj_size; RNN: nonlinearity).
// state_dict() emits a module's parameters, then its persistent buffers, then
// each child's entries under "child." — depth first. The walk below does the
// same with an explicit stack.
#include <cstdio>
#include <string>
#include <unordered_set>
#include <vector>

#include "checkpoint/reader_internal.h"
#include "error.h"
#include "mapping/wrapper_prefixes.h"

namespace ferry::conv {

std::string attribute_key(const std::string& module_path, const std::string& name) {
  return strip_wrapper_prefixes(module_path.empty() ? name : module_path + "." + name);
}

namespace detail {

const Value* object_state(const Value* object) {
  if (!object || object->kind != Kind::Object || !object->state) return nullptr;
  const Value* s = object->state;
  // __getstate__ may return (dict, slots); the dict is the attributes.
  if (s->kind == Kind::Tuple && s->items.size() == 2 && s->items[0]->kind == Kind::Dict) s = s->items[0];
  return s->kind == Kind::Dict ? s : nullptr;
}

bool is_hyperparameter(std::string_view name) {
  static const std::string_view kNames[] = {
      // recurrent modules
      "batch_first", "nonlinearity", "mode", "proj_size", "bidirectional", "num_layers", "hidden_size",
      "input_size", "bias",
      // Conv1d
      "kernel_size", "stride", "padding", "dilation", "groups", "padding_mode", "in_channels", "out_channels",
      // normalisations
      "eps", "num_features", "affine", "track_running_stats", "normalized_shape", "elementwise_affine",
      // activations
      "negative_slope", "alpha", "min_val", "max_val", "approximate", "num_parameters", "dim", "inplace",
      // Embedding
      "num_embeddings", "embedding_dim", "max_norm"};
  for (std::string_view n : kNames)
    if (n == name) return true;
  return false;
}

void record_hyperparameter(const std::string& module_path, const std::string& name,
                           const std::string& value, Checkpoint& out) {
  const std::string nonlinearity = attribute_key(module_path, "nonlinearity");
  if (name == "nonlinearity") {
    // An RNN's forward() runs what `mode` says; `nonlinearity` only repeats
    // it. When both are recorded, the mode decides.
    auto mode = out.attributes.find(attribute_key(module_path, "mode"));
    if (mode != out.attributes.end() && (mode->second == "RNN_RELU" || mode->second == "RNN_TANH")) return;
  }
  out.attributes[attribute_key(module_path, name)] = value;
  if (name == "mode" && value == "RNN_RELU") out.attributes[nonlinearity] = "relu";
  if (name == "mode" && value == "RNN_TANH") out.attributes[nonlinearity] = "tanh";
}

namespace {

// %.17g: a double read back exactly (eps = 1e-05 -> "1.0000000000000001e-05").
std::string real_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

void record_hyperparameters(const Value* attributes, const std::string& module_path, Checkpoint& out) {
  if (!attributes || attributes->kind != Kind::Dict) return;
  for (const auto& [k, v] : attributes->entries) {
    if (k->kind != Kind::String || !is_hyperparameter(k->bytes)) continue;
    switch (v->kind) {
      case Kind::Bool: record_hyperparameter(module_path, k->bytes, v->boolean ? "true" : "false", out); break;
      case Kind::Int: record_hyperparameter(module_path, k->bytes, std::to_string(v->integer), out); break;
      case Kind::Float: record_hyperparameter(module_path, k->bytes, real_text(v->real), out); break;
      case Kind::String: record_hyperparameter(module_path, k->bytes, v->bytes, out); break;
      case Kind::Tuple: case Kind::List: {
        // kernel_size=(3,), padding=(1,): written as TorchScript writes them, "(3,)" / "(1, 2)".
        std::string text = "(";
        bool ints = v->items.size() <= 8;
        for (const Value* item : v->items) {
          if (item->kind != Kind::Int) ints = false;
          else text += std::to_string(item->integer) + ",";
        }
        if (ints) record_hyperparameter(module_path, k->bytes, text + ")", out);
        break;
      }
      default: break;  // None, tensors (a Linear's `bias` is a parameter), ...
    }
  }
}

ModuleObject& record_class(const Value* object, const std::string& module_path, Checkpoint& out) {
  const std::string name = object->qualified_name();
  const size_t dot = name.rfind('.');
  out.attributes[attribute_key(module_path, kClassAttribute)] = dot == std::string::npos ? name : name.substr(dot + 1);
  ModuleObject m;
  m.path = strip_wrapper_prefixes(module_path);
  m.class_name = name;
  out.module_objects.push_back(std::move(m));
  return out.module_objects.back();
}

namespace {

// Bounds the walk of a module graph whose submodules are shared (a DAG can
// name one module along exponentially many paths, as state_dict() would).
constexpr size_t kMaxModuleVisits = size_t{1} << 16;

struct Frame {
  const Value* module;
  std::string path;  // "" for the root, else "encoder.rnn"
  std::vector<std::pair<std::string, const Value*>> children;
  size_t next = 0;
};

std::string shown(const std::string& module_path) {
  return module_path.empty() ? "<root>" : module_path;
}

// A dict attribute of the module state that may be absent or None.
const Value* optional_dict(const Value* state, const char* name, const std::string& where) {
  const Value* v = state->get(name);
  if (!v || v->kind == Kind::None) return nullptr;
  if (v->kind != Kind::Dict) throw Error(where + ": " + name + " is a " + describe_value(v) + ", not a dict");
  return v;
}

}  // namespace

void collect_module(const Value* root, const std::string& path, TensorCollector& collect, Checkpoint& out) {
  std::vector<Frame> stack;
  std::unordered_set<const Value*> on_stack;
  size_t visits = 0;

  auto enter = [&](const Value* module, const std::string& module_path) {
    const std::string where = path + ": module '" + shown(module_path) + "' (class " + module->qualified_name() + ")";
    if (++visits > kMaxModuleVisits)
      throw Error(where + ": more than " + std::to_string(kMaxModuleVisits) +
                  " module visits (submodules shared along too many paths)");
    const Value* state = object_state(module);
    if (!state) throw Error(where + ": the pickled object has no attribute dict (no BUILD state)");
    const Value* parameters = optional_dict(state, "_parameters", where);
    const Value* buffers = optional_dict(state, "_buffers", where);
    const Value* modules = optional_dict(state, "_modules", where);
    if (!state->get("_parameters") && !state->get("_modules"))
      throw Error(where + ": not an nn.Module (its state has neither _parameters nor _modules)");
    record_hyperparameters(state, module_path, out);
    record_class(module, module_path, out);

    const std::string prefix = module_path.empty() ? "" : module_path + ".";
    auto key_of = [&](const Value* k, const char* what) -> const std::string& {
      if (k->kind != Kind::String) throw Error(where + ": a " + what + " name is a " + kind_name(k->kind));
      return k->bytes;
    };
    if (parameters) {
      for (const auto& [k, v] : parameters->entries) {
        const std::string& name = key_of(k, "parameter");
        if (v->kind != Kind::None) collect.add(prefix + name, v);  // None: e.g. bias=False
      }
    }
    if (buffers) {
      std::unordered_set<std::string> non_persistent;
      if (const Value* set = state->get("_non_persistent_buffers_set")) {
        if (set->kind != Kind::Set && set->kind != Kind::List && set->kind != Kind::None)
          throw Error(where + ": _non_persistent_buffers_set is a " + describe_value(set));
        for (const Value* n : set->items)
          if (n->kind == Kind::String) non_persistent.insert(n->bytes);
      }
      for (const auto& [k, v] : buffers->entries) {
        const std::string& name = key_of(k, "buffer");
        if (v->kind != Kind::None && !non_persistent.count(name)) collect.add(prefix + name, v);
      }
    }
    Frame frame{module, module_path, {}, 0};
    if (modules) {
      for (const auto& [k, v] : modules->entries) {
        const std::string& name = key_of(k, "submodule");
        if (v->kind == Kind::None) continue;
        if (v->kind != Kind::Object)
          throw Error(where + ": submodule '" + name + "' is a " + describe_value(v) + ", not a module");
        frame.children.emplace_back(name, v);
      }
    }
    on_stack.insert(module);
    stack.push_back(std::move(frame));
  };

  enter(root, "");
  while (!stack.empty()) {
    Frame& top = stack.back();
    if (top.next == top.children.size()) {
      on_stack.erase(top.module);
      stack.pop_back();
      continue;
    }
    const auto [name, child] = top.children[top.next++];
    const std::string child_path = top.path.empty() ? name : top.path + "." + name;
    if (on_stack.count(child)) {
      std::string ancestor;
      for (const Frame& f : stack)
        if (f.module == child) ancestor = f.path;
      throw Error(path + ": module cycle: submodule '" + child_path + "' (class " + child->qualified_name() +
                  ") is the module '" + shown(ancestor) + "' that contains it");
    }
    enter(child, child_path);  // may reallocate `stack`: `top` is not used after this
  }
}

namespace {

// Where the placeholder walk stands: outside any module; inside a module's
// attributes (anything goes); at a module's own state (its _parameters,
// _buffers and _modules are outside again, its other attributes inside).
enum class Place : uint8_t { Outside, InModule, ModuleState };

// A value the walk reached, and from where (for the path in a refusal).
struct Reached {
  enum class How : uint8_t { Root, Key, Entry, Item, Args, State, Storage };
  const Value* value;
  size_t parent;  // index in the reached list; kNoParent for the root
  How how;
  size_t index;   // the entry or item index in the parent
};
constexpr size_t kNoParent = ~size_t{0};

bool is_module(const Value* v) {
  const Value* state = object_state(v);
  return state && (state->get("_parameters") || state->get("_modules"));
}

// "the root['model']._modules['fc']._parameters['weight']"
std::string path_of(const std::vector<Reached>& reached, size_t i) {
  constexpr size_t kMaxPath = 300;
  std::vector<size_t> chain;
  for (size_t j = i; j != kNoParent; j = reached[j].parent) chain.push_back(j);
  std::string out = "the root";
  for (size_t k = chain.size(); k-- > 0 && out.size() < kMaxPath;) {
    const Reached& r = reached[chain[k]];
    if (r.how == Reached::How::Root) continue;
    const Reached& up = reached[r.parent];
    switch (r.how) {
      case Reached::How::Root: break;
      case Reached::How::Key: out += " (a dict key)"; break;
      case Reached::How::Entry: {
        const std::string key = key_text(up.value->entries[r.index].first);
        out += up.how == Reached::How::State ? "." + key : "['" + key + "']";
        break;
      }
      case Reached::How::Item: out += "[" + std::to_string(r.index) + "]"; break;
      case Reached::How::Args: out += " (its arguments)"; break;
      case Reached::How::State: break;  // its entries read as attributes
      case Reached::How::Storage: out += " (its storage)"; break;
    }
  }
  if (out.size() >= kMaxPath) out = out.substr(0, kMaxPath) + "...";
  return out;
}

}  // namespace

void check_call_placeholders(const Value* root, const std::string& label) {
  using How = Reached::How;
  std::vector<Reached> reached;
  std::vector<std::pair<size_t, Place>> todo;
  std::unordered_set<const Value*> seen[3];
  auto push = [&](const Value* v, size_t parent, How how, size_t index, Place place) {
    if (!v || seen[static_cast<int>(place)].count(v)) return;
    reached.push_back({v, parent, how, index});
    todo.emplace_back(reached.size() - 1, place);
  };
  push(root, kNoParent, How::Root, 0, Place::Outside);
  while (!todo.empty()) {
    const auto [i, place] = todo.back();
    todo.pop_back();
    const Value* v = reached[i].value;
    if (!seen[static_cast<int>(place)].insert(v).second) continue;
    // Plain containers keep the place they are in; a module's state is
    // only special at its top.
    const Place inner = place == Place::ModuleState ? Place::InModule : place;
    switch (v->kind) {
      case Kind::Placeholder:
        if (place == Place::Outside)
          throw Error(label + ": refused REDUCE of '" + v->qualified_name() + "' (not an allowlisted callable) at byte " +
                      std::to_string(v->integer) + " (opcode 0x52 REDUCE): its result is " + path_of(reached, i) +
                      "; a call ferry never makes is kept only as a plain attribute of a pickled nn.Module");
        push(v->args, i, How::Args, 0, Place::InModule);
        push(v->state, i, How::State, 0, Place::InModule);
        break;
      case Kind::Dict:
        for (size_t n = 0; n < v->entries.size(); ++n) {
          const auto& [k, value] = v->entries[n];
          push(k, i, How::Key, n, inner);
          Place p = inner;
          if (place == Place::ModuleState && k->kind == Kind::String &&
              (k->bytes == "_parameters" || k->bytes == "_buffers" || k->bytes == "_modules"))
            p = Place::Outside;
          push(value, i, How::Entry, n, p);
        }
        break;
      case Kind::Tuple:
      case Kind::List:
      case Kind::Set:
        // A module's (dict, slots) state: the dict is the module's state.
        for (size_t n = 0; n < v->items.size(); ++n)
          push(v->items[n], i, How::Item, n, place == Place::ModuleState && n == 0 ? Place::ModuleState : inner);
        break;
      case Kind::Object:
        push(v->args, i, How::Args, 0, inner);
        push(v->state, i, How::State, 0, is_module(v) ? Place::ModuleState : inner);
        break;
      case Kind::Call:
        push(v->args, i, How::Args, 0, inner);
        push(v->state, i, How::State, 0, inner);
        break;
      case Kind::Tensor:
        push(v->tensor->storage, i, How::Storage, 0, Place::Outside);
        push(v->state, i, How::State, 0, inner);
        break;
      default:
        break;
    }
  }
}

}  // namespace detail
}  // namespace ferry::conv
