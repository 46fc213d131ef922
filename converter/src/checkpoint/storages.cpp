// What the checkpoint readers share about storages: the dtype tables, the
// bounds check of a strided view, the storage table (storages cached by
// key), storage persistent ids, and the storages of a zip archive.
#include <algorithm>
#include <cctype>

#include "checkpoint/reader_internal.h"
#include "error.h"

namespace ferry::conv::detail {

// ---------------------------------------------------------------------------
// dtypes.

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

namespace {

// torch.serialization.skip_data() (torch 2.5+) writes each storage record's
// header and size but none of its bytes: zeros, with a CRC-32 of 0, in an
// archive whose other records carry real CRCs. An archive saved with
// compute_crc32=False has 0 everywhere, and real zero weights have their
// real CRC (never 0), so neither is mistaken for it.
bool written_without_data(const ZipReader& zip, const std::string& folder, const ZipEntry& record, ByteSpan bytes) {
  if (record.crc32 != 0 || bytes.size == 0) return false;
  const ZipEntry* pickle = zip.find(folder + ".pkl");
  if (!pickle || pickle->crc32 == 0) return false;
  return std::all_of(bytes.data, bytes.data + bytes.size, [](uint8_t b) { return b == 0; }) &&
         crc32_ieee(bytes.data, bytes.size) != 0;
}

}  // namespace

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
    if (written_without_data(zip_, folder_, *ze, bytes))
      throw Error("record '" + ze->full_name + "' holds no weights: the file was saved under "
                  "torch.serialization.skip_data() (zeros, no CRC-32 among records that have one); "
                  "save it without skip_data");
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

}  // namespace ferry::conv::detail
