// The JSON records of a .pt2 archive: bounded, depth-checked, parsed by
// nlohmann-json, then read only through Field (below), which checks every
// type and range and names the field's path in its errors.
#include "checkpoint/pt2_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "checkpoint/aten_schema.h"
#include "error.h"
#include "io/bounded_json.h"
#include "text.h"

namespace ferry::conv {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxNodes = size_t{1} << 20;
constexpr size_t kMaxArgs = 1024;
constexpr size_t kMaxList = size_t{1} << 20;
constexpr size_t kMaxRank = 64;

bool has_control(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  return false;
}

bool identifier(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

// A JSON value with its path in the document, for messages. Every read is
// checked; nothing calls nlohmann in a way that throws.
class Field {
 public:
  Field(const Json& j, std::string path, const std::string* label) : j_(&j), path_(std::move(path)), label_(label) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(*label_ + ": " + (path_.empty() ? std::string("the document") : path_) + ": " + what);
  }

  const Json& json() const { return *j_; }
  const std::string& path() const { return path_; }
  bool is_null() const { return j_->is_null(); }
  bool is_object() const { return j_->is_object(); }
  bool is_array() const { return j_->is_array(); }
  bool is_string() const { return j_->is_string(); }

  std::string kind() const {
    switch (j_->type()) {
      case Json::value_t::null: return "null";
      case Json::value_t::object: return "an object";
      case Json::value_t::array: return "an array";
      case Json::value_t::string: return "a string";
      case Json::value_t::boolean: return "a boolean";
      case Json::value_t::number_integer:
      case Json::value_t::number_unsigned: return "an integer";
      case Json::value_t::number_float: return "a number";
      default: return "an unreadable value";
    }
  }

  void need_object() const {
    if (!j_->is_object()) fail("expected an object, found " + kind());
  }
  void need_array() const {
    if (!j_->is_array()) fail("expected an array, found " + kind());
    if (j_->size() > kMaxList) fail("array of " + std::to_string(j_->size()) + " entries (at most " +
                                    std::to_string(kMaxList) + ")");
  }

  std::string child_path(std::string_view key) const {
    if (identifier(key)) return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
    return path_ + "['" + printable(key) + "']";
  }

  // A member that must be there (null counts as there).
  Field at(const char* key) const {
    need_object();
    auto it = j_->find(key);
    if (it == j_->end()) fail("no '" + std::string(key) + "' field");
    return Field(*it, child_path(key), label_);
  }
  // A member that may be absent or null.
  std::optional<Field> get(const char* key) const {
    need_object();
    auto it = j_->find(key);
    if (it == j_->end() || it->is_null()) return std::nullopt;
    return Field(*it, child_path(key), label_);
  }
  size_t size() const {
    need_array();
    return j_->size();
  }
  Field operator[](size_t i) const {
    need_array();
    return Field((*j_)[i], path_ + "[" + std::to_string(i) + "]", label_);
  }
  // The members of an object, in the document's (sorted) key order.
  template <typename F>
  void each_member(F&& f) const {
    need_object();
    if (j_->size() > kMaxList) fail("object of " + std::to_string(j_->size()) + " members");
    for (auto it = j_->begin(); it != j_->end(); ++it) f(it.key(), Field(it.value(), child_path(it.key()), label_));
  }

  std::string str(size_t max = kMaxExportName) const {
    if (!j_->is_string()) fail("expected a string, found " + kind());
    const std::string& s = j_->get_ref<const std::string&>();
    if (s.size() > max) fail("string of " + std::to_string(s.size()) + " bytes (at most " + std::to_string(max) + ")");
    return s;
  }
  // A name (of a value, a tensor, a record, an op): no control characters,
  // so that every message naming it stays one line.
  std::string name(size_t max = kMaxExportName) const {
    std::string s = str(max);
    if (has_control(s)) fail("a name with a control character ('" + printable(s) + "')");
    return s;
  }
  int64_t integer() const {
    if (j_->is_number_unsigned()) {
      const uint64_t u = j_->get<uint64_t>();
      if (u > uint64_t(std::numeric_limits<int64_t>::max())) fail("integer " + std::to_string(u) + " out of range");
      return static_cast<int64_t>(u);
    }
    if (j_->is_number_integer()) return j_->get<int64_t>();
    if (j_->is_number_float()) fail("expected an integer, found the number " + printable(j_->dump()));
    fail("expected an integer, found " + kind());
  }
  bool boolean() const {
    if (!j_->is_boolean()) fail("expected true or false, found " + kind());
    return j_->get<bool>();
  }
  // A number; torch writes inf and nan as strings.
  double real() const {
    if (j_->is_number()) return j_->get<double>();
    if (j_->is_string()) {
      const std::string& s = j_->get_ref<const std::string&>();
      if (s == "inf" || s == "Infinity") return std::numeric_limits<double>::infinity();
      if (s == "-inf" || s == "-Infinity") return -std::numeric_limits<double>::infinity();
      if (s == "nan" || s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    }
    fail("expected a number, found " + kind());
  }
  // A one-key union object ({"as_int": 3}): its key and value.
  std::pair<std::string, Field> one_of() const {
    need_object();
    if (j_->size() != 1) fail("expected a one-member union object, found " + std::to_string(j_->size()) + " members");
    auto it = j_->begin();
    return {it.key(), Field(it.value(), child_path(it.key()), label_)};
  }

 private:
  const Json* j_;
  std::string path_;
  const std::string* label_;
};

Json parse_json(const uint8_t* data, size_t size, const std::string& label) {
  return parse_bounded_json(data, size, label);
}

// ----------------------------------------------------------------- tensors --

// A SymInt that must be known: {"as_int": n}.
int64_t known_int(const Field& f) {
  auto [key, v] = f.one_of();
  if (key == "as_int") return v.integer();
  if (key == "as_expr" || key == "as_name")
    f.fail("a symbolic value where a stored tensor needs a known size");
  f.fail("expected {\"as_int\": n}, found '" + printable(key) + "'");
}

std::vector<int64_t> known_ints(const Field& f) {
  std::vector<int64_t> out;
  const size_t n = f.size();
  if (n > kMaxRank) f.fail(std::to_string(n) + " dimensions (at most " + std::to_string(kMaxRank) + ")");
  for (size_t i = 0; i < n; ++i) out.push_back(known_int(f[i]));
  return out;
}

std::string device_text(const Field& f) {
  const std::string type = f.at("type").str(64);
  std::string s = printable(type, 64);
  if (auto index = f.get("index")) s += ":" + std::to_string(index->integer());
  return s;
}

PayloadEntry payload_entry(const std::string& fqn, const Field& f) {
  PayloadEntry e;
  e.fqn = fqn;
  e.path_name = f.at("path_name").name();
  if (auto v = f.get("is_param")) e.is_param = v->boolean();
  if (auto v = f.get("use_pickle")) e.use_pickle = v->boolean();
  auto meta = f.get("tensor_meta");
  if (!meta) return e;
  e.has_meta = true;
  e.dtype_code = meta->at("dtype").integer();
  e.sizes = known_ints(meta->at("sizes"));
  e.strides = known_ints(meta->at("strides"));
  e.storage_offset = known_int(meta->at("storage_offset"));
  if (auto d = meta->get("device")) e.device = device_text(*d);
  if (auto l = meta->get("layout")) e.layout = l->integer();
  if (auto r = meta->get("requires_grad")) (void)r->boolean();
  return e;
}

// ------------------------------------------------------------------- graph --

// "L['self']._modules['layers']._modules['0']", "getattr(L['self'].layers,
// '0')", "L['self'].lstm", "lstm" -> "layers.0", "layers.0", "lstm", "lstm".
std::string normalise_module_path(std::string_view raw) {
  std::vector<std::string> tokens;
  bool odd = false;
  for (size_t i = 0; i < raw.size();) {
    const char c = raw[i];
    if (c == '\'' || c == '"') {
      const size_t close = raw.find(c, i + 1);
      if (close == std::string_view::npos) return std::string(raw);
      tokens.emplace_back(raw.substr(i + 1, close - i - 1));
      if (tokens.back().empty() || tokens.back().find_first_not_of(
              "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != std::string::npos)
        odd = true;
      i = close + 1;
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_') {
      size_t j = i;
      while (j < raw.size() && ((raw[j] >= 'a' && raw[j] <= 'z') || (raw[j] >= 'A' && raw[j] <= 'Z') ||
                                (raw[j] >= '0' && raw[j] <= '9') || raw[j] == '_'))
        ++j;
      tokens.emplace_back(raw.substr(i, j - i));
      i = j;
    } else {
      if (c != '.' && c != '[' && c != ']' && c != '(' && c != ')' && c != ',' && c != ' ') odd = true;
      ++i;
    }
  }
  if (odd) return std::string(raw);
  std::string out;
  size_t k = 0;
  if (k < tokens.size() && (tokens[k] == "L" || tokens[k] == "getattr")) {
    while (k < tokens.size() && (tokens[k] == "L" || tokens[k] == "getattr")) ++k;
  }
  if (k < tokens.size() && (tokens[k] == "self" || tokens[k] == "L__self__")) ++k;
  for (; k < tokens.size(); ++k) {
    if (tokens[k] == "_modules" || tokens[k] == "getattr") continue;
    out += (out.empty() ? "" : ".") + tokens[k];
  }
  return out;
}

void read_module_stack(const std::string& stack, ExportNode& node) {
  // "key,path,type;key,path,type", outermost first; a path may hold commas
  // ("getattr(L['self'].layers, '0')"), a key and a type do not.
  const size_t start = stack.rfind(';') == std::string::npos ? 0 : stack.rfind(';') + 1;
  const std::string last = stack.substr(start);
  const size_t first_comma = last.find(','), last_comma = last.rfind(',');
  if (first_comma == std::string::npos || first_comma == last_comma) return;
  const std::string key = last.substr(0, first_comma);
  if (key == "_empty_nn_module_stack_from_metadata_hook") return;
  node.has_module = true;
  node.module_path = normalise_module_path(last.substr(first_comma + 1, last_comma - first_comma - 1));
  node.module_class = last.substr(last_comma + 1);
}

// A {"as_name": n} / {"as_int": v} entry of a symbolic int list.
void sym_int_entry(const Field& f, ExportArg& a) {
  auto [key, v] = f.one_of();
  if (key == "as_int") {
    a.ints.push_back(v.integer());
    a.names.emplace_back();
  } else if (key == "as_name") {
    a.ints.push_back(0);
    a.names.push_back(v.name());
  } else {
    f.fail("expected {\"as_int\": n} or {\"as_name\": s}, found '" + printable(key) + "'");
  }
}

std::string tensor_name(const Field& f) { return f.at("name").name(); }

// Refuses the node `f` (the `index`th of its graph) when its target is not an
// operator torch.export.load would accept, whether or not ferry reads the
// chain from this graph (aten_schema.h: export_target_kind). Returns the target.
std::string checked_target(const Field& f, size_t index) {
  const std::string target = f.at("target").name();
  if (export_target_kind(target) == ExportTargetKind::kUnknown) {
    std::string node = std::to_string(index);
    if (auto name = f.get("name"); name && name->is_string()) node += " '" + printable(name->str(), 128) + "'";
    f.fail("node " + node + ": target '" + printable(target) + "' is not an ATen operator ferry knows");
  }
  return target;
}

ExportArg parse_arg(const Field& f);

// A higher-order op's subgraph ({"name": .., "graph": {"nodes": [..], ..}}):
// ferry reads nothing in it, but every target in it, at any depth, is
// checked as the top-level graph's are.
void check_subgraph(const Field& f) {
  const Field nodes = f.at("graph").at("nodes");
  for (size_t i = 0; i < nodes.size(); ++i) {
    (void)checked_target(nodes[i], i);
    const Field inputs = nodes[i].at("inputs");
    for (size_t k = 0; k < inputs.size(); ++k) (void)parse_arg(inputs[k].at("arg"));
  }
}

ExportArg parse_arg(const Field& f) {
  ExportArg a;
  auto [key, v] = f.one_of();
  using K = ExportArg::Kind;
  if (key == "as_none") {
    a.kind = K::None;
  } else if (key == "as_tensor") {
    a.kind = K::Tensor;
    a.names.push_back(tensor_name(v));
  } else if (key == "as_tensors") {
    a.kind = K::Tensors;
    for (size_t i = 0; i < v.size(); ++i) a.names.push_back(tensor_name(v[i]));
  } else if (key == "as_optional_tensors") {
    a.kind = K::Tensors;
    for (size_t i = 0; i < v.size(); ++i) {
      auto [k2, v2] = v[i].one_of();
      if (k2 == "as_tensor") a.names.push_back(tensor_name(v2));
      else if (k2 == "as_none") a.names.emplace_back();
      else v[i].fail("expected as_tensor or as_none, found '" + printable(k2) + "'");
    }
  } else if (key == "as_optional_tensor") {
    auto [k2, v2] = v.one_of();
    if (k2 == "as_tensor") {
      a.kind = K::Tensor;
      a.names.push_back(tensor_name(v2));
    } else if (k2 != "as_none") {
      v.fail("expected as_tensor or as_none, found '" + printable(k2) + "'");
    }
  } else if (key == "as_int") {
    a.kind = K::Int;
    a.ints.push_back(v.integer());
  } else if (key == "as_ints") {
    a.kind = K::Ints;
    for (size_t i = 0; i < v.size(); ++i) a.ints.push_back(v[i].integer());
  } else if (key == "as_float") {
    a.kind = K::Float;
    a.reals.push_back(v.real());
  } else if (key == "as_floats") {
    a.kind = K::Floats;
    for (size_t i = 0; i < v.size(); ++i) a.reals.push_back(v[i].real());
  } else if (key == "as_bool") {
    a.kind = K::Bool;
    a.ints.push_back(v.boolean() ? 1 : 0);
  } else if (key == "as_bools") {
    a.kind = K::Bools;
    for (size_t i = 0; i < v.size(); ++i) a.ints.push_back(v[i].boolean() ? 1 : 0);
  } else if (key == "as_string") {
    a.kind = K::String;
    a.text = v.str();
  } else if (key == "as_strings") {
    a.kind = K::Strings;
    for (size_t i = 0; i < v.size(); ++i) a.strings.push_back(v[i].str());
  } else if (key == "as_sym_int" || key == "as_sym_bool" || key == "as_sym_float") {
    auto [k2, v2] = v.one_of();
    if (k2 == "as_name") {
      a.kind = K::SymInt;
      a.names.push_back(v2.name());
    } else if (k2 == "as_int") {
      a.kind = K::Int;
      a.ints.push_back(v2.integer());
    } else if (k2 == "as_bool") {
      a.kind = K::Bool;
      a.ints.push_back(v2.boolean() ? 1 : 0);
    } else if (k2 == "as_float") {
      a.kind = K::Float;
      a.reals.push_back(v2.real());
    } else {
      v.fail("expected as_name or a value, found '" + printable(k2) + "'");
    }
  } else if (key == "as_sym_ints") {
    const size_t n = v.size();
    for (size_t i = 0; i < n; ++i) sym_int_entry(v[i], a);
    const bool known = std::all_of(a.names.begin(), a.names.end(), [](const std::string& s) { return s.empty(); });
    a.kind = known ? K::Ints : K::SymInts;
    if (known) a.names.clear();
  } else if (key == "as_scalar_type") {
    a.kind = K::ScalarType;
    a.ints.push_back(v.integer());
  } else if (key == "as_layout") {
    a.kind = K::Layout;
    a.ints.push_back(v.integer());
  } else if (key == "as_memory_format") {
    a.kind = K::MemoryFormat;
    a.ints.push_back(v.integer());
  } else if (key == "as_device") {
    a.kind = K::Device;
    a.text = device_text(v);
  } else if (key == "as_custom_obj") {
    f.fail("a custom-object (TorchBind) argument: ferry reads no script objects");
  } else if (key == "as_operator") {
    // An operator passed as a value (auto_functionalized's op): named as a target is.
    a.kind = K::Other;
    a.text = "as_operator";
    const std::string op = v.name();
    if (export_target_kind(op) == ExportTargetKind::kUnknown)
      v.fail("operator '" + printable(op) + "' is not an ATen operator ferry knows");
  } else if (key == "as_graph") {
    a.kind = K::Other;
    a.text = "as_graph";
    check_subgraph(v);
  } else {
    a.kind = K::Other;
    a.text = printable(key, 64);
  }
  return a;
}

// The value names an argument uses.
void used_names(const ExportArg& a, std::vector<std::string>& out) {
  for (const std::string& n : a.names)
    if (!n.empty()) out.push_back(n);
}

ExportArg default_arg(const AtenDefault& d) {
  ExportArg a;
  using K = ExportArg::Kind;
  switch (d.kind) {
    case AtenDefault::kRequired:
    case AtenDefault::kNone: break;
    case AtenDefault::kInt: a.kind = K::Int; a.ints = {static_cast<int64_t>(d.number)}; break;
    case AtenDefault::kInts1: a.kind = K::Ints; a.ints = {static_cast<int64_t>(d.number)}; break;
    case AtenDefault::kIntsEmpty: a.kind = K::Ints; break;
    case AtenDefault::kFloat: a.kind = K::Float; a.reals = {d.number}; break;
    case AtenDefault::kBool: a.kind = K::Bool; a.ints = {d.number != 0 ? 1 : 0}; break;
    case AtenDefault::kString: a.kind = K::String; a.text = d.text; break;
  }
  return a;
}

// Puts a known op's arguments in schema order, defaults filled in.
void apply_schema(const AtenSchema& schema, const Field& where, ExportNode& node) {
  std::vector<std::pair<std::string, ExportArg>> given = std::move(node.args);
  node.args.clear();
  std::vector<bool> taken(given.size(), false);
  for (const AtenArgSchema& s : schema.args) {
    if (!s.name) break;
    size_t k = 0;
    while (k < given.size() && given[k].first != s.name) ++k;
    if (k < given.size()) {
      taken[k] = true;
      node.args.emplace_back(s.name, std::move(given[k].second));
    } else if (s.fallback.kind == AtenDefault::kRequired) {
      where.fail("node '" + printable(node.name) + "' (" + node.target + "): argument '" + s.name +
                 "' is missing and has no default");
    } else {
      node.args.emplace_back(s.name, default_arg(s.fallback));
    }
  }
  for (size_t k = 0; k < given.size(); ++k)
    if (!taken[k])
      where.fail("node '" + printable(node.name) + "' (" + node.target + "): argument '" + printable(given[k].first) +
                 "' is not in the op's schema");
}

void output_names(const Field& f, std::vector<std::string>& out) {
  auto [key, v] = f.one_of();
  if (key == "as_tensor") {
    out.push_back(tensor_name(v));
  } else if (key == "as_tensors") {
    for (size_t i = 0; i < v.size(); ++i) out.push_back(tensor_name(v[i]));
  } else if (key == "as_sym_int" || key == "as_sym_bool" || key == "as_sym_float") {
    auto [k2, v2] = v.one_of();
    out.push_back(k2 == "as_name" ? v2.name() : std::string());
  } else if (key == "as_optional_tensors") {
    for (size_t i = 0; i < v.size(); ++i) {
      auto [k2, v2] = v[i].one_of();
      out.push_back(k2 == "as_tensor" ? tensor_name(v2) : std::string());
    }
  } else {
    out.emplace_back();  // as_none, constants: nothing a later node can name
  }
}

ExportNode parse_node(const Field& f, size_t index) {
  ExportNode node;
  const std::string target = checked_target(f, index);
  node.target = target.compare(0, 10, "torch.ops.") == 0 ? target.substr(10) : target;
  const Field inputs = f.at("inputs");
  if (inputs.size() > kMaxArgs) inputs.fail(std::to_string(inputs.size()) + " arguments (at most " +
                                            std::to_string(kMaxArgs) + ")");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Field in = inputs[i];
    const std::string name = in.at("name").name(256);
    // A higher-order op's arguments are positional: no names.
    for (const auto& [n, a] : node.args)
      if (n == name && !name.empty()) in.fail("argument '" + printable(name) + "' given twice");
    node.args.emplace_back(name, parse_arg(in.at("arg")));
    if (auto kind = in.get("kind")) (void)kind->integer();
  }
  const Field outputs = f.at("outputs");
  for (size_t i = 0; i < outputs.size(); ++i) output_names(outputs[i], node.outputs);
  if (auto name = f.get("name")) node.name = name->name();
  if (node.name.empty()) {
    for (const std::string& o : node.outputs)
      if (!o.empty()) {
        node.name = o;
        break;
      }
  }
  if (node.name.empty()) node.name = "#" + std::to_string(index);
  if (auto meta = f.get("metadata")) {
    if (auto stack = meta->get("nn_module_stack")) {
      const std::string text = stack->str(size_t{1} << 20);
      if (has_control(text)) stack->fail("a module stack with a control character");
      read_module_stack(text, node);
    }
  }
  if (const AtenSchema* schema = find_aten_schema(node.target)) apply_schema(*schema, f, node);
  return node;
}

// signature.input_specs[i]: {"parameter": {"arg": {"name": ..}, "parameter_name": ..}}, ...
ExportInput parse_input_spec(const Field& f) {
  ExportInput in;
  auto [key, v] = f.one_of();
  using K = ExportInput::Kind;
  if (key == "user_input") {
    in.kind = K::UserInput;
    auto [k2, v2] = v.at("arg").one_of();
    if (k2 == "as_tensor") in.name = tensor_name(v2);
    else if (k2 == "as_sym_int") {
      auto [k3, v3] = v2.one_of();
      if (k3 == "as_name") in.name = v3.name();
    }
  } else if (key == "parameter") {
    in.kind = K::Parameter;
    in.name = tensor_name(v.at("arg"));
    in.target = v.at("parameter_name").name();
  } else if (key == "buffer") {
    in.kind = K::Buffer;
    in.name = tensor_name(v.at("arg"));
    in.target = v.at("buffer_name").name();
    if (auto p = v.get("persistent")) (void)p->boolean();
  } else if (key == "tensor_constant") {
    in.kind = K::TensorConstant;
    in.name = tensor_name(v.at("arg"));
    in.target = v.at("tensor_constant_name").name();
  } else if (key == "token") {
    in.kind = K::Token;
    in.name = tensor_name(v.at("arg"));
  } else if (key == "constant_input") {
    in.kind = K::ConstantInput;
  } else if (key == "custom_obj") {
    f.fail("a custom-object (TorchBind) input: ferry reads no script objects");
  } else {
    f.fail("unknown input kind '" + printable(key) + "'");
  }
  return in;
}

ExportOutput parse_output_spec(const Field& f) {
  ExportOutput out;
  auto [key, v] = f.one_of();
  using K = ExportOutput::Kind;
  auto arg_name = [&](const Field& arg) -> std::string {
    if (arg.is_object() && arg.json().size() == 1 && !arg.json().contains("name")) {
      auto [k2, v2] = arg.one_of();
      return k2 == "as_tensor" ? tensor_name(v2) : std::string();
    }
    return tensor_name(arg);
  };
  if (key == "user_output") {
    out.kind = K::UserOutput;
    out.name = arg_name(v.at("arg"));
  } else if (key == "buffer_mutation") {
    out.kind = K::BufferMutation;
    out.name = arg_name(v.at("arg"));
    out.target = v.at("buffer_name").name();
  } else if (key == "parameter_mutation") {
    out.kind = K::ParameterMutation;
    out.name = arg_name(v.at("arg"));
    out.target = v.at("parameter_name").name();
  } else if (key == "user_input_mutation") {
    out.kind = K::UserInputMutation;
    out.name = arg_name(v.at("arg"));
    if (auto t = v.get("user_input_name")) out.target = t->name();
  } else {
    out.kind = K::Other;
    out.target = printable(key, 64);
  }
  return out;
}

std::vector<int64_t> value_sizes(const Field& meta) {
  std::vector<int64_t> out;
  const Field sizes = meta.at("sizes");
  if (sizes.size() > kMaxRank) sizes.fail(std::to_string(sizes.size()) + " dimensions (at most " +
                                          std::to_string(kMaxRank) + ")");
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto [key, v] = sizes[i].one_of();
    out.push_back(key == "as_int" ? v.integer() : -1);
  }
  return out;
}

void check_names(const ExportGraph& g, const Field& where, const std::set<std::string>& symbols) {
  // Where each value is made: graph inputs (-1), or a node.
  std::unordered_map<std::string, long> made;
  for (const ExportInput& in : g.inputs)
    if (!in.name.empty() && !made.emplace(in.name, -1).second)
      where.fail("graph input '" + printable(in.name) + "' appears twice");
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const std::string& o : g.nodes[i].outputs) {
      if (o.empty()) continue;
      auto [it, fresh] = made.emplace(o, static_cast<long>(i));
      if (!fresh)
        where.fail("value '" + printable(o) + "' is made twice (" + g.nodes[i].describe() +
                   (it->second < 0 ? std::string(" and the graph inputs)") : " and " + g.nodes[size_t(it->second)].describe() + ")"));
    }
  std::vector<std::string> uses;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ExportNode& n = g.nodes[i];
    uses.clear();
    for (const auto& [name, a] : n.args) used_names(a, uses);
    for (const std::string& u : uses) {
      auto it = made.find(u);
      if (it == made.end()) {
        if (symbols.count(u)) continue;  // a symbol of the graph itself
        where.fail(n.describe() + " names an unknown input '" + printable(u) + "'");
      }
      if (it->second >= static_cast<long>(i))
        where.fail(n.describe() + " uses '" + printable(u) + "' before " +
                   (it->second == static_cast<long>(i) ? std::string("it is made (by the node itself)")
                                                       : g.nodes[size_t(it->second)].describe() + " makes it") +
                   ": the graph has a cycle or is not in topological order");
    }
  }
  for (const ExportOutput& o : g.outputs)
    if (!o.name.empty() && !made.count(o.name))
      where.fail("graph output '" + printable(o.name) + "' is not made by any node or input");
}

}  // namespace

std::vector<PayloadEntry> parse_payload_config(const uint8_t* data, size_t size, const std::string& label) {
  const Json doc = parse_json(data, size, label);
  const Field root(doc, "", &label);
  std::vector<PayloadEntry> out;
  root.at("config").each_member([&](const std::string& fqn, const Field& f) {
    if (fqn.empty() || fqn.size() > kMaxExportName) f.fail("FQN of " + std::to_string(fqn.size()) + " bytes");
    if (has_control(fqn)) f.fail("an FQN with a control character");
    out.push_back(payload_entry(fqn, f));
  });
  return out;
}

ExportGraph parse_export_graph(const uint8_t* data, size_t size, const std::string& label) {
  const Json doc = parse_json(data, size, label);
  const Field root(doc, "", &label);
  ExportGraph g;
  g.label = label;
  {
    const Field version = root.at("schema_version");
    const int64_t major = version.at("major").integer(), minor = version.at("minor").integer();
    if (major != 8)
      version.fail("schema version " + std::to_string(major) + "." + std::to_string(minor) +
                   ": ferry reads the torch.export graph schema 8.x (torch 2.6 to 2.11)");
    if (minor < 0 || minor > 1000000) version.at("minor").fail("minor version " + std::to_string(minor));
    g.schema_major = static_cast<int>(major);
    g.schema_minor = static_cast<int>(minor);
  }
  if (auto v = root.get("torch_version")) g.torch_version = printable(v->str(256), 64);
  if (auto v = root.get("verifiers")) {
    for (size_t i = 0; i < v->size(); ++i) g.verifiers.push_back(printable((*v)[i].str(256), 64));
  } else if (auto d = root.get("dialect")) {
    g.verifiers.push_back(printable(d->str(256), 64));
  }
  const Field module = root.at("graph_module");
  const Field graph = module.at("graph");
  const Field signature = module.at("signature");

  const Field inputs = graph.at("inputs");
  const Field specs = signature.at("input_specs");
  if (inputs.size() != specs.size())
    specs.fail(std::to_string(specs.size()) + " input specs for " + std::to_string(inputs.size()) + " graph inputs");
  for (size_t i = 0; i < specs.size(); ++i) {
    ExportInput in = parse_input_spec(specs[i]);
    // graph.inputs[i] is the same value.
    auto [key, v] = inputs[i].one_of();
    std::string graph_name;
    if (key == "as_tensor" || key == "as_token") graph_name = tensor_name(v);
    else if (key == "as_sym_int" || key == "as_custom_obj") {
      if (key == "as_custom_obj") inputs[i].fail("a custom-object (TorchBind) input: ferry reads no script objects");
      auto [k2, v2] = v.one_of();
      if (k2 == "as_name") graph_name = v2.name();
    }
    if (graph_name != in.name)
      specs[i].fail("names the value '" + printable(in.name) + "', but graph input " + std::to_string(i) + " is '" +
                    printable(graph_name) + "'");
    g.inputs.push_back(std::move(in));
  }

  const Field nodes = graph.at("nodes");
  if (nodes.size() > kMaxNodes) nodes.fail(std::to_string(nodes.size()) + " nodes (at most " + std::to_string(kMaxNodes) + ")");
  for (size_t i = 0; i < nodes.size(); ++i) g.nodes.push_back(parse_node(nodes[i], i));

  const Field outputs = graph.at("outputs");
  const Field out_specs = signature.at("output_specs");
  if (outputs.size() != out_specs.size())
    out_specs.fail(std::to_string(out_specs.size()) + " output specs for " + std::to_string(outputs.size()) +
                   " graph outputs");
  for (size_t i = 0; i < out_specs.size(); ++i) {
    ExportOutput o = parse_output_spec(out_specs[i]);
    std::vector<std::string> names;
    output_names(outputs[i], names);
    if (names.size() != 1 || names[0] != o.name)
      out_specs[i].fail("names the value '" + printable(o.name) + "', which graph output " + std::to_string(i) +
                        " is not");
    g.outputs.push_back(std::move(o));
  }

  if (auto values = graph.get("tensor_values")) {
    values->each_member([&](const std::string& name, const Field& meta) {
      if (name.size() > kMaxExportName || has_control(name)) meta.fail("a value name of " + std::to_string(name.size()) + " bytes or with a control character");
      g.sizes[name] = value_sizes(meta);
    });
  }
  // Symbols of the graph (sym_int_values, ...) may be named without a node
  // making them.
  std::set<std::string> symbols;
  for (const char* table : {"sym_int_values", "sym_bool_values", "sym_float_values"}) {
    if (auto values = graph.get(table)) values->each_member([&](const std::string& name, const Field&) { symbols.insert(name); });
  }
  check_names(g, graph.at("nodes"), symbols);
  return g;
}

// ------------------------------------------------------------- ExportArg --

bool ExportArg::integer(int64_t* out) const {
  if ((kind == Kind::Int || kind == Kind::Bool) && ints.size() == 1) {
    *out = ints[0];
    return true;
  }
  if (kind == Kind::Float && reals.size() == 1 && std::isfinite(reals[0]) && reals[0] == std::floor(reals[0]) &&
      std::fabs(reals[0]) < 9e15) {
    *out = static_cast<int64_t>(reals[0]);
    return true;
  }
  return false;
}

bool ExportArg::number(double* out) const {
  if (kind == Kind::Float && reals.size() == 1) {
    *out = reals[0];
    return true;
  }
  if ((kind == Kind::Int || kind == Kind::Bool) && ints.size() == 1) {
    *out = static_cast<double>(ints[0]);
    return true;
  }
  return false;
}

bool ExportArg::boolean(bool* out) const {
  if ((kind == Kind::Bool || kind == Kind::Int) && ints.size() == 1 && (ints[0] == 0 || ints[0] == 1)) {
    *out = ints[0] == 1;
    return true;
  }
  return false;
}

bool ExportArg::integers(std::vector<int64_t>* out) const {
  if (kind == Kind::Ints) {
    *out = ints;
    return true;
  }
  if (kind == Kind::Int && ints.size() == 1) {
    *out = ints;
    return true;
  }
  return false;
}

std::string ExportArg::describe() const {
  auto ints_text = [](const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + (v.size() > 8 ? ", ...]" : "]");
  };
  auto real_text = [](double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", x);
    return std::string(b);
  };
  auto names_text = [](const std::vector<std::string>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", '" : "'") + printable(v[i], 64) + "'";
    return s + (v.size() > 8 ? ", ...]" : "]");
  };
  const int64_t first = ints.empty() ? 0 : ints[0];
  switch (kind) {
    case Kind::None: return "None";
    case Kind::Tensor: return "tensor '" + printable(names.empty() ? "" : names[0]) + "'";
    case Kind::Tensors: return "tensors " + names_text(names);
    case Kind::Int: return "int " + std::to_string(first);
    case Kind::Ints: return "ints " + ints_text(ints);
    case Kind::SymInt: return "symbolic int '" + printable(names.empty() ? "" : names[0]) + "'";
    case Kind::SymInts: return "symbolic ints " + names_text(names);
    case Kind::Float: return "float " + real_text(reals.empty() ? 0.0 : reals[0]);
    case Kind::Floats: {
      std::string s = "floats [";
      for (size_t i = 0; i < reals.size() && i < 8; ++i) s += (i ? ", " : "") + real_text(reals[i]);
      return s + "]";
    }
    case Kind::Bool: return first ? "True" : "False";
    case Kind::Bools: return "bools " + ints_text(ints);
    case Kind::String: return "'" + printable(text, 64) + "'";
    case Kind::Strings: return "strings " + names_text(strings);
    case Kind::ScalarType: return "dtype code " + std::to_string(first);
    case Kind::Layout: return "layout code " + std::to_string(first);
    case Kind::MemoryFormat: return "memory format code " + std::to_string(first);
    case Kind::Device: return "device " + text;
    case Kind::Other: return "a '" + text + "' argument";
  }
  return "?";
}

const ExportArg* ExportNode::arg(std::string_view name) const {
  for (const auto& [n, a] : args)
    if (n == name) return &a;
  return nullptr;
}

std::string ExportNode::describe() const {
  std::string s = "node '" + printable(name, 128) + "' (" + printable(target, 128);
  if (has_module) s += module_path.empty() ? ", in the top-level module" : ", module '" + printable(module_path, 128) + "'";
  return s + ")";
}

}  // namespace ferry::conv
