// Checkpoint reading. The flow is:
//   detect_format()  -> which container (PYTORCH_FORMAT.md §0)
//   read_zip()       -> unpickle data.pkl, resolving storages from data/<key>
//                       (TorchScript archives go to torchscript.cpp)
//   read_legacy() / read_safetensors() for the other containers
//   select_tensors() -> pick the state dict (or whole module) out of the
//                       pickled tree (§4) and turn its tensors into
//                       bounds-checked TensorRefs.
// The pieces the readers share are declared in checkpoint_internal.h;
// materialize.cpp turns TensorRefs into float32.
#include "checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <unordered_set>

#include "checkpoint_internal.h"
#include "error.h"
#include "pickle.h"
#include "zip_reader.h"

namespace ferry::conv {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::F64: return "float64";
    case DType::I64: return "int64";
    case DType::I32: return "int32";
    case DType::I16: return "int16";
    case DType::I8: return "int8";
    case DType::U8: return "uint8";
    case DType::Bool: return "bool";
    case DType::Unknown: return "unknown";
  }
  return "unknown";
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: return 2;
    case DType::I8: case DType::U8: case DType::Bool: return 1;
    case DType::Unknown: return 0;
  }
  return 0;
}

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      throw Error("tensor '" + name + "': invalid shape");
  return n;
}

namespace detail {

// ---------------------------------------------------------------------------
// dtypes.

bool is_float(DType d) {
  return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F64;
}

const DTypeInfo* storage_class_info(const std::string& name) {
  static const std::pair<const char*, DTypeInfo> table[] = {
      {"DoubleStorage", {DType::F64, "float64", 8}},
      {"FloatStorage", {DType::F32, "float32", 4}},
      {"HalfStorage", {DType::F16, "float16", 2}},
      {"BFloat16Storage", {DType::BF16, "bfloat16", 2}},
      {"LongStorage", {DType::I64, "int64", 8}},
      {"IntStorage", {DType::I32, "int32", 4}},
      {"ShortStorage", {DType::I16, "int16", 2}},
      {"CharStorage", {DType::I8, "int8", 1}},
      {"ByteStorage", {DType::U8, "uint8", 1}},
      {"BoolStorage", {DType::Bool, "bool", 1}},
      {"ComplexFloatStorage", {DType::Unknown, "complex64", 8}},
      {"ComplexDoubleStorage", {DType::Unknown, "complex128", 16}},
      {"QInt8Storage", {DType::Unknown, "qint8", 1}},
      {"QUInt8Storage", {DType::Unknown, "quint8", 1}},
      {"QInt32Storage", {DType::Unknown, "qint32", 4}},
      {"QUInt4x2Storage", {DType::Unknown, "quint4x2", 1}},
      {"QUInt2x4Storage", {DType::Unknown, "quint2x4", 1}},
  };
  for (const auto& [n, info] : table)
    if (name == n) return &info;
  return nullptr;
}

const DTypeInfo* dtype_object_info(const std::string& name) {
  static const std::pair<const char*, DTypeInfo> table[] = {
      {"float32", {DType::F32, "float32", 4}},     {"float", {DType::F32, "float32", 4}},
      {"float64", {DType::F64, "float64", 8}},     {"double", {DType::F64, "float64", 8}},
      {"float16", {DType::F16, "float16", 2}},     {"half", {DType::F16, "float16", 2}},
      {"bfloat16", {DType::BF16, "bfloat16", 2}},  {"int64", {DType::I64, "int64", 8}},
      {"long", {DType::I64, "int64", 8}},          {"int32", {DType::I32, "int32", 4}},
      {"int", {DType::I32, "int32", 4}},           {"int16", {DType::I16, "int16", 2}},
      {"short", {DType::I16, "int16", 2}},         {"int8", {DType::I8, "int8", 1}},
      {"uint8", {DType::U8, "uint8", 1}},          {"bool", {DType::Bool, "bool", 1}},
      {"uint16", {DType::Unknown, "uint16", 2}},   {"uint32", {DType::Unknown, "uint32", 4}},
      {"uint64", {DType::Unknown, "uint64", 8}},   {"complex32", {DType::Unknown, "complex32", 4}},
      {"chalf", {DType::Unknown, "complex32", 4}}, {"complex64", {DType::Unknown, "complex64", 8}},
      {"cfloat", {DType::Unknown, "complex64", 8}},
      {"complex128", {DType::Unknown, "complex128", 16}},
      {"cdouble", {DType::Unknown, "complex128", 16}},
      {"qint8", {DType::Unknown, "qint8", 1}},     {"quint8", {DType::Unknown, "quint8", 1}},
      {"qint32", {DType::Unknown, "qint32", 4}},   {"quint4x2", {DType::Unknown, "quint4x2", 1}},
      {"quint2x4", {DType::Unknown, "quint2x4", 1}},
      {"float8_e4m3fn", {DType::Unknown, "float8_e4m3fn", 1}},
      {"float8_e5m2", {DType::Unknown, "float8_e5m2", 1}},
      {"float8_e4m3fnuz", {DType::Unknown, "float8_e4m3fnuz", 1}},
      {"float8_e5m2fnuz", {DType::Unknown, "float8_e5m2fnuz", 1}},
      {"bits8", {DType::Unknown, "bits8", 1}},     {"bits16", {DType::Unknown, "bits16", 2}},
      {"bits1x8", {DType::Unknown, "bits1x8", 1}}, {"bits2x4", {DType::Unknown, "bits2x4", 1}},
      {"bits4x2", {DType::Unknown, "bits4x2", 1}},
  };
  for (const auto& [n, info] : table)
    if (name == n) return &info;
  return nullptr;
}

const DTypeInfo kUntypedInfo{DType::U8, "uint8", 1};

// ---------------------------------------------------------------------------
// Views.

std::string dims_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

void check_view(const std::string& what, const std::vector<int64_t>& size,
                const std::vector<int64_t>& stride, int64_t offset, uint64_t storage_elements) {
  if (size.size() != stride.size())
    throw Error(what + ": size " + dims_text(size) + " and stride " + dims_text(stride) +
                " differ in rank");
  if (offset < 0) throw Error(what + ": negative storage offset " + std::to_string(offset));
  int64_t numel = 1;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] < 0 || stride[i] < 0)
      throw Error(what + ": negative size or stride (size " + dims_text(size) + ", stride " +
                  dims_text(stride) + ")");
    if (__builtin_mul_overflow(numel, size[i], &numel) || numel > kMaxTensorElements)
      throw Error(what + ": too many elements (size " + dims_text(size) + ")");
  }
  if (numel == 0) return;  // an empty tensor reads nothing
  int64_t last = offset;
  bool overflow = false;
  for (size_t i = 0; i < size.size(); ++i) {
    int64_t step;
    overflow |= __builtin_mul_overflow(size[i] - 1, stride[i], &step);
    overflow |= __builtin_add_overflow(last, step, &last);
  }
  if (overflow || last < 0 || static_cast<uint64_t>(last) >= storage_elements)
    throw Error(what + ": view (offset " + std::to_string(offset) + ", size " + dims_text(size) +
                ", stride " + dims_text(stride) + ") reaches past the end of its storage of " +
                std::to_string(storage_elements) + " elements");
}

bool is_safe_key(const std::string& key) {
  return !key.empty() && key != "." && key != ".." && key.find('/') == std::string::npos &&
         key.find('\\') == std::string::npos && key.find('\0') == std::string::npos;
}

// ---------------------------------------------------------------------------
// Storages.

const StorageTable::Entry* StorageTable::find(const std::string& key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : &it->second;
}

const StorageTable::Entry& StorageTable::add(const std::string& key, std::shared_ptr<Storage> storage,
                                             const DTypeInfo& info) {
  by_storage_[storage.get()] = info;
  auto [it, inserted] = by_key_.emplace(key, Entry{std::move(storage), info});
  if (!inserted) throw Error("internal: storage '" + key + "' added twice");
  return it->second;
}

const DTypeInfo* StorageTable::info_of(const Storage* s) const {
  auto it = by_storage_.find(s);
  return it == by_storage_.end() ? nullptr : &it->second;
}

StorageId parse_storage_id(const Value& pid, size_t arity) {
  const std::string shape = arity == 6 ? "('storage', type, key, location, numel, view_metadata)"
                                       : "('storage', type, key, location, numel)";
  if (pid.kind != Kind::Tuple || pid.items.size() != arity || pid.items[0]->kind != Kind::String ||
      pid.items[0]->bytes != "storage")
    throw Error("persistent id is not a " + shape + " tuple");
  const Value* type = pid.items[1];
  const Value* key_v = pid.items[2];
  const Value* location_v = pid.items[3];
  const Value* numel_v = pid.items[4];
  if (type->kind != Kind::Global) throw Error("storage type is not a class reference");
  StorageId id;
  if (type->global_kind == GlobalKind::StorageClass) id.info = storage_class_info(type->name);
  else if (type->global_kind == GlobalKind::UntypedStorage) id.info = &kUntypedInfo;
  if (!id.info) throw Error("unknown storage type '" + type->qualified_name() + "'");
  if (key_v->kind != Kind::String || location_v->kind != Kind::String || numel_v->kind != Kind::Int)
    throw Error("malformed storage persistent id (key, location or numel has the wrong type)");
  id.key = key_v->bytes;
  if (!is_safe_key(id.key)) throw Error("invalid storage key '" + id.key + "'");
  if (numel_v->integer < 0) throw Error("storage '" + id.key + "' has negative numel");
  id.location = location_v->bytes;
  id.numel = static_cast<uint64_t>(numel_v->integer);
  return id;
}

Value* ZipStorageLoader::load(const Value& pid, ValueArena& arena) {
  const StorageId id = parse_storage_id(pid, 5);
  const StorageTable::Entry* entry = table_.find(id.key);
  if (entry) {
    if (entry->storage->numel != id.numel || entry->info.size != id.info->size ||
        entry->info.dtype != id.info->dtype)
      throw Error("storage '" + id.key + "' is declared twice with different types or sizes");
  } else {
    const std::string record = folder_ + "/" + id.key;
    const ZipEntry* ze = zip_.find(record);
    if (!ze) throw Error("storage record '" + zip_.prefix() + "/" + record + "' not found");
    const ByteSpan bytes = zip_.stored(*ze);
    uint64_t expected;
    if (__builtin_mul_overflow(id.numel, uint64_t(id.info->size), &expected))
      throw Error("storage '" + id.key + "' size overflows");
    if (bytes.size != expected)
      throw Error("record '" + ze->full_name + "' has " + std::to_string(bytes.size) +
                  " bytes, but its storage declares " + std::to_string(id.numel) + " x " +
                  std::to_string(id.info->size) + " = " + std::to_string(expected) + " bytes");
    auto storage = std::make_shared<Storage>();
    storage->key = id.key;
    storage->location = id.location;
    storage->dtype = id.info->dtype;
    storage->numel = id.numel;
    storage->data = bytes.data;
    storage->nbytes = bytes.size;
    storage->big_endian = big_endian_;
    entry = &table_.add(id.key, std::move(storage), *id.info);
  }
  Value* v = arena.make(Kind::Storage);
  v->storage = entry->storage;
  v->persistent_id = &pid;
  return v;
}

namespace {

std::string trimmed(ByteSpan span) {
  std::string s(reinterpret_cast<const char*>(span.data), span.size);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

}  // namespace

bool read_zip_byte_order(const ZipReader& zip) {
  // The format version: .data/version is authoritative when present.
  const ZipEntry* version = zip.find(".data/version");
  if (!version) version = zip.find("version");
  if (version) {
    const std::string v = trimmed(zip.stored(*version));
    if (v.empty() || v.size() > 6 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      throw Error(zip.describe(*version) + ": not a version number");
  }
  if (const ZipEntry* order = zip.find("byteorder")) {
    const std::string v = trimmed(zip.stored(*order));
    if (v == "big") return true;
    if (v != "little") throw Error(zip.describe(*order) + ": unknown byte order '" + v + "'");
  }
  return false;
}

// ---------------------------------------------------------------------------
// From the pickled tree to the Checkpoint.

std::string describe_value(const Value* v) {
  if (v->kind == Kind::Object) return "object of class " + v->qualified_name();
  if (v->kind == Kind::Call) return v->qualified_name() + "(...)";
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
  const DTypeInfo* declared = table_.info_of(storage.get());
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

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Why a top-level entry beside the selected state dict is not used.
std::string reason_for_top_level(const std::string& key, const Value* v) {
  const std::string lower = lowercase(key);
  if (lower.find("optim") != std::string::npos) return "optimizer state";
  if (lower.find("sched") != std::string::npos) return "scheduler state";
  if (lower.find("scaler") != std::string::npos) return "grad scaler state";
  if (v->kind == Kind::Tensor) return "tensor outside the selected state dict";
  if (v->kind == Kind::Dict) return "not selected (dict)";
  return "not a tensor (" + describe_value(v) + ")";
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

const char* const kKnownStateDictKeys[] = {"state_dict", "model_state_dict", "model", "net",
                                           "model_state", "weights", "params"};

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

}  // namespace detail

// ---------------------------------------------------------------------------
// Zip checkpoints (torch.save since 1.6).

namespace {

using namespace detail;

Checkpoint read_zip(const MappedFile& file, const LoadOptions& options) {
  const std::string& path = file.path();
  ZipReader zip(file.data(), file.size(), path);

  // TorchScript keeps code/ and constants.pkl beside data.pkl (§3).
  bool torchscript = zip.find("constants.pkl") != nullptr;
  for (const ZipEntry& e : zip.entries()) torchscript = torchscript || e.name.rfind("code/", 0) == 0;
  if (torchscript) return read_torchscript(zip, path, options);

  const bool big_endian = read_zip_byte_order(zip);
  const ZipEntry* pkl = zip.find("data.pkl");
  if (!pkl) throw Error(path + ": zip archive without a data.pkl record: not a torch.save checkpoint");
  const ByteSpan pickle_bytes = zip.stored(*pkl);

  StorageTable table;
  ZipStorageLoader loader(zip, "data", big_endian, table);
  const PickleTree tree = unpickle(pickle_bytes.data, pickle_bytes.size, zip.describe(*pkl), &loader);

  Checkpoint out;
  select_tensors(tree.root, "zip", path, table, options, out);
  return out;
}

// ---------------------------------------------------------------------------
// Format detection (PYTORCH_FORMAT.md §0).

enum class Format { Empty, Zip, LegacyPickle, OtherPickle, Tar, Safetensors, Preview2018, Unknown };

Format detect_format(const uint8_t* d, size_t n) {
  if (n == 0) return Format::Empty;
  if (ZipReader::has_zip_signature(d, n)) return Format::Zip;
  if (n >= 262 && std::memcmp(d + 257, "ustar", 5) == 0) return Format::Tar;
  if (n >= 8 && std::memcmp(d, "PYTORCH1", 8) == 0) return Format::Preview2018;
  if (n >= 2 && d[0] == 0x80 && d[1] >= 2 && d[1] <= 5) {
    // The legacy stream opens with LONG1 of the 10-byte magic number
    // 0x1950a86a20f9469cfc6c, after PROTO and (protocol 4+) a FRAME.
    static const uint8_t kMagic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
    size_t at = 2;
    if (n >= 11 && d[2] == 0x95) at = 11;
    if (n >= at + sizeof kMagic && std::memcmp(d + at, kMagic, sizeof kMagic) == 0) return Format::LegacyPickle;
    return Format::OtherPickle;
  }
  // safetensors: u64 header length, then the JSON object. Its limits are
  // checked by the reader, which names them; here only the shape counts.
  if (n >= 9 && d[8] == '{') return Format::Safetensors;
  return Format::Unknown;
}

}  // namespace

Checkpoint load_checkpoint(const MappedFile& file, const LoadOptions& options) {
  const std::string& path = file.path();
  const uint8_t* d = file.data();
  const size_t n = file.size();
  switch (detect_format(d, n)) {
    case Format::Zip:
      return read_zip(file, options);
    case Format::LegacyPickle:
      return read_legacy(file, options);
    case Format::Safetensors:
      return read_safetensors(file, options);
    case Format::Empty:
      throw Error(path + ": empty file");
    case Format::OtherPickle:
      throw Error(path + ": a Python pickle without the PyTorch magic number: not a torch.save checkpoint");
    case Format::Tar:
      throw Error(path + ": the pre-0.3 PyTorch tar format is not supported");
    case Format::Preview2018:
      throw Error(path + ": the 2018 'PYTORCH1' preview format is not supported (PyTorch itself refuses it)");
    case Format::Unknown:
      break;
  }
  std::string head;
  for (size_t i = 0; i < std::min<size_t>(n, 8); ++i) {
    static const char* digits = "0123456789abcdef";
    if (i) head += ' ';
    head += digits[d[i] >> 4];
    head += digits[d[i] & 15];
  }
  throw Error(path + ": not a PyTorch checkpoint (unrecognized header " + head + ")");
}

}  // namespace ferry::conv
