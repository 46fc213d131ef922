// Errors raised by the converter. The converter is a host tool and uses C++
// exceptions internally; the CLI catches ferry::conv::Error at the top and
// prints one line `ferry: error: <what>` with a non-zero exit status.
// Messages name the file, the tensor, the record or the byte offset at fault.
//
// A message may quote any name a file holds: the constructor passes it
// through escaped() (text.h), so a NUL, a newline or a byte that is not
// UTF-8 in a name is spelled out and never cuts or splits the line.
#pragma once

#include <stdexcept>
#include <string>

#include "text.h"

namespace ferry::conv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(escaped(what)) {}
};

}  // namespace ferry::conv
