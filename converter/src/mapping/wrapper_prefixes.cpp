#include "mapping/wrapper_prefixes.h"

namespace ferry::conv {

std::string strip_wrapper_prefixes(const std::string& key) {
  static const std::string kModule = "module.";
  static const std::string kCompiled = "_orig_mod.";
  std::string out = key;
  for (bool changed = true; changed;) {
    changed = false;
    if (out.compare(0, kModule.size(), kModule) == 0) {
      out.erase(0, kModule.size());
      changed = true;
    }
    // `_orig_mod.` at the start or after any '.'.
    for (size_t pos = out.find(kCompiled); pos != std::string::npos; pos = out.find(kCompiled, pos)) {
      if (pos == 0 || out[pos - 1] == '.') {
        out.erase(pos, kCompiled.size());
        changed = true;
      } else {
        pos += kCompiled.size();
      }
    }
  }
  return out;
}

}  // namespace ferry::conv
