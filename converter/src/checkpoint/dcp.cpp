// Distributed checkpoint directories (dcp.h, PYTORCH_FORMAT.md §9): the
// .metadata records checked, the chunks read as the torch.save zips they
// are, sharded tensors reassembled.
#include "checkpoint/dcp.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string_view>

#include "checkpoint/reader_internal.h"
#include "error.h"
#include "io/sha256.h"
#include "io/zip_reader.h"

namespace ferry::conv {

using namespace detail;

namespace {

constexpr std::string_view kMetadataModule = "torch.distributed.checkpoint.metadata";
constexpr std::string_view kFilesystemModule = "torch.distributed.checkpoint.filesystem";
constexpr std::string_view kShardedTensorModule = "torch.distributed._shard.sharded_tensor.metadata";

// The globals a .metadata may name (§9); everything else is refused while
// unpickling, at the byte it appears.
bool dcp_global(std::string_view module, std::string_view name) {
  auto one_of = [&](std::initializer_list<std::string_view> names) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  if (module == kMetadataModule)
    return one_of({"Metadata", "TensorStorageMetadata", "TensorProperties", "_MEM_FORMAT_ENCODING",
                   "ChunkStorageMetadata", "MetadataIndex", "StorageMeta", "BytesStorageMetadata"});
  if (module == kFilesystemModule) return name == "_StorageInfo";
  if (module == kShardedTensorModule) return one_of({"TensorProperties", "MEM_FORMAT_ENCODING"});
  if (module == "torch")
    return name == "Size" || classify_global(module, name) == GlobalKind::DTypeObject;
  if (module == "torch.serialization") return name == "_get_layout";
  if (module == "pathlib" || module == "pathlib._local") return name == "PosixPath";
  return false;
}

std::string quoted(const std::string& s) { return "'" + s.substr(0, 200) + (s.size() > 200 ? "...'" : "'"); }

// Reads the .metadata tree. Every accessor names the record and field it
// reads in its error, after the file's label.
class MetadataParser {
 public:
  explicit MetadataParser(const std::string& label) : label_(label) {}

  DcpMetadata parse(const Value* root);

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw Error(label_ + ": " + where + ": " + what);
  }

  // An inert Object of class `module.name` (one of `names`), and its BUILD state.
  const Value* object(const Value* v, std::string_view module, std::initializer_list<std::string_view> names,
                      const std::string& where) const {
    bool ok = v->kind == Kind::Object && v->cls && v->cls->kind == Kind::Global;
    if (ok) {
      ok = false;
      for (std::string_view n : names) ok = ok || (v->cls->module == module && v->cls->name == n);
    }
    if (!ok) {
      std::string want;
      for (std::string_view n : names) want += (want.empty() ? "" : " or ") + std::string(n);
      fail(where, "is a " + describe_value(v) + ", not a " + want);
    }
    if (!v->state) fail(where, "has no state (no BUILD)");
    return v->state;
  }
  // A dataclass with no fields: NEWOBJ(cls, ()) and no BUILD, as pickle
  // writes an object whose __dict__ is empty (an empty BUILD dict is
  // accepted too); any state is refused: the class has nothing to hold.
  void field_less(const Value* v, std::string_view module, std::string_view name, const std::string& where) const {
    if (v->kind != Kind::Object || !v->cls || v->cls->kind != Kind::Global || v->cls->module != module ||
        v->cls->name != name)
      fail(where, "is a " + describe_value(v) + ", not a " + std::string(name));
    if (v->args && (v->args->kind != Kind::Tuple || !v->args->items.empty()))
      fail(where, std::string(name) + " made with arguments (a " + kind_name(v->args->kind) + " of " +
                      std::to_string(v->args->items.size()) + "): the class takes none");
    const Value* s = v->state;
    if (s && !(s->kind == Kind::Dict && s->entries.empty()) && s->kind != Kind::None)
      fail(where, std::string(name) + " has state (a " + kind_name(s->kind) +
                      (s->kind == Kind::Dict ? " of " + std::to_string(s->entries.size()) + " fields" : std::string()) +
                      "): the class has no fields");
  }
  const Value* dict(const Value* v, const std::string& where) const {
    if (v->kind != Kind::Dict) fail(where, std::string("is a ") + kind_name(v->kind) + ", not a dict");
    return v;
  }
  const Value* field(const Value* state, const char* name, const std::string& where) const {
    const Value* v = dict(state, where)->get(name);
    if (!v) fail(where, std::string("has no field '") + name + "'");
    return v;
  }
  std::string text(const Value* v, const std::string& where) const {
    if (v->kind != Kind::String) fail(where, std::string("is a ") + kind_name(v->kind) + ", not a str");
    return v->bytes;
  }
  int64_t integer(const Value* v, const std::string& where) const {
    if (v->kind != Kind::Int) fail(where, std::string("is a ") + kind_name(v->kind) + ", not an int");
    return v->integer;
  }
  uint64_t count(const Value* v, const std::string& where) const {
    const int64_t n = integer(v, where);
    if (n < 0) fail(where, "is negative (" + std::to_string(n) + ")");
    return static_cast<uint64_t>(n);
  }
  // A torch.Size (unpickled as a tuple) of non-negative ints.
  std::vector<int64_t> dims(const Value* v, const std::string& where) const {
    if (v->kind != Kind::Tuple && v->kind != Kind::List)
      fail(where, std::string("is a ") + kind_name(v->kind) + ", not a torch.Size");
    if (v->items.size() > kDcpMaxRank)
      fail(where, "has " + std::to_string(v->items.size()) + " dimensions (at most " + std::to_string(kDcpMaxRank) + ")");
    std::vector<int64_t> out;
    for (const Value* d : v->items) {
      const int64_t x = integer(d, where);
      if (x < 0) fail(where, "holds a negative size " + std::to_string(x));
      out.push_back(x);
    }
    return out;
  }

  std::string properties_dtype(const Value* properties, const std::string& where) const;
  DcpEntry tensor_entry(const std::string& fqn, const Value* state, const std::string& where) const;
  void check_tiling(const DcpEntry& e, const std::string& where) const;

  const std::string& label_;
};

// TensorProperties: (dtype, layout, requires_grad, memory_format,
// pin_memory) as a tuple since torch 2.1, a dict of the same fields before.
std::string MetadataParser::properties_dtype(const Value* properties, const std::string& where) const {
  const Value* state = nullptr;
  if (properties->kind == Kind::Object && properties->cls && properties->cls->module == kShardedTensorModule)
    state = object(properties, kShardedTensorModule, {"TensorProperties"}, where);
  else
    state = object(properties, kMetadataModule, {"TensorProperties"}, where);
  const Value* dtype = nullptr;
  const Value* layout = nullptr;
  if (state->kind == Kind::Tuple) {
    if (state->items.size() < 2) fail(where, "state is a tuple of " + std::to_string(state->items.size()) + ", not (dtype, layout, ...)");
    dtype = state->items[0];
    layout = state->items[1];
  } else if (state->kind == Kind::Dict) {
    dtype = field(state, "dtype", where);
    layout = state->get("layout");
  } else {
    fail(where, std::string("state is a ") + kind_name(state->kind) + ", not a tuple or dict");
  }
  if (dtype->kind != Kind::Global || dtype->global_kind != GlobalKind::DTypeObject)
    fail(where + ".dtype", "is a " + describe_value(dtype) + ", not a torch dtype");
  if (layout && layout->kind == Kind::Call && layout->args && layout->args->items.size() == 1 &&
      layout->args->items[0]->kind == Kind::String && layout->args->items[0]->bytes != "torch.strided")
    fail(where + ".layout", "is " + layout->args->items[0]->bytes + ": only dense (torch.strided) tensors are read");
  return dtype->name;
}

DcpEntry MetadataParser::tensor_entry(const std::string& fqn, const Value* state, const std::string& where) const {
  DcpEntry e;
  e.fqn = fqn;
  e.is_tensor = true;
  e.dtype = properties_dtype(field(state, "properties", where), where + ".properties");
  e.size = dims(field(state, "size", where), where + ".size");
  uint64_t numel = 1;
  for (int64_t d : e.size)
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) || numel > uint64_t(kMaxTensorElements))
      fail(where + ".size", dims_text(e.size) + " has more than 2^40 elements");
  const Value* chunks = field(state, "chunks", where);
  if (chunks->kind != Kind::List && chunks->kind != Kind::Tuple)
    fail(where + ".chunks", std::string("is a ") + kind_name(chunks->kind) + ", not a list");
  if (chunks->items.empty()) fail(where + ".chunks", "is empty: the tensor has no stored chunk");
  if (chunks->items.size() > kDcpMaxChunksPerTensor)
    fail(where + ".chunks", "lists " + std::to_string(chunks->items.size()) + " chunks (at most " +
                                std::to_string(kDcpMaxChunksPerTensor) + ")");
  for (size_t i = 0; i < chunks->items.size(); ++i) {
    const std::string at = where + ".chunks[" + std::to_string(i) + "]";
    const Value* cs = object(chunks->items[i], kMetadataModule, {"ChunkStorageMetadata"}, at);
    DcpChunk c;
    c.offsets = dims(field(cs, "offsets", at), at + ".offsets");
    c.sizes = dims(field(cs, "sizes", at), at + ".sizes");
    if (c.offsets.size() != e.size.size() || c.sizes.size() != e.size.size())
      fail(at, "offsets " + dims_text(c.offsets) + " and sizes " + dims_text(c.sizes) + " do not have the " +
                   std::to_string(e.size.size()) + " dimensions of the tensor's size " + dims_text(e.size));
    for (size_t d = 0; d < e.size.size(); ++d) {
      int64_t end = 0;
      if (__builtin_add_overflow(c.offsets[d], c.sizes[d], &end) || end > e.size[d])
        fail(at, "offsets " + dims_text(c.offsets) + " + sizes " + dims_text(c.sizes) +
                     " reach past the tensor's size " + dims_text(e.size) + " (dimension " + std::to_string(d) + ")");
    }
    e.chunks.push_back(std::move(c));
  }
  check_tiling(e, where);
  return e;
}

// The chunks, each inside the tensor (checked by the caller), tile it exactly
// when no two non-empty chunks share an element and their element counts
// add up to the tensor's. Overlap is found by a sweep along dimension 0:
// sorted by their first offset, a chunk is compared only with the chunks
// that start before it ends there (one neighbour each for FSDP's row shards).
void MetadataParser::check_tiling(const DcpEntry& e, const std::string& where) const {
  const size_t rank = e.size.size();
  uint64_t total = 1;
  for (int64_t d : e.size) total *= static_cast<uint64_t>(d);
  std::vector<size_t> order;
  uint64_t covered = 0;
  for (size_t i = 0; i < e.chunks.size(); ++i) {
    uint64_t n = 1;
    for (int64_t s : e.chunks[i].sizes) n *= static_cast<uint64_t>(s);  // <= total: inside the tensor
    if (n == 0) continue;
    covered += n;  // at most kDcpMaxChunksPerTensor x 2^40: no overflow
    order.push_back(i);
  }
  if (rank > 0) {
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return e.chunks[a].offsets[0] < e.chunks[b].offsets[0]; });
  }
  for (size_t x = 0; x < order.size(); ++x) {
    const DcpChunk& a = e.chunks[order[x]];
    for (size_t y = x + 1; y < order.size(); ++y) {
      const DcpChunk& b = e.chunks[order[y]];
      if (rank > 0 && b.offsets[0] >= a.offsets[0] + a.sizes[0]) break;
      bool overlap = true;
      for (size_t d = 0; d < rank && overlap; ++d)
        overlap = a.offsets[d] < b.offsets[d] + b.sizes[d] && b.offsets[d] < a.offsets[d] + a.sizes[d];
      if (overlap) {
        const size_t i = std::min(order[x], order[y]), j = std::max(order[x], order[y]);
        fail(where + ".chunks", "chunks[" + std::to_string(i) + "] (offsets " + dims_text(e.chunks[i].offsets) +
                                    ", sizes " + dims_text(e.chunks[i].sizes) + ") and chunks[" + std::to_string(j) +
                                    "] (offsets " + dims_text(e.chunks[j].offsets) + ", sizes " +
                                    dims_text(e.chunks[j].sizes) + ") overlap");
      }
    }
  }
  if (covered != total)
    fail(where + ".chunks", "cover " + std::to_string(covered) + " of the " + std::to_string(total) +
                                " elements of size " + dims_text(e.size) + ": a gap no chunk fills");
}

// relative_path names a file of the checkpoint's own directory: a plain,
// printable name (the provenance hash lists it one per line).
bool is_plain_file_name(const std::string& name) {
  if (!is_safe_key(name) || name.size() > 255) return false;
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7f) return false;
  return is_utf8(reinterpret_cast<const uint8_t*>(name.data()), name.size());
}

DcpMetadata MetadataParser::parse(const Value* root) {
  const Value* state = object(root, kMetadataModule, {"Metadata"}, "the root");
  DcpMetadata md;
  if (const Value* v = dict(state, "Metadata")->get("version"); v && v->kind != Kind::None)
    md.version = text(v, "Metadata.version");

  // planner_data: fqn -> the key path it was flattened from.
  std::map<std::string, std::vector<std::string>> paths;
  if (const Value* pd = state->get("planner_data"); pd && pd->kind != Kind::None) {
    dict(pd, "planner_data");
    for (const auto& [k, v] : pd->entries) {
      const std::string fqn = text(k, "planner_data key");
      const std::string at = "planner_data[" + quoted(fqn) + "]";
      if (v->kind != Kind::Tuple && v->kind != Kind::List)
        fail(at, std::string("is a ") + kind_name(v->kind) + ", not a key path tuple");
      if (v->items.empty() || v->items.size() > 256) fail(at, "is a key path of " + std::to_string(v->items.size()) + " elements");
      std::vector<std::string> path;
      for (const Value* p : v->items) {
        if (p->kind == Kind::String) path.push_back(p->bytes);
        else if (p->kind == Kind::Int) path.push_back(std::to_string(p->integer));
        else fail(at, std::string("holds a ") + kind_name(p->kind) + " (key paths hold str and int)");
      }
      paths[fqn] = std::move(path);
    }
  }

  // storage_data: (fqn, chunk offsets) -> where the chunk's bytes lie. A
  // repeated key replaces the earlier one, as the dict PyTorch builds does.
  struct Location {
    std::string file;
    uint64_t offset = 0, length = 0;
    std::string where;
  };
  std::map<std::pair<std::string, std::vector<int64_t>>, Location> storage;
  const Value* sd = dict(field(state, "storage_data", "Metadata"), "storage_data");
  size_t index = 0;
  for (const auto& [k, v] : sd->entries) {
    const std::string at = "storage_data entry " + std::to_string(index++);
    const Value* key = object(k, kMetadataModule, {"MetadataIndex"}, at + " key");
    const std::string fqn = text(field(key, "fqn", at + " key"), at + " key.fqn");
    const std::string where = "storage_data[" + quoted(fqn) + "]";
    std::vector<int64_t> offset;
    if (const Value* o = key->get("offset"); o && o->kind != Kind::None) offset = dims(o, where + " key.offset");
    const Value* info = object(v, kFilesystemModule, {"_StorageInfo"}, where);
    const std::string at_offset = where + " (chunk at " + dims_text(offset) + ")";
    Location loc;
    loc.file = text(field(info, "relative_path", at_offset), at_offset + ".relative_path");
    if (!is_plain_file_name(loc.file))
      fail(at_offset + ".relative_path", quoted(loc.file) + " is not a plain file name of the checkpoint directory");
    loc.offset = count(field(info, "offset", at_offset), at_offset + ".offset");
    loc.length = count(field(info, "length", at_offset), at_offset + ".length");
    if (const Value* t = info->get("transform_descriptors"); t && t->kind != Kind::None) {
      if (t->kind != Kind::List && t->kind != Kind::Tuple)
        fail(at_offset + ".transform_descriptors", std::string("is a ") + kind_name(t->kind) + ", not a list");
      if (!t->items.empty()) {
        std::string names;
        for (const Value* d : t->items)
          names += (names.empty() ? "" : ", ") + (d->kind == Kind::String ? quoted(d->bytes) : std::string(kind_name(d->kind)));
        fail(at_offset + ".transform_descriptors",
             "[" + names + "]: the chunk is stored transformed (e.g. zstd-compressed); ferry reads untransformed "
             "DCP only (save without the transform, or load and re-save it with torch)");
      }
    }
    loc.where = at_offset;
    storage[{fqn, offset}] = std::move(loc);
  }

  const Value* sdm = dict(field(state, "state_dict_metadata", "Metadata"), "state_dict_metadata");
  if (sdm->entries.size() > kDcpMaxEntries)
    fail("state_dict_metadata", "lists " + std::to_string(sdm->entries.size()) + " entries");
  std::set<std::string> seen;
  for (const auto& [k, v] : sdm->entries) {
    const std::string fqn = text(k, "state_dict_metadata key");
    if (!seen.insert(fqn).second) fail("state_dict_metadata", "lists " + quoted(fqn) + " twice");
    const std::string where = "state_dict_metadata[" + quoted(fqn) + "]";
    DcpEntry e;
    if (v->kind == Kind::Object && v->cls && v->cls->name == "BytesStorageMetadata") {
      // A non-tensor value: its record has no fields, its bytes one range.
      field_less(v, kMetadataModule, "BytesStorageMetadata", where);
      e.fqn = fqn;
      auto it = storage.find({fqn, {}});
      if (it == storage.end())
        fail(where, "no storage_data entry for the value (a key without offsets): its bytes are not in the checkpoint");
      DcpChunk c;
      c.file = it->second.file;
      c.offset = it->second.offset;
      c.length = it->second.length;
      e.chunks.push_back(std::move(c));
    } else {
      e = tensor_entry(fqn, object(v, kMetadataModule, {"TensorStorageMetadata"}, where), where);
      for (size_t i = 0; i < e.chunks.size(); ++i) {
        DcpChunk& c = e.chunks[i];
        auto it = storage.find({fqn, c.offsets});
        if (it == storage.end())
          fail(where + ".chunks[" + std::to_string(i) + "]",
               "no storage_data entry for the chunk at offsets " + dims_text(c.offsets) + ": its bytes are not in the checkpoint");
        c.file = it->second.file;
        c.offset = it->second.offset;
        c.length = it->second.length;
      }
    }
    auto p = paths.find(fqn);
    e.path = p != paths.end() ? p->second : std::vector<std::string>{fqn};
    md.entries.push_back(std::move(e));
  }
  return md;
}

// The model's entries: which are selected (and their tensor names), and why
// the others are not (checkpoint.h's selection for torch.save files, over
// planner_data's key paths).
struct Selection {
  std::string key;                              // the top-level key chosen; empty: a bare state dict
  std::vector<std::pair<size_t, std::string>> chosen;  // entry index, tensor name
  std::vector<std::pair<std::string, std::string>> ignored;
};

bool floating(const DcpEntry& e) {
  const DTypeInfo* info = dtype_object_info(e.dtype);
  return info && is_float(info->dtype);
}

Selection select_entries(const DcpMetadata& md, const std::string& label, const LoadOptions& options) {
  // The name an entry has below a top-level key, or "" when it is not below it.
  auto below = [](const DcpEntry& e, const std::string& key) -> std::string {
    if (e.path.size() >= 2 && e.path[0] == key) {
      std::string name;
      for (size_t i = 1; i < e.path.size(); ++i) name += (i > 1 ? "." : "") + e.path[i];
      return name;
    }
    if (e.path.size() == 1 && e.fqn.size() > key.size() + 1 && e.fqn.compare(0, key.size(), key) == 0 &&
        e.fqn[key.size()] == '.')
      return e.fqn.substr(key.size() + 1);  // no planner_data: the flattened key's own prefix
    return "";
  };
  std::vector<std::string> tops;  // top-level keys in file order
  for (const DcpEntry& e : md.entries)
    if (e.path.size() >= 2 && std::find(tops.begin(), tops.end(), e.path[0]) == tops.end()) tops.push_back(e.path[0]);
  auto key_list = [&] {
    std::string s;
    for (const std::string& t : tops) s += (s.empty() ? "'" : ", '") + t + "'";
    return s.empty() ? std::string("none (a flat state dict)") : s;
  };

  Selection sel;
  if (!options.key.empty()) {
    sel.key = options.key;
  } else if (!tops.empty()) {
    for (const char* known : kKnownStateDictKeys) {
      for (const DcpEntry& e : md.entries)
        if (e.is_tensor && floating(e) && !below(e, known).empty()) sel.key = known;
      if (!sel.key.empty()) break;
    }
    if (sel.key.empty()) {
      // The largest top-level dict holding only tensors.
      size_t best = 0;
      for (const std::string& t : tops) {
        size_t n = 0;
        bool all = true;
        for (const DcpEntry& e : md.entries) {
          if (below(e, t).empty()) continue;
          ++n;
          all = all && e.is_tensor;
        }
        if (all && n > best) {
          best = n;
          sel.key = t;
        }
      }
      if (sel.key.empty())
        throw Error(label + ": no state dict found (no top-level entry holds only tensors, none has a known "
                    "name); keys: " + key_list() + "; choose one with --key");
    }
  }
  for (size_t i = 0; i < md.entries.size(); ++i) {
    const DcpEntry& e = md.entries[i];
    std::string name = sel.key.empty() ? e.fqn : below(e, sel.key);
    if (name.empty()) {
      const std::string top = e.path.size() >= 2 ? e.path[0] : e.fqn;
      std::string reason = reason_for_top_level(top, nullptr);
      if (!e.is_tensor && reason == "not selected") reason = kDcpNonTensorReason;
      sel.ignored.emplace_back(e.fqn, e.path.size() >= 2 ? reason + " (under key '" + top + "')" : reason);
      continue;
    }
    sel.chosen.emplace_back(i, std::move(name));
  }
  if (!sel.key.empty() && sel.chosen.empty())
    throw Error(label + ": no key '" + sel.key + "' in the checkpoint; keys: " + key_list());
  return sel;
}

// Reads the chunks of one tensor.
class ChunkReader {
 public:
  ChunkReader(const std::string& dir, const std::string& metadata_label) : dir_(dir), metadata_label_(metadata_label) {}

  TensorRef read(const DcpEntry& e, const std::string& name, const DTypeInfo& dtype);
  // A non-tensor value's byte range lies inside its data file (never read).
  void check_value(const DcpEntry& e);
  // The data files read, by name.
  const std::map<std::string, std::shared_ptr<const MappedFile>>& files() const { return files_; }

 private:
  std::shared_ptr<const MappedFile> open(const std::string& file, const std::string& why);
  TensorRef read_chunk(const DcpEntry& e, size_t i, const DTypeInfo& dtype, std::string& label);

  const std::string& dir_;
  const std::string& metadata_label_;
  std::map<std::string, std::shared_ptr<const MappedFile>> files_;
};

std::shared_ptr<const MappedFile> ChunkReader::open(const std::string& file, const std::string& why) {
  auto it = files_.find(file);
  if (it != files_.end()) return it->second;
  std::shared_ptr<const MappedFile> mapped;
  try {
    mapped = std::make_shared<const MappedFile>(dir_ + "/" + file);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (the data file " + why + ")");
  }
  files_.emplace(file, mapped);
  return mapped;
}

void ChunkReader::check_value(const DcpEntry& e) {
  const DcpChunk& c = e.chunks.at(0);
  const auto file = open(c.file, metadata_label_ + " names for the value " + quoted(e.fqn));
  uint64_t end = 0;
  if (__builtin_add_overflow(c.offset, c.length, &end) || end > file->size())
    throw Error(metadata_label_ + ": storage_data[" + quoted(e.fqn) + "] (a non-tensor value): bytes [" +
                std::to_string(c.offset) + ", +" + std::to_string(c.length) + ") reach past the end of " + c.file +
                " (" + std::to_string(file->size()) + " bytes)");
}

// One chunk's range of its data file, read as the torch.save zip of one
// tensor that it is. `label` receives the range's name, for later messages.
TensorRef ChunkReader::read_chunk(const DcpEntry& e, size_t i, const DTypeInfo& dtype, std::string& label) {
  const DcpChunk& c = e.chunks[i];
  const std::string chunk = "tensor " + quoted(e.fqn) + " chunk " + std::to_string(i) + " at " + dims_text(c.offsets);
  const auto file = open(c.file, metadata_label_ + " names for " + chunk);
  uint64_t end = 0;
  if (__builtin_add_overflow(c.offset, c.length, &end) || end > file->size())
    throw Error(metadata_label_ + ": storage_data[" + quoted(e.fqn) + "] (chunk at " + dims_text(c.offsets) +
                "): bytes [" + std::to_string(c.offset) + ", +" + std::to_string(c.length) + ") reach past the end of " +
                c.file + " (" + std::to_string(file->size()) + " bytes)");
  label = file->path() + " bytes [" + std::to_string(c.offset) + ", " + std::to_string(end) + ") (" + chunk + ")";
  const uint8_t* bytes = file->data() + c.offset;
  if (!ZipReader::has_zip_signature(bytes, c.length)) {
    const bool safetensors = c.length >= 9 && bytes[8] == '{';
    throw Error(label + ": " +
                (safetensors ? std::string("a safetensors-format chunk (a DCP saved with the safetensors "
                                           "serialization format): ferry reads torch.save-format DCP only")
                             : std::string("not a torch.save zip (no zip signature)")));
  }
  const ZipReader zip(bytes, c.length, label);
  const bool big_endian = read_zip_byte_order(zip);
  const ZipEntry* pkl = zip.find("data.pkl");
  if (!pkl) throw Error(label + ": zip archive without a data.pkl record: not a torch.save of a tensor");
  const ByteSpan pickle_bytes = zip.stored(*pkl);
  StorageTable table;
  ZipStorageLoader loader(zip, "data", big_endian, table);
  const PickleTree tree = unpickle(pickle_bytes.data, pickle_bytes.size, zip.describe(*pkl), &loader);
  Checkpoint scratch;
  TensorCollector collect(label, table, scratch);
  collect.add(e.fqn, tree.root);
  if (scratch.tensors.size() != 1) {
    const std::string why = scratch.ignored.empty() ? describe_value(tree.root) : scratch.ignored[0].second;
    throw Error(label + ": holds " + why + ", not the chunk's tensor");
  }
  TensorRef t = std::move(scratch.tensors[0]);
  if (t.shape != c.sizes)
    throw Error(label + ": holds a tensor of shape " + dims_text(t.shape) + ", but the metadata gives the chunk sizes " +
                dims_text(c.sizes));
  if (t.dtype != dtype.dtype)
    throw Error(label + ": holds a " + dtype_name(t.dtype) + " tensor, but the metadata gives dtype " + e.dtype);
  // The storage keeps the data file mapped as long as any view of it lives.
  auto storage = std::make_shared<Storage>(*t.storage);
  storage->key = c.file + " @" + std::to_string(c.offset);  // where inspect shows it lies
  storage->keep_alive = file;
  t.storage = std::move(storage);
  return t;
}

// Copies the elements of `chunk` (a strided view, any byte order) into
// `dst`, the C-order little-endian bytes of the whole tensor of `size`, at
// the chunk's offsets.
void scatter(const TensorRef& chunk, const std::vector<int64_t>& offsets, const std::vector<int64_t>& size,
             size_t esize, uint8_t* dst) {
  const size_t rank = size.size();
  std::vector<int64_t> dst_stride(rank, 1);
  for (size_t d = rank; d-- > 1;) dst_stride[d - 1] = dst_stride[d] * size[d];
  const int64_t n = chunk.numel();
  if (n == 0) return;
  const bool swap = chunk.storage->big_endian && esize > 1;
  const uint8_t* src = chunk.storage->data;
  if (rank == 0) {
    for (size_t b = 0; b < esize; ++b) dst[b] = src[chunk.offset * esize + (swap ? esize - 1 - b : b)];
    return;
  }
  const int64_t inner = chunk.shape[rank - 1];
  const int64_t src_step = chunk.stride[rank - 1];
  std::vector<int64_t> idx(rank, 0);  // idx[rank - 1] stays 0: the inner run
  for (int64_t done = 0; done < n; done += inner) {
    int64_t s = chunk.offset, o = 0;
    for (size_t d = 0; d < rank; ++d) {
      s += idx[d] * chunk.stride[d];
      o += (offsets[d] + idx[d]) * dst_stride[d];
    }
    uint8_t* out = dst + o * static_cast<int64_t>(esize);
    if (!swap && src_step == 1) {
      std::memcpy(out, src + s * static_cast<int64_t>(esize), static_cast<size_t>(inner) * esize);
    } else {
      for (int64_t k = 0; k < inner; ++k) {
        const uint8_t* p = src + (s + k * src_step) * static_cast<int64_t>(esize);
        for (size_t b = 0; b < esize; ++b) out[k * static_cast<int64_t>(esize) + static_cast<int64_t>(b)] = p[swap ? esize - 1 - b : b];
      }
    }
    for (size_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < chunk.shape[d]) break;
      idx[d] = 0;
    }
  }
}

TensorRef ChunkReader::read(const DcpEntry& e, const std::string& name, const DTypeInfo& dtype) {
  std::vector<TensorRef> chunks;
  std::vector<std::string> labels(e.chunks.size());
  for (size_t i = 0; i < e.chunks.size(); ++i) chunks.push_back(read_chunk(e, i, dtype, labels[i]));
  if (chunks.size() == 1) {
    TensorRef t = std::move(chunks[0]);  // the chunk is the whole tensor (checked: it tiles it)
    t.name = name;
    return t;
  }
  // Several chunks: every element they view must be stored (a zero-stride
  // view could declare 2^40 elements over one), so the reassembled tensor
  // is never larger than the bytes the data files hold.
  const size_t esize = dtype.size;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const TensorRef& t = chunks[i];
    const uint64_t stored = t.storage->nbytes / esize;
    if (static_cast<uint64_t>(t.numel()) > stored)
      throw Error(labels[i] + ": a view of " + std::to_string(t.numel()) + " elements over a storage of " +
                  std::to_string(stored) + ": a sharded chunk must store every element it holds");
  }
  uint64_t numel = 1;
  for (int64_t d : e.size) numel *= static_cast<uint64_t>(d);
  auto bytes = std::make_shared<std::string>(numel * esize, '\0');
  uint8_t* dst = reinterpret_cast<uint8_t*>(bytes->data());
  for (size_t i = 0; i < chunks.size(); ++i) scatter(chunks[i], e.chunks[i].offsets, e.size, esize, dst);
  auto storage = std::make_shared<Storage>();
  storage->key = e.fqn + " (" + std::to_string(chunks.size()) + " chunks reassembled)";
  storage->location = chunks[0].storage->location;
  storage->dtype = dtype.dtype;
  storage->numel = numel;
  storage->data = reinterpret_cast<const uint8_t*>(bytes->data());
  storage->nbytes = bytes->size();
  storage->owned = std::move(bytes);
  TensorRef t;
  t.name = name;
  t.dtype = dtype.dtype;
  t.shape = e.size;
  t.stride.assign(e.size.size(), 1);
  for (size_t d = e.size.size(); d-- > 1;) t.stride[d - 1] = t.stride[d] * e.size[d];
  t.offset = 0;
  t.storage = std::move(storage);
  return t;
}

std::string strip_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The metadata file of `dir`: .metadata, else the only __<rank>.metadata.
std::string find_metadata(const std::string& dir) {
  if (exists(dir + "/.metadata")) return ".metadata";
  std::vector<std::string> per_rank;
  if (auto listing = std::unique_ptr<DIR, int (*)(DIR*)>(::opendir(dir.c_str()), ::closedir)) {
    while (const dirent* d = ::readdir(listing.get())) {
      const std::string n = d->d_name;
      if (n.size() > 11 && n.compare(0, 2, "__") == 0 && n.compare(n.size() - 9, 9, ".metadata") == 0) per_rank.push_back(n);
    }
  }
  std::sort(per_rank.begin(), per_rank.end());
  if (per_rank.size() == 1) return per_rank[0];
  if (per_rank.size() > 1)
    throw Error(dir + ": no .metadata, but " + std::to_string(per_rank.size()) + " per-rank metadata files (" +
                per_rank[0] + ", ...): a DCP saved without collectives by several ranks is not one checkpoint");
  if (exists(dir + "/model.safetensors.index.json"))
    throw Error(dir + ": a Hugging Face safetensors directory (model.safetensors.index.json), not a distributed "
                "checkpoint: convert its .safetensors file");
  throw Error(dir + ": a directory without a .metadata file: not a distributed checkpoint (torch.distributed.checkpoint)");
}

}  // namespace

DcpMetadata parse_dcp_metadata(const uint8_t* data, size_t size, const std::string& label) {
  UnpickleLimits limits;
  limits.allow_global = dcp_global;
  const PickleTree tree = unpickle(data, size, label, nullptr, limits);
  if (tree.end != size)
    throw Error(label + ": " + std::to_string(size - tree.end) + " bytes after the pickle's STOP at byte " +
                std::to_string(tree.end));
  return MetadataParser(label).parse(tree.root);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Checkpoint read_dcp_directory(const std::string& dir_in, const LoadOptions& options, std::vector<DcpFile>* files_read) {
  const std::string dir = strip_trailing_slashes(dir_in);
  const std::string metadata_name = find_metadata(dir);
  auto metadata_file = std::make_shared<const MappedFile>(dir + "/" + metadata_name);
  const std::string label = metadata_file->path();
  const DcpMetadata md = parse_dcp_metadata(metadata_file->data(), metadata_file->size(), label);
  const Selection sel = select_entries(md, label, options);

  Checkpoint out;
  out.path = dir_in;
  ChunkReader reader(dir, label);
  for (const auto& [index, name] : sel.chosen) {
    const DcpEntry& e = md.entries[index];
    if (!e.is_tensor) {
      out.ignored.emplace_back(name, kDcpNonTensorReason);
      continue;
    }
    const DTypeInfo* info = dtype_object_info(e.dtype);
    if (!info) throw Error(label + ": state_dict_metadata[" + quoted(e.fqn) + "].properties: unknown dtype 'torch." + e.dtype + "'");
    if (!is_float(info->dtype)) {
      out.ignored.emplace_back(name, info->dtype == DType::Unknown ? "unsupported dtype " + std::string(info->name)
                                                                  : "not a floating-point tensor (" + std::string(info->name) + ")");
      continue;
    }
    out.tensors.push_back(reader.read(e, name, *info));
  }
  for (const auto& ig : sel.ignored) out.ignored.push_back(ig);
  for (const DcpEntry& e : md.entries)
    if (!e.is_tensor) reader.check_value(e);

  std::set<std::string> data_files;
  for (const auto& kv : reader.files()) data_files.insert(kv.first);
  const std::string files = std::to_string(data_files.size()) + " data file" + (data_files.size() == 1 ? "" : "s");
  out.form = sel.key.empty() ? "DCP directory (" + files + ") state_dict"
                             : "DCP directory (" + files + ") training checkpoint (key '" + sel.key + "')";
  if (files_read) {
    files_read->clear();
    files_read->push_back({metadata_name, metadata_file});
    for (const auto& [n, f] : reader.files()) files_read->push_back({n, f});
    std::sort(files_read->begin(), files_read->end(), [](const DcpFile& a, const DcpFile& b) { return a.name < b.name; });
  }
  return out;
}

std::string dcp_sha256(const std::vector<DcpFile>& files) {
  std::vector<const DcpFile*> sorted;
  for (const DcpFile& f : files) sorted.push_back(&f);
  std::sort(sorted.begin(), sorted.end(), [](const DcpFile* a, const DcpFile* b) { return a->name < b->name; });
  std::string listing;
  for (const DcpFile* f : sorted) listing += sha256_file(*f->file) + "  " + f->name + "\n";
  return sha256_hex(reinterpret_cast<const uint8_t*>(listing.data()), listing.size());
}

}  // namespace ferry::conv
