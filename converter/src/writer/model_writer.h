// The model file writer: a ModelPlan → a model file (schema/ferry.fbs), in
// memory or on disk, by one code path. It is also the one place in the
// converter that runs the runtime, once per model.
//
//   1. stored forms (pack/tensor_packing.h) and the blob layout: each tensor
//      at a 64-byte-aligned offset;
//   2. the metadata (writer/metadata.h) around the reserved weight blob;
//   3. the weights, streamed in their stored form into the model's memory or
//      to a staging file (OUT.tmp.<pid>, io/atomic_file.h); a plain float32
//      tensor stored RowMajor is copied file to file in the kernel from
//      `source_fd`. Peak memory: a few MiB beside the metadata;
//   4. on the complete bytes, a shared mapping of the staging file: the
//      source's SHA-256 when the plan hashes it beside steps 2 and 3
//      (ModelPlan::source_sha256_async), then one runtime pass
//      (writer/runtime_pass.h): ferry_model_load verifies the bytes, and the
//      reference arena size for batch 1 / seq 1 and, when the plan has
//      self-test vectors, their golden output are written in place;
//   5. the optional C-array header (writer/c_array.h), from the same bytes;
//   6. the rename of the staging file to OUT, then of the header.
// On any failure or interruption (cancel_writes()) nothing is left at OUT or
// at the header's path (or the old files stay); a header that fails after
// OUT was renamed takes OUT with it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "plan/model_plan.h"
#include "writer/model_bytes.h"

namespace ferry::conv {

// Called while weights are written: (bytes done, bytes total), after each
// tensor.
using Progress = std::function<void(uint64_t, uint64_t)>;

struct WriteOptions {
  std::string path;            // the model file; empty: in memory (WrittenModel::bytes)
  int source_fd = -1;          // the checkpoint, read for in-kernel copies
  std::optional<std::string> c_array_path;  // a C-array header too
  std::string c_array_source;  // named in the header's comment
  std::vector<std::pair<size_t, size_t>> c_array_arenas;  // (max_batch, max_seq) figures beyond (1, 1)
  Progress progress;
};

struct WrittenModel {
  ModelBytes bytes;                  // in memory only
  uint64_t file_bytes = 0;           // the whole model
  uint64_t stored_weight_bytes = 0;  // the weight blob, panels and alignment included
  uint64_t arena_bytes = 0;          // streaming at batch 1 (reference backend)
  std::string c_array_name;          // the header's array, when written
};

// Writes the model. Throws Error naming the file at fault; an
// Error("internal: ...") means the plan or the written model is inconsistent
// (a converter bug).
WrittenModel write_model(const ModelPlan& plan, const WriteOptions& options = {});

// The model in memory: write_model with no path.
ModelBytes build_model(const ModelPlan& plan, const Progress& progress = nullptr);

}  // namespace ferry::conv
