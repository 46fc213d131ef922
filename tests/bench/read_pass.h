// A plain read of a buffer, four 8-float streams of adds: the memory ceiling
// of a step that streams its weights (each float read once, nothing else
// done with it). Shared by the benchmarks that report a fraction of it
// (ferry_bench_torch, ferry_bench_kernels).
#pragma once

#include <stddef.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry_bench {

#if defined(__x86_64__)
// The empty asm with a memory clobber makes every call read the buffer
// again: the compiler cannot fold repeated calls on the same buffer into one.
//
// n: a multiple of 32 (the rest is not read); p: 32-byte aligned.
__attribute__((target("avx2"), noinline)) inline float read_loop(const float* p, size_t n) {
  __asm__ __volatile__("" : : "r"(p) : "memory");
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}
#else
__attribute__((noinline)) inline float read_loop(const float* p, size_t n) {
  __asm__ __volatile__("" : : "r"(p) : "memory");
  float s = 0;
  for (size_t i = 0; i < n; ++i) s += p[i];
  return s;
}
#endif

}  // namespace ferry_bench
