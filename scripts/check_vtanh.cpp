// Checks that math.inl's vtanh and vsigmoid (y = x^2 clamped to the
// rational's range instead of x, sigmoid's halving folded into the
// coefficients) give the bits of the form they replaced (the rational on x
// clamped to [-9, 9], its result clamped to [-1, 1]; sigmoid = 1/2 +
// tanh(x/2)/2) for every float but NaN, with the runtime's FTZ/DAZ on and
// off, on the CPU it runs on (the reciprocal estimate differs between x86
// vendors). A one-off check of the x86 build, not a test (~30 s):
//   g++ -O2 -mavx2 -mfma -I runtime/src scripts/check_vtanh.cpp -o /tmp/check_vtanh && /tmp/check_vtanh
// Zen 4: 0 floats differ either way.
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

namespace now {
#include "kernels/simd/vec_avx2.h"
#include "kernels/simd/math.inl"
}  // namespace now

namespace before {
using namespace now;  // the vector helpers (vec_avx2.h has #pragma once)
FERRY_VEC_INLINE Vec vtanh(Vec x) {
  const Vec t = vmin(vset1(9.0f), vmax(vset1(-9.0f), x));
  const Vec y = vmul(t, t), y2 = vmul(y, y), y4 = vmul(y2, y2);
  const Vec p01 = vfma(vset1(0.127735108f), y, vset1(0.999999523f));
  const Vec p23 = vfma(vset1(7.64964807e-06f), y, vset1(0.00276020123f));
  const Vec p45 = vfma(vset1(-9.47882051e-12f), y, vset1(-6.59366739e-09f));
  const Vec p03 = vfma(p23, y2, p01);
  const Vec p46 = vfma(vset1(6.60268552e-14f), y2, p45);
  const Vec num = vmul(vfma(p46, y4, p03), t);
  const Vec q01 = vfma(vset1(0.461066663f), y, vset1(1.0f));
  const Vec q23 = vfma(vset1(0.000205080389f), y, vset1(0.0231177174f));
  const Vec r = vmul(num, vrecip(vfma(q23, y2, q01)));
  return vmin(vset1(1.0f), vmax(vset1(-1.0f), r));
}
FERRY_VEC_INLINE Vec vsigmoid(Vec x) { return vfma(vset1(0.5f), before::vtanh(vmul(vset1(0.5f), x)), vset1(0.5f)); }
}  // namespace before

static uint64_t check(bool flush) {
  _mm_setcsr(flush ? (_mm_getcsr() | 0x8040u) : (_mm_getcsr() & ~0x8040u));
  uint64_t bad = 0;
  for (uint64_t base = 0; base < (uint64_t{1} << 32); base += 8) {
    uint32_t bits[8];
    for (int i = 0; i < 8; ++i) bits[i] = static_cast<uint32_t>(base + i);
    float x[8];
    memcpy(x, bits, sizeof x);
    const __m256 v = _mm256_loadu_ps(x);
    float r[4][8];
    _mm256_storeu_ps(r[0], now::vtanh({v}).v);
    _mm256_storeu_ps(r[1], before::vtanh({v}).v);
    _mm256_storeu_ps(r[2], now::vsigmoid({v}).v);
    _mm256_storeu_ps(r[3], before::vsigmoid({v}).v);
    for (int i = 0; i < 8; ++i) {
      if (x[i] != x[i]) continue;  // NaN: NaN out, checked by the unit tests
      if (memcmp(&r[0][i], &r[1][i], 4) || memcmp(&r[2][i], &r[3][i], 4)) {
        if (bad++ < 10) {
          printf("x = %a (%08x): tanh %a / %a, sigmoid %a / %a\n", x[i], bits[i], r[0][i], r[1][i], r[2][i],
                 r[3][i]);
        }
      }
    }
  }
  return bad;
}

int main() {
  const uint64_t a = check(true), b = check(false);
  printf("floats whose bits differ: %llu with FTZ/DAZ, %llu without\n", (unsigned long long)a,
         (unsigned long long)b);
  return a || b;
}
