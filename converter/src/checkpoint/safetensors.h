// safetensors files (PYTORCH_FORMAT.md §6): a u64 header length, a JSON
// header, then the tensors' bytes, C order, little-endian.
#pragma once

#include "checkpoint/checkpoint.h"
#include "io/mapped_file.h"

namespace ferry::conv::detail {

// --key does not apply (a file holds one flat set of tensors) and is refused.
Checkpoint read_safetensors(const MappedFile& file, const LoadOptions& options);

}  // namespace ferry::conv::detail
