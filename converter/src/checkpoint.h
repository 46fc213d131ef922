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
  // The detected form, shown by inspect and recorded as provenance:
  // "zip state_dict", "zip training checkpoint (key 'model_state_dict')",
  // "zip whole module (__main__.Net)", "legacy (pre-1.6) state_dict",
  // "TorchScript archive (__torch__.Net)", "safetensors", ...
  std::string form;
  std::vector<TensorRef> tensors;   // state-dict order
  // Entries that are not model tensors, with why (optimizer state, ...).
  // Entries beside the selected state dict of a training checkpoint are
  // named by their dotted path from the top ("optimizer_state_dict.state.0.
  // exp_avg", "epoch"), so they cannot collide with a model tensor's name.
  std::vector<std::pair<std::string, std::string>> ignored;
  // Hyper-parameters the file records, keyed "module.path.attr" with wrapper
  // prefixes (module., _orig_mod.) stripped, e.g. "lstm.batch_first" ->
  // "true", "rnn.nonlinearity" -> "relu", "lstm.proj_size" -> "0"; a
  // root module's own attributes have no path ("batch_first"). Whole pickled
  // modules and TorchScript archives record them; safetensors records its
  // __metadata__ as "__metadata__.<key>". Empty for a bare state dict.
  std::map<std::string, std::string> attributes;
};

struct LoadOptions {
  std::string key;                  // --key: which entry of a checkpoint dict
};

// Reads the checkpoint in `file`, whichever container the bytes show (never
// the extension): a torch.save zip (bare state dict, training checkpoint
// dict, whole pickled module), the legacy pre-1.6 pickle stream (same
// shapes), a TorchScript archive, or safetensors. Throws Error with a precise
// message (file name, record, tensor, byte offset) on anything malformed or
// unsupported.
Checkpoint load_checkpoint(const MappedFile& file, const LoadOptions& options = {});

// Whether the view is C-contiguous (dimensions of size 1 may have any stride).
bool is_contiguous(const TensorRef& t);

// Writes elements [begin, begin + count) of the tensor, taken in C order, to
// dst as float32, honouring offset, strides, dtype (f32/f16/bf16/f64) and
// byte order. Costs O(rank + count): a streaming writer converts a tensor
// chunk by chunk without materializing it. The view is re-checked against its
// storage on every call; throws Error for a non-floating dtype, a view past
// its storage, or a range outside the tensor. `count` 0 only validates.
void to_float32_range(const TensorRef& t, float* dst, uint64_t begin, uint64_t count);

// The whole tensor as contiguous float32 in C order (to_float32_range over
// every element).
std::vector<float> to_float32(const TensorRef& t);

}  // namespace ferry::conv
