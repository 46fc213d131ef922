// safetensors (PYTORCH_FORMAT.md §6): u64 LE header length N, N bytes of
// UTF-8 JSON, then the data section. The header is
//   {"__metadata__": {str: str}?, "<name>": {"dtype": "F32", "shape": [...],
//    "data_offsets": [begin, end]}, ...}
// with offsets relative to the data section, C order, little-endian.
//
// The JSON is read by a small strict reader written for this header rather
// than a general JSON library: the schema is two levels deep, duplicate keys
// must be refused (general parsers keep the last silently), offsets are
// u64 and must not pass through doubles, and the reader must be bounded and
// never recurse on input-controlled depth. It accepts exactly RFC 8259 JSON
// (no comments, no trailing commas, no NaN), refuses lone surrogates and
// \u0000, and skips unknown fields of a tensor entry.
//
// Then the layout is checked: every dtype known, end − begin = the tensor's
// byte size (overflow-checked), and the data ranges, sorted, start at 0 and
// follow each other without gap or overlap up to exactly the end of the file.
#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "checkpoint/reader_internal.h"
#include "error.h"

namespace ferry::conv::detail {
namespace {

constexpr uint64_t kMaxHeader = 100000000;  // what the safetensors library allows
constexpr size_t kMaxTensors = size_t{1} << 20;
constexpr size_t kMaxRank = 64;
constexpr size_t kMaxString = size_t{16} << 20;
constexpr size_t kMaxSkipDepth = 64;

struct SafeDType {
  const char* name;  // as in the header
  DType dtype;       // Unknown: validated, listed as ignored
  uint32_t bits;     // per element
};

const SafeDType* find_dtype(const std::string& name) {
  static const SafeDType kTable[] = {
      {"BOOL", DType::Bool, 8},        {"U8", DType::U8, 8},
      {"I8", DType::I8, 8},            {"F8_E5M2", DType::Unknown, 8},
      {"F8_E4M3", DType::Unknown, 8},  {"F8_E8M0", DType::Unknown, 8},
      {"I16", DType::I16, 16},         {"U16", DType::Unknown, 16},
      {"F16", DType::F16, 16},         {"BF16", DType::BF16, 16},
      {"I32", DType::I32, 32},         {"U32", DType::Unknown, 32},
      {"F32", DType::F32, 32},         {"F64", DType::F64, 64},
      {"I64", DType::I64, 64},         {"U64", DType::Unknown, 64},
      {"C64", DType::Unknown, 64},     {"F4", DType::Unknown, 4},
      {"F6_E2M3", DType::Unknown, 6},  {"F6_E3M2", DType::Unknown, 6},
  };
  for (const SafeDType& d : kTable)
    if (name == d.name) return &d;
  return nullptr;
}

// A strict JSON reader over the header bytes. Errors name the file offset.
class JsonReader {
 public:
  JsonReader(const uint8_t* p, size_t n, size_t file_offset, std::string label)
      : p_(p), n_(n), base_(file_offset), label_(std::move(label)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(label_ + ": " + what + " at byte " + std::to_string(base_ + pos_));
  }

  void skip_whitespace() {
    while (pos_ < n_ && (p_[pos_] == ' ' || p_[pos_] == '\t' || p_[pos_] == '\n' || p_[pos_] == '\r')) ++pos_;
  }
  bool next_is(char c) {
    skip_whitespace();
    return pos_ < n_ && p_[pos_] == c;
  }
  bool at_end() {
    skip_whitespace();
    return pos_ == n_;
  }
  // Consumes `c` after whitespace when it is next.
  bool accept(char c) {
    skip_whitespace();
    if (pos_ < n_ && p_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c, const char* what) {
    if (!accept(c)) fail(std::string("expected ") + what);
  }

  std::string string() {
    skip_whitespace();
    if (pos_ >= n_ || p_[pos_] != '"') fail("expected a string");
    ++pos_;
    std::string out;
    for (;;) {
      if (pos_ >= n_) fail("unterminated string");
      const uint8_t c = p_[pos_];
      if (c == '"') {
        ++pos_;
        break;
      }
      if (c < 0x20) fail("control character in a string");
      if (c != '\\') {
        // A run of plain bytes, checked as UTF-8 below.
        const size_t start = pos_;
        while (pos_ < n_ && p_[pos_] != '"' && p_[pos_] != '\\' && p_[pos_] >= 0x20) ++pos_;
        if (!is_utf8(p_ + start, pos_ - start)) {
          pos_ = start;
          fail("string is not valid UTF-8");
        }
        out.append(reinterpret_cast<const char*>(p_ + start), pos_ - start);
      } else {
        if (++pos_ >= n_) fail("unterminated escape");
        const char e = static_cast<char>(p_[pos_++]);
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': append_code_point(out); break;
          default: --pos_; fail(std::string("invalid escape '\\") + e + "'");
        }
      }
      if (out.size() > kMaxString) fail("string longer than " + std::to_string(kMaxString) + " bytes");
    }
    return out;
  }

  // A non-negative integer: no sign, fraction, exponent or leading zero.
  uint64_t unsigned_integer(const std::string& what) {
    skip_whitespace();
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < n_ && p_[pos_] >= '0' && p_[pos_] <= '9') {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, uint64_t(p_[pos_] - '0'), &v)) {
        pos_ = start;
        fail(what + " overflows 64 bits");
      }
      ++pos_;
    }
    if (pos_ == start) fail(what + " is not a non-negative integer");
    if (p_[start] == '0' && pos_ - start > 1) {
      pos_ = start;
      fail(what + " has a leading zero");
    }
    if (pos_ < n_ && (p_[pos_] == '.' || p_[pos_] == 'e' || p_[pos_] == 'E')) {
      pos_ = start;
      fail(what + " is not an integer");
    }
    return v;
  }

  // Skips any JSON value, iteratively, nesting bounded.
  void skip_value() {
    std::vector<char> closers;
    for (;;) {
      skip_whitespace();
      if (pos_ >= n_) fail("unexpected end of the header");
      const uint8_t c = p_[pos_];
      bool opened = false;
      if (c == '{' || c == '[') {
        if (closers.size() >= kMaxSkipDepth) fail("values nested deeper than " + std::to_string(kMaxSkipDepth));
        ++pos_;
        closers.push_back(c == '{' ? '}' : ']');
        opened = true;
        if (accept(closers.back())) {
          closers.pop_back();
          opened = false;
        } else if (c == '{') {
          string();
          expect(':', "':'");
        }
      } else if (c == '"') {
        string();
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        number();
      } else if (!literal("true") && !literal("false") && !literal("null")) {
        fail("invalid JSON value");
      }
      if (opened) continue;  // read the container's first value
      // After a value: a separator, or the end of enclosing containers.
      for (;;) {
        if (closers.empty()) return;
        if (accept(',')) {
          if (closers.back() == '}') {
            string();
            expect(':', "':'");
          }
          break;
        }
        if (!accept(closers.back())) fail(std::string("expected ',' or '") + closers.back() + "'");
        closers.pop_back();
      }
    }
  }

 private:
  bool literal(const char* word) {
    const size_t len = std::strlen(word);
    if (n_ - pos_ >= len && std::memcmp(p_ + pos_, word, len) == 0) {
      pos_ += len;
      return true;
    }
    return false;
  }

  void number() {
    auto digits = [&] {
      const size_t start = pos_;
      while (pos_ < n_ && p_[pos_] >= '0' && p_[pos_] <= '9') ++pos_;
      if (pos_ == start) fail("malformed number");
      return pos_ - start;
    };
    if (p_[pos_] == '-') ++pos_;
    const size_t int_start = pos_;
    if (digits() > 1 && p_[int_start] == '0') fail("number with a leading zero");
    if (pos_ < n_ && p_[pos_] == '.') {
      ++pos_;
      digits();
    }
    if (pos_ < n_ && (p_[pos_] == 'e' || p_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < n_ && (p_[pos_] == '+' || p_[pos_] == '-')) ++pos_;
      digits();
    }
  }

  uint32_t hex4() {
    if (n_ - pos_ < 4) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const uint8_t c = p_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
      else fail("invalid \\u escape");
    }
    return v;
  }

  void append_code_point(std::string& out) {
    uint32_t cp = hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate in a \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (n_ - pos_ < 2 || p_[pos_] != '\\' || p_[pos_ + 1] != 'u') fail("lone high surrogate in a \\u escape");
      pos_ += 2;
      const uint32_t low = hex4();
      if (low < 0xDC00 || low > 0xDFFF) fail("high surrogate not followed by a low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    if (cp == 0) fail("\\u0000 in a string");
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  size_t base_;
  std::string label_;
};

struct Entry {
  std::string name;
  const SafeDType* dtype = nullptr;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
  uint64_t nbytes = 0;  // from dtype and shape
  uint64_t numel = 0;
};

// {"dtype": ..., "shape": [...], "data_offsets": [b, e]} of tensor `name`.
Entry read_entry(JsonReader& j, const std::string& name) {
  Entry e;
  e.name = name;
  const std::string what = "tensor '" + name + "'";
  bool have_dtype = false, have_shape = false, have_offsets = false;
  std::unordered_set<std::string> fields;
  j.expect('{', ("'{' to open " + what).c_str());
  if (!j.accept('}')) {
    do {
      const std::string field = j.string();
      if (!fields.insert(field).second) j.fail(what + ": duplicate field '" + field + "'");
      j.expect(':', "':'");
      if (field == "dtype") {
        const std::string d = j.string();
        e.dtype = find_dtype(d);
        if (!e.dtype) j.fail(what + ": unknown dtype '" + d + "'");
        have_dtype = true;
      } else if (field == "shape") {
        j.expect('[', "'[' to open the shape");
        if (!j.accept(']')) {
          do {
            if (e.shape.size() >= kMaxRank) j.fail(what + ": more than " + std::to_string(kMaxRank) + " dimensions");
            const uint64_t d = j.unsigned_integer(what + ": a shape dimension");
            if (d > uint64_t(kMaxTensorElements)) j.fail(what + ": shape dimension " + std::to_string(d) + " is too large");
            e.shape.push_back(static_cast<int64_t>(d));
          } while (j.accept(','));
          j.expect(']', "',' or ']' in the shape");
        }
        have_shape = true;
      } else if (field == "data_offsets") {
        j.expect('[', "'[' to open data_offsets");
        e.begin = j.unsigned_integer(what + ": data_offsets begin");
        j.expect(',', "',' in data_offsets");
        e.end = j.unsigned_integer(what + ": data_offsets end");
        j.expect(']', "']' closing data_offsets (two numbers)");
        have_offsets = true;
      } else {
        j.skip_value();  // a field from a newer writer
      }
    } while (j.accept(','));
    j.expect('}', ("',' or '}' in " + what).c_str());
  }
  if (!have_dtype || !have_shape || !have_offsets)
    j.fail(what + " lacks '" + std::string(!have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets") + "'");
  return e;
}

std::string range_text(const Entry& e) {
  return "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ")";
}

}  // namespace

Checkpoint read_safetensors(const MappedFile& file, const LoadOptions& options) {
  const std::string& path = file.path();
  const uint8_t* data = file.data();
  const size_t size = file.size();
  if (!options.key.empty())
    throw Error(path + ": --key does not apply to a safetensors file (it holds one flat set of tensors)");
  if (size < 8) throw Error(path + ": safetensors file shorter than its 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > kMaxHeader)
    throw Error(path + ": safetensors header of " + std::to_string(n) + " bytes exceeds the limit of " +
                std::to_string(kMaxHeader));
  if (n > size - 8)
    throw Error(path + ": safetensors header of " + std::to_string(n) + " bytes runs past the end of the file (" +
                std::to_string(size) + " bytes)");
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = size - data_start;

  Checkpoint out;
  out.form = "safetensors";
  JsonReader j(data + 8, static_cast<size_t>(n), 8, path + ": safetensors header");
  std::vector<Entry> entries;
  std::unordered_set<std::string> keys;
  j.expect('{', "'{' opening the header");
  if (!j.accept('}')) {
    do {
      const std::string key = j.string();
      if (!keys.insert(key).second) j.fail("duplicate key '" + key + "'");
      j.expect(':', "':'");
      if (key == "__metadata__") {
        std::unordered_set<std::string> meta_keys;
        j.expect('{', "'{' opening __metadata__");
        if (!j.accept('}')) {
          do {
            const std::string k = j.string();
            if (!meta_keys.insert(k).second) j.fail("duplicate __metadata__ key '" + k + "'");
            j.expect(':', "':'");
            if (!j.next_is('"')) j.fail("__metadata__ value of '" + k + "' is not a string");
            out.attributes["__metadata__." + k] = j.string();
          } while (j.accept(','));
          j.expect('}', "',' or '}' in __metadata__");
        }
        continue;
      }
      if (key.empty()) j.fail("empty tensor name");
      if (entries.size() >= kMaxTensors) j.fail("more than " + std::to_string(kMaxTensors) + " tensors");
      entries.push_back(read_entry(j, key));
    } while (j.accept(','));
    j.expect('}', "',' or '}' after a tensor entry");
  }
  if (!j.at_end()) j.fail("unexpected characters after the header object");

  // Sizes.
  for (Entry& e : entries) {
    const std::string what = path + ": safetensors tensor '" + e.name + "'";
    uint64_t numel = 1;
    for (int64_t d : e.shape)
      if (__builtin_mul_overflow(numel, uint64_t(d), &numel) || numel > uint64_t(kMaxTensorElements))
        throw Error(what + ": too many elements (shape " + dims_text(e.shape) + ")");
    const uint64_t bits = numel * e.dtype->bits;  // < 2^40 * 64: no overflow
    if (bits % 8 != 0)
      throw Error(what + ": " + std::to_string(numel) + " elements of " + e.dtype->name +
                  " do not fill whole bytes");
    e.numel = numel;
    e.nbytes = bits / 8;
    if (e.end < e.begin) throw Error(what + ": data_offsets " + range_text(e) + " end before they begin");
    if (e.end - e.begin != e.nbytes)
      throw Error(what + ": data_offsets " + range_text(e) + " hold " + std::to_string(e.end - e.begin) +
                  " bytes, but dtype " + e.dtype->name + " and shape " + dims_text(e.shape) + " need " +
                  std::to_string(e.nbytes));
    if (e.end > data_size)
      throw Error(what + ": data_offsets " + range_text(e) + " reach past the end of the data section (" +
                  std::to_string(data_size) + " bytes from byte " + std::to_string(data_start) + ")");
  }
  // Layout: sorted by offset, the ranges tile [0, data_size) exactly.
  std::vector<const Entry*> sorted;
  for (const Entry& e : entries) sorted.push_back(&e);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry* e : sorted) {
    if (e->begin < covered)
      throw Error(path + ": safetensors tensors '" + previous->name + "' " + range_text(*previous) + " and '" +
                  e->name + "' " + range_text(*e) + " overlap");
    if (e->begin > covered)
      throw Error(path + ": safetensors data has a gap of " + std::to_string(e->begin - covered) +
                  " bytes before tensor '" + e->name + "' " + range_text(*e) +
                  (previous ? " (after '" + previous->name + "')" : std::string(" (the first tensor)")));
    covered = e->end;
    previous = e;
  }
  if (covered != data_size)
    throw Error(path + ": safetensors data section is " + std::to_string(data_size) + " bytes, but its tensors cover " +
                std::to_string(covered));

  // Tensors, in header order.
  for (const Entry& e : entries) {
    if (e.dtype->dtype == DType::Unknown) {
      out.ignored.emplace_back(e.name, std::string("unsupported dtype ") + e.dtype->name);
      continue;
    }
    if (!is_float(e.dtype->dtype)) {
      out.ignored.emplace_back(e.name, std::string("not a floating-point tensor (") + dtype_name(e.dtype->dtype) + ")");
      continue;
    }
    auto storage = std::make_shared<Storage>();
    storage->key = range_text(e);
    storage->location = "n/a";  // safetensors records no device
    storage->dtype = e.dtype->dtype;
    storage->numel = e.numel;
    storage->data = data + data_start + e.begin;
    storage->nbytes = e.nbytes;
    TensorRef t;
    t.name = e.name;
    t.dtype = e.dtype->dtype;
    t.shape = e.shape;
    t.stride.resize(e.shape.size());
    int64_t stride = 1;
    for (size_t d = e.shape.size(); d-- > 0;) {
      t.stride[d] = stride;
      if (e.numel != 0) stride *= e.shape[d];  // the product is numel <= 2^40
    }
    t.storage = std::move(storage);
    out.tensors.push_back(std::move(t));
  }
  return out;
}

}  // namespace ferry::conv::detail
