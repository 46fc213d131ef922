#include "io/npy.h"

#include <cstdint>
#include <cstring>

#include "error.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace ferry::conv {
namespace {

// Value of `key` in the header dict text, e.g. 'descr': '<f4' → "'<f4'".
std::string dict_value(const std::string& header, const std::string& key, const std::string& what) {
  const std::string quoted = "'" + key + "'";
  const size_t k = header.find(quoted);
  if (k == std::string::npos) throw Error(what + ": .npy header lacks '" + key + "'");
  size_t v = header.find(':', k + quoted.size());
  if (v == std::string::npos) throw Error(what + ": malformed .npy header near '" + key + "'");
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  size_t end = v;
  if (v < header.size() && header[v] == '(') {
    end = header.find(')', v);
    if (end == std::string::npos) throw Error(what + ": malformed shape in .npy header");
    ++end;
  } else {
    while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  }
  return header.substr(v, end - v);
}

// What the caller takes: float32 only; float32 or integer ids; or any of
// float32, float64, int32, int64 as doubles (metadata).
enum class Want { kFloats, kFloatsOrIds, kNumbers };
NpyArray parse_any(const uint8_t* bytes, size_t size, const std::string& what, Want want);

}  // namespace

NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& what, bool allow_ids) {
  return parse_any(bytes, size, what, allow_ids ? Want::kFloatsOrIds : Want::kFloats);
}

namespace {

NpyArray parse_any(const uint8_t* bytes, size_t size, const std::string& what, Want want) {
  const bool allow_ids = want == Want::kFloatsOrIds;
  static const uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size < 10 || std::memcmp(bytes, kMagic, 6) != 0) {
    throw Error(what + ": not a .npy file (no \\x93NUMPY magic)");
  }
  const uint8_t major = bytes[6];
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = bytes[8] | (size_t{bytes[9]} << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) throw Error(what + ": truncated .npy header");
    header_len = bytes[8] | (size_t{bytes[9]} << 8) | (size_t{bytes[10]} << 16) | (size_t{bytes[11]} << 24);
    start = 12;
  } else {
    throw Error(what + ": .npy format version " + std::to_string(major) + " is unknown");
  }
  if (header_len > size - start) throw Error(what + ": .npy header runs past the end of the file");
  const std::string header(reinterpret_cast<const char*>(bytes + start), header_len);
  const std::string descr = dict_value(header, "descr", what);
  const bool f32 = descr == "'<f4'" || descr == "'|f4'" || descr == "'float32'";
  const bool i32 = descr == "'<i4'" || descr == "'int32'";
  const bool i64 = descr == "'<i8'" || descr == "'int64'";
  const bool f64 = descr == "'<f8'" || descr == "'float64'";
  if (want == Want::kNumbers && !(f32 || f64 || i32 || i64)) {
    throw Error(what + ": dtype " + descr + ", metadata reads float32, float64, int32 or int64");
  }
  if (want != Want::kNumbers && !f32 && !(allow_ids && (i32 || i64))) {
    throw Error(what + ": dtype " + descr +
                (allow_ids ? ", ferry reads float32 ('<f4') or, for token ids, int32 / int64"
                           : ", ferry reads float32 ('<f4'); convert with x.astype(np.float32)"));
  }
  const size_t elem = i64 || f64 ? 8 : 4;
  if (dict_value(header, "fortran_order", what) != "False") {
    throw Error(what + ": Fortran-ordered array; save it C-ordered (np.ascontiguousarray)");
  }
  const std::string shape_text = dict_value(header, "shape", what);
  NpyArray a;
  size_t count = 1;
  std::string num;
  for (char c : shape_text) {
    if (c >= '0' && c <= '9') {
      num += c;
    } else if (!num.empty()) {
      if (num.size() > 12) throw Error(what + ": shape dimension too large");
      const size_t d = std::stoull(num);
      if (__builtin_mul_overflow(count, d, &count)) throw Error(what + ": shape product overflows");
      a.shape.push_back(d);
      num.clear();
    }
  }
  const size_t data_start = start + header_len;
  size_t nbytes = 0;
  if (__builtin_mul_overflow(count, elem, &nbytes) || nbytes != size - data_start) {
    throw Error(what + ": shape " + shape_text + " needs " + std::to_string(count) + " values, the file holds " +
                std::to_string((size - data_start) / elem));
  }
  if (want == Want::kNumbers) {
    a.numbers.resize(count);
    for (size_t i = 0; i < count; ++i) {
      const uint8_t* p = bytes + data_start + i * elem;
      if (f64) {
        std::memcpy(&a.numbers[i], p, 8);
      } else if (f32) {
        float v;
        std::memcpy(&v, p, 4);
        a.numbers[i] = v;
      } else if (i64) {
        int64_t v;
        std::memcpy(&v, p, 8);
        if (v > (int64_t{1} << 53) || v < -(int64_t{1} << 53)) {
          throw Error(what + ": " + std::to_string(v) + " at index " + std::to_string(i) +
                      " is not exact as a double (metadata numbers are float64)");
        }
        a.numbers[i] = static_cast<double>(v);
      } else {
        int32_t v;
        std::memcpy(&v, p, 4);
        a.numbers[i] = v;
      }
    }
    return a;
  }
  if (f32) {
    a.data.resize(count);
    if (count) std::memcpy(a.data.data(), bytes + data_start, nbytes);
    return a;
  }
  a.is_ids = true;
  a.ids.resize(count);
  for (size_t i = 0; i < count; ++i) {
    int64_t v = 0;
    if (i64) {
      std::memcpy(&v, bytes + data_start + i * 8, 8);
    } else {
      int32_t v32 = 0;
      std::memcpy(&v32, bytes + data_start + i * 4, 4);
      v = v32;
    }
    if (v < INT32_MIN || v > INT32_MAX) {
      throw Error(what + ": id " + std::to_string(v) + " at index " + std::to_string(i) + " does not fit int32");
    }
    a.ids[i] = static_cast<int32_t>(v);
  }
  return a;
}

}  // namespace

NpyArray read_npy_numbers(const std::string& path) {
  MappedFile file(path);
  return parse_any(file.data(), file.size(), "'" + path + "'", Want::kNumbers);
}

NpyArray read_npy(const std::string& path, bool allow_ids) {
  MappedFile file(path);
  return parse_npy(file.data(), file.size(), "'" + path + "'", allow_ids);
}

void write_npy(const std::string& path, const NpyArray& array) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < array.shape.size(); ++i) {
    header += std::to_string(array.shape[i]);
    if (i + 1 < array.shape.size()) header += ", ";
  }
  if (array.shape.size() == 1) header += ",";  // Python's one-element tuple
  header += "), }";
  // Pad with spaces so the data starts 64-byte aligned; newline last.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::vector<uint8_t> bytes = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                static_cast<uint8_t>(header.size() & 0xff),
                                static_cast<uint8_t>(header.size() >> 8)};
  bytes.insert(bytes.end(), header.begin(), header.end());
  const uint8_t* p = reinterpret_cast<const uint8_t*>(array.data.data());
  bytes.insert(bytes.end(), p, p + array.data.size() * sizeof(float));
  write_file_atomic(path, bytes);
}

}  // namespace ferry::conv
