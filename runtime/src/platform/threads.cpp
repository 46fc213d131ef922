#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "platform/threads.h"

#include "ferry/ferry.h"

#ifdef FERRY_HAVE_PTHREADPOOL
#include <pthreadpool.h>

#include <thread>
#endif

namespace ferry {
namespace {

// A parallel call wakes the workers (a futex each: a few microseconds), so
// only work of ~10 us or more is split.
constexpr size_t kMinParallelWork = 131072;

#ifdef FERRY_HAVE_PTHREADPOOL
struct Job {
  RangeFn fn;
  void* ctx;
};

void run_tile(void* job, size_t start, size_t count) {
  const Job* j = static_cast<const Job*>(job);
  j->fn(j->ctx, start, start + count);
}
#endif

}  // namespace

void parallel_ranges(void* pool, size_t n, size_t tile, size_t work, RangeFn fn, void* ctx) {
  if (n == 0) return;
#ifdef FERRY_HAVE_PTHREADPOOL
  if (pool && work >= kMinParallelWork && tile < n &&
      pthreadpool_get_threads_count(static_cast<pthreadpool_t>(pool)) > 1) {
    Job job{fn, ctx};
    // Workers flush denormals like the caller, and sleep as soon as the
    // call is done instead of spinning for the next one: they never take a
    // core from the application's other threads (spinning workers made a
    // loaded 2-core machine up to 100x slower in the median).
    pthreadpool_parallelize_1d_tile_1d(static_cast<pthreadpool_t>(pool), run_tile, &job, n, tile,
                                       PTHREADPOOL_FLAG_DISABLE_DENORMALS | PTHREADPOOL_FLAG_YIELD_WORKERS);
    return;
  }
#else
  (void)pool;
  (void)tile;
  (void)work;
#endif
  fn(ctx, 0, n);
}

size_t pool_threads(void* pool) {
#ifdef FERRY_HAVE_PTHREADPOOL
  return pool ? pthreadpool_get_threads_count(static_cast<pthreadpool_t>(pool)) : 1;
#else
  (void)pool;
  return 1;
#endif
}

void yield_thread() {
#ifdef FERRY_HAVE_PTHREADPOOL
  std::this_thread::yield();
#endif
}

bool threads_supported() {
#ifdef FERRY_HAVE_PTHREADPOOL
  return true;
#else
  return false;
#endif
}

}  // namespace ferry

extern "C" void* ferry_threadpool_create(size_t threads) {
#ifdef FERRY_HAVE_PTHREADPOOL
  return pthreadpool_create(threads);
#else
  (void)threads;
  return nullptr;
#endif
}

extern "C" void ferry_threadpool_destroy(void* threadpool) {
#ifdef FERRY_HAVE_PTHREADPOOL
  if (threadpool) pthreadpool_destroy(static_cast<pthreadpool_t>(threadpool));
#else
  (void)threadpool;
#endif
}
