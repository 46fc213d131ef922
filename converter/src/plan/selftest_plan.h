// Golden self-test vectors for `ferry selftest` / ferry_selftest(): the plan.
//
// The converter stores in a model a seeded input (batch 1, a few steps) and
// the output the reference runtime gives for it, so a device checks its own
// build of the runtime (compiler, NEON/AVX kernels, XNNPACK) against the
// converter's reference run, with nothing but the model file.
//
// The plan holds the input and the size of the output; the writer, which
// runs the runtime once on the written model, fills in the output and the
// tolerance (writer/model_writer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "plan/model_plan.h"

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

// Deterministic uniform floats in [-1, 1) (splitmix64, 24 bits each; the
// same on every host, unlike <random>'s distributions).
std::vector<float> selftest_input(uint64_t seed, size_t count);

// Plans the vectors: plan.selftest gets the input, a zero output of the
// right size and placeholders the writer overwrites. Needs plan.layers,
// input_size, output_size and output_is_sequence.
void plan_selftest(ModelPlan& plan, const SelfTestOptions& options = {});

}  // namespace ferry::conv
