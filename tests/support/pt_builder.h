// Test helpers that assemble PyTorch checkpoint bytes in memory, byte by
// byte, without Python: a zip writer laid out the way torch.save writes
// (64-byte aligned STORED records, data descriptors, zip64 end records), a
// pickle opcode writer, and a helper that emits state dicts exactly as
// torch 1.13's pickler does (checked against `python3 -m pickletools`).
//
// Everything here is deliberately simple and permissive: tests use it to
// build malformed files too (see ZipBuilder::central()).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <unistd.h>
#include <utility>
#include <vector>

namespace ferry::test {

using Bytes = std::vector<uint8_t>;

inline Bytes bytes_of(std::string_view s) { return Bytes(s.begin(), s.end()); }

inline void put8(Bytes& b, uint8_t v) { b.push_back(v); }
inline void put16(Bytes& b, uint16_t v) {
  for (int i = 0; i < 2; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
inline void put32(Bytes& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
inline void put64(Bytes& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
inline void append(Bytes& b, std::string_view s) { b.insert(b.end(), s.begin(), s.end()); }
inline void append(Bytes& b, const Bytes& s) { b.insert(b.end(), s.begin(), s.end()); }

// Raw storage bytes, little-endian unless `big_endian`.
template <typename T>
Bytes raw_bytes(const std::vector<T>& values, bool big_endian = false) {
  Bytes out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  if (big_endian)
    for (size_t i = 0; i < out.size(); i += sizeof(T))
      for (size_t a = i, z = i + sizeof(T) - 1; a < z; ++a, --z) std::swap(out[a], out[z]);
  return out;
}

// A raw Deflate stream made of "stored" blocks (BTYPE 00): valid Deflate
// that any inflater accepts, written without zlib.
inline Bytes deflate_stored_blocks(const Bytes& data) {
  Bytes out;
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(data.size() - pos, 0xFFFF);
    const bool last = pos + n == data.size();
    put8(out, last ? 1 : 0);
    put16(out, uint16_t(n));
    put16(out, uint16_t(~n));
    out.insert(out.end(), data.begin() + long(pos), data.begin() + long(pos + n));
    pos += n;
  } while (pos < data.size());
  return out;
}

inline uint32_t test_crc32(const Bytes& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t byte : data) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
  }
  return ~crc;
}

// ---------------------------------------------------------------------------
// Zip writer.

class ZipBuilder {
 public:
  // One central-directory record; tests may edit these before finish().
  struct Central {
    std::string name;
    uint16_t flags = 0x0808;
    uint16_t method = 0;
    uint32_t crc = 0;
    uint64_t compressed_size = 0;
    uint64_t size = 0;
    uint64_t local_offset = 0;
  };
  struct Options {
    bool zip64_end = true;       // write zip64 EOCD + locator (torch always does)
    bool zip64_fields = false;   // saturate sizes/offset and use the zip64 extra
    std::string comment;         // archive comment after the EOCD
  };

  ZipBuilder() = default;
  explicit ZipBuilder(Options options) : options_(std::move(options)) {}

  // Adds a record. `align` pads the local extra field (ID 0x4246, 'Z' bytes)
  // so the data starts at a multiple of 64, as torch.save does. `stored_data`
  // is what is written; for method 8 pass the Deflate stream and the
  // uncompressed size.
  ZipBuilder& add(const std::string& name, const Bytes& stored_data, bool align = true,
                  uint16_t method = 0, uint64_t uncompressed_size = UINT64_MAX, uint32_t crc = 0) {
    Central c;
    c.name = name;
    c.method = method;
    c.local_offset = out_.size();
    c.compressed_size = stored_data.size();
    c.size = uncompressed_size == UINT64_MAX ? stored_data.size() : uncompressed_size;
    c.crc = crc != 0 ? crc : (method == 0 ? test_crc32(stored_data) : 0);
    size_t extra = 0;
    if (align) {
      const size_t before = out_.size() + 30 + name.size() + 4;
      extra = 4 + (64 - before % 64) % 64;
    }
    put32(out_, 0x04034b50);
    put16(out_, 20);
    put16(out_, c.flags);
    put16(out_, method);
    put16(out_, 0);
    put16(out_, 0);
    put32(out_, 0);  // crc, sizes: 0, as with a data descriptor
    put32(out_, 0);
    put32(out_, 0);
    put16(out_, uint16_t(name.size()));
    put16(out_, uint16_t(extra));
    append(out_, name);
    if (extra) {
      put16(out_, 0x4246);
      put16(out_, uint16_t(extra - 4));
      out_.insert(out_.end(), extra - 4, 'Z');
    }
    append(out_, stored_data);
    // Data descriptor (zip64 form: 8-byte sizes).
    put32(out_, 0x08074b50);
    put32(out_, c.crc);
    put64(out_, c.compressed_size);
    put64(out_, c.size);
    central_.push_back(c);
    return *this;
  }

  std::vector<Central>& central() { return central_; }
  // Bytes written so far (local records only, before finish()).
  const Bytes& body() const { return out_; }

  Bytes finish() {
    Bytes out = out_;
    const uint64_t cd_offset = out.size();
    for (const Central& c : central_) {
      const bool z = options_.zip64_fields;
      Bytes extra;
      if (z) {
        put16(extra, 0x0001);
        put16(extra, 24);
        put64(extra, c.size);
        put64(extra, c.compressed_size);
        put64(extra, c.local_offset);
      }
      put32(out, 0x02014b50);
      put16(out, 0x031e);
      put16(out, 20);
      put16(out, c.flags);
      put16(out, c.method);
      put16(out, 0);
      put16(out, 0);
      put32(out, c.crc);
      put32(out, z ? 0xFFFFFFFFu : uint32_t(c.compressed_size));
      put32(out, z ? 0xFFFFFFFFu : uint32_t(c.size));
      put16(out, uint16_t(c.name.size()));
      put16(out, uint16_t(extra.size()));
      put16(out, 0);  // comment
      put16(out, 0);  // disk
      put16(out, 0);  // internal attributes
      put32(out, 0);  // external attributes
      put32(out, z ? 0xFFFFFFFFu : uint32_t(c.local_offset));
      append(out, c.name);
      append(out, extra);
    }
    const uint64_t cd_size = out.size() - cd_offset;
    if (options_.zip64_end) {
      const uint64_t eocd64 = out.size();
      put32(out, 0x06064b50);
      put64(out, 44);
      put16(out, 0x031e);
      put16(out, 45);
      put32(out, 0);
      put32(out, 0);
      put64(out, central_.size());
      put64(out, central_.size());
      put64(out, cd_size);
      put64(out, cd_offset);
      put32(out, 0x07064b50);
      put32(out, 0);
      put64(out, eocd64);
      put32(out, 1);
    }
    put32(out, 0x06054b50);
    put16(out, 0);
    put16(out, 0);
    put16(out, uint16_t(std::min<size_t>(central_.size(), 0xFFFF)));
    put16(out, uint16_t(std::min<size_t>(central_.size(), 0xFFFF)));
    put32(out, uint32_t(std::min<uint64_t>(cd_size, 0xFFFFFFFF)));
    put32(out, options_.zip64_fields ? 0xFFFFFFFFu : uint32_t(std::min<uint64_t>(cd_offset, 0xFFFFFFFF)));
    put16(out, uint16_t(options_.comment.size()));
    append(out, options_.comment);
    return out;
  }

 private:
  Options options_;
  Bytes out_;
  std::vector<Central> central_;
};

// ---------------------------------------------------------------------------
// Pickle writer. Each method appends one opcode (with its argument).

class PickleBuilder {
 public:
  Bytes bytes;

  PickleBuilder& op(uint8_t o) { bytes.push_back(o); return *this; }
  PickleBuilder& raw(std::initializer_list<uint8_t> b) { bytes.insert(bytes.end(), b); return *this; }
  PickleBuilder& raw(std::string_view s) { append(bytes, s); return *this; }

  PickleBuilder& proto(uint8_t v = 2) { return op(0x80).op(v); }
  PickleBuilder& stop() { return op('.'); }
  PickleBuilder& mark() { return op('('); }
  PickleBuilder& none() { return op('N'); }
  PickleBuilder& boolean(bool v) { return op(v ? 0x88 : 0x89); }
  PickleBuilder& global(std::string_view module, std::string_view name) {
    op('c');
    raw(module).op('\n').raw(name).op('\n');
    return *this;
  }
  // Integers the way CPython's pickler picks the opcode.
  PickleBuilder& integer(int64_t v) {
    if (v >= 0 && v < 256) return op('K').op(uint8_t(v));
    if (v >= 0 && v < 65536) { op('M'); put16(bytes, uint16_t(v)); return *this; }
    if (v >= INT32_MIN && v <= INT32_MAX) { op('J'); put32(bytes, uint32_t(int32_t(v))); return *this; }
    return long1(v);
  }
  // LONG1 with the minimal two's-complement length.
  PickleBuilder& long1(int64_t v) {
    Bytes le;
    uint64_t u = uint64_t(v);
    for (int i = 0; i < 8; ++i) le.push_back(uint8_t(u >> (8 * i)));
    while (le.size() > 1) {
      const uint8_t top = le.back(), next = le[le.size() - 2];
      if ((top == 0x00 && !(next & 0x80)) || (top == 0xFF && (next & 0x80))) le.pop_back();
      else break;
    }
    if (v == 0) le.clear();
    op(0x8a).op(uint8_t(le.size()));
    append(bytes, le);
    return *this;
  }
  PickleBuilder& binfloat(double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    op('G');
    for (int i = 7; i >= 0; --i) bytes.push_back(uint8_t(u >> (8 * i)));
    return *this;
  }
  PickleBuilder& str(std::string_view s) {  // BINUNICODE
    op('X');
    put32(bytes, uint32_t(s.size()));
    return raw(s);
  }
  PickleBuilder& short_str(std::string_view s) {  // SHORT_BINUNICODE
    op(0x8c).op(uint8_t(s.size()));
    return raw(s);
  }
  PickleBuilder& short_bytes(std::string_view s) {  // SHORT_BINBYTES
    op('C').op(uint8_t(s.size()));
    return raw(s);
  }
  PickleBuilder& empty_tuple() { return op(')'); }
  PickleBuilder& empty_list() { return op(']'); }
  PickleBuilder& empty_dict() { return op('}'); }
  PickleBuilder& tuple() { return op('t'); }
  PickleBuilder& tuple_n(size_t n) { return op(uint8_t(0x84 + n)); }  // TUPLE1..3
  PickleBuilder& reduce() { return op('R'); }
  PickleBuilder& build() { return op('b'); }
  PickleBuilder& newobj() { return op(0x81); }
  PickleBuilder& append_() { return op('a'); }
  PickleBuilder& appends() { return op('e'); }
  PickleBuilder& setitem() { return op('s'); }
  PickleBuilder& setitems() { return op('u'); }
  PickleBuilder& binpersid() { return op('Q'); }
  PickleBuilder& binput(uint8_t i) { return op('q').op(i); }
  PickleBuilder& binget(uint8_t i) { return op('h').op(i); }
  PickleBuilder& long_binput(uint32_t i) { op('r'); put32(bytes, i); return *this; }
  PickleBuilder& long_binget(uint32_t i) { op('j'); put32(bytes, i); return *this; }
  PickleBuilder& memoize() { return op(0x94); }
  PickleBuilder& frame(uint64_t n) { op(0x95); put64(bytes, n); return *this; }
  PickleBuilder& stack_global() { return op(0x93); }
  // BINPUT with the next memo index, as CPython does after most values.
  PickleBuilder& put() {
    const uint32_t i = next_memo_++;
    return i < 256 ? binput(uint8_t(i)) : long_binput(i);
  }

 private:
  uint32_t next_memo_ = 0;
};

// ---------------------------------------------------------------------------
// torch.save-shaped pickles.

struct TensorSpec {
  std::string name;                      // state-dict key
  std::string storage_class = "FloatStorage";  // torch.<class>; "UntypedStorage" for v3
  std::string key;                       // storage record key
  std::string location = "cuda:0";
  int64_t storage_numel = 0;             // elements (bytes for UntypedStorage)
  int64_t offset = 0;
  std::vector<int64_t> size;
  std::vector<int64_t> stride;           // empty: contiguous
  std::string v3_dtype;                  // "float16" -> _rebuild_tensor_v3(..., torch.float16)
  bool parameter = false;                // wrap in _rebuild_parameter(t, True, OrderedDict())
  // Legacy stream: the persistent id gets a 6th item, the view metadata:
  // None, or (view_key, view_offset, view_size) when view_key is set.
  bool legacy = false;
  std::string view_key;
  int64_t view_offset = 0, view_size = 0;
};

inline std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& size) {
  // Wraps (in unsigned arithmetic) where the sizes overflow: the refusal
  // tests write absurd sizes on purpose and the readers must refuse them.
  std::vector<int64_t> s(size.size());
  uint64_t acc = 1;
  for (size_t i = size.size(); i-- > 0;) {
    s[i] = static_cast<int64_t>(acc);
    acc *= static_cast<uint64_t>(size[i]);
  }
  return s;
}

// Pushes one tensor, as torch's reduce_ex does:
//   _rebuild_tensor_v2((BINPERSID ('storage', cls, key, loc, numel)), offset,
//                      size, stride, False, OrderedDict())
inline void emit_tensor(PickleBuilder& p, const TensorSpec& t) {
  if (t.parameter) p.global("torch._utils", "_rebuild_parameter");
  const bool v3 = !t.v3_dtype.empty();
  p.global("torch._utils", v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
  p.mark();
  p.mark().str("storage").global(t.storage_class == "UntypedStorage" ? "torch.storage" : "torch", t.storage_class);
  p.str(t.key).str(t.location).integer(t.storage_numel);
  if (t.legacy) {
    if (t.view_key.empty()) p.none();
    else p.str(t.view_key).integer(t.view_offset).integer(t.view_size).tuple_n(3);
  }
  p.tuple().binpersid();
  p.integer(t.offset);
  const std::vector<int64_t> stride = t.stride.empty() ? contiguous_strides(t.size) : t.stride;
  p.mark();
  for (int64_t d : t.size) p.integer(d);
  p.tuple();
  p.mark();
  for (int64_t d : stride) p.integer(d);
  p.tuple();
  p.boolean(false);
  p.global("collections", "OrderedDict").empty_tuple().reduce();
  if (v3) p.global("torch", t.v3_dtype);
  p.tuple().reduce();
  if (t.parameter) {
    p.boolean(true).global("collections", "OrderedDict").empty_tuple().reduce();
    p.tuple_n(3).reduce();
  }
}

// Pushes an OrderedDict of the tensors (SETITEMS), then BUILD with
// {'_metadata': {}} as torch does.
inline void emit_state_dict(PickleBuilder& p, const std::vector<TensorSpec>& tensors) {
  p.global("collections", "OrderedDict").empty_tuple().reduce().put();
  p.mark();
  for (const TensorSpec& t : tensors) {
    p.str(t.name);
    emit_tensor(p, t);
  }
  p.setitems();
  p.empty_dict().str("_metadata").empty_dict().setitem().build();
}

inline Bytes state_dict_pickle(const std::vector<TensorSpec>& tensors) {
  PickleBuilder p;
  p.proto(2);
  emit_state_dict(p, tensors);
  p.stop();
  return p.bytes;
}

// A torch.save-style archive: <prefix>/data.pkl, <prefix>/data/<key> (64-byte
// aligned), <prefix>/version, and <prefix>/byteorder when given.
inline Bytes checkpoint_zip(const Bytes& data_pkl, const std::vector<std::pair<std::string, Bytes>>& storages,
                            const std::string& prefix = "archive", const std::string& byteorder = "") {
  ZipBuilder z;
  z.add(prefix + "/data.pkl", data_pkl);
  if (!byteorder.empty()) z.add(prefix + "/byteorder", bytes_of(byteorder));
  for (const auto& [key, data] : storages) z.add(prefix + "/data/" + key, data);
  z.add(prefix + "/version", bytes_of("3\n"));
  return z.finish();
}

// ---------------------------------------------------------------------------
// Whole pickled modules (torch.save(model)), laid out as torch 1.13 pickles
// an nn.Module: NEWOBJ of the class, then BUILD of its __dict__.

struct ModuleSpec {
  std::string module = "torch.nn.modules.linear";  // the class's module
  std::string cls = "Linear";
  std::vector<TensorSpec> parameters;              // emitted as _rebuild_parameter
  std::vector<std::string> none_parameters;        // registered as None (bias=False)
  std::vector<TensorSpec> buffers;
  std::vector<std::string> non_persistent;         // _non_persistent_buffers_set
  std::vector<std::pair<std::string, ModuleSpec>> children;
  // Plain attributes: "True"/"False" -> bool, digits -> int, else str.
  std::vector<std::pair<std::string, std::string>> attributes;
  // Legacy stream: the class comes as BINPERSID ('module', class, file, source).
  bool legacy_class_pid = false;
};

inline void emit_attribute_value(PickleBuilder& p, const std::string& v) {
  if (v == "True" || v == "False") {
    p.boolean(v == "True");
  } else if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos) {
    p.integer(std::stoll(v));
  } else {
    p.str(v);
  }
}

// Pushes the module object. Recursive: test modules are a few levels deep.
inline void emit_module(PickleBuilder& p, const ModuleSpec& m) {
  if (m.legacy_class_pid) {
    p.mark().str("module").global(m.module, m.cls).str("model.py").str("class Net: ...").tuple().binpersid();
  } else {
    p.global(m.module, m.cls);
  }
  p.empty_tuple().newobj();
  p.empty_dict().mark();
  p.str("training").boolean(false);
  p.str("_parameters").global("collections", "OrderedDict").empty_tuple().reduce().mark();
  for (const TensorSpec& t : m.parameters) {
    TensorSpec param = t;
    param.parameter = true;
    p.str(t.name);
    emit_tensor(p, param);
  }
  for (const std::string& n : m.none_parameters) p.str(n).none();
  p.setitems();
  p.str("_buffers").global("collections", "OrderedDict").empty_tuple().reduce().mark();
  for (const TensorSpec& t : m.buffers) {
    p.str(t.name);
    emit_tensor(p, t);
  }
  p.setitems();
  p.str("_non_persistent_buffers_set").global("__builtin__", "set").empty_list().mark();
  for (const std::string& n : m.non_persistent) p.str(n);
  p.appends().tuple_n(1).reduce();
  p.str("_backward_hooks").global("collections", "OrderedDict").empty_tuple().reduce();
  p.str("_modules").global("collections", "OrderedDict").empty_tuple().reduce().mark();
  for (const auto& [name, child] : m.children) {
    p.str(name);
    emit_module(p, child);
  }
  p.setitems();
  for (const auto& [name, value] : m.attributes) {
    p.str(name);
    emit_attribute_value(p, value);
  }
  p.setitems().build();
}

inline Bytes module_pickle(const ModuleSpec& m) {
  PickleBuilder p;
  p.proto(2);
  emit_module(p, m);
  p.stop();
  return p.bytes;
}

// ---------------------------------------------------------------------------
// Legacy (pre-1.6) stream: magic, protocol version, sys_info, the object, the
// storage key list, then per key an int64 element count and the raw bytes.

// The first three pickles; `protocol` other than 1001 makes a bad file.
inline Bytes legacy_header(int64_t protocol = 1001) {
  PickleBuilder p;
  p.proto(2).raw({0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19}).stop();
  p.proto(2).integer(protocol).stop();
  p.proto(2).empty_dict().mark().str("protocol_version").integer(1001).str("little_endian").boolean(true);
  p.str("type_sizes").empty_dict().mark().str("short").integer(2).str("int").integer(4).str("long").integer(4);
  p.setitems().setitems().stop();
  return p.bytes;
}

inline Bytes legacy_key_list(const std::vector<std::string>& keys) {
  PickleBuilder p;
  p.proto(2).empty_list().mark();
  for (const std::string& k : keys) p.str(k);
  p.appends().stop();
  return p.bytes;
}

// One raw storage: int64 LE element count, then the bytes.
inline Bytes legacy_storage(int64_t count, const Bytes& data) {
  Bytes out;
  put64(out, uint64_t(count));
  append(out, data);
  return out;
}

struct LegacyStorage {
  std::string key;
  int64_t count = 0;  // elements
  Bytes data;
};

// A whole legacy file: header, `main` (a pickle), the key list in the order
// given, the storages.
inline Bytes legacy_checkpoint(const Bytes& main, const std::vector<LegacyStorage>& storages) {
  Bytes out = legacy_header();
  append(out, main);
  std::vector<std::string> keys;
  for (const LegacyStorage& s : storages) keys.push_back(s.key);
  append(out, legacy_key_list(keys));
  for (const LegacyStorage& s : storages) append(out, legacy_storage(s.count, s.data));
  return out;
}

// ---------------------------------------------------------------------------
// TorchScript archive (torch.jit.save): data.pkl + data/<key>, constants.pkl,
// code/<path>.py records (Deflate, as torch writes them), version.

inline Bytes torchscript_zip(const Bytes& data_pkl, const std::vector<std::pair<std::string, Bytes>>& storages,
                             const std::vector<std::pair<std::string, std::string>>& code,
                             const Bytes& constants_pkl = {}, const std::string& prefix = "model") {
  ZipBuilder z;
  z.add(prefix + "/data.pkl", data_pkl);
  for (const auto& [key, data] : storages) z.add(prefix + "/data/" + key, data);
  for (const auto& [name, text] : code) {
    const Bytes plain = bytes_of(text);
    z.add(prefix + "/code/" + name, deflate_stored_blocks(plain), false, 8, plain.size(), test_crc32(plain));
  }
  PickleBuilder empty;
  empty.proto(2).empty_tuple().stop();
  z.add(prefix + "/constants.pkl", constants_pkl.empty() ? empty.bytes : constants_pkl);
  z.add(prefix + "/version", bytes_of("3\n"));
  return z.finish();
}

// ---------------------------------------------------------------------------
// safetensors: u64 LE header length, the JSON header (padded with spaces to
// a multiple of 8, as the safetensors library does), the data.

inline Bytes safetensors_file(const std::string& header, const Bytes& data, bool pad = true) {
  std::string h = header;
  if (pad) h.append((8 - h.size() % 8) % 8, ' ');
  Bytes out;
  put64(out, h.size());
  append(out, h);
  append(out, data);
  return out;
}

// A file in the temp directory holding `data`, removed on destruction.
class TempFile {
 public:
  explicit TempFile(const Bytes& data, const std::string& suffix = ".pt") {
    const char* dir = std::getenv("TMPDIR");
    std::string templ = std::string(dir && *dir ? dir : "/tmp") + "/ferry_test_XXXXXX" + suffix;
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    const int fd = mkstemps(buf.data(), int(suffix.size()));
    if (fd < 0) std::abort();
    path_ = buf.data();
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
      if (n <= 0) std::abort();
      done += size_t(n);
    }
    ::close(fd);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ferry::test
