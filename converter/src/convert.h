// The conversion pipeline: checkpoint → modules → chain → ModelPlan.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "model_writer.h"
#include "modules.h"

namespace ferry::conv {

struct ConvertOptions {
  std::optional<std::string> graph;      // --graph
  std::optional<bool> batch_first;       // --batch-first; else the file's record; else false
  std::string key;                       // --key
};

struct ConvertResult {
  ModelPlan plan;
  std::string graph;           // the chain used, in --graph syntax
  bool graph_inferred = false;
  std::string batch_first_source;  // "--batch-first", "recorded in the file", "PyTorch default"
  std::vector<std::string> notes;  // things the user should know (assumptions)
};

// Builds the plan. `checkpoint` and `modules` must outlive the plan's fills.
ConvertResult plan_conversion(const Checkpoint& checkpoint, const ModuleSet& modules,
                              const ConvertOptions& options);

// Lower-case hex SHA-256 of `size` bytes.
std::string sha256_hex(const uint8_t* data, size_t size);

}  // namespace ferry::conv
