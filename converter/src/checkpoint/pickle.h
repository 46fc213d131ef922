// A restricted unpickler: reads a Python pickle (protocols 2-5, the opcodes
// PyTorch checkpoints use; PYTORCH_FORMAT.md §1.2) into a tree of plain data
// without executing anything.
//
// Safety model (PYTORCH_FORMAT.md §5):
//   - GLOBAL / STACK_GLOBAL never import anything. A (module, name) pair is
//     classified into `GlobalKind`: a known callable (the set
//     torch.load(weights_only=True) allows, e.g. `collections.OrderedDict`,
//     `torch._utils._rebuild_tensor_v2`), an inert class reference (any other
//     name, e.g. `__main__.Net`), or refused outright (`os`, `posix`, `nt`,
//     `sys`, `subprocess`, `builtins.eval`, ...: Error at GLOBAL time).
//   - REDUCE runs only a fixed interpretation of the known callables (an
//     OrderedDict() becomes an empty Dict, _rebuild_tensor_v2(...) a Tensor,
//     ...). REDUCE of anything else is refused with an Error naming
//     `module.name` and the opcode's byte offset, with one exception a
//     reader opts into (UnpickleLimits::call_placeholders): REDUCE of an
//     inert class reference (GlobalKind::Class, never a refused global, nor
//     a dtype or storage class) becomes a Kind::Placeholder that records
//     the callable, its arguments and the byte offset, and is never called.
//     The reader then checks where every placeholder ended up
//     (reader_internal.h: check_call_placeholders): only as a plain
//     attribute of a pickled nn.Module (torch 0.3/0.4 stored the module's
//     `_backend`, torch.nn.backends.thnn._get_thnn_function_backend(), so);
//     anywhere else (a state dict entry, a parameter, a tensor's storage,
//     the root) it is refused with the same message REDUCE gave before.
//   - NEWOBJ / NEWOBJ_EX of a class make a generic Object that records the
//     class and arguments; BUILD stores its state. Nothing else happens.
//   - BINPERSID hands the persistent id to a PersistentLoader supplied by the
//     caller (the checkpoint reader resolves ('storage', ...) tuples there).
//   - Every length is checked against the bytes remaining; stack depth, MARK
//     depth, memo size, value count, string size and container nesting are
//     capped (UnpickleLimits). The interpreter is a loop over opcodes and
//     never recurses.
//
// Memory: every Value lives in the PickleTree's arena and is freed with it in
// one flat pass (no recursive destructors, so a 200k-deep tree cannot
// overflow the C stack). Containers hold non-owning pointers, which is also
// how pickle's shared references work: a memoized OrderedDict filled after
// it was stored is the same object everywhere. Trees can contain cycles
// (a list appended to itself); code that walks a tree must bound its depth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry::conv {

struct Storage;  // tensor_ref.h: Kind::Storage values carry one

// Classification of a GLOBAL (module, name). Only these are given meaning;
// `Class` is every name not listed (an inert reference).
enum class GlobalKind : uint8_t {
  Class,                  // anything else: may be NEWOBJ'd, never REDUCE'd
  OrderedDict,            // collections.OrderedDict (also builtins.dict)
  Counter,                // collections.Counter: a Dict
  Set,                    // builtins.set / __builtin__.set
  FrozenSet,              // builtins.frozenset
  ByteArray,              // builtins.bytearray
  Complex,                // builtins.complex -> Call
  CodecsEncode,           // _codecs.encode(str, 'latin1') -> Bytes
  TorchSize,              // torch.Size(tuple) -> Tuple
  TorchDevice,            // torch.device(...) -> Call
  DTypeObject,            // torch.float32, torch.bfloat16, ... (name kept)
  StorageClass,           // torch.FloatStorage, ... (typed storage class)
  UntypedStorage,         // torch.UntypedStorage / torch.storage.UntypedStorage
  TensorClass,            // torch.Tensor, torch.nn.parameter.Parameter (REDUCE of
                          // Parameter(t, requires_grad), 0.4-era files, is t)
  RebuildTensor,          // torch._utils._rebuild_tensor (v1: storage, offset, size, stride)
  RebuildTensorV2,        // torch._utils._rebuild_tensor_v2
  RebuildTensorV3,        // torch._utils._rebuild_tensor_v3
  RebuildParameter,       // torch._utils._rebuild_parameter
  RebuildParameterWithState,  // torch._utils._rebuild_parameter_with_state
  RebuildFromTypeV2,      // torch._tensor._rebuild_from_type_v2
  RebuildOther,           // other torch._utils._rebuild_* (qtensor, sparse, ...) -> Call
  TypeTagIdentity,        // torch.jit._pickle.restore_type_tag / build_*list -> arg 0
  // numpy, read as data (what torch.load(weights_only=True) allows in current
  // releases); numpy.core.* and numpy 2's numpy._core.* spellings alike:
  NumpyReconstruct,       // multiarray._reconstruct(ndarray, (0,), b'b') -> Object whose BUILD
                          // state (version, shape, dtype, is_fortran, bytes) makes it a Tensor
  NumpyDType,             // numpy.dtype('f4', False, True) -> Call; BUILD gives the byte order
  NumpyScalar,            // multiarray.scalar(dtype, bytes) -> Call (kept, never a tensor)
  // Constructors of plain values a distributed checkpoint's .metadata holds
  // (PYTORCH_FORMAT.md §9), REDUCE'd with scalar arguments only and kept as
  // an inert Call: torch.serialization._get_layout('torch.strided'),
  // torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING(0) (an enum),
  // pathlib.PosixPath('/', 'tmp', ...) (the path DCP saved to).
  InertValue,
};

// `module.name` is refused even as a reference (os, posix, nt, sys,
// subprocess, builtins.eval/exec/__import__/getattr, ...).
bool is_refused_global(std::string_view module, std::string_view name);
// The kind of a global that is not refused.
GlobalKind classify_global(std::string_view module, std::string_view name);

enum class Kind : uint8_t {
  None,
  Bool,
  Int,       // fits int64
  BigInt,    // LONG1/LONG4 outside int64: `bytes` holds LE two's complement
  Float,
  String,    // `bytes` holds UTF-8 text
  Bytes,     // `bytes` holds raw bytes (BINBYTES, SHORT_BINSTRING, ...)
  Tuple,     // `items`
  List,      // `items`
  Dict,      // `entries` in insertion order (OrderedDict or dict)
  Set,       // `items` (set and frozenset)
  Global,    // `module`, `name`, `global_kind`
  Object,    // NEWOBJ of a class: `cls`, `args`, `state` (set by BUILD)
  Call,      // REDUCE of a known callable kept as data: `cls` = callable, `args`
  Storage,   // result of the PersistentLoader: `storage`, `persistent_id`
  Tensor,    // _rebuild_tensor*: `tensor`
  // REDUCE of an inert class reference, never made (call_placeholders):
  // `cls` = the callable, `args`, `state` (a BUILD after it), `integer` =
  // the REDUCE's byte offset in the stream.
  Placeholder,
};

const char* kind_name(Kind k);  // "int", "str", "OrderedDict", ...

// Well-formed UTF-8 (no overlong forms, nothing above U+10FFFF), allowing
// encoded surrogates as CPython's 'surrogatepass' writes them. The readers
// check every name that reaches messages and files with it.
bool is_utf8(const uint8_t* p, size_t n);

struct Value;

// A tensor as a rebuild call described it; the storage is resolved and the
// view bounds are checked by the caller (checkpoint.cpp), which knows sizes.
struct TensorInfo {
  const Value* storage = nullptr;  // the rebuild's first argument
  int64_t offset = 0;              // in elements
  std::vector<int64_t> size;
  std::vector<int64_t> stride;     // in elements
  bool requires_grad = false;
  const Value* dtype = nullptr;    // _rebuild_tensor_v3's dtype Global, else null
};

struct Value {
  Kind kind = Kind::None;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0.0;
  std::string bytes;                  // String / Bytes / BigInt payload
  std::vector<Value*> items;          // Tuple / List / Set
  std::vector<std::pair<Value*, Value*>> entries;  // Dict
  // Global
  std::string module, name;
  GlobalKind global_kind = GlobalKind::Class;
  // Object / Call / Placeholder
  const Value* cls = nullptr;
  const Value* args = nullptr;
  const Value* state = nullptr;       // BUILD state (also kept for Dict/Tensor)
  // Storage
  std::shared_ptr<const Storage> storage;
  const Value* persistent_id = nullptr;
  // Tensor
  std::unique_ptr<TensorInfo> tensor;
  // Nesting depth as built (leaves are 0); used to cap nesting.
  uint32_t depth = 0;

  bool is(Kind k) const { return kind == k; }
  // Dict lookup by string key (linear; for small dicts), or nullptr.
  const Value* get(std::string_view key) const;
  // "module.name" of a Global (or of an Object's / Call's class).
  std::string qualified_name() const;
};

// Owns every Value of one unpickling; freeing it is one flat pass.
class ValueArena {
 public:
  explicit ValueArena(size_t max_values = 0) : max_values_(max_values) {}
  // A new None value. Throws Error when the value cap is exceeded.
  Value* make();
  Value* make(Kind kind) {
    Value* v = make();
    v->kind = kind;
    return v;
  }
  Value* make_string(std::string s, Kind kind = Kind::String) {
    Value* v = make(kind);
    v->bytes = std::move(s);
    return v;
  }
  Value* make_int(int64_t i) {
    Value* v = make(Kind::Int);
    v->integer = i;
    return v;
  }
  size_t size() const { return values_.size(); }

 private:
  std::deque<Value> values_;  // deque: stable addresses, no per-value allocation
  size_t max_values_;
};

// Resolves a persistent id (BINPERSID) into a value, normally a Kind::Storage
// made in `arena`. Throw Error to refuse the id; the unpickler adds the
// stream label and byte offset to the message.
class PersistentLoader {
 public:
  virtual ~PersistentLoader() = default;
  virtual Value* load(const Value& pid, ValueArena& arena) = 0;
};

struct UnpickleLimits {
  size_t max_stack = size_t{1} << 20;       // values on the stack
  size_t max_marks = 4096;                  // open MARKs
  size_t max_memo = size_t{1} << 22;        // memo entries
  size_t max_values = size_t{1} << 24;      // values built in total
  size_t max_string = size_t{256} << 20;    // bytes in one string / bytes value
  uint32_t max_nesting = 1000;              // container nesting depth
  size_t max_tensor_dims = 64;
  // When set, only the globals it accepts may appear at all: any other
  // (module, name) is refused at GLOBAL / STACK_GLOBAL time, before anything
  // is built from it. A reader whose stream may name only a known set of
  // classes (a DCP .metadata: checkpoint/dcp.h) narrows the unpickler to
  // that set; is_refused_global() still applies first.
  bool (*allow_global)(std::string_view module, std::string_view name) = nullptr;
  // When set, REDUCE of a GlobalKind::Class callable makes an inert
  // Kind::Placeholder instead of an Error. Only a reader that then checks
  // every placeholder's place (check_call_placeholders) sets it: torch.save
  // main pickles (zip, legacy stream, pre-0.3 tar), which may hold whole
  // modules.
  bool call_placeholders = false;
};

struct PickleTree {
  std::unique_ptr<ValueArena> arena;
  const Value* root = nullptr;
  size_t end = 0;  // offset just past STOP (the next pickle may start there)
};

// Unpickles the stream in [data, data + size) up to its STOP. `label` names
// the stream in errors ("model.pt: record 'archive/data.pkl'"); `loader` may
// be null, in which case persistent ids are refused. Throws Error with the
// label, the byte offset and the opcode on anything malformed or refused.
PickleTree unpickle(const uint8_t* data, size_t size, const std::string& label,
                    PersistentLoader* loader = nullptr, const UnpickleLimits& limits = {});

}  // namespace ferry::conv
