// The torch.save zip reader (PYTORCH_FORMAT.md §1): a state dict, a training
// checkpoint dict or a whole pickled module in data.pkl, storages in
// data/<key>. TorchScript archives, also zips, have their own reader
// (torchscript.h); load_checkpoint() tells them apart.
#pragma once

#include <string>

#include "checkpoint/checkpoint.h"
#include "io/zip_reader.h"

namespace ferry::conv::detail {

// `zip` is the validated archive of the file named `path` (for messages).
Checkpoint read_zip_checkpoint(const ZipReader& zip, const std::string& path, const LoadOptions& options);

}  // namespace ferry::conv::detail
