// The legacy torch.save stream (before 1.6, or
// _use_new_zipfile_serialization=False), PYTORCH_FORMAT.md §2. Back-to-back
// pickles, each starting right after the previous STOP:
//   1. the magic number 0x1950a86a20f9469cfc6c (LONG1),
//   2. the protocol version 1001,
//   3. sys_info {'protocol_version', 'little_endian', 'type_sizes'},
//   4. the object, whose persistent ids are
//        ('storage', type, root_key, location, numel, view_metadata)
//      with view_metadata None or (view_key, offset, size), or
//        ('module', class, source_file, source) for a module class,
//   5. the list of root storage keys,
//   then for each key in that list an int64 element count and the raw
//   little-endian bytes (PyTorch converts on big-endian writers), unaligned.
// Storages are declared while the object is unpickled and their bytes come
// afterwards, so they are attached once the stream has been walked; views
// are resolved last.
#include "checkpoint/legacy.h"

#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "checkpoint/reader_internal.h"
#include "error.h"

namespace ferry::conv::detail {
namespace {

// The magic number as LONG1 writes it: 10 bytes, little-endian.
constexpr uint8_t kMagic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
constexpr int64_t kProtocolVersion = 1001;

struct View {
  std::shared_ptr<Storage> storage;  // the view (data attached last)
  std::shared_ptr<Storage> root;
  uint64_t offset = 0;               // elements into root
  size_t element_size = 0;
};

class LegacyLoader : public PersistentLoader {
 public:
  explicit LegacyLoader(StorageTable& table) : table_(table) {}

  Value* load(const Value& pid, ValueArena& arena) override {
    if (pid.kind == Kind::Tuple && !pid.items.empty() && pid.items[0]->kind == Kind::String &&
        pid.items[0]->bytes == "module") {
      // torch.save recorded a module class with its source (to warn when the
      // source changed); the value is the class itself, here an inert reference.
      if (pid.items.size() != 4 || pid.items[1]->kind != Kind::Global)
        throw Error("malformed ('module', class, source_file, source) persistent id");
      if (pid.items[1]->global_kind != GlobalKind::Class)
        throw Error("('module', ...) persistent id names '" + pid.items[1]->qualified_name() +
                    "', which is not a module class");
      return pid.items[1];
    }
    const StorageId id = parse_storage_id(pid, 6);
    std::shared_ptr<Storage> root = declare_root(id);
    const Value* meta = pid.items[5];
    Value* v = arena.make(Kind::Storage);
    v->persistent_id = &pid;
    v->storage = meta->kind == Kind::None ? root : declare_view(id, root, *meta);
    return v;
  }

  // Root storages in declaration order (for messages and completeness).
  const std::vector<std::shared_ptr<Storage>>& roots() const { return roots_; }
  const std::vector<View>& views() const { return views_; }
  bool is_root(const std::string& key) const { return root_keys_.count(key) != 0; }

 private:
  std::shared_ptr<Storage> declare_root(const StorageId& id) {
    if (const StorageTable::Entry* e = table_.find(id.key)) {
      if (!root_keys_.count(id.key)) throw Error("storage '" + id.key + "' is declared both as a view and as a storage");
      if (e->storage->numel != id.numel || e->info.size != id.info->size || e->info.dtype != id.info->dtype)
        throw Error("storage '" + id.key + "' is declared twice with different types or sizes");
      return e->storage;
    }
    uint64_t nbytes;
    if (__builtin_mul_overflow(id.numel, uint64_t(id.info->size), &nbytes))
      throw Error("storage '" + id.key + "' size overflows");
    auto s = std::make_shared<Storage>();
    s->key = id.key;
    s->location = id.location;
    s->dtype = id.info->dtype;
    s->numel = id.numel;
    s->nbytes = nbytes;  // data attached once the raw bytes are reached
    table_.add(id.key, s, *id.info);
    root_keys_.insert(id.key);
    roots_.push_back(s);
    return s;
  }

  std::shared_ptr<Storage> declare_view(const StorageId& id, const std::shared_ptr<Storage>& root, const Value& meta) {
    if (meta.kind != Kind::Tuple || meta.items.size() != 3 || meta.items[0]->kind != Kind::String ||
        meta.items[1]->kind != Kind::Int || meta.items[2]->kind != Kind::Int)
      throw Error("storage '" + id.key + "': view metadata is not None or a (view_key, offset, size) tuple");
    const std::string& key = meta.items[0]->bytes;
    const int64_t offset = meta.items[1]->integer;
    const int64_t size = meta.items[2]->integer;
    if (!is_safe_key(key)) throw Error("invalid storage view key '" + key + "'");
    if (offset < 0 || size < 0)
      throw Error("storage view '" + key + "' has a negative offset or size");
    if (const StorageTable::Entry* e = table_.find(key)) {
      for (const View& v : views_)
        if (v.storage == e->storage && v.root == root && v.offset == uint64_t(offset) &&
            v.storage->numel == uint64_t(size))
          return e->storage;
      throw Error("storage view '" + key + "' is declared twice differently (or names a storage)");
    }
    uint64_t end;
    if (__builtin_add_overflow(uint64_t(offset), uint64_t(size), &end) || end > root->numel)
      throw Error("storage view '" + key + "' (offset " + std::to_string(offset) + ", size " +
                  std::to_string(size) + ") reaches past the end of storage '" + id.key + "' of " +
                  std::to_string(root->numel) + " elements");
    auto s = std::make_shared<Storage>();
    s->key = key;
    s->location = root->location;
    s->dtype = root->dtype;
    s->numel = uint64_t(size);
    s->nbytes = uint64_t(size) * id.info->size;  // <= root's nbytes: no overflow
    table_.add(key, s, *id.info);
    views_.push_back(View{s, root, uint64_t(offset), id.info->size});
    return s;
  }

  StorageTable& table_;
  std::unordered_set<std::string> root_keys_;
  std::vector<std::shared_ptr<Storage>> roots_;
  std::vector<View> views_;
};

std::string at_byte(size_t pos) { return "at byte " + std::to_string(pos); }

}  // namespace

Checkpoint read_legacy(const MappedFile& file, const LoadOptions& options) {
  const std::string& path = file.path();
  const uint8_t* data = file.data();
  const size_t size = file.size();
  size_t pos = 0;

  // The three small header pickles get small limits.
  UnpickleLimits header_limits;
  header_limits.max_values = 4096;
  header_limits.max_string = 4096;
  auto next_pickle = [&](const char* what, PersistentLoader* loader, const UnpickleLimits& limits) {
    const std::string label = path + ": legacy stream, " + what + " pickle (" + at_byte(pos) + ")";
    PickleTree tree = unpickle(data + pos, size - pos, label, loader, limits);
    pos += tree.end;
    return tree;
  };

  const PickleTree magic = next_pickle("magic number", nullptr, header_limits);
  if (magic.root->kind != Kind::BigInt || magic.root->bytes.size() != sizeof kMagic ||
      std::memcmp(magic.root->bytes.data(), kMagic, sizeof kMagic) != 0)
    throw Error(path + ": legacy stream: wrong magic number (not a torch.save file, or corrupt)");
  const PickleTree protocol = next_pickle("protocol version", nullptr, header_limits);
  if (protocol.root->kind != Kind::Int || protocol.root->integer != kProtocolVersion)
    throw Error(path + ": legacy stream: unsupported protocol version " +
                (protocol.root->kind == Kind::Int ? std::to_string(protocol.root->integer)
                                                  : describe_value(protocol.root)) +
                " (expected 1001)");
  const PickleTree sys_info = next_pickle("sys_info", nullptr, header_limits);
  if (sys_info.root->kind != Kind::Dict)
    throw Error(path + ": legacy stream: sys_info is a " + describe_value(sys_info.root) + ", not a dict");

  StorageTable table;
  LegacyLoader loader(table);
  UnpickleLimits main_limits;
  main_limits.call_placeholders = true;  // torch 0.3/0.4 modules hold their thnn _backend's call
  const size_t main_at = pos;
  const PickleTree main = next_pickle("main", &loader, main_limits);
  check_call_placeholders(main.root, path + ": legacy stream, main pickle (" + at_byte(main_at) + ")");
  const size_t keys_at = pos;
  const PickleTree keys = next_pickle("storage key list", nullptr, UnpickleLimits{});
  if (keys.root->kind != Kind::List)
    throw Error(path + ": legacy stream: the storage key list (" + at_byte(keys_at) + ") is a " +
                describe_value(keys.root) + ", not a list");

  // The raw storages, in key-list order.
  std::unordered_set<std::string> attached;
  for (const Value* k : keys.root->items) {
    if (k->kind != Kind::String)
      throw Error(path + ": legacy stream: the storage key list holds a " + describe_value(k));
    const std::string& key = k->bytes;
    const StorageTable::Entry* entry = table.find(key);
    if (!entry || !loader.is_root(key))
      throw Error(path + ": legacy stream: the storage key list names '" + key +
                  "', which the main pickle never declared");
    if (!attached.insert(key).second)
      throw Error(path + ": legacy stream: storage '" + key + "' is listed twice");
    Storage& s = *entry->storage;
    const std::string what = path + ": legacy stream: storage '" + key + "' (" + at_byte(pos) + ")";
    if (size - pos < 8)
      throw Error(what + ": truncated: its element count needs 8 bytes, " + std::to_string(size - pos) + " left");
    uint64_t count = 0;
    for (int i = 7; i >= 0; --i) count = (count << 8) | data[pos + size_t(i)];
    if (count != s.numel)
      throw Error(what + ": holds " + std::to_string(static_cast<int64_t>(count)) +
                  " elements, but the pickle declares " + std::to_string(s.numel));
    pos += 8;
    if (s.nbytes > size - pos)
      throw Error(what + ": truncated: needs " + std::to_string(s.nbytes) + " bytes of data, " +
                  std::to_string(size - pos) + " left");
    s.data = data + pos;
    pos += static_cast<size_t>(s.nbytes);
  }
  for (const auto& s : loader.roots())
    if (!attached.count(s->key))
      throw Error(path + ": legacy stream: storage '" + s->key +
                  "' is used by the pickle but has no data (missing from the storage key list)");
  if (pos != size)
    throw Error(path + ": legacy stream: " + std::to_string(size - pos) + " unexpected bytes after the last storage (" +
                at_byte(pos) + ")");
  for (const View& v : loader.views()) v.storage->data = v.root->data + v.offset * v.element_size;

  Checkpoint out;
  select_tensors(main.root, "legacy (pre-1.6)", path, table, options, out);
  return out;
}

}  // namespace ferry::conv::detail
