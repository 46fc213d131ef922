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
// With `source` given, each tensor's bytes in that mapping are released from
// this process's resident set once converted (they stay in the page cache),
// so converting a large file costs about the output's size in memory.
ConvertResult plan_conversion(const Checkpoint& checkpoint, const ModuleSet& modules,
                              const ConvertOptions& options, const MappedFile* source = nullptr);

// Lower-case hex SHA-256 of `size` bytes.
std::string sha256_hex(const uint8_t* data, size_t size);
// Of a whole mapped file, releasing its pages from the resident set as it goes.
std::string sha256_file(const MappedFile& file);

// Drops the resident pages of [data, data+size) if they lie inside `file`'s
// read-only mapping (a no-op otherwise: heap memory is never touched).
void release_pages(const MappedFile& file, const uint8_t* data, size_t size);

}  // namespace ferry::conv
