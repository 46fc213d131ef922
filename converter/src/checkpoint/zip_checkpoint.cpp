// torch.save zip archives (the default since PyTorch 1.6), PYTORCH_FORMAT.md
// §1: data.pkl unpickled with its storages resolved from data/<key>, then
// the model selected out of the tree (select.cpp).
#include "checkpoint/zip_checkpoint.h"

#include "checkpoint/reader_internal.h"
#include "error.h"

namespace ferry::conv::detail {

Checkpoint read_zip_checkpoint(const ZipReader& zip, const std::string& path, const LoadOptions& options) {
  const bool big_endian = read_zip_byte_order(zip);
  const ZipEntry* pkl = zip.find("data.pkl");
  if (!pkl) throw Error(path + ": zip archive without a data.pkl record: not a torch.save checkpoint");
  const ByteSpan pickle_bytes = zip.stored(*pkl);

  StorageTable table;
  ZipStorageLoader loader(zip, "data", big_endian, table);
  UnpickleLimits limits;
  limits.call_placeholders = true;  // whole modules may hold calls never made
  const std::string label = zip.describe(*pkl);
  const PickleTree tree = unpickle(pickle_bytes.data, pickle_bytes.size, label, &loader, limits);
  check_call_placeholders(tree.root, label);

  Checkpoint out;
  select_tensors(tree.root, "zip", path, table, options, out);
  return out;
}

}  // namespace ferry::conv::detail
