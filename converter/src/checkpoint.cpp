// Checkpoint reading. The flow is:
//   detect_format()  -> which container (PYTORCH_FORMAT.md §0)
//   read_zip()       -> unpickle data.pkl, resolving storages from data/<key>
//   select_tensors() -> pick the state dict out of the pickled tree (§4) and
//                       turn its tensors into bounds-checked TensorRefs.
// Further containers (legacy pickle stream, whole modules, TorchScript,
// safetensors) plug in as another reader that produces a tree (or tensors
// directly) and reuses StorageTable / select_tensors().
#include "checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <unordered_map>

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

namespace {

// ---------------------------------------------------------------------------
// dtypes as the file names them. `size` is known even for dtypes ferry does
// not convert (complex, quantized, ...), so their views are still checked.

struct DTypeInfo {
  DType dtype;
  const char* name;  // torch's name, for messages
  size_t size;       // bytes per element
};

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

constexpr DTypeInfo kUntypedInfo{DType::U8, "uint8", 1};  // UntypedStorage counts bytes

// ---------------------------------------------------------------------------
// Views: offset + Σ (size_i − 1)·stride_i must be a valid element index.

std::string dims_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Tensors are capped at 2^40 elements: enough for any model ferry targets,
// and it keeps a zero-stride "broadcast" view from asking for exabytes.
constexpr int64_t kMaxTensorElements = int64_t{1} << 40;

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

// ---------------------------------------------------------------------------
// Storages, cached by key: shared storages and views repeat the same key.

class StorageTable {
 public:
  struct Entry {
    std::shared_ptr<Storage> storage;
    DTypeInfo info;
  };

  const Entry* find(const std::string& key) const {
    auto it = by_key_.find(key);
    return it == by_key_.end() ? nullptr : &it->second;
  }
  const Entry& add(std::shared_ptr<Storage> storage, const DTypeInfo& info) {
    by_storage_[storage.get()] = info;
    const std::string key = storage->key;
    return by_key_.emplace(key, Entry{std::move(storage), info}).first->second;
  }
  // The element type a storage was declared with, or nullptr for a storage
  // this table did not make.
  const DTypeInfo* info_of(const Storage* s) const {
    auto it = by_storage_.find(s);
    return it == by_storage_.end() ? nullptr : &it->second;
  }

 private:
  std::unordered_map<std::string, Entry> by_key_;
  std::unordered_map<const Storage*, DTypeInfo> by_storage_;
};

bool is_safe_key(const std::string& key) {
  return !key.empty() && key != "." && key != ".." && key.find('/') == std::string::npos &&
         key.find('\\') == std::string::npos && key.find('\0') == std::string::npos;
}

// Resolves ('storage', storage_type, key, location, numel) persistent ids of
// a zip checkpoint against its data/<key> records.
class ZipStorageLoader : public PersistentLoader {
 public:
  ZipStorageLoader(const ZipReader& zip, bool big_endian, StorageTable& table)
      : zip_(zip), big_endian_(big_endian), table_(table) {}

  Value* load(const Value& pid, ValueArena& arena) override {
    if (pid.kind != Kind::Tuple || pid.items.size() != 5 || pid.items[0]->kind != Kind::String ||
        pid.items[0]->bytes != "storage")
      throw Error("persistent id is not a ('storage', type, key, location, numel) tuple");
    const Value* type = pid.items[1];
    const Value* key_v = pid.items[2];
    const Value* location_v = pid.items[3];
    const Value* numel_v = pid.items[4];
    if (type->kind != Kind::Global) throw Error("storage type is not a class reference");
    const DTypeInfo* info = nullptr;
    if (type->global_kind == GlobalKind::StorageClass) info = storage_class_info(type->name);
    else if (type->global_kind == GlobalKind::UntypedStorage) info = &kUntypedInfo;
    if (!info) throw Error("unknown storage type '" + type->qualified_name() + "'");
    if (key_v->kind != Kind::String || location_v->kind != Kind::String || numel_v->kind != Kind::Int)
      throw Error("malformed storage persistent id (key, location or numel has the wrong type)");
    const std::string& key = key_v->bytes;
    if (!is_safe_key(key)) throw Error("invalid storage key '" + key + "'");
    if (numel_v->integer < 0) throw Error("storage '" + key + "' has negative numel");
    const uint64_t numel = static_cast<uint64_t>(numel_v->integer);

    const StorageTable::Entry* entry = table_.find(key);
    if (entry) {
      if (entry->storage->numel != numel || entry->info.size != info->size ||
          entry->info.dtype != info->dtype)
        throw Error("storage '" + key + "' is declared twice with different types or sizes");
    } else {
      const std::string record = "data/" + key;
      const ZipEntry* ze = zip_.find(record);
      if (!ze) throw Error("storage record '" + zip_.prefix() + "/" + record + "' not found");
      const ByteSpan bytes = zip_.stored(*ze);
      uint64_t expected;
      if (__builtin_mul_overflow(numel, uint64_t(info->size), &expected))
        throw Error("storage '" + key + "' size overflows");
      if (bytes.size != expected)
        throw Error("record '" + ze->full_name + "' has " + std::to_string(bytes.size) +
                    " bytes, but its storage declares " + std::to_string(numel) + " x " +
                    std::to_string(info->size) + " = " + std::to_string(expected) + " bytes");
      auto storage = std::make_shared<Storage>();
      storage->key = key;
      storage->location = location_v->bytes;
      storage->dtype = info->dtype;
      storage->numel = numel;
      storage->data = bytes.data;
      storage->nbytes = bytes.size;
      storage->big_endian = big_endian_;
      entry = &table_.add(std::move(storage), *info);
    }
    Value* v = arena.make(Kind::Storage);
    v->storage = entry->storage;
    v->persistent_id = &pid;
    return v;
  }

 private:
  const ZipReader& zip_;
  bool big_endian_;
  StorageTable& table_;
};

// ---------------------------------------------------------------------------
// From the pickled tree to the Checkpoint.

std::string describe_value(const Value* v) {
  if (v->kind == Kind::Object) return "object of class " + v->qualified_name();
  if (v->kind == Kind::Call) return v->qualified_name() + "(...)";
  return kind_name(v->kind);
}

// A state-dict key as text (non-string keys are rare; show them readably).
std::string key_text(const Value* k) {
  if (k->kind == Kind::String) return k->bytes;
  if (k->kind == Kind::Int) return std::to_string(k->integer);
  return "<" + std::string(kind_name(k->kind)) + " key>";
}

size_t count_tensors(const Value* dict) {
  size_t n = 0;
  for (const auto& kv : dict->entries) n += kv.second->kind == Kind::Tensor;
  return n;
}

bool all_tensors(const Value* dict) {
  return !dict->entries.empty() && count_tensors(dict) == dict->entries.size();
}

std::string reason_for_top_level(const std::string& key, const Value* v) {
  std::string lower = key;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower.find("optim") != std::string::npos) return "optimizer state";
  if (lower.find("sched") != std::string::npos) return "scheduler state";
  if (lower.find("scaler") != std::string::npos) return "grad scaler state";
  if (v->kind == Kind::Tensor) return "tensor outside the selected state dict";
  if (v->kind == Kind::Dict) return "not selected (dict)";
  return "not a tensor (" + describe_value(v) + ")";
}

class TensorCollector {
 public:
  TensorCollector(const std::string& path, const StorageTable& table, Checkpoint& out)
      : path_(path), table_(table), out_(out) {}

  // Adds the tensors of a state dict, in order; the rest goes to `ignored`.
  void add_state_dict(const Value* dict) {
    for (const auto& [k, v] : dict->entries) {
      const std::string name = key_text(k);
      if (k->kind != Kind::String) {
        out_.ignored.emplace_back(name, "non-string state-dict key");
        continue;
      }
      add_value(name, v);
    }
  }

 private:
  void add_value(const std::string& name, const Value* v) {
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

  const std::string& path_;
  const StorageTable& table_;
  Checkpoint& out_;
};

const char* const kKnownStateDictKeys[] = {"state_dict", "model_state_dict", "model", "net",
                                           "model_state", "weights", "params"};

// Picks the state dict out of a pickled checkpoint (PYTORCH_FORMAT.md §4)
// and fills `out`. `container` names the file form ("zip").
void select_tensors(const Value* root, const std::string& container, const std::string& path,
                    const StorageTable& table, const LoadOptions& options, Checkpoint& out) {
  if (root->kind == Kind::Object)
    throw Error(path + ": a whole pickled module (class '" + root->qualified_name() +
                "', torch.save(model)) is not supported yet; save model.state_dict() instead");
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
    if (v->kind != Kind::Dict)
      throw Error(path + ": key '" + options.key + "' holds a " + describe_value(v) +
                  ", not a state dict");
    selected = options.key;
  } else {
    for (const char* known : kKnownStateDictKeys) {
      const Value* v = root->get(known);
      if (v && v->kind == Kind::Dict && count_tensors(v) > 0) {
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
        for (const auto& [k, v] : root->entries)
          if (v->kind == Kind::Object)
            throw Error(path + ": key '" + key_text(k) + "' holds a whole pickled module (class '" +
                        v->qualified_name() + "'), which is not supported yet");
        throw Error(path + ": no state dict found (no tensors at the top level or under a known key); keys: " +
                    key_list());
      }
    }
  }

  TensorCollector collect(path, table, out);
  if (selected.empty()) {
    out.form = container + " state_dict";
    collect.add_state_dict(root);
    return;
  }
  out.form = container + " training checkpoint (key '" + selected + "')";
  for (const auto& [k, v] : root->entries) {
    const std::string name = key_text(k);
    if (k->kind == Kind::String && name == selected) collect.add_state_dict(v);
    else out.ignored.emplace_back(name, reason_for_top_level(name, v));
  }
}

// ---------------------------------------------------------------------------
// Zip checkpoints (torch.save since 1.6).

std::string trimmed(ByteSpan span) {
  std::string s(reinterpret_cast<const char*>(span.data), span.size);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

Checkpoint read_zip(const MappedFile& file, const LoadOptions& options) {
  const std::string& path = file.path();
  ZipReader zip(file.data(), file.size(), path);

  // TorchScript keeps code/ and constants.pkl beside data.pkl (§3).
  bool torchscript = zip.find("constants.pkl") != nullptr;
  for (const ZipEntry& e : zip.entries()) torchscript = torchscript || e.name.rfind("code/", 0) == 0;
  if (torchscript) throw Error(path + ": TorchScript archive (torch.jit.save) is not supported yet");

  // The format version: .data/version is authoritative when present.
  const ZipEntry* version = zip.find(".data/version");
  if (!version) version = zip.find("version");
  if (version) {
    const std::string v = trimmed(zip.stored(*version));
    if (v.empty() || v.size() > 6 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      throw Error(zip.describe(*version) + ": not a version number");
  }

  bool big_endian = false;
  if (const ZipEntry* order = zip.find("byteorder")) {
    const std::string v = trimmed(zip.stored(*order));
    if (v == "big") big_endian = true;
    else if (v != "little") throw Error(zip.describe(*order) + ": unknown byte order '" + v + "'");
  }

  const ZipEntry* pkl = zip.find("data.pkl");
  if (!pkl) throw Error(path + ": zip archive without a data.pkl record: not a torch.save checkpoint");
  const ByteSpan pickle_bytes = zip.stored(*pkl);

  StorageTable table;
  ZipStorageLoader loader(zip, big_endian, table);
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
  if (n >= 9 && d[8] == '{') {
    uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = (header << 8) | d[i];
    if (header <= 100000000 && header <= n - 8) return Format::Safetensors;
  }
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
    case Format::Empty:
      throw Error(path + ": empty file");
    case Format::LegacyPickle:
      throw Error(path + ": legacy (pre-1.6, non-zip) PyTorch format is not supported yet");
    case Format::OtherPickle:
      throw Error(path + ": a Python pickle without the PyTorch magic number: not a torch.save checkpoint");
    case Format::Tar:
      throw Error(path + ": the pre-0.3 PyTorch tar format is not supported");
    case Format::Safetensors:
      throw Error(path + ": safetensors files are not supported yet");
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

// ---------------------------------------------------------------------------
// Materialization.

namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // ±0
  } else {
    // Subnormal: normalize the mantissa.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((mant & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace

std::vector<float> to_float32(const TensorRef& t) {
  const std::string what = "tensor '" + t.name + "'";
  if (!is_float(t.dtype))
    throw Error(what + ": dtype " + std::string(dtype_name(t.dtype)) + " does not convert to float32");
  if (!t.storage) throw Error(what + ": no storage");
  const Storage& s = *t.storage;
  const size_t esize = dtype_size(t.dtype);
  // Re-checked here (cheap) so a hand-made TensorRef cannot read out of bounds.
  check_view(what, t.shape, t.stride, t.offset, s.nbytes / esize);
  const int64_t numel = t.numel();
  std::vector<float> out(static_cast<size_t>(numel));
  if (numel == 0) return out;

  // Storage bytes are in the file's byte order; memcpy reads host order.
  constexpr bool kHostBigEndian = __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__;
  const bool swap = s.big_endian != kHostBigEndian;
  const size_t rank = t.shape.size();

  // Fast path: a contiguous float32 view in host order is one copy.
  bool contiguous = true;
  for (size_t d = 0, expect = 1; d < rank; ++d) {
    const size_t k = rank - 1 - d;
    if (t.shape[k] != 1 && t.stride[k] != static_cast<int64_t>(expect)) contiguous = false;
    expect *= static_cast<size_t>(t.shape[k]);
  }
  if (contiguous && !swap && t.dtype == DType::F32) {
    std::memcpy(out.data(), s.data + static_cast<size_t>(t.offset) * 4, out.size() * 4);
    return out;
  }

  // General walk in C order with an index counter; `at` is the element
  // offset of the current index.
  std::vector<int64_t> index(rank, 0);
  int64_t at = t.offset;
  uint8_t buf[8];
  for (int64_t i = 0; i < numel; ++i) {
    const uint8_t* p = s.data + static_cast<size_t>(at) * esize;
    if (swap) {
      for (size_t b = 0; b < esize; ++b) buf[b] = p[esize - 1 - b];
      p = buf;
    }
    float v;
    switch (t.dtype) {
      case DType::F32: std::memcpy(&v, p, 4); break;
      case DType::F64: { double x; std::memcpy(&x, p, 8); v = static_cast<float>(x); break; }
      case DType::F16: { uint16_t h; std::memcpy(&h, p, 2); v = half_to_float(h); break; }
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        const uint32_t bits = uint32_t(h) << 16;
        std::memcpy(&v, &bits, 4);
        break;
      }
      default: v = 0; break;  // unreachable: checked above
    }
    out[static_cast<size_t>(i)] = v;
    // Advance the index; `at` only ever moves to in-bounds elements, so the
    // arithmetic stays within what check_view() proved cannot overflow.
    for (size_t d = rank; d-- > 0;) {
      if (index[d] + 1 < t.shape[d]) {
        ++index[d];
        at += t.stride[d];
        break;
      }
      at -= t.stride[d] * index[d];
      index[d] = 0;
    }
  }
  return out;
}

}  // namespace ferry::conv
