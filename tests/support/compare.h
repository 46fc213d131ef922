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
  // (memcmp with the null data() of an empty vector is undefined.)
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// The result has ferry_run's layout: the sequence output, or the last
// step's output for a model with `last`.
// ferry_step (or, `tokens` set, ferry_step_tokens) one time step at a
// time over an input in the model's layout ([T,B,F], [B,T,F] or [B,F,T];
// token ids [T,B] or [B,T]), the output put together in the output's
// layout (info.output_layout).
inline std::vector<float> step_through(ferry_session* s, const ferry_model_info& info, const float* x, size_t B,
                                       size_t T, const int32_t* tokens = nullptr) {
  const size_t I = info.input_size, F = info.output_size;
  const int input_layout = info.channels_first ? FERRY_LAYOUT_CHANNELS_FIRST
                           : info.batch_first  ? FERRY_LAYOUT_BATCH_FIRST
                                               : FERRY_LAYOUT_TIME_MAJOR;
  const auto index = [B, T](int layout, size_t t, size_t n, size_t f, size_t width) {
    return layout == FERRY_LAYOUT_CHANNELS_FIRST ? (n * width + f) * T + t
         : layout == FERRY_LAYOUT_BATCH_FIRST    ? (n * T + t) * width + f
                                                 : (t * B + n) * width + f;
  };
  const auto at = [&](size_t t, size_t n, size_t f, size_t width) { return index(input_layout, t, n, f, width); };
  const auto out_at = [&](size_t t, size_t n, size_t f) { return index(info.output_layout, t, n, f, F); };
  std::vector<float> xt(B * I), yt(B * F), y(info.output_is_sequence ? T * B * F : B * F);
  std::vector<int32_t> ids(B);
  for (size_t t = 0; t < T; ++t) {
    for (size_t n = 0; n < B; ++n) {
      if (tokens) ids[n] = info.batch_first ? tokens[n * T + t] : tokens[t * B + n];
      else for (size_t f = 0; f < I; ++f) xt[n * I + f] = x[at(t, n, f, I)];
    }
    EXPECT_EQ(tokens ? ferry_step_tokens(s, ids.data(), B, yt.data(), yt.size())
                     : ferry_step(s, xt.data(), B, yt.data(), yt.size()),
              FERRY_OK)
        << ferry_last_error();
    if (info.output_is_sequence) {
      for (size_t n = 0; n < B; ++n)
        for (size_t f = 0; f < F; ++f) y[out_at(t, n, f)] = yt[n * F + f];
    } else if (t + 1 == T) {
      y = yt;
    }
  }
  return y;
}

}  // namespace ferry::test
