// XNNPACK's f32 fully-connected operator (Debian's libxnnpack, 2022 API),
// with every XNNPACK allocation carved from memory the session owns.
//
// XNNPACK keeps one process-wide allocator (xnn_initialize(&allocator) sets
// it, every call again). ferry installs its own before creating operators:
// while a thread has a carve region open (thread-local), allocations made on
// that thread are bump-allocated from it; any other allocation (another
// XNNPACK user in the process, libtorch for one) goes to posix_memalign/free,
// as XNNPACK's default allocator does. Operators made for a session are never
// deleted (the session is its arena), so nothing is ever freed back into a
// region.
//
// Sizes: create_fc takes exactly what measure_fc measured for the same
// (n, k) — a dry run of the same create through a counting allocator — which
// is how ferry_arena_size stays exact without knowing XNNPACK's internals.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "ferry/ferry.h"

namespace ferry {
namespace xnn {

// Compiled in (FERRY_HAVE_XNNPACK) and xnn_initialize succeeds on this CPU.
bool available();
// Why not, for messages.
const char* unavailable_reason();

// Bytes of carve region one fully-connected operator with `n` outputs and
// `k` inputs takes. Creates and deletes one with ordinary heap memory (this
// is the only place ferry lets XNNPACK allocate from the heap).
ferry_status measure_fc(size_t n, size_t k, size_t* bytes_out);

// Creates the operator y[m][0..n) = bias + W x[m] (rows `in_stride` and
// `out_stride` floats apart), W = `kernel` [n][k] row-major (read during the
// call only), bias [n] or null. Allocations come from region[*used ..
// capacity); *used advances by exactly measure_fc's bytes.
ferry_status create_fc(uint8_t* region, size_t capacity, size_t* used, size_t n, size_t k,
                       size_t in_stride, size_t out_stride, const float* kernel, const float* bias,
                       void** op_out);

// Runs the operator on `m` rows. No allocation. `pool`: pthreadpool_t or null.
ferry_status run_fc(void* op, size_t m, const float* x, float* y, void* pool);

}  // namespace xnn
}  // namespace ferry
