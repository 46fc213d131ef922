// The model file writer: a ModelPlan (layers, tensors to be filled, I/O,
// provenance) → one FlatBuffers buffer with a 64-byte-aligned weight blob,
// verified by loading it with the runtime before it is written; files are
// written to a temporary name and renamed, never left half-written.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ferry::conv {

// A float32 tensor whose values are produced on demand, straight into the
// output buffer (so a large model is never held twice in memory).
struct TensorPlan {
  std::string name;
  std::vector<uint32_t> shape;
  std::function<void(float* dst)> fill;  // writes product(shape) floats

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

struct ModelPlan {
  std::vector<LayerPlan> layers;
  std::vector<TensorPlan> tensors;
  bool batch_first = false;
  uint32_t input_size = 0;
  uint32_t output_size = 0;
  bool output_is_sequence = false;
  // Provenance.
  std::string source_file, source_sha256, source_format, converter_version;
  std::vector<MappingRow> mapping;
};

// Builds the model file in memory and verifies it with the runtime's loader
// (a failure there is a converter bug and throws Error).
std::vector<uint8_t> build_model(const ModelPlan& plan);

// Writes `bytes` to `path` through a temporary file in the same folder and a
// rename; on any failure nothing is left at `path` (or the old file stays).
void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace ferry::conv
