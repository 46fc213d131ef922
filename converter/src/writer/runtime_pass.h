// The writer's one run of the runtime over a complete model file. Internal
// to the writer, which is the only part of the converter that runs the
// runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "writer/c_array.h"

namespace ferry::conv {

// Loads the model in `data` once with the runtime: ferry_model_load verifies
// it (a refusal is a converter bug: Error("internal: ...")). Then, with that
// one handle, on the reference backend (machine-independent, as the schema
// defines it): takes the arena size for streaming at batch 1, and, when the
// file plans self-test vectors, runs their input and keeps the output. Both
// are written in place into `data` (the arena field, the golden output, and
// the tolerance relative_tolerance * max(1, max |output|)). Returns the arena
// size.
//
// With `c_array`, also what the --c-array header's memory macros say
// (writer/c_array.h): the capacities the model needs, and the arena of the
// reference kernels in ferry_sizes.h's parts, streaming at batch 1 (one the
// runtime refuses, a Conv1d needing more steps, carries its message
// instead), per (max_batch, max_seq) of `c_array_arenas` (a refused one is an
// Error naming it) and for the self-test.
uint64_t complete_with_runtime(uint8_t* data, size_t size, float relative_tolerance, CArrayMemory* c_array = nullptr,
                               const std::vector<std::pair<size_t, size_t>>& c_array_arenas = {});

}  // namespace ferry::conv
