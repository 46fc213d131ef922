// Output comparisons the backend tests share: the largest difference (NaN
// counts as the worst), bit equality, and a model's output produced step by
// step with ferry_step from a whole-sequence input in the model's layout.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ferry/ferry.h"

namespace ferry::test {

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(double{a[i]} - double{b[i]});
    if (!(e <= worst)) worst = e;  // NaN counts as the worst
  }
  return worst;
}

inline bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// x: [B,T,I] (batch_first) or [T,B,I]; the result has ferry_run's layout:
// the sequence output, or the last step's output for a model with `last`.
inline std::vector<float> step_through(ferry_session* s, const ferry_model_info& info, const float* x, size_t B,
                                       size_t T) {
  const size_t I = info.input_size, F = info.output_size;
  std::vector<float> xt(B * I), yt(B * F), y(info.output_is_sequence ? T * B * F : B * F);
  for (size_t t = 0; t < T; ++t) {
    for (size_t n = 0; n < B; ++n) {
      const size_t src = info.batch_first ? (n * T + t) * I : (t * B + n) * I;
      std::memcpy(&xt[n * I], &x[src], I * sizeof(float));
    }
    EXPECT_EQ(ferry_step(s, xt.data(), B, yt.data(), yt.size()), FERRY_OK) << ferry_last_error();
    if (info.output_is_sequence) {
      for (size_t n = 0; n < B; ++n) {
        const size_t dst = info.batch_first ? (n * T + t) * F : (t * B + n) * F;
        std::memcpy(&y[dst], &yt[n * F], F * sizeof(float));
      }
    } else if (t + 1 == T) {
      y = yt;
    }
  }
  return y;
}

}  // namespace ferry::test
