// The legacy torch.save stream (before PyTorch 1.6, or
// _use_new_zipfile_serialization=False; PYTORCH_FORMAT.md §2): back-to-back
// pickles, then the raw storages, unaligned.
#pragma once

#include "checkpoint/checkpoint.h"
#include "io/mapped_file.h"

namespace ferry::conv::detail {

Checkpoint read_legacy(const MappedFile& file, const LoadOptions& options);

}  // namespace ferry::conv::detail
