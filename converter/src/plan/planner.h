// The planner: a checkpoint's modules and the layer chain (--graph, or
// inferred) → the ModelPlan. It decides the chain, batch_first, each layer's
// tensors (copied from the checkpoint, or computed: folded biases, per
// mapping/pytorch_rules.h) and the provenance mapping, in which every tensor
// of the checkpoint is either used or listed as ignored with its reason.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "io/mapped_file.h"
#include "mapping/modules.h"
#include "plan/model_plan.h"

namespace ferry::conv {

struct PlanOptions {
  std::optional<std::string> graph;      // --graph; inferred when absent
  std::optional<std::string> inferred_graph;  // a chain read from the file (TorchScript forward)
  std::optional<bool> batch_first;       // --batch-first; else the file's record; else false
  std::optional<Layout> layout;          // --layout: batch_first / channels_first, and a time axis
  // The layout the file records for its input, used where neither --layout
  // nor --batch-first is given: the axes its ops take, read from a .pt2's
  // graph (mapping/export_chain.h) or from TorchScript code or an
  // nn.Sequential's layers (mapping/chain_axes.h), which accounts for every
  // transpose, so a recorded batch_first that differs is no news. Its
  // source, for the report.
  std::optional<Layout> recorded_layout;
  std::string recorded_layout_source;
  // A sequence output's layout (plan.output_layout): --output-layout, else
  // what the file records (the axes at a .pt2 graph's or a TorchScript
  // forward's return, after its transposes; unset where it returns its
  // sequence in its input's layout), else the input's.
  std::optional<Layout> output_layout;
  std::optional<Layout> recorded_output_layout;
  std::string recorded_output_layout_source;
};

// One line per layer: "Conv1d 'conv': assumed stride 1, padding 0 (the file
// does not record them); to change: --graph 'conv(stride=N)'; ...".
std::vector<std::string> assumption_lines(const std::vector<Assumption>& assumptions);

struct PlanResult {
  ModelPlan plan;                  // provenance fields other than the mapping left empty
  std::string graph;               // the chain used, in --graph syntax
  bool graph_inferred = false;
  std::string batch_first_source;  // "--batch-first", "recorded in the file", "PyTorch default ..."
  std::string output_layout_source;  // "--output-layout", the recorded source; empty: the input's
  std::vector<std::string> notes;  // things the user should know (assumptions: plan.assumptions)
};

// Builds the plan. `checkpoint` and `modules` must outlive the plan's fills.
// With `source` (the mapping `checkpoint` views) given, plain float32 tensors
// get their source_offset, and each tensor's bytes in that mapping are
// released from this process's resident set once converted (io/page_release.h),
// so converting a large file costs about the output's size in memory.
// Throws Error naming the --graph element, module or tensor at fault.
PlanResult plan_conversion(const Checkpoint& checkpoint, const ModuleSet& modules, const PlanOptions& options,
                           const MappedFile* source = nullptr);

}  // namespace ferry::conv
