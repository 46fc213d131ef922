// A checkpoint's tensors as the readers hand them over: strided views of
// storages whose bytes stay in the mapped file, in the file's dtype and byte
// order, and their conversion to float32, whole or by element range.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtype.h"

namespace ferry::conv {

// One storage record: raw bytes of a tensor's base storage.
struct Storage {
  std::string key;        // record key ("0", "1", ...)
  std::string location;   // "cpu", "cuda:0", ... recorded, never used
  DType dtype = DType::Unknown;
  uint64_t numel = 0;     // elements of `dtype`
  const uint8_t* data = nullptr;  // points into the mapped file, or into `owned`
  uint64_t nbytes = 0;
  bool big_endian = false;
  // A numpy array's bytes, copied out of the pickle that held them inline,
  // or a sharded DCP tensor's chunks reassembled (dcp.h): exactly `nbytes`.
  std::shared_ptr<const std::string> owned;
  // Whatever else `data` lives in and must outlive every view of it: the
  // mapping of a DCP data file (.distcp), which no Checkpoint owns otherwise.
  std::shared_ptr<const void> keep_alive;
};

// A tensor as the checkpoint describes it: a strided view of a storage.
// Several tensors may view one storage (cuDNN's flattened RNN weights, a
// slice): a tensor is its view, never "its storage".
struct TensorRef {
  std::string name;                 // state-dict key, exactly as in the file
  DType dtype = DType::Unknown;
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;      // in elements
  int64_t offset = 0;               // storage offset in elements
  std::shared_ptr<const Storage> storage;
  // A tensor ferry computed from others instead of reading it (a weight-norm
  // or spectral-norm weight folded back: mapping/reparametrize.h): the
  // state-dict keys it was made from, and how, e.g.
  // "weight_norm(fc.weight_g, fc.weight_v, dim 0)". Empty for a tensor of
  // the file.
  std::vector<std::string> sources;
  std::string derivation;

  int64_t numel() const;
};

// "[2, 3]": a shape or strides as messages and `ferry inspect` print them.
std::string dims_text(const std::vector<int64_t>& dims);

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
