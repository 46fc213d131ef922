#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "plan/arena_plan.h"

#include <stdint.h>

#include "ferry/ferry.h"

namespace ferry {
namespace {

constexpr size_t kAlign = FERRY_ALIGNMENT;

bool round_up(size_t bytes, size_t* out) {
  if (bytes > SIZE_MAX - (kAlign - 1)) return false;
  *out = (bytes + kAlign - 1) / kAlign * kAlign;
  return true;
}

}  // namespace

size_t ArenaPlan::reserve(size_t bytes) {
  const size_t offset = end_;
  size_t rounded = 0, end = 0;
  if (!round_up(bytes, &rounded) || __builtin_add_overflow(end_, rounded, &end)) {
    overflowed_ = true;
    return offset;
  }
  end_ = end;
  return offset;
}

size_t ArenaPlan::reserve_last(size_t bytes) {
  const size_t offset = end_;
  if (__builtin_add_overflow(end_, bytes, &end_)) overflowed_ = true;
  return offset;
}

size_t ArenaPlan::reserve_floats(size_t a, size_t b, size_t c) {
  size_t n = 0;
  if (__builtin_mul_overflow(a, b, &n) || __builtin_mul_overflow(n, c, &n) ||
      __builtin_mul_overflow(n, sizeof(float), &n)) {
    overflowed_ = true;
    return end_;
  }
  return reserve(n);
}

size_t ArenaPlan::overlay(size_t from, size_t bytes) {
  size_t rounded = 0, end = 0;
  if (!round_up(bytes, &rounded) || __builtin_add_overflow(from, rounded, &end)) {
    overflowed_ = true;
    return from;
  }
  if (end > end_) end_ = end;
  return from;
}

}  // namespace ferry
