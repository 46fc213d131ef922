// The largest difference between two .npy arrays (compare.h's measure: NaN
// counts as the worst, arrays of different sizes are infinitely apart), for
// the end-to-end tests that compare ferry's outputs with PyTorch's files.
#pragma once

#include "compare.h"
#include "io/npy.h"

namespace ferry::test {

inline double max_abs_diff(const conv::NpyArray& a, const conv::NpyArray& b) {
  if (a.shape != b.shape) return INFINITY;
  return max_abs_diff(a.data, b.data);
}

}  // namespace ferry::test
