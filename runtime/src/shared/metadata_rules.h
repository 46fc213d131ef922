// The rules for user metadata (schema/ferry.fbs, Model.metadata), shared by
// the converter, which refuses what breaks them before writing, and the
// runtime's loader, which refuses a file that breaks them: limits, the key
// alphabet and UTF-8 text.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace ferry {
namespace meta {

constexpr size_t kMaxEntries = 64;
constexpr size_t kMaxKeyBytes = 64;
constexpr size_t kMaxTextBytes = 64 * 1024;
constexpr size_t kMaxNumbers = 65536;
constexpr size_t kMaxRank = 4;  // FERRY_METADATA_MAX_RANK
constexpr size_t kMaxTotalBytes = 1024 * 1024;  // keys, text and 8 bytes a number

// 1 to kMaxKeyBytes characters of [A-Za-z0-9_.-].
inline bool key_ok(const char* key, size_t bytes) {
  if (bytes == 0 || bytes > kMaxKeyBytes) return false;
  for (size_t i = 0; i < bytes; ++i) {
    const char c = key[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Valid UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF);
// the offset of the first bad byte in *bad otherwise.
inline bool utf8_ok(const uint8_t* s, size_t n, size_t* bad) {
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      *bad = i;
      return false;
    }
    if (n - i < len) {
      *bad = i;
      return false;
    }
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) {
        *bad = i;
        return false;
      }
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      *bad = i;
      return false;
    }
    i += len;
  }
  return true;
}

}  // namespace meta
}  // namespace ferry
