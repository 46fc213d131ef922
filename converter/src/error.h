// Errors raised by the converter. The converter is a host tool and uses C++
// exceptions internally; the CLI catches ferry::conv::Error at the top and
// prints one line `ferry: error: <what>` with a non-zero exit status.
// Messages name the file, the tensor, the record or the byte offset at fault.
#pragma once

#include <stdexcept>
#include <string>

namespace ferry::conv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace ferry::conv
