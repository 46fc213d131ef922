#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "kernels/xnnpack/xnnpack_fc.h"

#include "common/status.h"

#ifdef FERRY_HAVE_XNNPACK

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xnnpack.h>

namespace ferry {
namespace xnn {
namespace {

constexpr size_t kAlign = 64;

size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// A thread's open region. `base` null: counting only (measure_fc), the
// memory itself from the heap.
struct Carve {
  uint8_t* base;
  size_t capacity;
  size_t used;
};

thread_local Carve* t_carve = nullptr;

bool in_region(const void* p) {
  const Carve* c = t_carve;
  if (!c || !c->base) return false;
  const uint8_t* b = static_cast<const uint8_t*>(p);
  return b >= c->base && b < c->base + c->capacity;
}

// The same arithmetic in both modes: each block starts 64-aligned; an
// alignment above 64 reserves its worst-case padding, so that the bytes
// taken never depend on where the region happens to lie.
void* carve(size_t alignment, size_t size) {
  Carve* c = t_carve;
  const size_t a = alignment > kAlign ? alignment : kAlign;
  const size_t start = align_up(c->used, kAlign);
  const size_t end = start + (a - kAlign) + size;
  if (end < start || (c->base && end > c->capacity)) return nullptr;
  void* p = nullptr;
  if (c->base) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(c->base + start);
    p = reinterpret_cast<void*>((at + a - 1) / a * a);
  } else if (posix_memalign(&p, a, size ? size : 1) != 0) {
    return nullptr;
  }
  c->used = end;
  return p;
}

void* heap_aligned(size_t alignment, size_t size) {
  void* p = nullptr;
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  return posix_memalign(&p, alignment, size ? size : 1) == 0 ? p : nullptr;
}

void* x_allocate(void*, size_t size) { return t_carve ? carve(16, size) : malloc(size); }

void* x_reallocate(void*, void* pointer, size_t size) {
  // XNNPACK's fully-connected operator never reallocates; a region cannot
  // grow a block in place, so refuse (create fails cleanly) rather than
  // guess the old block's size.
  if (t_carve) return nullptr;
  return realloc(pointer, size);
}

void x_deallocate(void*, void* pointer) {
  if (!in_region(pointer)) free(pointer);
}

void* x_aligned_allocate(void*, size_t alignment, size_t size) {
  return t_carve ? carve(alignment, size) : heap_aligned(alignment, size);
}

void x_aligned_deallocate(void*, void* pointer) {
  if (!in_region(pointer)) free(pointer);
}

const xnn_allocator kAllocator = {nullptr, x_allocate, x_reallocate, x_deallocate,
                                  x_aligned_allocate, x_aligned_deallocate};

bool initialize() { return xnn_initialize(&kAllocator) == xnn_status_success; }

// Opens `c` on this thread for the scope.
struct CarveScope {
  explicit CarveScope(Carve* c) { t_carve = c; }
  ~CarveScope() { t_carve = nullptr; }
};

ferry_status create(size_t n, size_t k, size_t in_stride, size_t out_stride, const float* kernel,
                    const float* bias, xnn_operator_t* op) {
  const xnn_status st = xnn_create_fully_connected_nc_f32(k, n, in_stride, out_stride, kernel, bias,
                                                          -INFINITY, INFINITY, 0, op);
  if (st == xnn_status_out_of_memory) {
    return fail(FERRY_ARENA_TOO_SMALL, "XNNPACK fully-connected %zux%zu: out of region memory", n, k);
  }
  if (st != xnn_status_success) {
    return fail(FERRY_UNSUPPORTED, "XNNPACK fully-connected %zux%zu: create failed (status %d)", n, k,
                static_cast<int>(st));
  }
  return FERRY_OK;
}

}  // namespace

bool available() { return initialize(); }

const char* unavailable_reason() { return "XNNPACK does not initialize on this CPU"; }

ferry_status measure_fc(size_t n, size_t k, size_t* bytes_out) {
  if (!initialize()) return fail(FERRY_UNSUPPORTED, "XNNPACK does not initialize on this CPU");
  // The values do not matter for the sizes: a zero kernel from the heap.
  float* kernel = static_cast<float*>(calloc(n * k, sizeof(float)));
  if (!kernel) return fail(FERRY_INVALID_ARGUMENT, "out of memory measuring XNNPACK (%zux%zu)", n, k);
  Carve counting{nullptr, 0, 0};
  xnn_operator_t op = nullptr;
  ferry_status st;
  {
    CarveScope scope(&counting);
    st = create(n, k, k, n, kernel, nullptr, &op);
  }
  free(kernel);
  if (st != FERRY_OK) return st;
  xnn_delete_operator(op);  // heap blocks: freed by x_aligned_deallocate
  *bytes_out = align_up(counting.used, kAlign);
  return FERRY_OK;
}

ferry_status create_fc(uint8_t* region, size_t capacity, size_t* used, size_t n, size_t k,
                       size_t in_stride, size_t out_stride, const float* kernel, const float* bias,
                       void** op_out) {
  if (!initialize()) return fail(FERRY_UNSUPPORTED, "XNNPACK does not initialize on this CPU");
  Carve c{region, capacity, *used};
  xnn_operator_t op = nullptr;
  ferry_status st;
  {
    CarveScope scope(&c);
    st = create(n, k, in_stride, out_stride, kernel, bias, &op);
  }
  if (st != FERRY_OK) return st;
  *used = align_up(c.used, kAlign);
  *op_out = op;
  return FERRY_OK;
}

ferry_status run_fc(void* op, size_t m, const float* x, float* y, void* pool) {
  xnn_operator_t o = static_cast<xnn_operator_t>(op);
  pthreadpool_t p = static_cast<pthreadpool_t>(pool);
  if (xnn_setup_fully_connected_nc_f32(o, m, x, y, p) != xnn_status_success ||
      xnn_run_operator(o, p) != xnn_status_success) {
    return fail(FERRY_INVALID_STATE, "XNNPACK fully-connected run failed");
  }
  return FERRY_OK;
}

}  // namespace xnn
}  // namespace ferry

#else  // !FERRY_HAVE_XNNPACK

namespace ferry {
namespace xnn {

bool available() { return false; }

const char* unavailable_reason() { return "this runtime was built without XNNPACK (FERRY_XNNPACK=OFF)"; }

ferry_status measure_fc(size_t, size_t, size_t*) {
  return fail(FERRY_UNSUPPORTED, "this runtime was built without XNNPACK (FERRY_XNNPACK=OFF)");
}

ferry_status create_fc(uint8_t*, size_t, size_t*, size_t, size_t, size_t, size_t, const float*, const float*,
                       void**) {
  return fail(FERRY_UNSUPPORTED, "this runtime was built without XNNPACK (FERRY_XNNPACK=OFF)");
}

ferry_status run_fc(void*, size_t, const float*, float*, void*) {
  return fail(FERRY_UNSUPPORTED, "this runtime was built without XNNPACK (FERRY_XNNPACK=OFF)");
}

}  // namespace xnn
}  // namespace ferry

#endif
