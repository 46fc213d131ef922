// The arena planner: hands out regions of the caller's session arena to
// whoever asks (the C API for the session header, then the backend for its
// control block, state, activations and kernel scratch).
//
// Algorithm, in four lines: regions are laid out in the order asked, each
// starting FERRY_ALIGNMENT-aligned; a region is never freed; an "overlay"
// region reuses memory from a given offset on (memory that is not used
// until the first run, e.g. XNNPACK's packing scratch at init) and extends
// the arena only by what it needs beyond the end. Sizes are overflow-checked
// once, in the planner: a plan that overflows size_t is reported, not wrapped.
//
// The same plan is computed for ferry_session_arena_size and for
// ferry_session_init, so the size reported is exactly what init uses.
#pragma once

#include <stddef.h>

namespace ferry {

class ArenaPlan {
 public:
  // Reserves `bytes` (rounded up to FERRY_ALIGNMENT) at the end; returns the
  // region's offset.
  size_t reserve(size_t bytes);
  // The same, unrounded: for a last region whose end is the arena's end.
  size_t reserve_last(size_t bytes);
  // Reserves a*b*c floats (overflow-checked).
  size_t reserve_floats(size_t a, size_t b = 1, size_t c = 1);
  // A region of `bytes` starting at `from` (a previous offset); the arena
  // grows only if it ends past the current end. Returns `from`.
  size_t overlay(size_t from, size_t bytes);

  size_t end() const { return end_; }
  bool overflowed() const { return overflowed_; }

 private:
  size_t end_ = 0;
  bool overflowed_ = false;
};

}  // namespace ferry
