// The ferry CLI's flag parser: positional arguments and `--flag [value]`.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "error.h"

namespace ferry::cli {

// A mistake in the command line: reported with the usage text, exit status 2.
struct UsageError : conv::Error {
  using conv::Error::Error;
};

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  // --flag value
  std::set<std::string> flags;                // --flag

  // Parses argv[first..argc). `valued` flags take the next argument as their
  // value, `boolean` ones none; any other --flag is a UsageError.
  Args(int argc, char** argv, int first, const std::set<std::string>& valued, const std::set<std::string>& boolean);

  std::optional<std::string> get(const std::string& flag) const;
  bool has(const std::string& flag) const { return flags.count(flag) != 0; }
};

}  // namespace ferry::cli
