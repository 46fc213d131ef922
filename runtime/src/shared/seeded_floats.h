// Deterministic floats in [-1, 1) from a 32-bit linear congruential
// generator (Numerical Recipes' constants): the same sequence on every
// host and target, for probes (the XNNPACK agreement check at session init)
// and benchmarks (`ferry bench`). Not for anything that needs quality
// randomness. Header-only; shared by the runtime and the converter.
#pragma once

#include <stdint.h>

namespace ferry {

// Advances `*state` and returns 24 random bits as a float in [-1, 1).
inline float seeded_float(uint32_t* state) {
  *state = *state * 1664525u + 1013904223u;
  return static_cast<float>(static_cast<int32_t>(*state >> 8) - (1 << 23)) * (1.0f / (1 << 23));
}

}  // namespace ferry
