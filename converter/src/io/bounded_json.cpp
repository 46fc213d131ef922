#include "io/bounded_json.h"

#include <new>

#include "error.h"
#include "text.h"

namespace ferry::conv {

nlohmann::json parse_bounded_json(const uint8_t* data, size_t size, const std::string& label) {
  if (size > kMaxJsonBytes)
    throw Error(label + ": " + std::to_string(size) + " bytes of JSON (at most " + std::to_string(kMaxJsonBytes) + ")");
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < size; ++i) {
    const uint8_t c = data[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw Error(label + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels at byte " +
                    std::to_string(i));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  try {
    const char* p = reinterpret_cast<const char*>(data);
    return nlohmann::json::parse(p, p + size);
  } catch (const nlohmann::json::exception& e) {
    throw Error(label + ": not valid JSON (" + printable(e.what(), 300) + ")");
  } catch (const std::bad_alloc&) {
    throw Error(label + ": JSON too large to hold in memory");
  }
}

}  // namespace ferry::conv
