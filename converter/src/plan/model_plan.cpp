#include "plan/model_plan.h"

#include "error.h"
#include "weight_layout.h"

namespace ferry::conv {

uint64_t TensorPlan::numel() const {
  uint64_t n = 1;
  for (uint32_t d : shape) {
    if (__builtin_mul_overflow(n, uint64_t{d}, &n)) throw Error("tensor '" + name + "': shape overflows");
  }
  return n;
}

}  // namespace ferry::conv

namespace ferry::conv {

float RoundedMatrix::value(uint32_t r, uint32_t k) const {
  const float q_rk = q[uint64_t{r} * cols + k];
  if (dtype == DType::I8) return q_rk * row_scales[r];
  return q_rk * layout::float_from_half(group_scales[uint64_t{r} * layout::group_count(cols) + k / layout::kGroup]);
}

}  // namespace ferry::conv
