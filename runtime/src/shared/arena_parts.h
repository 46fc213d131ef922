// A CPU session's arena in the parts that ferry/ferry_sizes.h adds up
// (FERRY_ARENA_BYTES_CPU): the parts that hold pointers, whose sizes depend
// on the target, and the rest, which does not. `ferry convert --c-array`
// writes the rest as a number and lets the target's header add the others,
// so the model header's arena macros are exact on every target. Shared with
// the converter (writer/c_array.cpp).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "ferry/ferry.h"

namespace ferry {

// One region of the arena, in the order laid out.
struct ArenaRegion {
  const char* name = nullptr;  // "state", "activations", ...
  size_t bytes = 0;            // a multiple of FERRY_ALIGNMENT
  bool pointers = false;       // its size depends on the target (ferry/ferry_sizes.h)
};
constexpr uint32_t kMaxArenaRegions = 24;

struct ArenaParts {
  size_t total = 0;        // ferry_session_arena_size() on this target
  size_t portable = 0;     // state, activations and scratch: the same everywhere
  uint32_t lone_cells = 0; // cells with a lone step laid out at init (0: none)
  size_t program_ops = 0;  // ops of the streaming program (0: none)
  ArenaRegion regions[kMaxArenaRegions];  // every region, session head first
  uint32_t region_count = 0;
};

// The parts of a session for (model, options) on a CPU backend. A CUDA
// session, or an XNNPACK region (sized by XNNPACK itself), has no portable
// figure: FERRY_UNSUPPORTED.
ferry_status session_arena_parts(const ferry_model* model, const ferry_session_options* options, ArenaParts* out);

// The capacities a model needs: its chain's elements and its recurrent
// (layer, direction) cells (FERRY_MAX_CHAIN, FERRY_MAX_CELLS at least these).
void model_capacities(const ferry_model* model, uint32_t* chain, uint32_t* cells);

// Floats of state per batch sample that layer `layer` of the chain keeps
// between calls (h and c, a causal conv's history, a pooling layer's running
// value and count); 0 for one beyond the chain.
uint32_t layer_state_floats(const ferry_model* model, uint32_t layer);

}  // namespace ferry
