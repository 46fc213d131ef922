// The writer's one run of the runtime over a complete model file. Internal
// to the writer, which is the only part of the converter that runs the
// runtime.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::conv {

// Loads the model in `data` once with the runtime: ferry_model_load verifies
// it (a refusal is a converter bug: Error("internal: ...")). Then, with that
// one handle, on the reference backend (machine-independent, as the schema
// defines it): takes the arena size for streaming at batch 1, and, when the
// file plans self-test vectors, runs their input and keeps the output. Both
// are written in place into `data` (the arena field, the golden output, and
// the tolerance relative_tolerance * max(1, max |output|)). Returns the arena
// size.
uint64_t complete_with_runtime(uint8_t* data, size_t size, float relative_tolerance);

}  // namespace ferry::conv
