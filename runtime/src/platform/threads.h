// Optional parallelism over a caller-owned pthreadpool. Work is only ever
// split over outputs (rows, units, output columns), never inside a sum, so a
// result does not depend on the number of threads (kernels/kernel_set.h, numeric
// contract). Without pthreadpool in the build, or without a pool, or for work
// too small to be worth waking threads, everything runs on the caller.
#pragma once

#include <stddef.h>

namespace ferry {

// fn(ctx, begin, end) over [0, n) in pieces of `tile` (the last may be
// shorter). `pool` is a pthreadpool_t or null; `work` estimates the cost in
// multiply-adds (below ~128k the call stays on the calling thread).
using RangeFn = void (*)(void* ctx, size_t begin, size_t end);
void parallel_ranges(void* pool, size_t n, size_t tile, size_t work, RangeFn fn, void* ctx);

// Threads of a pool (1 when null or when built without pthreadpool).
size_t pool_threads(void* pool);

// Whether this build can use a pool at all.
bool threads_supported();

// Waiting on another thread of a pool: a pause hint per turn of a short
// spin, and, for a longer wait, the core given back to the OS.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield");
#endif
}
void yield_thread();

}  // namespace ferry
