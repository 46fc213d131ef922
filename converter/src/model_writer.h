// The model file writer: a ModelPlan (layers, tensors to be filled, I/O,
// provenance) → one FlatBuffers buffer with a 64-byte-aligned weight blob,
// verified by loading it with the runtime before it is written; files are
// written to a temporary name and renamed, never left half-written.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ferry::conv {

// A float32 tensor whose values are produced on demand, in ranges, straight
// into the output (so a large model is never held twice in memory).
struct TensorPlan {
  std::string name;
  std::vector<uint32_t> shape;
  // Writes elements [begin, begin + count) of the C-order tensor to dst.
  std::function<void(float* dst, uint64_t begin, uint64_t count)> fill;
  // When >= 0: the tensor's bytes are exactly the source file's bytes at this
  // offset (contiguous little-endian float32), copied in the kernel.
  int64_t source_offset = -1;

  uint64_t numel() const;
};

struct CellPlan {
  int w_ih = -1, w_hh = -1, bias = -1, b_hn = -1, w_hr = -1;  // TensorPlan indices
};

enum class LayerOp { LSTM, GRU, RNN_TANH, RNN_RELU, Linear, Last, ReLU, Tanh, Sigmoid, Softmax, Identity };

struct LayerPlan {
  LayerOp op = LayerOp::Identity;
  std::string name;
  uint32_t input_size = 0, output_size = 0;
  uint32_t hidden_size = 0, proj_size = 0, num_layers = 0;
  bool bidirectional = false;
  std::vector<CellPlan> cells;  // index k * D + d
  int weight = -1, bias = -1;   // Linear
};

struct MappingRow {
  std::string source_key;
  int layer = -1;       // -1 = ignored
  std::string role;     // or the reason it was ignored
};

// Golden vectors stored in the file for `ferry selftest`: an input in the
// model's layout and the output it must give.
struct SelfTestPlan {
  uint32_t batch = 0, seq = 0;
  std::vector<float> input, output;
  float tolerance = 0;
};

struct ModelPlan {
  std::vector<LayerPlan> layers;
  std::vector<TensorPlan> tensors;
  bool batch_first = false;
  uint32_t input_size = 0;
  uint32_t output_size = 0;
  bool output_is_sequence = false;
  // Provenance.
  std::string source_file, source_sha256, source_format, converter_version;
  // If set, called after the weights are written to obtain source_sha256
  // (so hashing a large file can run beside the conversion).
  std::function<std::string()> source_sha256_async;
  std::vector<MappingRow> mapping;
  SelfTestPlan selftest;  // written when batch > 0
};

// Called while weights are written: (bytes done, bytes total).
using Progress = std::function<void(uint64_t, uint64_t)>;

// The finished model file, held in the builder's own buffer (no second copy).
class ModelBytes {
 public:
  ModelBytes() = default;
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

// Builds the model file in memory and verifies it with the runtime's loader
// (a failure there is a converter bug and throws Error). With
// `fill_weights` false the weight blob is left unwritten (and its memory
// untouched): write_model_file then streams the weights to the file.
ModelBytes build_model(const ModelPlan& plan, const Progress& progress = nullptr,
                       bool fill_weights = true);

// Writes a model built with fill_weights=false to `path` (temporary name +
// rename): the metadata from `bytes`, the weights streamed from the plan in
// chunks, or copied file-to-file in the kernel from `source_fd` where a
// tensor is a plain copy of the source. Peak memory: a few MiB.
void write_model_file(const std::string& path, const ModelBytes& bytes, const ModelPlan& plan,
                      int source_fd, const Progress& progress = nullptr);

// Writes `bytes` to `path` through a temporary file in the same folder and a
// rename; on any failure nothing is left at `path` (or the old file stays).
void write_file_atomic(const std::string& path, const uint8_t* data, size_t size);
inline void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes) {
  write_file_atomic(path, bytes.data(), bytes.size());
}

// Interruption. cancel_writes() only sets a flag, so a signal handler may
// call it (the CLI does, on SIGINT, SIGTERM and SIGHUP). From then on every
// writer above fails at its next write or rename with Error("interrupted:
// ..."), and the unwinding removes its temporary file like any other error.
// A write that is already complete stays; a cancel is never undone.
void cancel_writes();
bool writes_cancelled();

}  // namespace ferry::conv
