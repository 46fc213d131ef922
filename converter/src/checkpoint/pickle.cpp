#include "checkpoint/pickle.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "checkpoint/tensor_ref.h"
#include "error.h"

namespace ferry::conv {

// ---------------------------------------------------------------------------
// Globals: refused names and the allowlist.

namespace {

bool module_in(std::string_view module, std::initializer_list<std::string_view> roots) {
  for (std::string_view root : roots) {
    if (module == root) return true;
    if (module.size() > root.size() && module.compare(0, root.size(), root) == 0 &&
        module[root.size()] == '.')
      return true;
  }
  return false;
}

bool name_in(std::string_view name, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names)
    if (name == n) return true;
  return false;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool is_refused_global(std::string_view module, std::string_view name) {
  // Whole modules whose only use in a pickle is running code or touching the
  // system. Submodules (os.path, ...) are covered too.
  if (module_in(module, {"sys", "os", "posix", "nt", "subprocess", "shutil", "socket", "ctypes",
                         "importlib", "runpy", "pty", "marshal", "pickle", "_pickle", "code",
                         "codeop", "commands", "popen2", "webbrowser", "multiprocessing", "signal"}))
    return true;
  if (module == "builtins" || module == "__builtin__")
    return name_in(name, {"eval", "exec", "execfile", "compile", "__import__", "getattr", "setattr",
                          "delattr", "globals", "locals", "vars", "open", "input", "breakpoint",
                          "apply", "exit", "quit", "help", "reload"});
  return false;
}

GlobalKind classify_global(std::string_view module, std::string_view name) {
  if (module == "collections") {
    if (name == "OrderedDict") return GlobalKind::OrderedDict;
    if (name == "Counter") return GlobalKind::Counter;
  } else if (module == "builtins" || module == "__builtin__") {
    if (name == "dict") return GlobalKind::OrderedDict;
    if (name == "set") return GlobalKind::Set;
    if (name == "frozenset") return GlobalKind::FrozenSet;
    if (name == "bytearray") return GlobalKind::ByteArray;
    if (name == "complex") return GlobalKind::Complex;
  } else if (module == "numpy.core.multiarray" || module == "numpy._core.multiarray") {
    if (name == "_reconstruct") return GlobalKind::NumpyReconstruct;
    if (name == "scalar") return GlobalKind::NumpyScalar;
  } else if (module == "numpy") {
    if (name == "dtype") return GlobalKind::NumpyDType;
  } else if (module == "_codecs") {
    if (name == "encode") return GlobalKind::CodecsEncode;
  } else if (module == "torch.serialization") {
    if (name == "_get_layout") return GlobalKind::InertValue;
  } else if (module == "torch.distributed.checkpoint.metadata") {
    if (name == "_MEM_FORMAT_ENCODING") return GlobalKind::InertValue;
  } else if (module == "pathlib" || module == "pathlib._local") {
    if (name == "PosixPath" || name == "PurePosixPath") return GlobalKind::InertValue;
  } else if (module == "torch._utils") {
    if (name == "_rebuild_tensor") return GlobalKind::RebuildTensor;
    if (name == "_rebuild_tensor_v2") return GlobalKind::RebuildTensorV2;
    if (name == "_rebuild_tensor_v3") return GlobalKind::RebuildTensorV3;
    if (name == "_rebuild_parameter") return GlobalKind::RebuildParameter;
    if (name == "_rebuild_parameter_with_state") return GlobalKind::RebuildParameterWithState;
    if (starts_with(name, "_rebuild_")) return GlobalKind::RebuildOther;
  } else if (module == "torch._tensor") {
    if (name == "_rebuild_from_type_v2") return GlobalKind::RebuildFromTypeV2;
    if (name == "_rebuild_from_type") return GlobalKind::RebuildOther;
  } else if (module == "torch.jit._pickle") {
    if (name == "restore_type_tag" || (starts_with(name, "build_") && ends_with(name, "list")))
      return GlobalKind::TypeTagIdentity;
  } else if (module == "torch.nn.parameter") {
    if (name == "Parameter") return GlobalKind::TensorClass;
  } else if (module == "torch.storage") {
    if (name == "UntypedStorage") return GlobalKind::UntypedStorage;
  } else if (module == "torch") {
    if (name == "Size") return GlobalKind::TorchSize;
    if (name == "device") return GlobalKind::TorchDevice;
    if (name == "Tensor") return GlobalKind::TensorClass;
    if (name == "UntypedStorage") return GlobalKind::UntypedStorage;
    if (name_in(name, {"DoubleStorage", "FloatStorage", "HalfStorage", "BFloat16Storage",
                       "LongStorage", "IntStorage", "ShortStorage", "CharStorage", "ByteStorage",
                       "BoolStorage", "ComplexFloatStorage", "ComplexDoubleStorage", "QInt8Storage",
                       "QUInt8Storage", "QInt32Storage", "QUInt4x2Storage", "QUInt2x4Storage"}))
      return GlobalKind::StorageClass;
    if (name_in(name, {"float32", "float", "float64", "double", "float16", "half", "bfloat16",
                       "int64", "long", "int32", "int", "int16", "short", "int8", "uint8", "uint16",
                       "uint32", "uint64", "bool", "complex32", "chalf", "complex64", "cfloat",
                       "complex128", "cdouble", "qint8", "quint8", "qint32", "quint4x2", "quint2x4",
                       "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                       "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2"}))
      return GlobalKind::DTypeObject;
  }
  return GlobalKind::Class;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::BigInt: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::Bytes: return "bytes";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Set: return "set";
    case Kind::Global: return "global";
    case Kind::Object: return "object";
    case Kind::Call: return "call";
    case Kind::Storage: return "storage";
    case Kind::Tensor: return "tensor";
    case Kind::Placeholder: return "call never made";
  }
  return "?";
}

const Value* Value::get(std::string_view key) const {
  if (kind != Kind::Dict) return nullptr;
  for (const auto& [k, v] : entries)
    if (k->kind == Kind::String && k->bytes == key) return v;
  return nullptr;
}

std::string Value::qualified_name() const {
  if (kind == Kind::Global) return module + "." + name;
  if ((kind == Kind::Object || kind == Kind::Call || kind == Kind::Placeholder) && cls) return cls->qualified_name();
  return kind_name(kind);
}

Value* ValueArena::make() {
  if (max_values_ != 0 && values_.size() >= max_values_)
    throw Error("too many pickle values (limit " + std::to_string(max_values_) + ")");
  return &values_.emplace_back();
}

bool is_utf8(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n;) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const size_t len = utf8_sequence(p + i, n - i);  // text.h: the one UTF-8 decoder
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// ---------------------------------------------------------------------------
// The interpreter.

namespace {

// Opcode bytes (CPython Lib/pickle.py).
enum Op : uint8_t {
  MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', FLOAT = 'F', INT = 'I',
  BININT = 'J', BININT1 = 'K', LONG = 'L', BININT2 = 'M', NONE = 'N', PERSID = 'P',
  BINPERSID = 'Q', REDUCE = 'R', STRING = 'S', BINSTRING = 'T', SHORT_BINSTRING = 'U',
  UNICODE = 'V', BINUNICODE = 'X', APPEND = 'a', BUILD = 'b', GLOBAL = 'c', DICT = 'd',
  EMPTY_DICT = '}', APPENDS = 'e', GET = 'g', BINGET = 'h', INST = 'i', LONG_BINGET = 'j',
  LIST = 'l', EMPTY_LIST = ']', OBJ = 'o', PUT = 'p', BINPUT = 'q', LONG_BINPUT = 'r',
  SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')', SETITEMS = 'u', BINFLOAT = 'G',
  BINBYTES = 'B', SHORT_BINBYTES = 'C',
  PROTO = 0x80, NEWOBJ = 0x81, EXT1 = 0x82, EXT2 = 0x83, EXT4 = 0x84, TUPLE1 = 0x85,
  TUPLE2 = 0x86, TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a, LONG4 = 0x8b,
  SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d, BINBYTES8 = 0x8e, EMPTY_SET = 0x8f,
  ADDITEMS = 0x90, FROZENSET = 0x91, NEWOBJ_EX = 0x92, STACK_GLOBAL = 0x93, MEMOIZE = 0x94,
  FRAME = 0x95, BYTEARRAY8 = 0x96, NEXT_BUFFER = 0x97, READONLY_BUFFER = 0x98,
};

const char* op_name(uint8_t op) {
  switch (op) {
    case MARK: return "MARK"; case STOP: return "STOP"; case POP: return "POP";
    case POP_MARK: return "POP_MARK"; case DUP: return "DUP"; case FLOAT: return "FLOAT";
    case INT: return "INT"; case BININT: return "BININT"; case BININT1: return "BININT1";
    case LONG: return "LONG"; case BININT2: return "BININT2"; case NONE: return "NONE";
    case PERSID: return "PERSID"; case BINPERSID: return "BINPERSID"; case REDUCE: return "REDUCE";
    case STRING: return "STRING"; case BINSTRING: return "BINSTRING";
    case SHORT_BINSTRING: return "SHORT_BINSTRING"; case UNICODE: return "UNICODE";
    case BINUNICODE: return "BINUNICODE"; case APPEND: return "APPEND"; case BUILD: return "BUILD";
    case GLOBAL: return "GLOBAL"; case DICT: return "DICT"; case EMPTY_DICT: return "EMPTY_DICT";
    case APPENDS: return "APPENDS"; case GET: return "GET"; case BINGET: return "BINGET";
    case INST: return "INST"; case LONG_BINGET: return "LONG_BINGET"; case LIST: return "LIST";
    case EMPTY_LIST: return "EMPTY_LIST"; case OBJ: return "OBJ"; case PUT: return "PUT";
    case BINPUT: return "BINPUT"; case LONG_BINPUT: return "LONG_BINPUT";
    case SETITEM: return "SETITEM"; case TUPLE: return "TUPLE"; case EMPTY_TUPLE: return "EMPTY_TUPLE";
    case SETITEMS: return "SETITEMS"; case BINFLOAT: return "BINFLOAT"; case BINBYTES: return "BINBYTES";
    case SHORT_BINBYTES: return "SHORT_BINBYTES"; case PROTO: return "PROTO";
    case NEWOBJ: return "NEWOBJ"; case EXT1: return "EXT1"; case EXT2: return "EXT2";
    case EXT4: return "EXT4"; case TUPLE1: return "TUPLE1"; case TUPLE2: return "TUPLE2";
    case TUPLE3: return "TUPLE3"; case NEWTRUE: return "NEWTRUE"; case NEWFALSE: return "NEWFALSE";
    case LONG1: return "LONG1"; case LONG4: return "LONG4";
    case SHORT_BINUNICODE: return "SHORT_BINUNICODE"; case BINUNICODE8: return "BINUNICODE8";
    case BINBYTES8: return "BINBYTES8"; case EMPTY_SET: return "EMPTY_SET";
    case ADDITEMS: return "ADDITEMS"; case FROZENSET: return "FROZENSET";
    case NEWOBJ_EX: return "NEWOBJ_EX"; case STACK_GLOBAL: return "STACK_GLOBAL";
    case MEMOIZE: return "MEMOIZE"; case FRAME: return "FRAME"; case BYTEARRAY8: return "BYTEARRAY8";
    case NEXT_BUFFER: return "NEXT_BUFFER"; case READONLY_BUFFER: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

std::string hex_byte(uint8_t b) {
  char buf[8];
  snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

class Unpickler {
 public:
  static constexpr size_t kArenaSlack = 1024;  // > values one opcode can make

  Unpickler(const uint8_t* data, size_t size, const std::string& label, PersistentLoader* loader,
            const UnpickleLimits& limits)
      : data_(data), size_(size), label_(label), loader_(loader), limits_(limits),
        // The arena's own cap is a backstop; run() checks max_values before
        // each opcode so the error carries the byte offset.
        arena_(std::make_unique<ValueArena>(limits.max_values + kArenaSlack)) {}

  PickleTree run();

 private:
  [[noreturn]] void fail(const std::string& what) const {
    std::string msg = label_ + ": " + what + " at byte " + std::to_string(op_pos_);
    if (have_op_) {
      const char* name = op_name(op_);
      msg += " (opcode " + hex_byte(op_) + (name ? std::string(" ") + name : std::string()) + ")";
    }
    throw Error(msg);
  }

  // --- input
  size_t remaining() const { return size_ - pos_; }
  const uint8_t* take(uint64_t n) {
    if (n > remaining())
      fail("truncated: needs " + std::to_string(n) + " bytes, " + std::to_string(remaining()) +
           " left");
    const uint8_t* p = data_ + pos_;
    pos_ += static_cast<size_t>(n);
    return p;
  }
  uint8_t u8() { return *take(1); }
  uint16_t u16() { const uint8_t* p = take(2); return uint16_t(p[0] | (p[1] << 8)); }
  uint32_t u32() {
    const uint8_t* p = take(4);
    return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
  }
  uint64_t u64() {
    const uint32_t lo = u32();
    return uint64_t(lo) | (uint64_t(u32()) << 32);
  }
  // A '\n'-terminated line (GLOBAL's module and name), bounded.
  std::string line() {
    constexpr size_t kMaxLine = 4096;
    const size_t limit = std::min(remaining(), kMaxLine);
    const void* nl = std::memchr(data_ + pos_, '\n', limit);
    if (!nl) fail("unterminated or overlong GLOBAL name");
    const size_t n = static_cast<const uint8_t*>(nl) - (data_ + pos_);
    std::string s(reinterpret_cast<const char*>(take(n)), n);
    ++pos_;  // the '\n'
    if (!is_utf8(reinterpret_cast<const uint8_t*>(s.data()), s.size())) fail("GLOBAL name is not UTF-8");
    return s;
  }
  // A length-prefixed payload: the length is checked against the bytes left
  // before anything is allocated.
  std::string payload(uint64_t n) {
    if (n <= remaining() && n > limits_.max_string)
      fail("string of " + std::to_string(n) + " bytes exceeds the limit of " +
           std::to_string(limits_.max_string));
    const uint8_t* p = take(n);  // fails with "truncated" when n > remaining
    return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
  }
  Value* text(std::string s) {
    if (!is_utf8(reinterpret_cast<const uint8_t*>(s.data()), s.size())) fail("string is not valid UTF-8");
    return arena_->make_string(std::move(s));
  }

  // --- stack. MARK records the stack height; items above the innermost mark
  // form the current frame, and nothing pops below it (as in CPython, where
  // MARK moves the stack aside).
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Value* v) {
    if (stack_.size() >= limits_.max_stack)
      fail("stack depth exceeds the limit of " + std::to_string(limits_.max_stack));
    stack_.push_back(v);
  }
  Value* pop() {
    if (stack_.size() <= floor()) fail("stack underflow");
    Value* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Value* top() {
    if (stack_.size() <= floor()) fail("stack underflow");
    return stack_.back();
  }
  std::vector<Value*> pop_mark() {
    if (marks_.empty()) fail("MARK underflow (no MARK on the stack)");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Value*> items(stack_.begin() + static_cast<ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }

  // --- containers
  void set_depth(Value* container, const Value* child) {
    const uint32_t d = child->depth + 1;
    if (d > container->depth) container->depth = d;
    if (container->depth > limits_.max_nesting)
      fail("containers nested deeper than the limit of " + std::to_string(limits_.max_nesting));
  }
  Value* make_seq(Kind kind, std::vector<Value*> items) {
    Value* v = arena_->make(kind);
    for (const Value* item : items) set_depth(v, item);
    v->items = std::move(items);
    return v;
  }
  // Canonical text for keys Python would hash equal (str, int/bool, None,
  // bytes); other keys are never merged.
  static bool dict_key(const Value* k, std::string& out) {
    switch (k->kind) {
      case Kind::String: out = "s" + k->bytes; return true;
      case Kind::Bytes: out = "b" + k->bytes; return true;
      case Kind::Int: out = "i" + std::to_string(k->integer); return true;
      case Kind::Bool: out = k->boolean ? "i1" : "i0"; return true;
      case Kind::None: out = "n"; return true;
      default: return false;
    }
  }
  void set_item(Value* dict, Value* key, Value* value) {
    set_depth(dict, key);
    set_depth(dict, value);
    std::string canon;
    if (dict_key(key, canon)) {
      auto& index = dict_index_[dict];
      auto [it, inserted] = index.emplace(std::move(canon), dict->entries.size());
      if (!inserted) {  // a repeated key replaces the value in place, as dict does
        dict->entries[it->second].second = value;
        return;
      }
    }
    dict->entries.emplace_back(key, value);
  }
  void set_items(Value* dict, const std::vector<Value*>& kv) {
    if (kv.size() % 2 != 0) fail("odd number of items for a dict");
    for (size_t i = 0; i < kv.size(); i += 2) set_item(dict, kv[i], kv[i + 1]);
  }
  Value* dict_target() {
    Value* d = top();
    if (d->kind != Kind::Dict) fail(std::string("SETITEM on a ") + kind_name(d->kind) + ", not a dict");
    return d;
  }

  // --- memo
  void memo_put(uint64_t index, Value* v) {
    if (index > UINT32_MAX) fail("memo index out of range");
    auto it = memo_.find(static_cast<uint32_t>(index));
    if (it != memo_.end()) {
      it->second = v;
      return;
    }
    if (memo_.size() >= limits_.max_memo)
      fail("memo exceeds the limit of " + std::to_string(limits_.max_memo) + " entries");
    memo_.emplace(static_cast<uint32_t>(index), v);
  }
  Value* memo_get(uint32_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo index " + std::to_string(index) + " was never stored");
    return it->second;
  }

  // --- values
  Value* make_long(const uint8_t* p, size_t n);
  Value* make_global(std::string module, std::string name);
  Value* reduce(Value* callable, Value* args, int level = 0);
  Value* new_object(Value* cls, Value* args);
  Value* make_tensor(GlobalKind kind, const Value* args);
  int64_t arg_int(const Value* v, const char* what);
  const Value* arg_tuple(const Value* args, size_t min_n, size_t max_n, const Value* callable);
  void build(Value* target, Value* state);
  void numpy_array(Value* target, const Value* state);

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  uint8_t op_ = 0;
  bool have_op_ = false;
  const std::string& label_;
  PersistentLoader* loader_;
  const UnpickleLimits& limits_;
  std::unique_ptr<ValueArena> arena_;
  std::vector<Value*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, Value*> memo_;
  std::unordered_map<const Value*, std::unordered_map<std::string, size_t>> dict_index_;
  Value* none_ = nullptr;
};

Value* Unpickler::make_long(const uint8_t* p, size_t n) {
  // n bytes, little-endian two's complement. It fits int64 when every byte
  // above the 8th repeats the sign.
  if (n == 0) return arena_->make_int(0);
  const bool negative = (p[n - 1] & 0x80) != 0;
  bool fits = true;
  for (size_t i = 8; i < n; ++i) fits = fits && p[i] == (negative ? 0xFF : 0x00);
  if (n > 8 && fits) fits = ((p[7] & 0x80) != 0) == negative;
  if (!fits) return arena_->make_string(std::string(reinterpret_cast<const char*>(p), n), Kind::BigInt);
  uint64_t u = negative ? ~uint64_t{0} : 0;
  for (size_t i = 0; i < std::min<size_t>(n, 8); ++i) {
    u &= ~(uint64_t{0xFF} << (8 * i));
    u |= uint64_t(p[i]) << (8 * i);
  }
  int64_t i64;
  std::memcpy(&i64, &u, sizeof i64);
  return arena_->make_int(i64);
}

Value* Unpickler::make_global(std::string module, std::string name) {
  if (is_refused_global(module, name)) fail("refused global '" + module + "." + name + "'");
  if (limits_.allow_global && !limits_.allow_global(module, name))
    fail("refused global '" + module + "." + name + "' (not one this stream may name)");
  Value* v = arena_->make(Kind::Global);
  v->global_kind = classify_global(module, name);
  v->module = std::move(module);
  v->name = std::move(name);
  return v;
}

int64_t Unpickler::arg_int(const Value* v, const char* what) {
  if (v->kind != Kind::Int) fail(std::string(what) + " is a " + kind_name(v->kind) + ", not an int");
  return v->integer;
}

const Value* Unpickler::arg_tuple(const Value* args, size_t min_n, size_t max_n, const Value* callable) {
  if (args->kind != Kind::Tuple) fail("arguments of '" + callable->qualified_name() + "' are not a tuple");
  if (args->items.size() < min_n || args->items.size() > max_n)
    fail("'" + callable->qualified_name() + "' called with " + std::to_string(args->items.size()) +
         " arguments");
  return args;
}

Value* Unpickler::make_tensor(GlobalKind kind, const Value* args) {
  const auto& a = args->items;
  auto info = std::make_unique<TensorInfo>();
  info->storage = a[0];
  info->offset = arg_int(a[1], "tensor storage offset");
  if (info->offset < 0) fail("negative tensor storage offset " + std::to_string(info->offset));
  auto dims = [&](const Value* t, const char* what, std::vector<int64_t>& out) {
    if (t->kind != Kind::Tuple && t->kind != Kind::List)
      fail(std::string("tensor ") + what + " is a " + kind_name(t->kind) + ", not a tuple");
    if (t->items.size() > limits_.max_tensor_dims)
      fail(std::string("tensor has ") + std::to_string(t->items.size()) + " dimensions");
    for (const Value* d : t->items) {
      const int64_t x = arg_int(d, what);
      if (x < 0) fail(std::string("negative tensor ") + what + " " + std::to_string(x));
      out.push_back(x);
    }
  };
  dims(a[2], "size", info->size);
  dims(a[3], "stride", info->stride);
  if (info->size.size() != info->stride.size())
    fail("tensor size has " + std::to_string(info->size.size()) + " dimensions but stride has " +
         std::to_string(info->stride.size()));
  if (kind != GlobalKind::RebuildTensor) {
    if (a[4]->kind != Kind::Bool) fail("tensor requires_grad is not a bool");
    info->requires_grad = a[4]->boolean;
  }
  if (kind == GlobalKind::RebuildTensorV3) {
    const Value* dt = a[6];
    if (dt->kind != Kind::Global || dt->global_kind != GlobalKind::DTypeObject)
      fail("_rebuild_tensor_v3 dtype is not a torch dtype");
    info->dtype = dt;
  }
  Value* v = arena_->make(Kind::Tensor);
  v->tensor = std::move(info);
  return v;
}

// REDUCE: a fixed interpretation of allowlisted callables; nothing is called.
// `level` is 1 inside _rebuild_from_type_v2, which may not nest.
Value* Unpickler::reduce(Value* callable, Value* args, int level) {
  if (callable->kind != Kind::Global)
    fail(std::string("REDUCE of a ") + kind_name(callable->kind) + ", not a global");
  auto as_items = [&](const Value* v, const char* what) -> const std::vector<Value*>& {
    if (v->kind != Kind::Tuple && v->kind != Kind::List && v->kind != Kind::Set)
      fail("'" + callable->qualified_name() + "' " + what + " is a " + kind_name(v->kind));
    return v->items;
  };
  switch (callable->global_kind) {
    case GlobalKind::OrderedDict:
    case GlobalKind::Counter: {
      arg_tuple(args, 0, 1, callable);
      Value* d = arena_->make(Kind::Dict);
      if (!args->items.empty()) {
        const Value* init = args->items[0];
        if (init->kind == Kind::Dict) {
          for (const auto& [k, v] : init->entries) set_item(d, k, v);
        } else {
          for (const Value* pair : as_items(init, "argument")) {
            if (pair->kind != Kind::Tuple && pair->kind != Kind::List) fail("dict item is not a pair");
            if (pair->items.size() != 2) fail("dict item is not a pair");
            set_item(d, pair->items[0], pair->items[1]);
          }
        }
      }
      return d;
    }
    case GlobalKind::Set:
    case GlobalKind::FrozenSet: {
      arg_tuple(args, 0, 1, callable);
      return make_seq(Kind::Set, args->items.empty() ? std::vector<Value*>{}
                                                     : as_items(args->items[0], "argument"));
    }
    case GlobalKind::ByteArray:
    case GlobalKind::CodecsEncode: {
      // bytearray(), bytearray(bytes), bytearray(str, enc), _codecs.encode(str, enc).
      arg_tuple(args, callable->global_kind == GlobalKind::ByteArray ? 0 : 2, 2, callable);
      if (args->items.empty()) return arena_->make_string("", Kind::Bytes);
      const Value* src = args->items[0];
      if (args->items.size() == 1) {
        if (src->kind != Kind::Bytes) fail("bytearray argument is not bytes");
        return arena_->make_string(src->bytes, Kind::Bytes);
      }
      const Value* enc = args->items[1];
      if (src->kind != Kind::String || enc->kind != Kind::String)
        fail("'" + callable->qualified_name() + "' expects (str, encoding)");
      if (enc->bytes == "utf-8" || enc->bytes == "utf8") return arena_->make_string(src->bytes, Kind::Bytes);
      if (enc->bytes != "latin1" && enc->bytes != "latin-1")
        fail("unsupported encoding '" + enc->bytes + "'");
      // The str holds code points < 256 (UTF-8 in memory); each becomes a byte.
      std::string out;
      const std::string& s = src->bytes;
      for (size_t i = 0; i < s.size();) {
        const uint8_t c = static_cast<uint8_t>(s[i]);
        if (c < 0x80) { out.push_back(static_cast<char>(c)); ++i; continue; }
        if ((c & 0xE0) != 0xC0 || i + 1 >= s.size() || c > 0xC3)
          fail("latin1 string holds a code point above 255");
        out.push_back(static_cast<char>(((c & 0x1F) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3F)));
        i += 2;
      }
      return arena_->make_string(std::move(out), Kind::Bytes);
    }
    case GlobalKind::TorchSize: {
      arg_tuple(args, 0, 1, callable);
      return make_seq(Kind::Tuple, args->items.empty() ? std::vector<Value*>{}
                                                       : as_items(args->items[0], "argument"));
    }
    case GlobalKind::NumpyReconstruct: {
      // _reconstruct(numpy.ndarray, (0,), b'b'): an empty array that BUILD fills.
      arg_tuple(args, 3, 3, callable);
      const Value* cls = args->items[0];
      if (cls->kind != Kind::Global || cls->module != "numpy" || cls->name != "ndarray")
        fail("'" + callable->qualified_name() + "' of a " + std::string(kind_name(cls->kind)) + ", not numpy.ndarray");
      Value* v = arena_->make(Kind::Object);
      v->cls = cls;
      v->args = args;
      set_depth(v, args);
      return v;
    }
    case GlobalKind::NumpyDType: {
      arg_tuple(args, 1, 3, callable);
      if (args->items[0]->kind != Kind::String) fail("numpy.dtype of a " + std::string(kind_name(args->items[0]->kind)));
      Value* v = arena_->make(Kind::Call);
      v->cls = callable;
      v->args = args;
      set_depth(v, args);
      return v;
    }
    case GlobalKind::NumpyScalar: {
      // multiarray.scalar(dtype, bytes): kept inert, never a tensor. With an
      // object dtype numpy hands its second argument back as the value, so
      // only (numeric or string dtype, bytes) is data.
      arg_tuple(args, 1, 2, callable);
      const std::string refused = "refused REDUCE of '" + callable->qualified_name() + "' of ";
      const Value* dt = args->items[0];
      if (dt->kind != Kind::Call || !dt->cls || dt->cls->global_kind != GlobalKind::NumpyDType)
        fail(refused + "a " + kind_name(dt->kind) + " (not (numpy.dtype, bytes))");
      const std::string& code = dt->args->items[0]->bytes;
      if (code.empty() || code[0] == 'O')
        fail(refused + "dtype '" + code.substr(0, 8) + "' (object scalars are not allowlisted)");
      if (args->items.size() == 2 && args->items[1]->kind != Kind::Bytes && args->items[1]->kind != Kind::String)
        fail(refused + "a " + kind_name(args->items[1]->kind) + " (not (numpy.dtype, bytes))");
      Value* v = arena_->make(Kind::Call);
      v->cls = callable;
      v->args = args;
      set_depth(v, args);
      return v;
    }
    case GlobalKind::InertValue: {
      // Plain data in, plain data kept: strings, numbers, booleans, None.
      arg_tuple(args, 0, 64, callable);
      for (const Value* a : args->items) {
        if (a->kind != Kind::String && a->kind != Kind::Int && a->kind != Kind::Bool && a->kind != Kind::None)
          fail("'" + callable->qualified_name() + "' called with a " + kind_name(a->kind) +
               " (only strings and numbers are data)");
      }
      Value* v = arena_->make(Kind::Call);
      v->cls = callable;
      v->args = args;
      set_depth(v, args);
      return v;
    }
    case GlobalKind::Complex:
    case GlobalKind::TorchDevice:
    case GlobalKind::RebuildOther: {
      if (args->kind != Kind::Tuple) fail("arguments of '" + callable->qualified_name() + "' are not a tuple");
      Value* v = arena_->make(Kind::Call);
      v->cls = callable;
      v->args = args;
      set_depth(v, args);
      return v;
    }
    case GlobalKind::RebuildTensor:
      return make_tensor(callable->global_kind, arg_tuple(args, 4, 4, callable));
    case GlobalKind::RebuildTensorV2:
      return make_tensor(callable->global_kind, arg_tuple(args, 6, 7, callable));
    case GlobalKind::RebuildTensorV3:
      return make_tensor(callable->global_kind, arg_tuple(args, 7, 8, callable));
    case GlobalKind::RebuildParameter:
    case GlobalKind::RebuildParameterWithState: {
      // _rebuild_parameter(data, requires_grad, hooks[, state]) returns data.
      const size_t n = callable->global_kind == GlobalKind::RebuildParameter ? 3 : 4;
      arg_tuple(args, n, n, callable);
      Value* data = args->items[0];
      if (data->kind == Kind::Tensor && args->items[1]->kind == Kind::Bool)
        data->tensor->requires_grad = args->items[1]->boolean;
      return data;
    }
    case GlobalKind::RebuildFromTypeV2: {
      // _rebuild_from_type_v2(func, type, args, state) = func(*args), retyped.
      arg_tuple(args, 4, 4, callable);
      if (level > 0) fail("nested _rebuild_from_type_v2");
      Value* func = args->items[0];
      Value* inner = args->items[2];
      if (func->kind != Kind::Global || func->global_kind == GlobalKind::RebuildFromTypeV2)
        fail("_rebuild_from_type_v2 of an unsupported function");
      return reduce(func, inner, level + 1);
    }
    case GlobalKind::TypeTagIdentity: {
      // restore_type_tag(value, type_str) / build_intlist(value): the value.
      arg_tuple(args, 1, 2, callable);
      return args->items[0];
    }
    case GlobalKind::TensorClass:
      // Parameter(data, requires_grad): how PyTorch before _rebuild_parameter
      // (0.4 era, legacy whole modules) pickled parameters. Returns data.
      if (callable->name == "Parameter") {
        arg_tuple(args, 1, 2, callable);
        Value* data = args->items[0];
        if (data->kind != Kind::Tensor) fail("Parameter of a " + std::string(kind_name(data->kind)) + ", not a tensor");
        if (args->items.size() == 2 && args->items[1]->kind == Kind::Bool)
          data->tensor->requires_grad = args->items[1]->boolean;
        return data;
      }
      break;
    case GlobalKind::Class:
      if (limits_.call_placeholders && level == 0) {
        // Kept, never called; the reader checks where it ends up.
        if (args->kind != Kind::Tuple) fail("arguments of '" + callable->qualified_name() + "' are not a tuple");
        Value* v = arena_->make(Kind::Placeholder);
        v->cls = callable;
        v->args = args;
        v->integer = static_cast<int64_t>(op_pos_);
        set_depth(v, args);
        return v;
      }
      break;
    case GlobalKind::DTypeObject:
    case GlobalKind::StorageClass:
    case GlobalKind::UntypedStorage:
      break;
  }
  fail("refused REDUCE of '" + callable->qualified_name() + "' (not an allowlisted callable)");
}

Value* Unpickler::new_object(Value* cls, Value* args) {
  if (cls->kind != Kind::Global) fail(std::string("NEWOBJ of a ") + kind_name(cls->kind) + ", not a class");
  if (args->kind != Kind::Tuple) fail("NEWOBJ arguments are not a tuple");
  switch (cls->global_kind) {
    case GlobalKind::OrderedDict:
    case GlobalKind::Counter:
      return arena_->make(Kind::Dict);
    case GlobalKind::Set:
    case GlobalKind::FrozenSet:
      return arena_->make(Kind::Set);
    case GlobalKind::Class:
    case GlobalKind::TensorClass: {
      // An inert instance: the class is recorded, nothing runs.
      Value* v = arena_->make(Kind::Object);
      v->cls = cls;
      v->args = args;
      set_depth(v, args);
      return v;
    }
    default:
      fail("NEWOBJ of '" + cls->qualified_name() + "', which is not a class");
  }
}

// A numpy array's BUILD state, (version, shape, dtype, is_fortran, data),
// turns the _reconstruct'ed Object into a Tensor over a storage that owns a
// copy of the data bytes (they live in the pickle, not in a storage record).
void Unpickler::numpy_array(Value* target, const Value* state) {
  if (state->kind != Kind::Tuple || (state->items.size() != 5 && state->items.size() != 4))
    fail("numpy array state is a " + std::string(kind_name(state->kind)) + ", not (version, shape, dtype, is_fortran, data)");
  const size_t b = state->items.size() - 4;
  const Value* shape = state->items[b];
  const Value* dtype = state->items[b + 1];
  const Value* fortran = state->items[b + 2];
  const Value* data = state->items[b + 3];
  if (shape->kind != Kind::Tuple) fail("numpy array shape is a " + std::string(kind_name(shape->kind)) + ", not a tuple");
  if (dtype->kind != Kind::Call || !dtype->cls || dtype->cls->global_kind != GlobalKind::NumpyDType)
    fail("numpy array dtype is a " + std::string(kind_name(dtype->kind)) + ", not a numpy.dtype");
  if (fortran->kind != Kind::Bool) fail("numpy array is_fortran is a " + std::string(kind_name(fortran->kind)) + ", not a bool");
  if (data->kind == Kind::List) fail("numpy array of Python objects (dtype object): not data ferry reads");
  if (data->kind != Kind::Bytes && data->kind != Kind::String)
    fail("numpy array data is a " + std::string(kind_name(data->kind)) + ", not bytes");
  // The dtype: a type code ('f4', 'float32' is spelled 'f4' by numpy's pickle)
  // and, in its BUILD state, the byte order.
  struct Code {
    const char* numpy;
    const char* torch;
    size_t size;
  };
  static constexpr Code kCodes[] = {{"f2", "float16", 2}, {"f4", "float32", 4}, {"f8", "float64", 8},
                                    {"i1", "int8", 1},    {"i2", "int16", 2},   {"i4", "int32", 4},
                                    {"i8", "int64", 8},   {"u1", "uint8", 1},   {"b1", "bool", 1}};
  const std::string& code = dtype->args->items[0]->bytes;
  const Code* found = nullptr;
  for (const Code& c : kCodes)
    if (code == c.numpy) found = &c;
  if (!found) fail("numpy array of dtype '" + code.substr(0, 32) + "': only float16/32/64 and integer arrays are read");
  bool big_endian = false;
  if (const Value* ds = dtype->state) {
    if (ds->kind != Kind::Tuple || ds->items.size() < 2 || ds->items[1]->kind != Kind::String)
      fail("numpy.dtype state is a " + std::string(kind_name(ds->kind)) + ", not (version, byteorder, ...)");
    const std::string& order = ds->items[1]->bytes;
    if (order == ">") big_endian = true;
    else if (order != "<" && order != "|" && order != "=") fail("numpy.dtype byte order '" + order.substr(0, 8) + "'");
  }
  auto info = std::make_unique<TensorInfo>();
  if (shape->items.size() > limits_.max_tensor_dims)
    fail("numpy array has " + std::to_string(shape->items.size()) + " dimensions");
  uint64_t numel = 1;
  for (const Value* d : shape->items) {
    if (d->kind != Kind::Int) fail("numpy array shape holds a " + std::string(kind_name(d->kind)));
    if (d->integer < 0) fail("numpy array shape holds a negative size " + std::to_string(d->integer));
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d->integer), &numel)) fail("numpy array shape overflows");
    info->size.push_back(d->integer);
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, uint64_t{found->size}, &nbytes) || nbytes != data->bytes.size())
    fail("numpy array data holds " + std::to_string(data->bytes.size()) + " bytes, shape of " +
         std::to_string(numel) + " x '" + code + "' needs " + std::to_string(numel) + " x " + std::to_string(found->size));
  // Element strides: C order, or Fortran order (first axis fastest).
  const size_t rank = info->size.size();
  info->stride.assign(rank, 1);
  if (fortran->boolean) {
    for (size_t i = 1; i < rank; ++i) info->stride[i] = info->stride[i - 1] * std::max<int64_t>(1, info->size[i - 1]);
  } else {
    for (size_t i = rank; i-- > 1;) info->stride[i - 1] = info->stride[i] * std::max<int64_t>(1, info->size[i]);
  }
  auto owned = std::make_shared<std::string>(data->bytes);
  auto storage = std::make_shared<Storage>();
  storage->key = "numpy";
  storage->location = "numpy";
  storage->numel = numel;
  storage->data = reinterpret_cast<const uint8_t*>(owned->data());
  storage->nbytes = nbytes;
  storage->big_endian = big_endian;
  storage->owned = owned;
  Value* sv = arena_->make(Kind::Storage);
  sv->storage = storage;
  Value* dt = arena_->make(Kind::Global);
  dt->module = "torch";
  dt->name = found->torch;
  dt->global_kind = GlobalKind::DTypeObject;
  info->storage = sv;
  info->dtype = dt;
  target->kind = Kind::Tensor;
  target->tensor = std::move(info);
  target->state = nullptr;
}

void Unpickler::build(Value* target, Value* state) {
  if (target->kind == Kind::Object && target->cls && target->cls->kind == Kind::Global &&
      target->cls->module == "numpy" && target->cls->name == "ndarray") {
    numpy_array(target, state);
    return;
  }
  switch (target->kind) {
    case Kind::Object:
    case Kind::Dict:  // OrderedDict's {'_metadata': ...}: kept, not merged
    case Kind::Tensor:
    case Kind::Call:
    case Kind::Placeholder:  // e.g. functools.partial: REDUCE, then BUILD
      target->state = state;
      set_depth(target, state);
      return;
    default:
      fail(std::string("BUILD on a ") + kind_name(target->kind));
  }
}

PickleTree Unpickler::run() {
  none_ = arena_->make(Kind::None);
  while (pos_ < size_) {
    op_pos_ = pos_;
    op_ = data_[pos_++];
    have_op_ = true;
    if (arena_->size() >= limits_.max_values)
      fail("more than " + std::to_string(limits_.max_values) + " values");
    switch (op_) {
      case PROTO: {
        const uint8_t version = u8();
        if (version > 5) fail("unsupported pickle protocol " + std::to_string(version));
        break;
      }
      case FRAME: {
        // Frames only group opcodes for buffered reading; the length must
        // still fit in what is left.
        const uint64_t n = u64();
        if (n > remaining()) fail("frame of " + std::to_string(n) + " bytes runs past the end");
        break;
      }
      case STOP: {
        Value* root = pop();
        PickleTree tree;
        tree.arena = std::move(arena_);
        tree.root = root;
        tree.end = pos_;
        return tree;
      }

      // --- scalars
      case NONE: push(none_); break;
      case NEWTRUE:
      case NEWFALSE: {
        Value* v = arena_->make(Kind::Bool);
        v->boolean = op_ == NEWTRUE;
        push(v);
        break;
      }
      case BININT: {
        const uint32_t u = u32();
        int32_t i;
        std::memcpy(&i, &u, sizeof i);
        push(arena_->make_int(i));
        break;
      }
      case BININT1: push(arena_->make_int(u8())); break;
      case BININT2: push(arena_->make_int(u16())); break;
      case LONG1: {
        const size_t n = u8();
        push(make_long(take(n), n));
        break;
      }
      case LONG4: {
        const uint32_t n = u32();
        if (n > limits_.max_string) fail("LONG4 of " + std::to_string(n) + " bytes is too long");
        push(make_long(take(n), n));
        break;
      }
      case BINFLOAT: {
        // Big-endian IEEE double, unlike every other number in a pickle.
        const uint8_t* p = take(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | p[i];
        Value* v = arena_->make(Kind::Float);
        std::memcpy(&v->real, &bits, sizeof bits);
        push(v);
        break;
      }

      // --- strings and bytes
      case SHORT_BINUNICODE: push(text(payload(u8()))); break;
      case BINUNICODE: push(text(payload(u32()))); break;
      case BINUNICODE8: push(text(payload(u64()))); break;
      case SHORT_BINSTRING:
      case BINSTRING: {
        // Python 2 str: torch.load decodes it as UTF-8; keep raw bytes when
        // that fails.
        const uint64_t n = op_ == SHORT_BINSTRING ? u8() : u32();
        std::string s = payload(n);
        const bool utf8 = is_utf8(reinterpret_cast<const uint8_t*>(s.data()), s.size());
        push(arena_->make_string(std::move(s), utf8 ? Kind::String : Kind::Bytes));
        break;
      }
      case SHORT_BINBYTES: push(arena_->make_string(payload(u8()), Kind::Bytes)); break;
      case BINBYTES: push(arena_->make_string(payload(u32()), Kind::Bytes)); break;
      case BINBYTES8:
      case BYTEARRAY8: push(arena_->make_string(payload(u64()), Kind::Bytes)); break;

      // --- containers
      case EMPTY_TUPLE: push(arena_->make(Kind::Tuple)); break;
      case EMPTY_LIST: push(arena_->make(Kind::List)); break;
      case EMPTY_DICT: push(arena_->make(Kind::Dict)); break;
      case EMPTY_SET: push(arena_->make(Kind::Set)); break;
      case TUPLE: push(make_seq(Kind::Tuple, pop_mark())); break;
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        const size_t n = size_t(op_ - TUPLE1) + 1;
        std::vector<Value*> items(n);
        for (size_t i = n; i-- > 0;) items[i] = pop();
        push(make_seq(Kind::Tuple, std::move(items)));
        break;
      }
      case LIST: push(make_seq(Kind::List, pop_mark())); break;
      case FROZENSET: push(make_seq(Kind::Set, pop_mark())); break;
      case DICT: {
        std::vector<Value*> kv = pop_mark();
        Value* d = arena_->make(Kind::Dict);
        set_items(d, kv);
        push(d);
        break;
      }
      case APPEND: {
        Value* item = pop();
        Value* list = top();
        if (list->kind != Kind::List) fail(std::string("APPEND to a ") + kind_name(list->kind) + ", not a list");
        set_depth(list, item);
        list->items.push_back(item);
        break;
      }
      case APPENDS: {
        std::vector<Value*> items = pop_mark();
        Value* list = top();
        if (list->kind != Kind::List) fail(std::string("APPENDS to a ") + kind_name(list->kind) + ", not a list");
        for (Value* item : items) {
          set_depth(list, item);
          list->items.push_back(item);
        }
        break;
      }
      case ADDITEMS: {
        std::vector<Value*> items = pop_mark();
        Value* set = top();
        if (set->kind != Kind::Set) fail(std::string("ADDITEMS to a ") + kind_name(set->kind) + ", not a set");
        for (Value* item : items) {
          set_depth(set, item);
          set->items.push_back(item);
        }
        break;
      }
      case SETITEM: {
        Value* value = pop();
        Value* key = pop();
        set_item(dict_target(), key, value);
        break;
      }
      case SETITEMS: {
        std::vector<Value*> kv = pop_mark();
        set_items(dict_target(), kv);
        break;
      }

      // --- stack manipulation
      case MARK:
        if (marks_.size() >= limits_.max_marks)
          fail("MARK depth exceeds the limit of " + std::to_string(limits_.max_marks));
        marks_.push_back(stack_.size());
        break;
      case POP:
        // CPython: POP on an empty frame discards the innermost MARK.
        if (stack_.size() > floor()) stack_.pop_back();
        else pop_mark();
        break;
      case POP_MARK: pop_mark(); break;
      case DUP: push(top()); break;

      // --- memo
      case BINPUT: memo_put(u8(), top()); break;
      case LONG_BINPUT: memo_put(u32(), top()); break;
      case MEMOIZE: memo_put(memo_.size(), top()); break;
      case BINGET: push(memo_get(u8())); break;
      case LONG_BINGET: push(memo_get(u32())); break;

      // --- globals, calls, objects
      case GLOBAL: {
        std::string module = line();
        std::string name = line();
        push(make_global(std::move(module), std::move(name)));
        break;
      }
      case STACK_GLOBAL: {
        Value* name = pop();
        Value* module = pop();
        if (module->kind != Kind::String || name->kind != Kind::String)
          fail("STACK_GLOBAL operands are not strings");
        push(make_global(module->bytes, name->bytes));
        break;
      }
      case REDUCE: {
        Value* args = pop();
        Value* callable = pop();
        push(reduce(callable, args));
        break;
      }
      case NEWOBJ: {
        Value* args = pop();
        Value* cls = pop();
        push(new_object(cls, args));
        break;
      }
      case NEWOBJ_EX: {
        Value* kwargs = pop();
        Value* args = pop();
        Value* cls = pop();
        if (kwargs->kind != Kind::Dict) fail("NEWOBJ_EX keyword arguments are not a dict");
        push(new_object(cls, args));
        break;
      }
      case BUILD: {
        Value* state = pop();
        build(top(), state);
        break;
      }
      case BINPERSID: {
        Value* pid = pop();
        if (!loader_) fail("persistent id, but no persistent loader");
        Value* v = nullptr;
        try {
          v = loader_->load(*pid, *arena_);
        } catch (const Error& e) {
          fail(e.what());
        }
        if (!v) fail("persistent id not resolved");
        push(v);
        break;
      }

      case INT: case LONG: case FLOAT: case STRING: case UNICODE: case PERSID: case GET:
      case PUT: case INST: case OBJ:
        fail("text-protocol (0/1) opcode not supported");
      case EXT1: case EXT2: case EXT4:
        fail("extension-registry opcode not supported");
      case NEXT_BUFFER: case READONLY_BUFFER:
        fail("out-of-band buffer opcode not supported");
      default:
        fail("unknown opcode " + hex_byte(op_));
    }
  }
  op_pos_ = pos_;
  have_op_ = false;
  fail("truncated: no STOP opcode");
}

}  // namespace

PickleTree unpickle(const uint8_t* data, size_t size, const std::string& label,
                    PersistentLoader* loader, const UnpickleLimits& limits) {
  return Unpickler(data, size, label, loader, limits).run();
}

}  // namespace ferry::conv
