#include "args.h"

namespace ferry::cli {

Args::Args(int argc, char** argv, int first, const std::set<std::string>& valued,
           const std::set<std::string>& boolean) {
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
      if (valued.count(a)) {
        if (i + 1 >= argc) throw UsageError(a + " needs a value");
        values[a] = argv[++i];
      } else if (boolean.count(a)) {
        flags.insert(a);
      } else {
        throw UsageError("unknown option '" + a + "'");
      }
    } else {
      positional.push_back(a);
    }
  }
}

std::optional<std::string> Args::get(const std::string& flag) const {
  auto it = values.find(flag);
  if (it == values.end()) return std::nullopt;
  return it->second;
}

}  // namespace ferry::cli
