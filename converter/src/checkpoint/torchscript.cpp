// TorchScript archives (torch.jit.save), PYTORCH_FORMAT.md §3.
//
//   <prefix>/data.pkl           the module objects: GLOBAL '__torch__.<qualname>',
//                               NEWOBJ, BUILD({attribute: value}); parameters
//                               are plain _rebuild_tensor_v2 tensors
//   <prefix>/data/<key>         their storages
//   <prefix>/constants.pkl      a tuple of the code's constants (+ constants/<key>)
//   <prefix>/code/**.py         the compiled source, Deflate: each class's
//                               __parameters__ / __buffers__ lists and its
//                               Final constants (`batch_first : Final[bool] = True`)
//
// Weights: the objects are walked depth first from the root; a module's own
// parameters and buffers (in the order its code lists them, else attribute
// order) come before its submodules, which gives state_dict()'s keys and
// order. Tensors held elsewhere — an LSTM's `_flat_weights` list repeats its
// parameters — are deduplicated by storage, offset, shape and stride; any
// left over are listed as ignored. Hyper-parameters: the Final constants of
// each object's class (from code/) plus plain attributes in data.pkl, keyed
// by the object's attribute path; every object's scalar attributes
// (ModuleObject::scalars), which a forward may branch on.
//
// A class that defines both __getstate__ and __setstate__ is pickled as
// whatever __getstate__ returned, and torch.jit.load rebuilds the object by
// running __setstate__ on it: the attributes are followed only where that
// code just assigns parts of the state back (restored_state), else the
// module is refused, since the stored tensors are not the ones torch uses.
//
// code/ is only read as text, line by line: nothing in it is run. Each record
// is inflated with a cap (ZipReader::extract), and so is their total.
#include "checkpoint/torchscript.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "checkpoint/reader_internal.h"
#include "error.h"

namespace ferry::conv::detail {
namespace {

constexpr size_t kMaxCodeRecord = size_t{16} << 20;  // one code/*.py, inflated
constexpr size_t kMaxCodeTotal = size_t{64} << 20;   // all of them together
constexpr size_t kMaxClasses = size_t{1} << 16;
constexpr size_t kMaxObjectVisits = size_t{1} << 16;
constexpr size_t kMaxScanned = size_t{1} << 22;      // container values scanned for tensors
constexpr size_t kMaxForwardLines = 4096;           // lines of one class's forward kept (more: cut, so no return)
constexpr size_t kMaxScalarText = 256;              // a string attribute kept for branches

// What code/ says about one class.
struct ClassInfo {
  std::string base;  // "Module" for modules
  std::vector<std::pair<std::string, std::string>> finals;  // hyper-parameters, as attribute text
  bool has_parameters = false, has_buffers = false;
  bool any_final = false;  // declares a Final constant, a hyper-parameter or not
  std::vector<std::string> parameters, buffers;
  std::vector<std::string> forward;  // the lines of `def forward(...)`, as text
  std::string record;                // the code/ record that defines the class
  // torch.jit.load passes the pickled state to __setstate__ when the class
  // defines both it and __getstate__ (else it sets the attributes itself).
  bool has_getstate = false;
  std::vector<std::string> setstate;  // the lines of `def __setstate__(...)`
};
using ClassTable = std::unordered_map<std::string, ClassInfo>;

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool is_identifier(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

// "code/__torch__/torch/nn/modules/rnn.py" -> "__torch__.torch.nn.modules.rnn":
// the module a class defined in that file belongs to (how torch.jit.load
// finds a class's source).
bool code_qualifier(const std::string& name, std::string* out) {
  constexpr std::string_view kDir = "code/", kExt = ".py";
  std::string_view s = name;
  if (!starts_with(s, kDir) || s.size() <= kDir.size() + kExt.size() || s.substr(s.size() - kExt.size()) != kExt)
    return false;
  s = s.substr(kDir.size(), s.size() - kDir.size() - kExt.size());
  out->clear();
  size_t start = 0;
  for (;;) {
    const size_t slash = s.find('/', start);
    const std::string_view part = s.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (!is_identifier(part)) return false;
    if (!out->empty()) *out += '.';
    *out += part;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

// A Python string literal as TorchScript prints it ("LSTM", 'x'), unquoted;
// false when `v` is not one.
bool unquote(std::string_view v, std::string* out) {
  if (v.size() < 2 || (v.front() != '"' && v.front() != '\'') || v.back() != v.front()) return false;
  out->clear();
  for (size_t i = 1; i + 1 < v.size(); ++i) {
    char c = v[i];
    if (c == '\\' && i + 2 < v.size()) {
      c = v[++i];
      if (c == 'n') c = '\n';
      else if (c == 't') c = '\t';
    }
    *out += c;
  }
  return true;
}

// A Final constant's value as attribute text: True/False -> true/false,
// strings unquoted, anything else as written.
std::string constant_text(std::string_view v) {
  if (v == "True") return "true";
  if (v == "False") return "false";
  std::string s;
  if (unquote(v, &s)) return s;
  return std::string(v.substr(0, 256));
}

// `["a", "b", ]` -> {a, b}.
bool parse_name_list(std::string_view v, std::vector<std::string>* out) {
  v = trim(v);
  if (v.size() < 2 || v.front() != '[' || v.back() != ']') return false;
  v = v.substr(1, v.size() - 2);
  while (true) {
    v = trim(v);
    if (v.empty()) return true;
    const char q = v.front();
    if (q != '"' && q != '\'') return false;
    const size_t close = v.find(q, 1);
    if (close == std::string_view::npos) return false;
    out->emplace_back(v.substr(1, close - 1));
    v = trim(v.substr(close + 1));
    if (!v.empty()) {
      if (v.front() != ',') return false;
      v.remove_prefix(1);
    }
  }
}

// Reads the class headers and two-space-indented class-body declarations of
// one code/ file. Method bodies (deeper indentation) are skipped.
void parse_code(const std::string& qualifier, std::string_view text, const std::string& where,
                const std::string& record, ClassTable& classes) {
  ClassInfo* current = nullptr;
  std::vector<std::string>* in_method = nullptr;  // the lines of the method being read, if kept
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    if (current && line.size() > 2 && line[0] == ' ' && line[1] == ' ' && line[2] != ' ') {
      const std::string_view stmt = line.substr(2);
      in_method = starts_with(stmt, "def forward(")        ? &current->forward
                  : starts_with(stmt, "def __setstate__(") ? &current->setstate
                                                           : nullptr;
      if (starts_with(stmt, "def __getstate__(")) current->has_getstate = true;
    }
    if (current && in_method && line[0] == ' ' && in_method->size() < kMaxForwardLines) {
      in_method->emplace_back(line.substr(0, kMaxScriptLine + 1));
    }
    if (line[0] != ' ') {
      current = nullptr;
      in_method = nullptr;
      if (!starts_with(line, "class ")) continue;
      const std::string_view rest = line.substr(6);
      const size_t stop = rest.find_first_of("(:");
      const std::string_view name = trim(rest.substr(0, stop));
      if (!is_identifier(name)) continue;
      std::string_view base;
      if (stop != std::string_view::npos && rest[stop] == '(') {
        const size_t close = rest.find(')', stop);
        if (close != std::string_view::npos) base = trim(rest.substr(stop + 1, close - stop - 1));
      }
      const std::string qualname = qualifier + "." + std::string(name);
      if (!classes.count(qualname) && classes.size() >= kMaxClasses)
        throw Error(where + ": more than " + std::to_string(kMaxClasses) + " classes in code/");
      current = &classes[qualname];
      current->base = std::string(base);
      current->record = record;
      continue;
    }
    if (!current || line.size() < 3 || line[1] != ' ' || line[2] == ' ') continue;
    const std::string_view stmt = trim(line.substr(2));
    if (starts_with(stmt, "__parameters__ =")) {
      current->parameters.clear();
      current->has_parameters = parse_name_list(stmt.substr(16), &current->parameters);
      continue;
    }
    if (starts_with(stmt, "__buffers__ =")) {
      current->buffers.clear();
      current->has_buffers = parse_name_list(stmt.substr(13), &current->buffers);
      continue;
    }
    // name : Final[type] = value
    const size_t colon = stmt.find(" : ");
    if (colon == std::string_view::npos) continue;
    const std::string_view name = stmt.substr(0, colon);
    std::string_view rest = stmt.substr(colon + 3);
    if (!is_identifier(name) || !starts_with(rest, "Final[")) continue;
    current->any_final = true;
    if (!is_hyperparameter(name)) continue;
    size_t depth = 0, i = 5;
    for (; i < rest.size(); ++i) {
      if (rest[i] == '[') ++depth;
      else if (rest[i] == ']' && --depth == 0) break;
    }
    if (i >= rest.size()) continue;
    rest = trim(rest.substr(i + 1));
    if (rest.empty() || rest[0] != '=') continue;
    current->finals.emplace_back(std::string(name), constant_text(trim(rest.substr(1))));
  }
}

// Every code/**.py record, inflated with caps.
ClassTable read_code(const ZipReader& zip) {
  ClassTable classes;
  size_t total = 0;
  for (const ZipEntry& e : zip.entries()) {
    std::string qualifier;
    if (!code_qualifier(e.name, &qualifier)) continue;  // .debug_pkl and others
    // extract() refuses a record declared over kMaxCodeRecord before
    // inflating anything, and one that inflates past what it declares.
    if (e.size <= kMaxCodeRecord && e.size > kMaxCodeTotal - total)
      throw Error(zip.describe(e) + ": the code/ records of this archive inflate to more than " +
                  std::to_string(kMaxCodeTotal) + " bytes in total");
    const std::vector<uint8_t> text = zip.extract(e, kMaxCodeRecord);
    total += text.size();
    parse_code(qualifier, std::string_view(reinterpret_cast<const char*>(text.data()), text.size()),
               zip.describe(e), e.name, classes);
  }
  return classes;
}

// Identity of a tensor value: the same view of the same storage.
std::string tensor_identity(const Value* v) {
  const TensorInfo& t = *v->tensor;
  const void* storage = t.storage;
  if (t.storage && t.storage->kind == Kind::Storage) storage = t.storage->storage.get();
  return std::to_string(reinterpret_cast<uintptr_t>(storage)) + "@" + std::to_string(t.offset) +
         dims_text(t.size) + dims_text(t.stride) + (t.dtype ? t.dtype->name : std::string());
}

class Walker {
 public:
  Walker(const std::string& path, const ClassTable& classes, TensorCollector& collect, Checkpoint& out)
      : path_(path), classes_(classes), collect_(collect), out_(out) {}

  void run(const Value* root) {
    enter(root, "");
    while (!stack_.empty()) {
      Frame& top = stack_.back();
      if (top.next == top.children.size()) {
        on_stack_.erase(top.object);
        stack_.pop_back();
        continue;
      }
      const auto [name, child] = top.children[top.next++];
      const std::string child_path = top.path.empty() ? name : top.path + "." + name;
      if (on_stack_.count(child))
        throw Error(path_ + ": TorchScript object cycle: attribute '" + child_path + "' (class " +
                    child->qualified_name() + ") contains itself");
      enter(child, child_path);  // may reallocate stack_
    }
    list_leftovers();
  }

 private:
  struct Frame {
    const Value* object;
    std::string path;
    std::vector<std::pair<std::string, const Value*>> children;
    size_t next = 0;
  };

  void emit(const std::string& name, const Value* v) {
    collect_.add(name, v);
    if (v->kind == Kind::Tensor) emitted_.insert(tensor_identity(v));
  }

  void enter(const Value* object, const std::string& path) {
    if (++visits_ > kMaxObjectVisits)
      throw Error(path_ + ": more than " + std::to_string(kMaxObjectVisits) + " TorchScript object visits");
    const std::string prefix = path.empty() ? "" : path + ".";
    auto found = classes_.find(object->qualified_name());
    const ClassInfo* info = found == classes_.end() ? nullptr : &found->second;
    if (info)
      for (const auto& [name, value] : info->finals) record_hyperparameter(path, name, value, out_);
    const Value* state = object_state(object);
    if (info && info->has_getstate && !info->setstate.empty()) {
      state = restored_state(object, *info, path);
      if (object->state) leftovers_.emplace_back(prefix + "<state>", object->state);  // parts it does not restore
    }
    if (!state) {
      // No attributes, or a custom __getstate__ value: not a state_dict
      // source, but its tensors are still accounted for.
      if (object->state) leftovers_.emplace_back(prefix + "<state>", object->state);
      return;
    }
    record_hyperparameters(state, path, out_);
    ModuleObject& recorded = record_class(object, path, out_);
    if (info) {
      recorded.forward = info->forward;
      recorded.code_record = info->record;
      recorded.final_constants = info->any_final;
    }
    for (const auto& [k, v] : state->entries)
      if (k->kind == Kind::String) {
        if (const auto text = scalar_text(v)) recorded.scalars[k->bytes] = *text;
      }

    // Own parameters and buffers first, as state_dict() orders them.
    std::unordered_set<std::string> own;
    if (info && (info->has_parameters || info->has_buffers)) {
      for (const auto* names : {&info->parameters, &info->buffers})
        for (const std::string& name : *names) {
          const Value* v = state->get(name);
          if (v && v->kind != Kind::None && own.insert(name).second) emit(prefix + name, v);
        }
    } else {
      for (const auto& [k, v] : state->entries)
        if (k->kind == Kind::String && v->kind == Kind::Tensor && own.insert(k->bytes).second) emit(prefix + k->bytes, v);
    }
    Frame frame{object, path, {}, 0};
    for (const auto& [k, v] : state->entries) {
      if (k->kind != Kind::String || own.count(k->bytes)) continue;
      const std::string& name = k->bytes;
      if (v->kind == Kind::Object && is_module(v)) frame.children.emplace_back(name, v);
      else if (v->kind == Kind::Tensor || v->kind == Kind::Object || v->kind == Kind::List ||
               v->kind == Kind::Tuple || v->kind == Kind::Dict || v->kind == Kind::Set)
        leftovers_.emplace_back(prefix + name, v);
    }
    on_stack_.insert(object);
    stack_.push_back(std::move(frame));
  }

  // A scalar attribute as a Python literal (ModuleObject::scalars), or nothing.
  static std::optional<std::string> scalar_text(const Value* v) {
    switch (v->kind) {
      case Kind::Bool: return std::string(v->boolean ? "True" : "False");
      case Kind::Int: return std::to_string(v->integer);
      case Kind::None: return std::string("None");
      case Kind::Float: {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.17g", v->real);
        return std::string(buf);
      }
      case Kind::String:
        if (v->bytes.size() <= kMaxScalarText) return "'" + v->bytes + "'";
        return std::nullopt;
      default: return std::nullopt;
    }
  }

  // The attributes torch.jit.load gives an object whose class defines
  // __getstate__ and __setstate__: it calls __setstate__ with the pickled
  // state (whatever __getstate__ returned). Followed only where every line
  // assigns a part of that state, unchanged, to an attribute
  // (`self.weight = (state)[0]`, `self.w = state["w"]`, `return None`): then
  // the attributes are exactly those parts. Anything else computes what
  // torch loads, which ferry does not run: refused, naming the module and
  // its class.
  const Value* restored_state(const Value* object, const ClassInfo& info, const std::string& path) {
    const std::string who = path_ + ": module '" + (path.empty() ? std::string("root") : path) + "' (class " +
                            object->qualified_name() + ")";
    auto refuse = [&](const std::string& line, const std::string& why) -> const Value* {
      throw Error(who + ": its __setstate__ (record '" + info.record + "', line '" + line.substr(0, 120) + "') " + why +
                  ": torch.jit.load runs it on the stored state, and ferry runs no code from a file");
    };
    // The signature, over lines until its closing ':': `def __setstate__(self: T,\n    state: Tuple[...]) -> NoneType:`.
    std::string signature;
    size_t i = 0;
    int depth = 0;
    for (; i < info.setstate.size(); ++i) {
      const std::string_view l = trim(info.setstate[i]);
      for (char c : l) depth += c == '(' || c == '[' ? 1 : c == ')' || c == ']' ? -1 : 0;
      signature += std::string(l) + " ";
      if (depth <= 0) break;
      if (signature.size() > kMaxScriptLine) break;
    }
    std::vector<std::string> params;
    {
      const size_t open = signature.find('(');
      size_t start = open == std::string::npos ? signature.size() : open + 1;
      int d = 0;
      for (size_t k = start; k < signature.size() && params.size() < 3; ++k) {
        const char c = signature[k];
        if (c == '[' || c == '(') ++d;
        if ((c == ']' || c == ')') && d-- == 0) {
          params.emplace_back(trim(std::string_view(signature).substr(start, k - start)));
          break;
        }
        if (c == ',' && d == 0) {
          params.emplace_back(trim(std::string_view(signature).substr(start, k - start)));
          start = k + 1;
        }
      }
      for (std::string& p : params) p = std::string(trim(std::string_view(p).substr(0, p.find(':'))));
    }
    if (params.size() != 2 || !is_identifier(params[0]) || !is_identifier(params[1]))
      return refuse(std::string(trim(info.setstate[0])), "has a signature ferry does not read");
    const std::string& self = params[0];
    const std::string& arg = params[1];
    const Value* pickled = object->state;
    arena_.emplace_back();
    Value& dict = arena_.back();
    dict.kind = Kind::Dict;
    for (++i; i < info.setstate.size(); ++i) {
      const std::string_view line = trim(info.setstate[i]);
      if (line.empty() || line == "return None") continue;
      // self.NAME = (ARG)[INDEX] | ARG[INDEX] | (ARG)["KEY"] | ARG["KEY"]
      const std::string text(line);
      const size_t eq = line.find(" = ");
      const std::string_view target = eq == std::string_view::npos ? std::string_view() : line.substr(0, eq);
      std::string_view source = eq == std::string_view::npos ? std::string_view() : line.substr(eq + 3);
      if (!starts_with(target, self + ".") || !is_identifier(target.substr(self.size() + 1)))
        return refuse(text, "does more than assign the stored values to attributes");
      const std::string name(target.substr(self.size() + 1));
      const std::string bracketed = "(" + arg + ")[";
      if (starts_with(source, bracketed)) source.remove_prefix(bracketed.size());
      else if (starts_with(source, arg + "[")) source.remove_prefix(arg.size() + 1);
      else return refuse(text, "computes the value of '" + name + "'");
      if (source.empty() || source.back() != ']') return refuse(text, "computes the value of '" + name + "'");
      source.remove_suffix(1);
      Value* part = nullptr;
      std::string key;
      if (unquote(source, &key)) {
        if (pickled && pickled->kind == Kind::Dict)
          for (const auto& [k, v] : pickled->entries)
            if (k->kind == Kind::String && k->bytes == key) part = v;
      } else if (!source.empty() && source.size() < 6 && source.find_first_not_of("0123456789") == std::string_view::npos) {
        const size_t index = std::stoul(std::string(source));
        if (pickled && (pickled->kind == Kind::Tuple || pickled->kind == Kind::List) && index < pickled->items.size())
          part = pickled->items[index];
      } else {
        return refuse(text, "computes the value of '" + name + "'");
      }
      if (!part)
        return refuse(text, "reads a part the stored state (" + (pickled ? describe_value(pickled) : std::string("none")) +
                                ") does not have");
      for (const auto& [existing, unused] : dict.entries)
        if (existing->bytes == name) return refuse(text, "assigns '" + name + "' twice");
      arena_.emplace_back();
      Value& k = arena_.back();
      k.kind = Kind::String;
      k.bytes = name;
      dict.entries.emplace_back(&k, part);
    }
    return &dict;
  }

  bool is_module(const Value* object) const {
    auto it = classes_.find(object->qualified_name());
    return it == classes_.end() || it->second.base == "Module" || it->second.base.empty();
  }

  // Tensors outside parameters and buffers: repeats of emitted ones (an
  // LSTM's _flat_weights) are dropped, the rest listed as ignored.
  void list_leftovers() {
    std::unordered_set<const Value*> seen;
    std::unordered_set<std::string> listed;
    size_t scanned = 0;
    for (const auto& [attribute, value] : leftovers_) {
      std::vector<std::pair<std::string, const Value*>> todo{{attribute, value}};
      while (!todo.empty()) {
        auto [name, v] = std::move(todo.back());
        todo.pop_back();
        if (++scanned > kMaxScanned)
          throw Error(path_ + ": more than " + std::to_string(kMaxScanned) + " values in TorchScript attributes");
        if (v->kind == Kind::Tensor) {
          const std::string id = tensor_identity(v);
          if (!emitted_.count(id) && listed.insert(id).second)
            out_.ignored.emplace_back(name, "tensor attribute that is not a parameter or buffer");
          continue;
        }
        if (!seen.insert(v).second) continue;
        if (v->kind == Kind::List || v->kind == Kind::Tuple || v->kind == Kind::Set) {
          for (size_t i = v->items.size(); i-- > 0;) todo.emplace_back(name + "." + std::to_string(i), v->items[i]);
        } else if (v->kind == Kind::Dict) {
          for (size_t i = v->entries.size(); i-- > 0;)
            todo.emplace_back(name + "." + key_text(v->entries[i].first), v->entries[i].second);
        } else if (v->kind == Kind::Object && v->state) {
          todo.emplace_back(name, v->state);
        }
      }
    }
  }

  const std::string& path_;
  const ClassTable& classes_;
  TensorCollector& collect_;
  Checkpoint& out_;
  std::vector<Frame> stack_;
  std::unordered_set<const Value*> on_stack_;
  std::unordered_set<std::string> emitted_;
  std::vector<std::pair<std::string, const Value*>> leftovers_;
  std::deque<Value> arena_;  // the attribute dicts of restored_state
  size_t visits_ = 0;
};

// constants.pkl: tensors the code uses as literals. Validated like any
// tensor, then listed as ignored (they are not state-dict entries).
void read_constants(const ZipReader& zip, const std::string& path, bool big_endian, Checkpoint& out) {
  const ZipEntry* entry = zip.find("constants.pkl");
  if (!entry) return;
  const ByteSpan bytes = zip.stored(*entry);
  StorageTable table;
  ZipStorageLoader loader(zip, "constants", big_endian, table);
  const PickleTree tree = unpickle(bytes.data, bytes.size, zip.describe(*entry), &loader);
  if (tree.root->kind != Kind::Tuple)
    throw Error(zip.describe(*entry) + ": holds a " + describe_value(tree.root) + ", not a tuple of constants");
  Checkpoint constants;
  TensorCollector collect(path, table, constants);
  for (size_t i = 0; i < tree.root->items.size(); ++i)
    if (tree.root->items[i]->kind == Kind::Tensor) collect.add("CONSTANTS.c" + std::to_string(i), tree.root->items[i]);
  for (const TensorRef& t : constants.tensors) out.ignored.emplace_back(t.name, "TorchScript constant");
  for (const auto& [name, why] : constants.ignored) out.ignored.emplace_back(name, "TorchScript constant, " + why);
}

}  // namespace

bool is_torchscript(const ZipReader& zip, const std::string& path) {
  // What torch.load asks (serialization.py, _is_torchscript_zip): a
  // constants.pkl record, and nothing else.
  if (zip.find("constants.pkl")) return true;
  // code/ records without it: torch.load reads data.pkl as a torch.save
  // checkpoint (whose __torch__ classes it cannot import) and torch.jit.load
  // cannot read it at all. Neither reads the TorchScript ferry would.
  for (const ZipEntry& e : zip.entries()) {
    if (e.name.rfind("code/", 0) == 0) {
      throw Error(path + ": TorchScript code (" + e.full_name + ") without a constants.pkl record: "
                  "torch.jit.load cannot read it and torch.load would read its data.pkl as a plain checkpoint; "
                  "not read as either");
    }
  }
  return false;
}

Checkpoint read_torchscript(const ZipReader& zip, const std::string& path, const LoadOptions& options) {
  if (!options.key.empty())
    throw Error(path + ": --key does not apply to a TorchScript archive (it holds one module)");
  const bool big_endian = read_zip_byte_order(zip);
  const ClassTable classes = read_code(zip);

  const ZipEntry* pkl = zip.find("data.pkl");
  if (!pkl) throw Error(path + ": TorchScript archive without a data.pkl record");
  const ByteSpan bytes = zip.stored(*pkl);
  StorageTable table;
  ZipStorageLoader loader(zip, "data", big_endian, table);
  const PickleTree tree = unpickle(bytes.data, bytes.size, zip.describe(*pkl), &loader);
  if (tree.root->kind != Kind::Object)
    throw Error(zip.describe(*pkl) + ": holds a " + describe_value(tree.root) + ", not a TorchScript module object");

  Checkpoint out;
  out.form = "TorchScript archive (" + tree.root->qualified_name() + ")";
  TensorCollector collect(path, table, out);
  Walker(path, classes, collect, out).run(tree.root);
  read_constants(zip, path, big_endian, out);
  return out;
}

}  // namespace ferry::conv::detail
