// torch.export archives (.pt2), PYTORCH_FORMAT.md §8: the layout is told
// from the records, the graph JSON read (pt2_json.h), the weights read as
// nested torch.save zips (layouts a, b) or raw storages (c), then bound to
// the graph through its signature.
#include "checkpoint/pt2.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "checkpoint/aten_schema.h"
#include "checkpoint/export_graph.h"
#include "checkpoint/pt2_json.h"
#include "checkpoint/reader_internal.h"
#include "error.h"

namespace ferry::conv::detail {
namespace {

constexpr size_t kMaxModels = 4096;

// Where the parts of one program are, below the archive's prefix.
struct Records {
  enum Kind { kLegacy, kTorchSave, kRaw } kind = kRaw;
  std::string model;      // the program's name ("model"); empty for (a)
  std::string graph;      // the graph JSON
  std::string weights;    // (a, b): torch.save of the state dict; (c): the weights config
  std::string constants;  // same for the constants; may be absent from the archive
};

const char* layout_name(Records::Kind k) {
  switch (k) {
    case Records::kLegacy: return "torch <= 2.7 layout: torch.save weights";
    case Records::kTorchSave: return "torch 2.8 layout: torch.save weights";
    case Records::kRaw: return "torch 2.9+ layout: raw weight files";
  }
  return "";
}

std::string text_of(ByteSpan span, size_t max = 64) {
  std::string s(reinterpret_cast<const char*>(span.data), std::min(span.size, max));
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  for (char& c : s)
    if (c < 0x20 || c >= 0x7f) c = '?';
  return s;
}

std::string list_text(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "'" : ", '") + x + "'";
  return s;
}

Records find_records(const ZipReader& zip, const LoadOptions& options) {
  const std::string& label = zip.label();
  Records r;
  if (zip.prefix().empty()) {
    // (a): Python's zipfile wrote every record at the root.
    r.kind = Records::kLegacy;
    r.graph = "serialized_exported_program.json";
    // torch 2.1 named the pickled state dict .json.
    r.weights = zip.find("serialized_state_dict.pt") || !zip.find("serialized_state_dict.json")
                    ? "serialized_state_dict.pt" : "serialized_state_dict.json";
    r.constants = zip.find("serialized_constants.pt") || !zip.find("serialized_constants.json")
                      ? "serialized_constants.pt" : "serialized_constants.json";
    if (!options.key.empty())
      throw Error(label + ": --key '" + options.key + "' given, but a torch <= 2.7 export archive holds one program");
    if (!zip.find(r.weights)) throw Error(zip.describe(r.weights) + " not found: the archive has no weights");
    return r;
  }
  const ZipEntry* format = zip.find("archive_format");
  const std::string format_text = text_of(zip.stored(*format));
  if (format_text != "pt2")
    throw Error(zip.describe(*format) + ": archive format '" + format_text + "', not 'pt2'");
  if (const ZipEntry* version = zip.find("archive_version")) {
    const std::string v = text_of(zip.stored(*version));
    if (v.empty() || v.size() > 4 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      throw Error(zip.describe(*version) + ": archive version '" + v + "' is not a number");
  }
  // The programs: models/<name>.json.
  std::vector<std::string> models;
  for (const ZipEntry& e : zip.entries()) {
    const std::string& n = e.name;
    if (n.size() > 12 && n.compare(0, 7, "models/") == 0 && n.compare(n.size() - 5, 5, ".json") == 0 &&
        n.find('/', 7) == std::string::npos) {
      models.push_back(n.substr(7, n.size() - 12));
      if (models.size() > kMaxModels) throw Error(label + ": more than " + std::to_string(kMaxModels) + " programs");
    }
  }
  if (models.empty())
    throw Error(label + ": a PT2 archive without a models/<name>.json graph (an AOTInductor-only package?): "
                "ferry reads the ExportedProgram that torch.export.save writes");
  if (!options.key.empty()) {
    if (std::find(models.begin(), models.end(), options.key) == models.end())
      throw Error(label + ": --key '" + options.key + "': no such program; the archive holds " + list_text(models));
    r.model = options.key;
  } else if (models.size() == 1) {
    r.model = models[0];
  } else {
    throw Error(label + ": the archive holds " + std::to_string(models.size()) + " programs (" + list_text(models) +
                "): choose one with --key");
  }
  r.graph = "models/" + r.model + ".json";
  if (zip.find("data/weights/" + r.model + ".pt")) {
    r.kind = Records::kTorchSave;
    r.weights = "data/weights/" + r.model + ".pt";
    r.constants = "data/constants/" + r.model + ".pt";
  } else {
    r.kind = Records::kRaw;
    r.weights = "data/weights/" + r.model + "_weights_config.json";
    r.constants = "data/constants/" + r.model + "_constants_config.json";
    if (!zip.find(r.weights))
      throw Error(zip.describe(r.weights) + " not found (nor data/weights/" + r.model +
                  ".pt): the archive has no weights for program '" + r.model + "'");
  }
  return r;
}

// The graph schema's ScalarType codes.
const DTypeInfo* scalar_type_info(int64_t code) {
  static const std::pair<int, DTypeInfo> table[] = {
      {1, {DType::U8, "uint8", 1}},          {2, {DType::I8, "int8", 1}},
      {3, {DType::I16, "int16", 2}},         {4, {DType::I32, "int32", 4}},
      {5, {DType::I64, "int64", 8}},         {6, {DType::F16, "float16", 2}},
      {7, {DType::F32, "float32", 4}},       {8, {DType::F64, "float64", 8}},
      {9, {DType::Unknown, "complex32", 4}}, {10, {DType::Unknown, "complex64", 8}},
      {11, {DType::Unknown, "complex128", 16}}, {12, {DType::Bool, "bool", 1}},
      {13, {DType::BF16, "bfloat16", 2}},    {28, {DType::Unknown, "uint16", 2}},
      {29, {DType::Unknown, "float8_e4m3fn", 1}}, {30, {DType::Unknown, "float8_e5m2", 1}},
      {31, {DType::Unknown, "float8_e4m3fnuz", 1}}, {32, {DType::Unknown, "float8_e5m2fnuz", 1}},
  };
  for (const auto& [c, info] : table)
    if (c == code) return &info;
  return nullptr;
}

// Reads the torch.save zip stored as `record` of `outer` and hands its
// unpickled root, with the storages it made, to `use`.
void read_torch_save(const ZipReader& outer, const std::string& record,
                     const std::function<void(const Value* root, const StorageTable& table, const std::string& label)>& use) {
  const ZipEntry* entry = outer.find(record);
  if (!entry) throw Error(outer.describe(record) + " not found");
  const std::string label = outer.describe(*entry);
  const ByteSpan bytes = outer.stored(*entry);
  if (!ZipReader::has_zip_signature(bytes.data, bytes.size))
    throw Error(label + ": not a torch.save zip archive");
  const ZipReader inner(bytes.data, bytes.size, label);
  const bool big_endian = read_zip_byte_order(inner);
  const ZipEntry* pkl = inner.find("data.pkl");
  if (!pkl) throw Error(label + ": no data.pkl record: not a torch.save archive");
  const ByteSpan pickle_bytes = inner.stored(*pkl);
  StorageTable table;
  ZipStorageLoader loader(inner, "data", big_endian, table);
  const PickleTree tree = unpickle(pickle_bytes.data, pickle_bytes.size, inner.describe(*pkl), &loader);
  use(tree.root, table, label);
}

// (a), (b): the state dict (or the constants) as a pickled dict.
void read_pickled_tensors(const ZipReader& zip, const std::string& record, bool constants, Checkpoint& out) {
  read_torch_save(zip, record, [&](const Value* root, const StorageTable& table, const std::string& label) {
    if (root->kind != Kind::Dict)
      throw Error(label + ": holds a " + describe_value(root) + ", not a dict of tensors");
    if (!constants) {
      TensorCollector(label, table, out).add_state_dict(root);
      return;
    }
    // Constants are checked as tensors, then listed: they are not state-dict entries.
    Checkpoint scratch;
    TensorCollector(label, table, scratch).add_state_dict(root);
    for (const TensorRef& t : scratch.tensors) out.ignored.emplace_back(t.name, "a constant of the exported program");
    for (auto& entry : scratch.ignored) out.ignored.push_back(std::move(entry));
  });
}

// One contiguous view of a raw storage, for the overlap check.
struct Extent {
  uint64_t begin, end;  // bytes
  const PayloadEntry* entry;
};

bool same_view(const PayloadEntry& a, const PayloadEntry& b) {
  return a.dtype_code == b.dtype_code && a.sizes == b.sizes && a.strides == b.strides &&
         a.storage_offset == b.storage_offset;
}

std::string shape_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// (c), use_pickle: what package_pt2 writes for a tensor subclass, a
// torch.save of that one tensor. Read as a torch.save file is read (the
// same allowlist: a subclass rebuilt by _rebuild_from_type_v2 is its data,
// a wrapper subclass's own rebuild function is refused), and it must be the
// tensor the config's tensor_meta describes.
void add_pickled_payload(const ZipReader& zip, const std::string& record, const std::string& where,
                         const PayloadEntry& e, bool constants, Checkpoint& out) {
  const std::string full = (zip.prefix().empty() ? "" : zip.prefix() + "/") + record;
  const ZipEntry* entry = zip.find(record);
  if (!entry) throw Error(where + ".path_name: record '" + full + "' not found");
  const ByteSpan bytes = zip.stored(*entry);
  if (!ZipReader::has_zip_signature(bytes.data, bytes.size))
    throw Error(where + ".use_pickle: record '" + full + "' is not a torch.save archive (a pickled payload is one)");
  read_torch_save(zip, record, [&](const Value* root, const StorageTable& table, const std::string& label) {
    if (root->kind != Kind::Tensor)
      throw Error(where + ".use_pickle: record '" + full + "' holds a " + describe_value(root) + ", not a tensor");
    Checkpoint one;
    TensorCollector(label, table, one).add(e.fqn, root);
    for (auto& ignored : one.ignored) out.ignored.push_back(std::move(ignored));
    if (one.tensors.empty()) return;  // not a float tensor: listed as ignored with the reason
    TensorRef& t = one.tensors[0];
    if (e.has_meta) {
      const DTypeInfo* info = scalar_type_info(e.dtype_code);
      if (!info || info->dtype != t.dtype || e.sizes != t.shape)
        throw Error(where + ".tensor_meta: says a " + shape_text(e.sizes) + " " + (info ? info->name : "unknown") +
                    " tensor; the pickled payload '" + full + "' holds a " + shape_text(t.shape) + " " +
                    dtype_name(t.dtype) + " one");
    }
    if (constants)
      out.ignored.emplace_back(e.fqn, "a constant of the exported program");
    else
      out.tensors.push_back(std::move(t));
  });
}

// (c): raw storages described by a payload config.
void read_raw_tensors(const ZipReader& zip, const std::string& config_record, const std::string& folder,
                      bool constants, Checkpoint& out) {
  const ZipEntry* config_entry = zip.find(config_record);
  if (!config_entry) {
    if (constants) return;  // no constants
    throw Error(zip.describe(config_record) + " not found");
  }
  const std::string label = zip.describe(*config_entry);
  const std::vector<uint8_t> json = zip.extract(*config_entry, kMaxJsonBytes);
  const std::vector<PayloadEntry> entries = parse_payload_config(json.data(), json.size(), label);
  const bool big_endian = read_zip_byte_order(zip);

  struct RawStorage {
    std::shared_ptr<Storage> storage;
    std::vector<Extent> extents;
  };
  std::unordered_map<std::string, RawStorage> storages;
  for (const PayloadEntry& e : entries) {
    const std::string where = label + ": config['" + e.fqn + "']";
    auto starts_with = [&](const char* p) { return e.path_name.compare(0, std::strlen(p), p) == 0; };
    if (starts_with("custom_obj_"))
      throw Error(where + ": a custom object (TorchBind script object, '" + e.path_name +
                  "'): ferry reads no script objects");
    if (starts_with("opaque_obj_"))
      throw Error(where + ": an opaque pickled object ('" + e.path_name + "'): ferry reads no pickled objects");
    if (!is_safe_key(e.path_name))
      throw Error(where + ".path_name: '" + e.path_name + "' is not a record name below " + folder +
                  " (a path, '..' or empty)");
    if (e.use_pickle) {
      add_pickled_payload(zip, folder + e.path_name, where, e, constants, out);
      continue;
    }
    if (!e.has_meta) throw Error(where + ": no tensor_meta for a raw tensor");
    const DTypeInfo* info = scalar_type_info(e.dtype_code);
    if (!info) throw Error(where + ".tensor_meta.dtype: unknown dtype code " + std::to_string(e.dtype_code));
    if (e.layout != 7)
      throw Error(where + ".tensor_meta.layout: layout code " + std::to_string(e.layout) +
                  " (sparse or mkldnn); ferry reads strided tensors only");
    RawStorage& raw = storages[e.path_name];
    if (!raw.storage) {
      const std::string record = folder + e.path_name;
      const ZipEntry* ze = zip.find(record);
      if (!ze)
        throw Error(where + ".path_name: record '" + (zip.prefix().empty() ? "" : zip.prefix() + "/") + record +
                    "' not found");
      const ByteSpan bytes = zip.stored(*ze);
      raw.storage = std::make_shared<Storage>();
      raw.storage->key = e.path_name;
      raw.storage->location = e.device.empty() ? "cpu" : e.device;
      raw.storage->dtype = info->dtype;
      raw.storage->data = bytes.data;
      raw.storage->nbytes = bytes.size;
      raw.storage->numel = bytes.size / info->size;
      raw.storage->big_endian = big_endian;
    }
    const Storage& s = *raw.storage;
    if (s.nbytes % info->size != 0)
      throw Error(where + ": record '" + e.path_name + "' has " + std::to_string(s.nbytes) +
                  " bytes, not a whole number of " + info->name + " elements");
    check_view(where + ".tensor_meta", e.sizes, e.strides, e.storage_offset, s.nbytes / info->size);
    TensorRef t;
    t.name = e.fqn;
    t.dtype = info->dtype;
    t.shape = e.sizes;
    t.stride = e.strides;
    t.offset = e.storage_offset;
    t.storage = raw.storage;
    const int64_t numel = t.numel();
    if (numel > 0 && is_contiguous(t)) {
      const uint64_t begin = uint64_t(e.storage_offset) * info->size;
      raw.extents.push_back({begin, begin + uint64_t(numel) * info->size, &e});
    }
    if (constants) {
      out.ignored.emplace_back(e.fqn, "a constant of the exported program");
    } else if (!is_float(info->dtype)) {
      out.ignored.emplace_back(e.fqn, info->dtype == DType::Unknown
                                          ? "unsupported dtype " + std::string(info->name)
                                          : "not a floating-point tensor (" + std::string(info->name) + ")");
    } else {
      out.tensors.push_back(std::move(t));
    }
  }
  // Views of one storage may be the same view (tied weights) or disjoint,
  // as torch's own storages are; a partial overlap is no module's state.
  for (auto& [name, raw] : storages) {
    std::sort(raw.extents.begin(), raw.extents.end(),
              [](const Extent& a, const Extent& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
    const Extent* reach = nullptr;
    for (const Extent& x : raw.extents) {
      if (reach && x.begin < reach->end && !same_view(*reach->entry, *x.entry))
        throw Error(label + ": config['" + x.entry->fqn + "'] and config['" + reach->entry->fqn +
                    "'] overlap in storage '" + name + "' (bytes [" + std::to_string(reach->begin) + ", " +
                    std::to_string(reach->end) + ") and [" + std::to_string(x.begin) + ", " + std::to_string(x.end) +
                    ")) without being the same view");
      if (!reach || x.end > reach->end) reach = &x;
    }
  }
}

// Attribute text of an op argument, as the other readers record them.
std::string attribute_text(const ExportArg& a) {
  bool b;
  if (a.kind == ExportArg::Kind::Bool && a.boolean(&b)) return b ? "true" : "false";
  if (a.kind == ExportArg::Kind::Int) return std::to_string(a.ints[0]);
  if (a.kind == ExportArg::Kind::Ints && !a.ints.empty() && a.ints.size() <= 8) {
    std::string s = "(";
    for (int64_t v : a.ints) s += std::to_string(v) + ",";
    return s + ")";
  }
  if (a.kind == ExportArg::Kind::Float && a.reals.size() == 1) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", a.reals[0]);
    return buf;
  }
  if (a.kind == ExportArg::Kind::String && a.text.size() <= 64 &&
      std::all_of(a.text.begin(), a.text.end(), [](char c) { return c >= 0x20 && c < 0x7f; }))
    return a.text;
  return "";
}

// Classes from nn_module_stack; hyper-parameters from the op arguments,
// keyed by the module that owns the op's weights.
void record_attributes(const ExportGraph& g, Checkpoint& out) {
  std::unordered_map<std::string, std::string> fqn_of;
  for (const ExportInput& in : g.inputs)
    if (in.kind == ExportInput::Kind::Parameter || in.kind == ExportInput::Kind::Buffer) fqn_of[in.name] = in.target;
  for (const ExportNode& n : g.nodes) {
    if (n.has_module && !n.module_class.empty()) {
      const size_t dot = n.module_class.rfind('.');
      out.attributes.emplace(attribute_key(n.module_path, kClassAttribute),
                             dot == std::string::npos ? n.module_class : n.module_class.substr(dot + 1));
    }
    const AtenSchema* schema = find_aten_schema(n.target);
    if (!schema || !schema->module_arg) continue;
    const ExportArg* owner = n.arg(schema->module_arg);
    if (!owner || owner->names.empty()) continue;
    auto fqn = fqn_of.find(owner->names[0]);
    if (fqn == fqn_of.end()) continue;  // computed weights: the chain mapping says so
    const size_t dot = fqn->second.rfind('.');
    const std::string module = dot == std::string::npos ? "" : fqn->second.substr(0, dot);
    for (const AtenAttribute& attr : schema->attributes) {
      if (!attr.attribute) break;
      std::string value;
      if (attr.argument) {
        if (const ExportArg* a = n.arg(attr.argument)) value = attribute_text(*a);
      } else if (attr.value) {
        value = attr.value;
      }
      if (value.empty() || out.attributes.count(attribute_key(module, attr.attribute))) continue;
      record_hyperparameter(module, attr.attribute, value, out);
    }
  }
}

// Every parameter and buffer of the signature is a tensor of the file.
void bind_signature(const ExportGraph& g, const std::string& graph_label, Checkpoint& out) {
  std::unordered_set<std::string> held;
  for (const TensorRef& t : out.tensors) held.insert(t.name);
  for (const auto& [name, why] : out.ignored) held.insert(name);
  std::unordered_map<std::string, size_t> rank;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const ExportInput& in = g.inputs[i];
    const char* what = in.kind == ExportInput::Kind::Parameter ? "parameter"
                       : in.kind == ExportInput::Kind::Buffer   ? "buffer"
                       : in.kind == ExportInput::Kind::TensorConstant ? "tensor constant"
                                                                         : nullptr;
    if (!what) continue;
    if (!held.count(in.target))
      throw Error(graph_label + ": graph_module.signature.input_specs[" + std::to_string(i) + "]: " + what + " '" +
                  in.target + "' (graph input '" + in.name + "') is not among the archive's weights or constants");
    rank.emplace(in.target, rank.size());
  }
  // State-dict order, as far as the signature gives it: parameters, then buffers.
  std::stable_sort(out.tensors.begin(), out.tensors.end(), [&](const TensorRef& a, const TensorRef& b) {
    auto ra = rank.find(a.name), rb = rank.find(b.name);
    const size_t x = ra == rank.end() ? SIZE_MAX : ra->second, y = rb == rank.end() ? SIZE_MAX : rb->second;
    return x < y;
  });
}

}  // namespace

bool is_pt2(const ZipReader& zip) {
  if (zip.prefix().empty()) return zip.find("serialized_exported_program.json") != nullptr;
  return zip.find("archive_format") != nullptr;
}

Checkpoint read_pt2(const ZipReader& zip, const std::string& path, const LoadOptions& options) {
  const Records records = find_records(zip, options);
  const ZipEntry* graph_entry = zip.find(records.graph);
  if (!graph_entry) throw Error(zip.describe(records.graph) + " not found");
  const std::vector<uint8_t> json = zip.extract(*graph_entry, kMaxJsonBytes);
  auto graph = std::make_shared<ExportGraph>(parse_export_graph(json.data(), json.size(), zip.describe(*graph_entry)));

  Checkpoint out;
  if (records.kind == Records::kRaw) {
    read_raw_tensors(zip, records.weights, "data/weights/", false, out);
    read_raw_tensors(zip, records.constants, "data/constants/", true, out);
  } else {
    read_pickled_tensors(zip, records.weights, false, out);
    if (zip.find(records.constants)) read_pickled_tensors(zip, records.constants, true, out);
  }
  bind_signature(*graph, graph->label, out);
  record_attributes(*graph, out);
  out.form = std::string("torch.export archive (.pt2, ") + layout_name(records.kind) + (records.model.empty() ? "" : ", program '" + records.model + "'") +
             "; graph schema " + std::to_string(graph->schema_major) + "." + std::to_string(graph->schema_minor) +
             (graph->torch_version.empty() ? "" : ", saved by torch " + graph->torch_version) + ")";
  (void)path;
  out.export_graph = std::move(graph);
  return out;
}

}  // namespace ferry::conv::detail
