// Checkpoint reading: turns a PyTorch file (any form listed in DESIGN.md) into
// an ordered list of named tensors that view the mapped file's bytes, plus
// whatever hyper-parameters the file records. Nothing in the file is executed:
// see pickle.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mapped_file.h"

namespace ferry::conv {

enum class DType { F32, F16, BF16, F64, I64, I32, I16, I8, U8, Bool, Unknown };

const char* dtype_name(DType d);   // "float32", ...
size_t dtype_size(DType d);        // bytes per element (0 for Unknown)

// One storage record: raw bytes of a tensor's base storage.
struct Storage {
  std::string key;        // record key ("0", "1", ...)
  std::string location;   // "cpu", "cuda:0", ... recorded, never used
  DType dtype = DType::Unknown;
  uint64_t numel = 0;     // elements of `dtype`
  const uint8_t* data = nullptr;  // points into the mapped file
  uint64_t nbytes = 0;
  bool big_endian = false;
};

// A tensor as the checkpoint describes it: a strided view of a storage.
struct TensorRef {
  std::string name;                 // state-dict key, exactly as in the file
  DType dtype = DType::Unknown;
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;      // in elements
  int64_t offset = 0;               // storage offset in elements
  std::shared_ptr<const Storage> storage;

  int64_t numel() const;
};

struct Checkpoint {
  std::string form;                 // e.g. "zip state_dict", shown by inspect
  std::vector<TensorRef> tensors;   // state-dict order
  // Entries that are not model tensors, with why (optimizer state, ...).
  std::vector<std::pair<std::string, std::string>> ignored;
  // Hyper-parameters the file records, keyed "module.path.attr"
  // (e.g. "lstm.batch_first" -> "true"). Empty for a bare state dict.
  std::map<std::string, std::string> attributes;
};

struct LoadOptions {
  std::string key;                  // --key: which entry of a checkpoint dict
};

// Reads the checkpoint in `file`. Throws Error with a precise message
// (file name, record, byte offset) on anything malformed or unsupported.
Checkpoint load_checkpoint(const MappedFile& file, const LoadOptions& options = {});

// Materializes a tensor as contiguous float32 in C order, honouring offset,
// strides, dtype (f32/f16/bf16/f64) and byte order. Bounds were checked at
// load; throws Error for a non-floating dtype.
std::vector<float> to_float32(const TensorRef& t);

}  // namespace ferry::conv
