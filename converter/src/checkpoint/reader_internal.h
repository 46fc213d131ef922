// Shared internals of the checkpoint readers. Not part of the converter's
// interface: only the reader modules include this header. It declares what
// the readers have in common and none of the readers themselves, so no
// reader depends on another; the dispatcher (checkpoint.cpp) includes the
// readers' own headers.
//
//   storages.cpp        dtype tables, view checks, the storage table,
//                       storage persistent ids, zip storages, byte order
//   select.cpp          from a pickled tree to the Checkpoint: tensors,
//                       state-dict selection, what is ignored and why
//   module_walk.cpp     whole pickled nn.Modules (§4c) and hyper-parameters
//   materialize.cpp     to_float32 / to_float32_range (tensor_ref.h)
// and the readers, one per container (each with its header):
//   zip_checkpoint.cpp  torch.save zip archives (PYTORCH_FORMAT.md §1)
//   legacy.cpp          the pre-1.6 pickle stream (§2)
//   legacy_tar.cpp      the pre-0.3 tar format (torch 0.1-0.2)
//   torchscript.cpp     torch.jit.save archives (§3)
//   safetensors.cpp     safetensors files (§6)
//   pt2.cpp             torch.export archives (§8), with pt2_json.cpp (the
//                       graph JSON and weights configs) and aten_schema.cpp
//
// Every reader ends in the same Checkpoint: tensors in state-dict order that
// view the mapped file, `ignored` entries with a reason, and `attributes`
// (hyper-parameters keyed "module.path.name", wrapper prefixes stripped).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/pickle.h"
#include "io/zip_reader.h"

namespace ferry::conv::detail {

// ---------------------------------------------------------------------------
// dtypes as files name them. `size` is known even for dtypes ferry does not
// convert (complex, quantized, float8, ...), so their views are still checked.

struct DTypeInfo {
  DType dtype;       // Unknown for dtypes ferry does not convert
  const char* name;  // torch's name, for messages
  size_t size;       // bytes per element
};

// torch.<Name>Storage classes ("FloatStorage", ...), or nullptr.
const DTypeInfo* storage_class_info(const std::string& name);
// torch.<dtype> objects of _rebuild_tensor_v3 ("float16", "half", ...), or nullptr.
const DTypeInfo* dtype_object_info(const std::string& name);
// UntypedStorage counts bytes.
extern const DTypeInfo kUntypedInfo;

// Tensors are capped at 2^40 elements: enough for any model ferry targets,
// and it keeps a zero-stride "broadcast" view from asking for exabytes.
constexpr int64_t kMaxTensorElements = int64_t{1} << 40;

// A strided view must stay inside its storage: offset + Σ (size_i − 1)·stride_i
// < storage_elements, overflow-checked (empty tensors read nothing). `what`
// starts the error message ("model.pt: tensor 'fc.weight'").
void check_view(const std::string& what, const std::vector<int64_t>& size,
                const std::vector<int64_t>& stride, int64_t offset, uint64_t storage_elements);

// A storage record key: non-empty, no '/', '\\', NUL, "." or "..".
bool is_safe_key(const std::string& key);

// ---------------------------------------------------------------------------
// Storages, cached by key: shared storages and views repeat the same key.
// The table owns them; tensors share ownership through TensorRef::storage.

class StorageTable {
 public:
  struct Entry {
    std::shared_ptr<Storage> storage;
    DTypeInfo info;
  };

  const Entry* find(const std::string& key) const;
  // Adds `storage` under `key` (normally storage->key). The key must be new.
  const Entry& add(const std::string& key, std::shared_ptr<Storage> storage, const DTypeInfo& info);
  // The element type a storage was declared with, or nullptr for a storage
  // this table did not make.
  const DTypeInfo* info_of(const Storage* s) const;
  size_t size() const { return by_key_.size(); }

 private:
  std::unordered_map<std::string, Entry> by_key_;
  std::unordered_map<const Storage*, DTypeInfo> by_storage_;
};

// The fields of a ('storage', storage_type, key, location, numel, ...)
// persistent id, validated (known storage class, safe key, numel >= 0).
struct StorageId {
  const DTypeInfo* info = nullptr;
  std::string key;
  std::string location;
  uint64_t numel = 0;
};
// `arity` is the tuple length the container writes (5 in zip archives, 6 in
// the legacy stream, whose last item is the view metadata).
StorageId parse_storage_id(const Value& pid, size_t arity);

// Resolves the persistent ids of `<folder>.pkl` in a zip archive against its
// `<folder>/<key>` records ("data" for torch.save and TorchScript weights,
// "constants" for TorchScript constants).
class ZipStorageLoader : public PersistentLoader {
 public:
  ZipStorageLoader(const ZipReader& zip, std::string folder, bool big_endian, StorageTable& table)
      : zip_(zip), folder_(std::move(folder)), big_endian_(big_endian), table_(table) {}
  Value* load(const Value& pid, ValueArena& arena) override;

 private:
  const ZipReader& zip_;
  std::string folder_;
  bool big_endian_;
  StorageTable& table_;
};

// Validates the `version` / `.data/version` record and reads `byteorder`:
// true when the archive's tensor data is big-endian.
bool read_zip_byte_order(const ZipReader& zip);

// ---------------------------------------------------------------------------
// From pickled values to the Checkpoint.

// "object of class __main__.Net", "int", "torch._utils._rebuild_qtensor(...)".
std::string describe_value(const Value* v);
// A dict key as text (non-string keys shown readably).
std::string key_text(const Value* k);

// Turns tensor values into bounds-checked TensorRefs appended to out.tensors
// (non-tensors and non-float tensors go to out.ignored with the reason).
class TensorCollector {
 public:
  // `path` names the file in errors; `table` made every storage the tensors
  // may refer to.
  TensorCollector(const std::string& path, const StorageTable& table, Checkpoint& out)
      : path_(path), table_(table), out_(out) {}

  // Adds the entries of a state dict, in order.
  void add_state_dict(const Value* dict);
  // Adds one state-dict entry `name` holding `v`.
  void add(const std::string& name, const Value* v);

 private:
  const std::string& path_;
  const StorageTable& table_;
  Checkpoint& out_;
};

// The keys a training checkpoint keeps its model's state dict under, in the
// order they are looked for.
constexpr size_t kKnownStateDictKeyCount = 7;
extern const char* const kKnownStateDictKeys[kKnownStateDictKeyCount];

// Why a top-level entry `key` beside the selected state dict is not used:
// "optimizer state", "scheduler state", "grad scaler state" by its name,
// else by its value `v` ("not selected (dict)", ...; "not selected" for null).
std::string reason_for_top_level(const std::string& key, const Value* v);

// Picks the model out of an unpickled torch.save object and fills `out`
// (PYTORCH_FORMAT.md §4): a bare state dict, a training-checkpoint dict (known
// key, --key, or the largest all-tensor dict; the other top-level entries are
// listed as ignored under their own dotted paths), or a whole pickled module,
// alone or under a key. `container` starts out.form ("zip", "legacy
// (pre-1.6)").
void select_tensors(const Value* root, const std::string& container, const std::string& path,
                    const StorageTable& table, const LoadOptions& options, Checkpoint& out);

// ---------------------------------------------------------------------------
// module_walk.cpp: whole modules and hyper-parameters.

// Emits the state dict of a pickled nn.Module (an inert Object whose BUILD
// state holds _parameters, _buffers, _non_persistent_buffers_set, _modules)
// in state_dict() order: own parameters, persistent buffers, then children
// with "child." prefixes, depth first. Records the hyper-parameters of every
// module (see record_hyperparameters). Iterative; a module that contains
// itself is refused, and the number of module visits is bounded.
void collect_module(const Value* module, const std::string& path, TensorCollector& collect,
                    Checkpoint& out);

// The placeholders a stream unpickled with UnpickleLimits::call_placeholders
// holds (calls of inert class references, never made: pickle.h) must each
// sit only as a plain attribute of a pickled nn.Module, or inside one (a
// module's `_backend`, a functools.partial in its __dict__); not in its
// _parameters, _buffers or _modules, not as a tensor's storage, not in a
// state dict, not as the root. Walks the tree from `root` (each value
// visited at most twice: shared and cyclic trees are fine) and throws the
// Error REDUCE would have thrown for the first placeholder found elsewhere:
// "<label>: refused REDUCE of 'module.name' (not an allowlisted callable)
// at byte N (opcode 0x52 REDUCE): ..." with where it was found.
void check_call_placeholders(const Value* root, const std::string& label);

// The state dict of an Object: its BUILD state, or state[0] of a
// (dict, slots) tuple; nullptr when there is none.
const Value* object_state(const Value* object);

// Hyper-parameters ferry records from modules: batch_first, nonlinearity,
// mode, proj_size, bidirectional, num_layers, hidden_size, input_size, bias.
bool is_hyperparameter(std::string_view name);
// Records the hyper-parameters among a module's attributes (a dict of
// name -> value): bools as "true"/"false", ints in decimal, strings as is.
// An RNN's `mode` (RNN_TANH / RNN_RELU: what forward() runs) also sets its
// `nonlinearity`.
void record_hyperparameters(const Value* attributes, const std::string& module_path, Checkpoint& out);
// Records the class of a module object (the last part of its qualified name)
// as its kClassAttribute, and appends the object to out.module_objects (the
// walkers call it in depth-first order), returning that entry.
ModuleObject& record_class(const Value* object, const std::string& module_path, Checkpoint& out);
// Same for one attribute given as text (TorchScript Final constants).
void record_hyperparameter(const std::string& module_path, const std::string& name,
                           const std::string& value, Checkpoint& out);

}  // namespace ferry::conv::detail
