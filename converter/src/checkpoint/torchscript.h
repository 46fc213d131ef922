// TorchScript archives (torch.jit.save, PYTORCH_FORMAT.md §3): a zip like
// torch.save's, with the module objects in data.pkl, the compiled source in
// code/ and the code's constants in constants.pkl.
#pragma once

#include <string>

#include "checkpoint/checkpoint.h"
#include "io/zip_reader.h"

namespace ferry::conv::detail {

// Whether torch.load would hand the archive to torch.jit.load: it has a
// constants.pkl. Throws Error for code/ records without one (TorchScript to
// no reader of torch's).
// `path` names the file in that message.
bool is_torchscript(const ZipReader& zip, const std::string& path);

// `zip` is the validated archive of the file named `path` (for messages).
// --key does not apply (an archive holds one module) and is refused.
Checkpoint read_torchscript(const ZipReader& zip, const std::string& path, const LoadOptions& options);

}  // namespace ferry::conv::detail
