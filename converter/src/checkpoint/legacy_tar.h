// The tar format of torch.save before PyTorch 0.3 (0.1.x and 0.2; torch's
// serialization.py still reads it: legacy_load). A tar archive (PAX format)
// of four members:
//
//   sys_info  a pickled dict {protocol_version: 1000, little_endian,
//             type_sizes}; a big-endian writer is refused
//   storages  a pickled count, then per storage a pickled (key, location,
//             storage class) and the storage itself: an int64 element count
//             and its raw little-endian bytes; then a pickled list of views
//             (key, root key, offset, size), in elements of the root
//   tensors   a pickled count, then per tensor a pickled (key, storage key,
//             tensor class) and its metadata: ndim (int32, then 4 unused
//             bytes), ndim int64 sizes, ndim int64 strides, an int64
//             storage offset (all little-endian, in elements)
//   pickle    the saved object, whose persistent ids are str(key) of a
//             tensor or storage, or (class, source_file, source) for a
//             module class (a whole torch.save(model))
//
// Every length is checked against the bytes of its member, every member
// against the archive (tar headers: checksum, octal sizes, pax 'path' and
// 'size' records); views and tensors are checked inside their storages.
// The main pickle is read with call placeholders (pickle.h), as torch.save
// main pickles are: a whole module's calls it never makes stay inert
// attributes. Tensors view the mapped file; nothing is copied.
#pragma once

#include "checkpoint/checkpoint.h"
#include "io/mapped_file.h"

namespace ferry::conv::detail {

Checkpoint read_legacy_tar(const MappedFile& file, const LoadOptions& options);

}  // namespace ferry::conv::detail
