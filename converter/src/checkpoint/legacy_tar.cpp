// The pre-0.3 tar format (legacy_tar.h): tar members found and bounded, then
// storages, views and tensors read from their members, then the main pickle
// with its persistent ids resolved against them.
#include "checkpoint/legacy_tar.h"

#include <cstring>
#include <map>
#include <unordered_map>

#include "checkpoint/reader_internal.h"
#include "error.h"

namespace ferry::conv::detail {
namespace {

constexpr size_t kBlock = 512;
constexpr size_t kMaxMembers = 64;          // torch wrote 4 (and pax headers)
constexpr int64_t kMaxRecords = int64_t{1} << 20;  // storages or tensors in one archive
constexpr int64_t kMaxDims = 64;

std::string at_byte(uint64_t pos) { return "at byte " + std::to_string(pos); }

struct Member {
  std::string name;
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  uint64_t at = 0;  // the data's offset in the file
  char type = '0';
};

// A NUL- or length-terminated header field.
std::string field(const uint8_t* h, size_t off, size_t len) {
  const char* p = reinterpret_cast<const char*>(h + off);
  return std::string(p, strnlen(p, len));
}

// An octal number field (digits, optionally surrounded by spaces / NULs).
bool octal(const uint8_t* h, size_t off, size_t len, uint64_t& out) {
  out = 0;
  size_t i = 0;
  while (i < len && h[off + i] == ' ') ++i;
  bool any = false;
  for (; i < len && h[off + i] >= '0' && h[off + i] <= '7'; ++i) {
    if (out > (UINT64_MAX >> 3)) return false;
    out = out * 8 + (h[off + i] - '0');
    any = true;
  }
  for (; i < len; ++i)
    if (h[off + i] != ' ' && h[off + i] != 0) return false;
  return any;
}

// The records "<length> <key>=<value>\n" of a pax extended header; only
// `path` and `size` change what ferry reads.
void pax_records(const Member& m, const std::string& where, std::string& path, std::string& size) {
  uint64_t pos = 0;
  while (pos < m.size) {
    uint64_t len = 0, i = pos;
    while (i < m.size && m.data[i] >= '0' && m.data[i] <= '9' && i - pos < 12) len = len * 10 + (m.data[i++] - '0');
    if (i == pos || i >= m.size || m.data[i] != ' ' || len < i - pos + 4 || len > m.size - pos)
      throw Error(where + ": malformed pax record " + at_byte(m.at + pos));
    const std::string record(reinterpret_cast<const char*>(m.data + i + 1), static_cast<size_t>(len - (i + 1 - pos)));
    if (record.back() != '\n') throw Error(where + ": pax record " + at_byte(m.at + pos) + " does not end in a newline");
    const size_t eq = record.find('=');
    if (eq == std::string::npos) throw Error(where + ": pax record " + at_byte(m.at + pos) + " has no '='");
    const std::string key = record.substr(0, eq), value = record.substr(eq + 1, record.size() - eq - 2);
    if (key == "path") path = value;
    if (key == "size") size = value;
    pos += len;
  }
}

// The members of the archive, each bounded by the file.
std::vector<Member> tar_members(const uint8_t* d, size_t n, const std::string& path) {
  std::vector<Member> out;
  std::string next_path, next_size;  // from a pax header, for the member after it
  size_t pos = 0;
  while (n - pos >= kBlock) {
    const uint8_t* h = d + pos;
    bool zero = true;
    for (size_t i = 0; i < kBlock && zero; ++i) zero = h[i] == 0;
    if (zero) return out;  // the end-of-archive blocks (what follows is padding)
    const std::string where = path + ": tar header " + at_byte(pos);
    // The checksum field counts as spaces; some writers sum signed chars.
    uint64_t checksum = 0, sum = 0;
    int64_t signed_sum = 0;
    for (size_t i = 0; i < kBlock; ++i) {
      const uint8_t b = (i >= 148 && i < 156) ? ' ' : h[i];
      sum += b;
      signed_sum += static_cast<int8_t>(b);
    }
    if (!octal(h, 148, 8, checksum) || (checksum != sum && static_cast<int64_t>(checksum) != signed_sum))
      throw Error(where + ": bad header checksum (not a PyTorch 0.1-0.2 tar archive, or corrupt)");
    Member m;
    m.type = static_cast<char>(h[156]);
    m.name = field(h, 0, 100);
    if (std::memcmp(h + 257, "ustar", 5) == 0) {
      const std::string prefix = field(h, 345, 155);
      if (!prefix.empty()) m.name = prefix + "/" + m.name;
    }
    if (h[124] & 0x80) throw Error(where + ": member '" + m.name + "': a base-256 size (a member over 8 GiB)");
    if (!octal(h, 124, 12, m.size)) throw Error(where + ": member '" + m.name + "': malformed size field");
    const bool extended = m.type == 'x' || m.type == 'g';
    if (!extended) {
      if (!next_path.empty()) m.name = next_path;
      if (!next_size.empty()) {
        uint64_t s = 0;
        for (char c : next_size) {
          if (c < '0' || c > '9' || s > UINT64_MAX / 10 - 9) throw Error(where + ": pax size '" + next_size + "' is not a number");
          s = s * 10 + uint64_t(c - '0');
        }
        m.size = s;
      }
      next_path.clear();
      next_size.clear();
    }
    pos += kBlock;
    m.at = pos;
    if (m.size > n - pos)
      throw Error(where + ": member '" + m.name + "' needs " + std::to_string(m.size) + " bytes, " +
                  std::to_string(n - pos) + " left (a truncated archive)");
    m.data = d + pos;
    pos += static_cast<size_t>(m.size);
    pos += (kBlock - pos % kBlock) % kBlock;
    if (pos > n) pos = n;  // the last member's padding may be cut: harmless
    if (m.type == 'x') {
      pax_records(m, where, next_path, next_size);
      continue;
    }
    if (m.type == 'g') continue;
    if (out.size() >= kMaxMembers) throw Error(path + ": tar archive of more than " + std::to_string(kMaxMembers) + " members");
    out.push_back(std::move(m));
  }
  if (pos < n) throw Error(path + ": tar archive: " + std::to_string(n - pos) + " bytes " + at_byte(pos) + " are not a whole header");
  return out;
}

// Reads one member front to back: pickles, int64s, raw bytes, each bounded
// by what is left of the member.
class Section {
 public:
  Section(const Member& m, const std::string& path) : m_(m), label_(path + ": tar member '" + m.name + "'") {}

  const std::string& label() const { return label_; }
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return m_.size - pos_; }
  std::string where() const { return label_ + " " + at_byte(pos_); }

  PickleTree pickle(const std::string& what, PersistentLoader* loader, const UnpickleLimits& limits) {
    PickleTree t = unpickle(m_.data + pos_, static_cast<size_t>(left()), label_ + ", " + what + " (" + at_byte(pos_) + ")",
                            loader, limits);
    pos_ += t.end;
    return t;
  }
  int64_t i64(const std::string& what) {
    const uint8_t* p = take(8, what);
    uint64_t u = 0;
    for (int i = 7; i >= 0; --i) u = (u << 8) | p[i];
    int64_t v;
    std::memcpy(&v, &u, sizeof v);
    return v;
  }
  const uint8_t* take(uint64_t n, const std::string& what) {
    if (n > left())
      throw Error(where() + ": truncated: " + what + " needs " + std::to_string(n) + " bytes, " + std::to_string(left()) +
                  " left");
    const uint8_t* p = m_.data + pos_;
    pos_ += n;
    return p;
  }

 private:
  const Member& m_;
  std::string label_;
  uint64_t pos_ = 0;
};

// The small pickles between the raw bytes: counts and record tuples.
UnpickleLimits record_limits() {
  UnpickleLimits l;
  l.max_values = 4096;
  l.max_string = 4096;
  l.max_nesting = 16;
  return l;
}

int64_t count_of(Section& s, const char* what) {
  const PickleTree t = s.pickle(std::string("the ") + what + " count", nullptr, record_limits());
  if (t.root->kind != Kind::Int) throw Error(s.label() + ": the " + what + " count is a " + describe_value(t.root) + ", not an int");
  if (t.root->integer < 0 || t.root->integer > kMaxRecords)
    throw Error(s.label() + ": " + std::to_string(t.root->integer) + " " + what + " (at most " + std::to_string(kMaxRecords) + ")");
  return t.root->integer;
}

struct TarTensor {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;
  std::vector<int64_t> size, stride;
};

// The main pickle's persistent ids: str(key) of a tensor or a storage, or
// (class, source_file, source) of a module class.
class TarLoader : public PersistentLoader {
 public:
  TarLoader(const std::map<int64_t, TarTensor>& tensors, const StorageTable& table)
      : tensors_(tensors), table_(table) {}

  Value* load(const Value& pid, ValueArena& arena) override {
    if (pid.kind == Kind::Tuple) {
      if (pid.items.size() != 3 || pid.items[0]->kind != Kind::Global || pid.items[0]->global_kind != GlobalKind::Class)
        throw Error("persistent id is a tuple, but not (module class, source_file, source)");
      return pid.items[0];
    }
    if (pid.kind != Kind::String)
      throw Error("persistent id is a " + describe_value(&pid) + ", not a tensor or storage key");
    const std::string shown = pid.bytes.substr(0, 64);
    if (pid.bytes.empty() || pid.bytes.size() > 19) throw Error("persistent id '" + shown + "' is not a tensor or storage key");
    int64_t key = 0;
    for (char c : pid.bytes) {
      if (c < '0' || c > '9') throw Error("persistent id '" + shown + "' is not a tensor or storage key");
      if (__builtin_mul_overflow(key, 10, &key) || __builtin_add_overflow(key, c - '0', &key))
        throw Error("persistent id '" + pid.bytes + "' is out of range");
    }
    if (auto it = tensors_.find(key); it != tensors_.end()) {
      const TarTensor& t = it->second;
      Value* sv = arena.make(Kind::Storage);
      sv->storage = t.storage;
      auto info = std::make_unique<TensorInfo>();
      info->storage = sv;
      info->offset = t.offset;
      info->size = t.size;
      info->stride = t.stride;
      Value* v = arena.make(Kind::Tensor);
      v->tensor = std::move(info);
      return v;
    }
    if (const StorageTable::Entry* e = table_.find(std::to_string(key))) {
      Value* sv = arena.make(Kind::Storage);
      sv->storage = e->storage;
      return sv;
    }
    throw Error("persistent id '" + pid.bytes + "' names no tensor or storage of the archive");
  }

 private:
  const std::map<int64_t, TarTensor>& tensors_;
  const StorageTable& table_;
};

int64_t int_item(const Value* v, const std::string& where, const char* what) {
  if (v->kind != Kind::Int) throw Error(where + ": " + what + " is a " + describe_value(v) + ", not an int");
  return v->integer;
}

// Record i of a storages or tensors member (`what`: "storage", "tensor"):
// one pickled 3-tuple, whose fields `fields` names for the message.
PickleTree triple_record(Section& s, const char* what, int64_t i, const std::string& where, const char* fields) {
  PickleTree rec = s.pickle(std::string(what) + " " + std::to_string(i) + " record", nullptr, record_limits());
  if (rec.root->kind != Kind::Tuple || rec.root->items.size() != 3)
    throw Error(where + ": the record is a " + describe_value(rec.root) + ", not (" + fields + ")");
  return rec;
}

void read_storages(Section& s, StorageTable& table) {
  const int64_t n = count_of(s, "storages");
  for (int64_t i = 0; i < n; ++i) {
    const std::string where = s.where() + " (storage " + std::to_string(i) + ")";
    const PickleTree rec = triple_record(s, "storage", i, where, "key, location, storage type");
    const Value* r = rec.root;
    const int64_t key = int_item(r->items[0], where, "the key");
    if (r->items[1]->kind != Kind::String) throw Error(where + ": the location is a " + describe_value(r->items[1]) + ", not a str");
    const Value* type = r->items[2];
    const DTypeInfo* info = type->kind == Kind::Global && type->global_kind == GlobalKind::StorageClass
                                ? storage_class_info(type->name)
                                : nullptr;
    if (!info) throw Error(where + ": unknown storage type " + describe_value(type));
    const std::string name = std::to_string(key);
    if (table.find(name)) throw Error(where + ": storage " + name + " is stored twice");
    const int64_t numel = s.i64("the element count of storage " + name);
    uint64_t nbytes = 0;
    if (numel < 0 || __builtin_mul_overflow(uint64_t(numel), uint64_t(info->size), &nbytes))
      throw Error(where + ": storage " + name + " has an element count of " + std::to_string(numel));
    auto st = std::make_shared<Storage>();
    st->key = name;
    st->location = r->items[1]->bytes;
    st->dtype = info->dtype;
    st->numel = uint64_t(numel);
    st->nbytes = nbytes;
    st->data = s.take(nbytes, "storage " + name + " (" + std::to_string(numel) + " x " + std::to_string(info->size) + " bytes)");
    table.add(name, std::move(st), *info);
  }
  // Views: (key, root key, offset, size) in elements of the root.
  const PickleTree views = s.pickle("the storage views", nullptr, UnpickleLimits{});
  const Value* list = views.root;
  if (list->kind != Kind::List && list->kind != Kind::Tuple)
    throw Error(s.label() + ": the storage views are a " + describe_value(list) + ", not a list");
  for (size_t i = 0; i < list->items.size(); ++i) {
    const std::string where = s.label() + ": storage view " + std::to_string(i);
    const Value* v = list->items[i];
    if ((v->kind != Kind::Tuple && v->kind != Kind::List) || v->items.size() != 4)
      throw Error(where + " is a " + describe_value(v) + ", not (key, root key, offset, size)");
    const std::string key = std::to_string(int_item(v->items[0], where, "the key"));
    const std::string root_key = std::to_string(int_item(v->items[1], where, "the root key"));
    const int64_t offset = int_item(v->items[2], where, "the offset");
    const int64_t size = int_item(v->items[3], where, "the size");
    const StorageTable::Entry* root = table.find(root_key);
    if (!root) throw Error(where + ": root storage " + root_key + " is not in the archive");
    if (table.find(key)) throw Error(where + ": storage " + key + " is declared twice");
    uint64_t end = 0;
    if (offset < 0 || size < 0 || __builtin_add_overflow(uint64_t(offset), uint64_t(size), &end) ||
        end > root->storage->numel)
      throw Error(where + " (offset " + std::to_string(offset) + ", size " + std::to_string(size) +
                  ") reaches past the end of storage " + root_key + " of " + std::to_string(root->storage->numel) +
                  " elements");
    auto st = std::make_shared<Storage>(*root->storage);
    st->key = key;
    st->numel = uint64_t(size);
    st->nbytes = uint64_t(size) * root->info.size;
    st->data = root->storage->data + uint64_t(offset) * root->info.size;
    table.add(key, std::move(st), root->info);
  }
}

std::map<int64_t, TarTensor> read_tensors(Section& s, const StorageTable& table) {
  std::map<int64_t, TarTensor> out;
  const int64_t n = count_of(s, "tensors");
  for (int64_t i = 0; i < n; ++i) {
    const std::string where = s.where() + " (tensor " + std::to_string(i) + ")";
    const PickleTree rec = triple_record(s, "tensor", i, where, "key, storage key, tensor type");
    const Value* r = rec.root;
    const int64_t key = int_item(r->items[0], where, "the key");
    if (r->items[1]->kind == Kind::None) throw Error(where + ": tensor " + std::to_string(key) + " has no storage");
    const std::string storage_key = std::to_string(int_item(r->items[1], where, "the storage key"));
    if (r->items[2]->kind != Kind::Global)
      throw Error(where + ": the tensor type is a " + describe_value(r->items[2]) + ", not a class");
    const StorageTable::Entry* st = table.find(storage_key);
    if (!st) throw Error(where + ": tensor " + std::to_string(key) + " names storage " + storage_key + ", which the archive does not hold");
    if (out.count(key)) throw Error(where + ": tensor " + std::to_string(key) + " is stored twice");
    const std::string name = "tensor " + std::to_string(key);
    // A little-endian int32, then 4 unused bytes (torch once wrote an int64).
    const uint8_t* nd = s.take(8, "the dimension count of " + name);
    const uint32_t u = uint32_t(nd[0]) | (uint32_t(nd[1]) << 8) | (uint32_t(nd[2]) << 16) | (uint32_t(nd[3]) << 24);
    int32_t ndim;
    std::memcpy(&ndim, &u, sizeof ndim);
    if (ndim < 0 || ndim > kMaxDims) throw Error(where + ": " + name + " has " + std::to_string(ndim) + " dimensions");
    TarTensor t;
    for (int32_t d = 0; d < ndim; ++d) t.size.push_back(s.i64("the sizes of " + name));
    for (int32_t d = 0; d < ndim; ++d) t.stride.push_back(s.i64("the strides of " + name));
    t.offset = s.i64("the storage offset of " + name);
    for (size_t d = 0; d < t.size.size(); ++d)
      if (t.size[d] < 0 || t.stride[d] < 0)
        throw Error(where + ": " + name + " has a negative size or stride (" + dims_text(t.size) + ", " + dims_text(t.stride) + ")");
    if (t.offset < 0) throw Error(where + ": " + name + " has a negative storage offset " + std::to_string(t.offset));
    check_view(where + ": " + name, t.size, t.stride, t.offset, st->storage->numel);
    t.storage = st->storage;
    out.emplace(key, std::move(t));
  }
  return out;
}

}  // namespace

Checkpoint read_legacy_tar(const MappedFile& file, const LoadOptions& options) {
  const std::string& path = file.path();
  const std::vector<Member> members = tar_members(file.data(), file.size(), path);
  std::unordered_map<std::string, const Member*> by_name;
  for (const Member& m : members) {
    if (!by_name.emplace(m.name, &m).second)
      throw Error(path + ": tar member '" + m.name + "' appears twice");
  }
  auto member = [&](const char* name) -> const Member& {
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw Error(path + ": a tar archive without a '" + name + "' member: not a torch.save file of PyTorch 0.1-0.2 (the "
                  "members are sys_info, pickle, tensors, storages)");
    if (it->second->type != '0' && it->second->type != 0)
      throw Error(path + ": tar member '" + name + "' is not a regular file (type '" + std::string(1, it->second->type) + "')");
    return *it->second;
  };
  const Member& storages = member("storages");
  const Member& tensors = member("tensors");
  const Member& main = member("pickle");
  if (by_name.count("sys_info")) {
    Section s(member("sys_info"), path);
    const PickleTree info = s.pickle("sys_info", nullptr, record_limits());
    if (info.root->kind != Kind::Dict) throw Error(s.label() + ": sys_info is a " + describe_value(info.root) + ", not a dict");
    if (const Value* le = info.root->get("little_endian"); le && le->kind == Kind::Bool && !le->boolean)
      throw Error(s.label() + ": written on a big-endian machine (little_endian is False): not supported");
  }

  StorageTable table;
  Section ss(storages, path);
  read_storages(ss, table);
  Section ts(tensors, path);
  const std::map<int64_t, TarTensor> tensor_map = read_tensors(ts, table);

  TarLoader loader(tensor_map, table);
  Section ms(main, path);
  UnpickleLimits limits;
  limits.call_placeholders = true;  // a whole module's calls, kept inert (pickle.h)
  const PickleTree tree = ms.pickle("the main pickle", &loader, limits);
  if (ms.left() != 0)
    throw Error(ms.label() + ": " + std::to_string(ms.left()) + " bytes after the pickle's STOP " + at_byte(ms.pos()));
  check_call_placeholders(tree.root, ms.label() + ", the main pickle (at byte 0)");

  Checkpoint out;
  select_tensors(tree.root, "legacy tar (PyTorch 0.1-0.2)", path, table, options, out);
  return out;
}

}  // namespace ferry::conv::detail
