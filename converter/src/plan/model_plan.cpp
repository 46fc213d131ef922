#include "plan/model_plan.h"

#include "error.h"

namespace ferry::conv {

uint64_t TensorPlan::numel() const {
  uint64_t n = 1;
  for (uint32_t d : shape) {
    if (__builtin_mul_overflow(n, uint64_t{d}, &n)) throw Error("tensor '" + name + "': shape overflows");
  }
  return n;
}

}  // namespace ferry::conv
