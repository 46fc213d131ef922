// The core's FMA peak, measured: 12 independent FMA chains on one core
// (enough to cover latency x ports on every x86 core since Haswell), at
// AVX2+FMA (8 lanes) or AVX-512 (16 lanes). Shared by the benchmarks that
// report a fraction of it (ferry_bench_torch, ferry_bench_kernels).
#pragma once

#include <time.h>

#include <algorithm>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry_bench {

#if defined(__x86_64__)
// Twelve chains with distinct starting values: identical ones would be
// merged into one by the compiler (and measure latency, not throughput).
__attribute__((target("avx2,fma"), noinline)) inline float fma_loop_avx2(long iters) {
  __m256 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_ps(1.0f + 0.01f * static_cast<float>(j));
  const __m256 m = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-4f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) a[j] = _mm256_fmadd_ps(a[j], m, c);
  }
  __m256 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, a[j]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx512f"), noinline)) inline float fma_loop_avx512(long iters) {
  __m512 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(j));
  const __m512 m = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-4f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) a[j] = _mm512_fmadd_ps(a[j], m, c);
  }
  __m512 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, a[j]);
  return _mm512_reduce_add_ps(s);
}
#endif

// Seconds of CPU time this thread has used (what the benchmarks time with:
// time another process held the core is left out).
inline double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Multiply-adds per second of one core at its FMA peak (median of 15
// rounds, thread CPU time); 0 where the CPU lacks the ISA or is not x86.
inline double fma_peak(bool avx512) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (avx512 ? !__builtin_cpu_supports("avx512f") : !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    return 0;
  }
  const long iters = 4000000;
  static volatile float sink;
  std::vector<double> rates;
  for (int r = 0; r < 15; ++r) {
    const double t0 = thread_cpu_seconds();
    sink = avx512 ? fma_loop_avx512(iters) : fma_loop_avx2(iters);
    rates.push_back(iters * 12.0 * (avx512 ? 16 : 8) / (thread_cpu_seconds() - t0));
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
#else
  (void)avx512;
  return 0;
#endif
}

}  // namespace ferry_bench
