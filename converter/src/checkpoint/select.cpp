// From an unpickled torch.save object to the Checkpoint: which entry is the
// model (PYTORCH_FORMAT.md §4), its tensors as bounds-checked views, and
// every other entry listed as ignored with the reason.
#include <algorithm>
#include <cctype>
#include <unordered_set>

#include "checkpoint/reader_internal.h"
#include "error.h"

namespace ferry::conv::detail {

std::string describe_value(const Value* v) {
  if (v->kind == Kind::Object) return "object of class " + v->qualified_name();
  if (v->kind == Kind::Call) return v->qualified_name() + "(...)";
  if (v->kind == Kind::Placeholder) return "call of " + v->qualified_name() + " (never made)";
  return kind_name(v->kind);
}

std::string key_text(const Value* k) {
  if (k->kind == Kind::String) return k->bytes;
  if (k->kind == Kind::Int) return std::to_string(k->integer);
  return "<" + std::string(kind_name(k->kind)) + " key>";
}

void TensorCollector::add_state_dict(const Value* dict) {
  for (const auto& [k, v] : dict->entries) {
    const std::string name = key_text(k);
    if (k->kind != Kind::String) {
      out_.ignored.emplace_back(name, "non-string state-dict key");
      continue;
    }
    add(name, v);
  }
}

void TensorCollector::add(const std::string& name, const Value* v) {
  if (v->kind == Kind::Call && v->cls && v->cls->global_kind == GlobalKind::NumpyScalar) {
    out_.ignored.emplace_back(name, "numpy scalar, not a tensor");
    return;
  }
  if (v->kind == Kind::Call) {
    out_.ignored.emplace_back(name, "unsupported tensor kind (" + v->qualified_name() + ")");
    return;
  }
  if (v->kind != Kind::Tensor) {
    out_.ignored.emplace_back(name, "not a tensor (" + describe_value(v) + ")");
    return;
  }
  const std::string what = path_ + ": tensor '" + name + "'";
  const TensorInfo& t = *v->tensor;
  if (t.storage->kind != Kind::Storage || !t.storage->storage)
    throw Error(what + ": storage argument is a " + std::string(kind_name(t.storage->kind)));
  const std::shared_ptr<const Storage>& storage = t.storage->storage;
  // A numpy array owns its bytes and always names its dtype.
  const DTypeInfo* declared = storage->owned ? dtype_object_info(t.dtype ? t.dtype->name : "") : table_.info_of(storage.get());
  if (!declared) throw Error(what + ": storage '" + storage->key + "' was not loaded from this file");
  DTypeInfo info = *declared;
  if (t.dtype) {
    const DTypeInfo* d = dtype_object_info(t.dtype->name);
    if (!d) throw Error(what + ": unknown dtype 'torch." + t.dtype->name + "'");
    info = *d;
  }
  // Offsets and strides count elements of the tensor's own dtype.
  check_view(what, t.size, t.stride, t.offset, storage->nbytes / info.size);
  if (!is_float(info.dtype)) {
    out_.ignored.emplace_back(name, info.dtype == DType::Unknown
                                        ? "unsupported dtype " + std::string(info.name)
                                        : "not a floating-point tensor (" + std::string(info.name) + ")");
    return;
  }
  TensorRef ref;
  ref.name = name;
  ref.dtype = info.dtype;
  ref.shape = t.size;
  ref.stride = t.stride;
  ref.offset = t.offset;
  ref.storage = storage;
  out_.tensors.push_back(std::move(ref));
}

const char* const kKnownStateDictKeys[kKnownStateDictKeyCount] = {
    "state_dict", "model_state_dict", "model", "net", "model_state", "weights", "params"};

// Why a top-level entry beside the selected state dict is not used.
std::string reason_for_top_level(const std::string& key, const Value* v) {
  std::string lower = key;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower.find("optim") != std::string::npos) return "optimizer state";
  if (lower.find("sched") != std::string::npos) return "scheduler state";
  if (lower.find("scaler") != std::string::npos) return "grad scaler state";
  if (!v) return "not selected";
  if (v->kind == Kind::Tensor) return "tensor outside the selected state dict";
  if (v->kind == Kind::Dict) return "not selected (dict)";
  return "not a tensor (" + describe_value(v) + ")";
}

namespace {

size_t count_tensors(const Value* dict) {
  size_t n = 0;
  for (const auto& kv : dict->entries) n += kv.second->kind == Kind::Tensor;
  return n;
}

bool all_tensors(const Value* dict) {
  return !dict->entries.empty() && count_tensors(dict) == dict->entries.size();
}

// A pickled nn.Module: an Object whose state has `_parameters` or `_modules`.
bool is_module_object(const Value* v) {
  if (v->kind != Kind::Object) return false;
  const Value* state = object_state(v);
  return state && (state->get("_parameters") || state->get("_modules"));
}

// Lists a top-level entry that is not the model. Tensors inside dicts, lists
// and tuples are listed one by one under their dotted path from the top
// level ("optimizer_state_dict.state.0.exp_avg"), so no ignored name can
// collide with a model tensor's; an entry without tensors is listed once
// ("epoch"). Iterative, each container visited once (pickled trees may share
// or even contain themselves), at most kMaxListed entries.
void ignore_top_level(const std::string& key, const Value* v, Checkpoint& out) {
  constexpr size_t kMaxListed = size_t{1} << 20;
  const std::string reason = reason_for_top_level(key, v);
  const bool optimizer_like = reason == "optimizer state" || reason == "scheduler state" ||
                              reason == "grad scaler state";
  const std::string tensor_reason = optimizer_like ? reason : "not selected (under key '" + key + "')";
  size_t listed = 0;
  std::unordered_set<const Value*> seen;
  std::vector<std::pair<std::string, const Value*>> todo{{key, v}};
  while (!todo.empty()) {
    auto [name, value] = std::move(todo.back());
    todo.pop_back();
    if (value->kind == Kind::Tensor && value != v) {
      if (listed++ < kMaxListed) out.ignored.emplace_back(name, tensor_reason);
      continue;
    }
    if (!seen.insert(value).second) continue;
    // Children pushed in reverse so they come out in file order.
    if (value->kind == Kind::Dict) {
      for (size_t i = value->entries.size(); i-- > 0;)
        todo.emplace_back(name + "." + key_text(value->entries[i].first), value->entries[i].second);
    } else if (value->kind == Kind::List || value->kind == Kind::Tuple) {
      for (size_t i = value->items.size(); i-- > 0;)
        todo.emplace_back(name + "." + std::to_string(i), value->items[i]);
    }
  }
  if (listed == 0) out.ignored.emplace_back(key, reason);
  if (listed > kMaxListed)
    out.ignored.emplace_back(key, std::to_string(listed - kMaxListed) + " more tensors (" + tensor_reason + ")");
}

}  // namespace

void select_tensors(const Value* root, const std::string& container, const std::string& path,
                    const StorageTable& table, const LoadOptions& options, Checkpoint& out) {
  TensorCollector collect(path, table, out);
  if (root->kind == Kind::Object) {
    if (!options.key.empty())
      throw Error(path + ": --key '" + options.key + "' given, but the file holds a whole pickled module (class '" +
                  root->qualified_name() + "'), not a checkpoint dict");
    out.form = container + " whole module (" + root->qualified_name() + ")";
    collect_module(root, path, collect, out);
    return;
  }
  if (root->kind != Kind::Dict)
    throw Error(path + ": not a state dict: the file holds a " + describe_value(root));

  auto key_list = [&] {
    std::string s;
    for (const auto& kv : root->entries) s += (s.empty() ? "" : ", ") + ("'" + key_text(kv.first) + "'");
    return s.empty() ? std::string("(none)") : s;
  };

  std::string selected;  // empty: the root itself is the state dict
  if (!options.key.empty()) {
    const Value* v = root->get(options.key);
    if (!v) throw Error(path + ": no key '" + options.key + "' in the checkpoint; keys: " + key_list());
    if (v->kind != Kind::Dict && !is_module_object(v))
      throw Error(path + ": key '" + options.key + "' holds a " + describe_value(v) +
                  ", not a state dict or a module");
    selected = options.key;
  } else {
    for (const char* known : kKnownStateDictKeys) {
      const Value* v = root->get(known);
      if (v && ((v->kind == Kind::Dict && count_tensors(v) > 0) || is_module_object(v))) {
        selected = known;
        break;
      }
    }
    if (selected.empty() && count_tensors(root) == 0) {
      // Not a bare state dict: the largest all-tensor dict among the values.
      size_t best = 0;
      for (const auto& [k, v] : root->entries) {
        if (k->kind == Kind::String && v->kind == Kind::Dict && all_tensors(v) && v->entries.size() > best) {
          best = v->entries.size();
          selected = k->bytes;
        }
      }
      if (selected.empty()) {
        // Else a whole module stored under some key, when there is one.
        std::string modules;
        size_t count = 0;
        for (const auto& [k, v] : root->entries) {
          if (k->kind != Kind::String || !is_module_object(v)) continue;
          if (count++ == 0) selected = k->bytes;
          modules += (modules.empty() ? "'" : ", '") + k->bytes + "' (" + v->qualified_name() + ")";
        }
        if (count == 0)
          throw Error(path + ": no state dict found (no tensors at the top level or under a known key); keys: " +
                      key_list());
        if (count > 1)
          throw Error(path + ": several whole modules in the checkpoint: " + modules +
                      "; choose one with --key");
      }
    }
  }

  if (selected.empty()) {
    out.form = container + " state_dict";
    collect.add_state_dict(root);
    return;
  }
  const Value* chosen = root->get(selected);
  out.form = container + " training checkpoint (key '" + selected + "'" +
             (chosen->kind == Kind::Object ? ", whole module " + chosen->qualified_name() : std::string()) + ")";
  for (const auto& [k, v] : root->entries) {
    const std::string name = key_text(k);
    if (k->kind == Kind::String && name == selected) {
      if (v->kind == Kind::Object) collect_module(v, path, collect, out);
      else collect.add_state_dict(v);
    } else {
      ignore_top_level(name, v, out);
    }
  }
}

}  // namespace ferry::conv::detail
