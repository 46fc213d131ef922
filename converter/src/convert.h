// The converter as one call: a PyTorch checkpoint → a ferry model file.
//
//   checkpoint/  read the file (any form), tensors as views of its bytes
//   mapping/     state dict → modules, the layer chain, PyTorch's layout rules
//   plan/        the ModelPlan: layers, tensors, I/O, provenance, self-test
//   pack/        each tensor in the layout the kernels read
//   writer/      the model file, verified and completed by one runtime pass
//
// convert() runs them in that order for the CLI (`ferry convert`), the tests
// and the benchmarks; each stage's header documents it. The source file is
// hashed (SHA-256, provenance) on a second thread beside the planning.
#pragma once

#include <cstdint>
#include <array>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plan/planner.h"
#include "quantize/accuracy.h"
#include "writer/model_writer.h"

namespace ferry::conv {

// Whether the golden self-test vectors are stored. Computing them runs the
// whole model once, which for a large host model costs as much time and
// memory as the conversion itself.
enum class SelfTestPolicy {
  Auto,    // stored up to kAutoSelfTestWeightBytes of weights
  Always,  // --selftest
  Never,
};
constexpr uint64_t kAutoSelfTestWeightBytes = uint64_t{64} << 20;

struct ConvertReport;

struct ConvertRequest {
  std::string input;                  // IN: the checkpoint
  std::string output;                 // OUT.fb; empty: the model comes back in ConvertResult::bytes
  std::optional<std::string> graph;   // --graph; inferred when absent
  // --code: Python files (FILE or FILE:Class, .py or .ipynb) defining the
  // model: the chain and the layer options read from its source
  // (mapping/python_model.h), never run.
  std::vector<std::string> code;
  std::optional<bool> batch_first;    // --batch-first; else what the file records; else false
  std::optional<Layout> layout;       // --layout btf|tbf|bft (instead of --batch-first)
  std::optional<Layout> output_layout;  // --output-layout btf|tbf|bft; else the file's record; else the input's
  std::string key;                    // --key: the entry of a checkpoint dict
  std::optional<std::string> c_array; // --c-array: also write the model as a C header here
  // --max-batch / --max-seq: the header's arena figures beyond streaming at
  // batch 1, one per (batch, seq) of their product.
  std::vector<size_t> c_array_batches, c_array_seqs;
  SelfTestPolicy selftest = SelfTestPolicy::Auto;
  // --meta KEY=VALUE: the user's metadata, stored in the file in this order
  // (plan/user_metadata.h says what VALUE may be).
  std::vector<std::string> metadata;
  // Read and plan only (`ferry inspect`): the report's read and planned
  // parts; nothing is quantized or written, no self-test is planned.
  bool plan_only = false;
  QuantizeRequest quantize;           // --quantize, --calibration, --max-error, --fallback
  Progress progress;                  // while the weights are written
  // Called as each long step starts ("reading", "quantizing: GPTQ
  // lstm.weight_hh_l0 (int4)", "writing"): the CLI's progress line on a
  // terminal. May be empty.
  std::function<void(const std::string&)> stage;
  // Called once the conversion is planned, before anything is written, with
  // the report's read and planned parts (the CLI prints them here, so a
  // conversion that fails while writing still shows what it read).
  std::function<void(const ConvertReport&)> on_plan;
};

// One element of the chain, as planned.
struct LayerSummary {
  std::string name;         // module path, or the op ("last", "relu", ...)
  std::string description;  // "LSTM(16, 64, num_layers=2)"; empty for ops
  uint32_t input_size = 0, output_size = 0;
};

struct ConvertReport {
  // Read.
  uint64_t input_bytes = 0;
  std::string form;                            // Checkpoint::form
  size_t tensor_count = 0;
  std::vector<std::string> storage_locations;  // "cpu", "cuda:0", ... sorted, once each
  // Planned.
  std::string graph;                           // the chain, in --graph syntax
  bool graph_inferred = false;
  bool batch_first = false;
  bool channels_first = false;
  bool input_is_tokens = false;
  std::string batch_first_source;
  bool output_is_sequence = false;
  std::optional<Layout> output_layout;  // a sequence output's, where not the input's (ModelPlan::output_layout)
  std::string output_layout_source;
  std::vector<LayerSummary> layers;
  std::vector<std::pair<std::string, std::string>> ignored;  // state-dict key, reason
  // Weights folded from weight norm / spectral norm parts, as
  // "fc.weight = weight_norm(fc.weight_g, fc.weight_v, dim 0)".
  std::vector<std::string> folded;
  std::vector<std::string> notes;              // what the user should know
  std::vector<Assumption> assumptions;         // hyper-parameters assumed (plan/model_plan.h)
  // --code: what was read: the class, each layer's constructor and line, and
  // per chain element (as `graph` lists them) the line it came from.
  struct CodeRead {
    std::string class_name, class_where, root_path;
    std::vector<std::array<std::string, 3>> layers;  // path, constructor, where
    std::vector<std::string> element_sources;
    // "Net (model.py:12)", with "  under 'model'" where it sits under a prefix.
    std::string class_text() const;
    // Per element of `graph` read from the forward: its --graph text and line.
    std::vector<std::pair<std::string, std::string>> chain(const std::string& graph) const;
  };
  std::optional<CodeRead> code;
  uint64_t weight_bytes = 0;                   // float32 weights as planned
  bool selftest_stored = false;
  std::vector<std::pair<std::string, std::string>> metadata;  // --meta: key, describe_meta()
  // Quantized (after on_plan; quantization.requested empty when not asked).
  std::vector<LayerPrecision> precisions;  // per weighted layer (index into `layers`)
  std::vector<std::string> fallback_moves;
  QuantizationPlan quantization;
  // Written (after on_plan).
  uint64_t file_bytes = 0;
  uint64_t stored_weight_bytes = 0;            // the weight blob, panels and alignment included
  uint64_t arena_bytes = 0;                    // streaming at batch 1
  std::string c_array_name;                    // when --c-array was written
};

struct ConvertResult {
  ConvertReport report;
  ModelBytes bytes;  // in-memory conversions (empty ConvertRequest::output) only
};

// Converts. Throws Error with one line naming the file, tensor, module or
// --graph element at fault; nothing is left at the output paths then.
ConvertResult convert(const ConvertRequest& request);

}  // namespace ferry::conv
