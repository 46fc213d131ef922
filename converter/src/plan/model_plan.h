// The ModelPlan: everything a model file will hold, decided before a byte is
// written. The planner (planner.h) makes it from a checkpoint; tests build
// small ones by hand; the writer (writer/model_writer.h) turns it into the
// file.
//
// Tensors are not values but recipes: each TensorPlan produces its float32
// elements on demand, by range, straight into the output, so a large model is
// never held twice in memory. Layers refer to tensors by index.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtype.h"
#include "plan/user_metadata.h"

namespace ferry::conv {

// A weight matrix already rounded onto an int8 / int4 grid by a
// calibration-aware rounding (quantize/gptq.h): integers and scales of the
// logical matrix [rows, cols] (w ~= q * scale).
struct RoundedMatrix {
  DType dtype = DType::F32;           // I8 or I4
  uint32_t rows = 0, cols = 0;
  std::vector<int8_t> q;              // [rows, cols], row-major
  std::vector<float> row_scales;      // I8: [rows]
  std::vector<uint16_t> group_scales; // I4: f16 bits, [rows, layout::group_count(cols)]
  float value(uint32_t r, uint32_t k) const;  // q * its scale
};

// A tensor of the model, in PyTorch's logical shape and C order.
struct TensorPlan {
  std::string name;             // e.g. "lstm.l0.w_ih" (for humans and inspect)
  std::vector<uint32_t> shape;
  // The dtype it is stored in: F32, or for a weight matrix (w_ih, w_hh,
  // w_hr, Linear weight) F16, I8 or I4 (plan/quantization.h; `fill` still
  // produces the float32 values, pack/ quantizes them).
  DType dtype = DType::F32;
  // Writes elements [begin, begin + count) of the C-order tensor to dst.
  std::function<void(float* dst, uint64_t begin, uint64_t count)> fill;
  // When >= 0: the tensor's bytes are exactly the source file's bytes at this
  // offset (contiguous little-endian float32), which the writer may copy
  // file to file in the kernel instead of calling `fill`.
  int64_t source_offset = -1;
  // Set by the quantize stage for a matrix whose dtype (I8 / I4) was
  // rounded with calibration (dtype equal to this one's): pack/ stores these
  // integers and scales instead of rounding `fill`'s values to nearest.
  std::shared_ptr<const RoundedMatrix> rounded;

  uint64_t numel() const;  // throws Error when the shape overflows
};

// The tensors of one recurrent cell (one layer, one direction), as TensorPlan
// indices; -1 where the cell has none.
struct CellPlan {
  int w_ih = -1, w_hh = -1, bias = -1, b_hn = -1, w_hr = -1;
};

// The schema's LayerKind, value for value (writer/metadata.cpp checks it).
enum class LayerOp {
  LSTM, GRU, RNN_TANH, RNN_RELU, Linear, Last, ReLU, Tanh, Sigmoid, Softmax, Identity,
  // (format 1.2)
  Conv1d, BatchNorm, LayerNorm, PReLU, LeakyReLU, ELU, GELU, SiLU, Hardtanh, LogSoftmax, MeanPool, MaxPool,
  Embedding, Save, Add,
};

enum class PaddingMode { Zeros, Reflect, Replicate };

// One element of the chain.
struct LayerPlan {
  LayerOp op = LayerOp::Identity;
  std::string name;
  uint32_t input_size = 0, output_size = 0;
  uint32_t hidden_size = 0, proj_size = 0, num_layers = 0;  // recurrent
  bool bidirectional = false;
  std::vector<CellPlan> cells;  // index k * D + d
  int weight = -1, bias = -1;   // Linear, Conv1d, BatchNorm (scale, shift), LayerNorm, PReLU, Embedding
  // Conv1d (weight [out, in/groups, kernel]).
  uint32_t kernel_size = 0, stride = 1, dilation = 1, groups = 1, pad_left = 0, pad_right = 0;
  PaddingMode padding_mode = PaddingMode::Zeros;
  // LayerNorm eps; LeakyReLU slope, ELU alpha, Hardtanh min (alpha) and max (beta); GELU's tanh form.
  float eps = 0, alpha = 0, beta = 0;
  bool approximate_tanh = false;
  uint32_t slot = 0;  // Save / Add
};

// Provenance: where a state-dict entry went.
struct MappingRow {
  std::string source_key;
  int layer = -1;       // -1 = ignored
  std::string role;     // or the reason it was ignored
};

// Golden vectors stored in the file for `ferry selftest` (selftest_plan.h):
// an input in the model's layout and the output it must give. The writer
// fills `output` and `tolerance` from a reference run of the written model.
struct SelfTestPlan {
  uint32_t batch = 0, seq = 0;  // batch 0: no vectors
  std::vector<float> input;
  std::vector<float> output;    // sized by the plan, zeros until written
  float tolerance = 0;          // placeholder until written
  // The stored tolerance is relative_tolerance * max(1, max |output|).
  float relative_tolerance = 0;
};

// The converter's accuracy report of a quantized model (schema: Quantization),
// filled by quantize/accuracy.h; empty `requested`: an fp32 model.
struct ErrorStatsPlan {
  std::string name;
  DType dtype = DType::F32;
  float max_abs = 0, rms = 0, cosine = 1;
  std::string rounding;  // "nearest", "gptq" or "mixed" (int8 / int4 layers); not stored
};
// The report's comparison of the two roundings (converter output only, not
// stored): every int8 / int4 layer at its final dtype rounded one way.
struct RoundingReport {
  std::string rounding;                // "nearest" or "gptq"
  std::vector<ErrorStatsPlan> layers;  // each layer alone
  ErrorStatsPlan model;
  float drift_start_rms = 0, drift_end_rms = 0;
};
struct QuantizationPlan {
  std::string requested;  // "f16", "int8", "int4"
  std::string input;      // what the error was measured on
  float max_error = 0;
  ErrorStatsPlan model;
  std::vector<ErrorStatsPlan> layers;
  uint32_t drift_steps = 0;
  float drift_start_rms = 0, drift_end_rms = 0;
  // Not stored: both roundings, when --calibration made GPTQ possible.
  std::vector<RoundingReport> roundings;
};

// A hyper-parameter the converter had to assume: neither the file records
// it (a state dict never records a Conv1d's padding, a norm's eps, an RNN's
// nonlinearity or the input layout) nor did --graph or a flag give it. Each
// is printed with the layer, the value assumed and how to override it, and
// stored in the model file's provenance (`ferry inspect` lists them), so a
// wrong guess is seen without comparing outputs. A chain read from the file
// (TorchScript code, a .pt2 graph) records its options: no assumptions there.
struct Assumption {
  std::string layer;      // "Conv1d 'conv'", "leaky_relu (--graph element 4)", "the input"
  std::string parameter;  // "padding", "eps", "batch_first"
  std::string value;      // the value assumed: "0", "1e-05", "False (time-major [T,B,F])"
  std::string override;   // how to set it: "--graph 'conv(padding=N)'", "--batch-first or --layout btf|tbf|bft"
};

// Where a sequence's time axis is (--layout, --output-layout).
enum class Layout { kBatchFirst, kTimeMajor, kChannelsFirst };  // btf, tbf, bft

struct ModelPlan {
  std::vector<LayerPlan> layers;
  std::vector<TensorPlan> tensors;
  // I/O.
  bool batch_first = false;
  uint32_t input_size = 0;
  uint32_t output_size = 0;
  bool output_is_sequence = false;
  bool channels_first = false;   // [B,F,T] input (and, unless output_layout says otherwise, sequence output)
  // A sequence output's layout where it is not the input's (the model
  // returns its sequence transposed): the file is then format 2.
  std::optional<Layout> output_layout;
  bool time_axis = false;        // written only where no layer implies it (a per-step Linear chain)
  bool input_is_tokens = false;  // int32 token ids into a first Embedding
  // Provenance.
  std::string source_file, source_sha256, source_format, converter_version;
  // If set, the writer calls it for source_sha256 once the weights are
  // written, so hashing a large source runs beside the conversion; it must
  // return a SHA-256 in hex (64 characters: the room the writer reserves).
  std::function<std::string()> source_sha256_async;
  std::vector<MappingRow> mapping;
  std::vector<Assumption> assumptions;  // in chain order
  SelfTestPlan selftest;  // written when batch > 0
  QuantizationPlan quantization;  // written when requested is set
  std::vector<MetaValue> metadata;  // --meta, in order
};

// The input's layout, and a sequence output's (the input's unless set).
inline Layout input_layout(const ModelPlan& plan) {
  return plan.channels_first ? Layout::kChannelsFirst : plan.batch_first ? Layout::kBatchFirst : Layout::kTimeMajor;
}
inline Layout output_layout(const ModelPlan& plan) { return plan.output_layout.value_or(input_layout(plan)); }

}  // namespace ferry::conv
