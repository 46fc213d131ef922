#include "plan/user_metadata.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "error.h"
#include "io/mapped_file.h"
#include "io/npy.h"
#include "metadata_rules.h"

namespace ferry::conv {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A decimal number (digits, sign, point, exponent; no hex, inf or nan),
// finite, as a whole word.
bool decimal_number(const std::string& s, double* out) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E')) return false;
  }
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

std::string shown(const std::string& word) {
  return word.size() > 80 ? word.substr(0, 77) + "..." : word;
}

}  // namespace

MetaValue parse_meta(const std::string& word) {
  const size_t eq = word.find('=');
  if (eq == std::string::npos) {
    throw Error("--meta '" + shown(word) + "': expected KEY=VALUE (VALUE: a number, text, or @FILE)");
  }
  MetaValue v;
  v.key = word.substr(0, eq);
  const std::string value = word.substr(eq + 1);
  if (!meta::key_ok(v.key.data(), v.key.size())) {
    throw Error("--meta '" + shown(word) + "': the key must be 1 to " + std::to_string(meta::kMaxKeyBytes) +
                " characters of A-Z a-z 0-9 _ . -");
  }
  const std::string what = "--meta " + v.key;
  if (!value.empty() && value[0] == '@') {
    const std::string path = value.substr(1);
    if (path.empty()) throw Error(what + ": '@' names no file");
    if (ends_with(path, ".npy")) {
      const NpyArray a = read_npy_numbers(path);
      if (a.shape.size() > meta::kMaxRank) {
        throw Error(what + ": '" + path + "' has " + std::to_string(a.shape.size()) + " dimensions, metadata takes " +
                    std::to_string(meta::kMaxRank) + " at most");
      }
      if (a.numbers.empty()) throw Error(what + ": '" + path + "' holds no numbers");
      if (a.numbers.size() > meta::kMaxNumbers) {
        throw Error(what + ": '" + path + "' holds " + std::to_string(a.numbers.size()) + " numbers, metadata takes " +
                    std::to_string(meta::kMaxNumbers) + " at most per entry");
      }
      v.is_text = false;
      v.numbers = a.numbers;
      for (size_t d : a.shape) v.shape.push_back(static_cast<uint32_t>(d));  // <= kMaxNumbers each
      return v;
    }
    const MappedFile f(path);
    if (f.size() > meta::kMaxTextBytes) {
      throw Error(what + ": '" + path + "' is " + std::to_string(f.size()) + " bytes, text metadata takes " +
                  std::to_string(meta::kMaxTextBytes) + " at most");
    }
    v.text.assign(reinterpret_cast<const char*>(f.data()), f.size());
  } else if (value.rfind("text:", 0) == 0) {
    v.text = value.substr(5);
  } else {
    // Numbers: one, or a comma-separated list.
    std::vector<double> numbers;
    size_t start = 0;
    bool all = !value.empty();
    while (all) {
      const size_t comma = value.find(',', start);
      double d = 0;
      all = decimal_number(value.substr(start, comma == std::string::npos ? std::string::npos : comma - start), &d);
      if (all) numbers.push_back(d);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (all && numbers.size() <= meta::kMaxNumbers) {
      v.is_text = false;
      v.numbers = numbers;
      if (value.find(',') != std::string::npos) v.shape = {static_cast<uint32_t>(numbers.size())};
      return v;
    }
    v.text = value;
  }
  size_t bad = 0;
  if (!meta::utf8_ok(reinterpret_cast<const uint8_t*>(v.text.data()), v.text.size(), &bad)) {
    throw Error(what + ": the text is not UTF-8 (byte " + std::to_string(bad) + ")");
  }
  if (v.text.size() > meta::kMaxTextBytes) {
    throw Error(what + ": " + std::to_string(v.text.size()) + " bytes of text, at most " +
                std::to_string(meta::kMaxTextBytes));
  }
  return v;
}

void check_meta(const std::vector<MetaValue>& entries) {
  if (entries.size() > meta::kMaxEntries) {
    throw Error("--meta: " + std::to_string(entries.size()) + " entries, a model holds " +
                std::to_string(meta::kMaxEntries) + " at most");
  }
  size_t total = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (entries[j].key == entries[i].key) throw Error("--meta " + entries[i].key + ": the key is given twice");
    }
    total += entries[i].key.size() + entries[i].text.size() + entries[i].numbers.size() * sizeof(double);
  }
  if (total > meta::kMaxTotalBytes) {
    throw Error("--meta: " + std::to_string(total) + " bytes in all, a model holds " +
                std::to_string(meta::kMaxTotalBytes) + " at most");
  }
}

std::string describe_meta(const MetaValue& v) {
  if (v.is_text) return "text, " + std::to_string(v.text.size()) + " bytes";
  if (v.shape.empty()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v.numbers[0]);
    return std::string("number ") + buf;
  }
  std::string dims;
  for (size_t d = 0; d < v.shape.size(); ++d) dims += (d ? ", " : "") + std::to_string(v.shape[d]);
  return "numbers [" + dims + "]";
}

}  // namespace ferry::conv
