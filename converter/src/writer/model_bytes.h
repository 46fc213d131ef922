// A complete model file in memory: the FlatBuffers builder's own buffer,
// handed over without a copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace ferry::conv {

class ModelBytes {
 public:
  ModelBytes() = default;
  // `owner` keeps [data, data + size) alive.
  ModelBytes(std::shared_ptr<void> owner, uint8_t* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}
  const uint8_t* data() const { return data_; }
  uint8_t* mutable_data() { return data_; }
  size_t size() const { return size_; }
  std::vector<uint8_t> to_vector() const { return {data_, data_ + size_}; }

 private:
  std::shared_ptr<void> owner_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ferry::conv
