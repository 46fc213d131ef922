// Golden self-test vectors for `ferry selftest` / ferry_selftest().
//
// The converter stores in every model a seeded input (batch 1, a few steps)
// and the output the reference runtime gives for it, so a device checks its
// own build of the runtime (compiler, NEON/AVX kernels, XNNPACK) against the
// converter's reference run, with nothing but the model file.
//
// Two steps, because the weights are streamed to the file and never held
// whole in memory:
//   1. plan_selftest(plan) before build_model(): the input, an output of the
//      right size (zeros for now) and a placeholder tolerance;
//   2. fill_selftest_output() on the complete model bytes (mapped from the
//      written file): runs the reference backend and writes the output and the
//      tolerance in place. write_with_selftest() does this around any writer,
//      on a staging file renamed over OUT only once it is complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model_writer.h"

namespace ferry::conv {

struct SelfTestOptions {
  uint32_t batch = 1;
  uint32_t seq = 5;  // 1 for a model without a time axis
  uint64_t seed = 0x5e1f7e57f0e11a11ull;
  // Accepted error: relative_tolerance * max(1, max |expected output|).
  // 1e-4 leaves room for FMA, other summation orders and fast exp/tanh in
  // the SIMD backends, and is far below what a wrong gate order or bias gives.
  float relative_tolerance = 1e-4f;
};

// Deterministic uniform floats in [-1, 1) (splitmix64; the same on every
// host, unlike <random>'s distributions).
std::vector<float> selftest_input(uint64_t seed, size_t count);

// Step 1. Needs plan.layers, input_size, output_size, output_is_sequence.
void plan_selftest(ModelPlan& plan, const SelfTestOptions& options = {});

// Step 2. `data` is a complete model file (weights written), writable. Runs
// its stored input with the reference backend and stores the output and the
// tolerance in place. A model without vectors is left unchanged. Throws Error.
void fill_selftest_output(uint8_t* data, size_t size, const SelfTestOptions& options = {});

// Calls write(staging) with a staging path beside `out` (the writer makes a
// complete model file there), fills the self-test output in the staged file
// and renames it to `out`. On any failure nothing is left at `out`
// (or the old file stays) and the staging file is removed.
void write_with_selftest(const std::string& out, const std::function<void(const std::string&)>& write,
                         const SelfTestOptions& options = {});

}  // namespace ferry::conv
