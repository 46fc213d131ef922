// After ferry_session_init nothing allocates: this test binary interposes
// malloc, calloc, realloc, the aligned allocators and operator new (the ELF
// executable's definitions win over glibc's for every library in the
// process), counts every call made while a trap is armed, and runs
// ferry_run, ferry_step and the state calls on every backend, with and
// without a thread pool, under the trap. Disarmed, the interposers only
// forward to glibc, so the rest of the suite is unaffected.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <cstring>
#include <malloc.h>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "ferry/ferry.h"
#include "writer/model_writer.h"

// Interposing needs glibc's __libc_* entry points, and must stay out of the
// way of sanitizers, which interpose the allocator themselves.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define FERRY_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FERRY_SANITIZED 1
#endif
#if defined(__GLIBC__) && !defined(FERRY_SANITIZED)
#define FERRY_TRAP_ALLOCATIONS 1
#endif

namespace {

std::atomic<bool> g_armed{false};
std::atomic<long> g_calls{0};

[[maybe_unused]] void note() {
  if (g_armed.load(std::memory_order_relaxed)) g_calls.fetch_add(1, std::memory_order_relaxed);
}

// Counts allocations between construction and destruction.
struct AllocationTrap {
  AllocationTrap() {
    g_calls = 0;
    g_armed = true;
  }
  ~AllocationTrap() { g_armed = false; }
  long calls() const { return g_calls.load(); }
};

}  // namespace

#ifdef FERRY_TRAP_ALLOCATIONS
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

extern "C" {
void* malloc(size_t n) {
  note();
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t size) {
  note();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) {
  note();
  return __libc_realloc(p, n);
}
void* memalign(size_t alignment, size_t n) {
  note();
  return __libc_memalign(alignment, n);
}
void* aligned_alloc(size_t alignment, size_t n) {
  note();
  return __libc_memalign(alignment, n);
}
int posix_memalign(void** out, size_t alignment, size_t n) {
  note();
  void* p = __libc_memalign(alignment, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void free(void* p) { __libc_free(p); }
}

void* operator new(size_t n) {
  note();
  void* p = __libc_malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t n) {
  note();
  void* p = __libc_malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  note();
  return __libc_malloc(n ? n : 1);
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  note();
  return __libc_malloc(n ? n : 1);
}
void operator delete(void* p) noexcept { __libc_free(p); }
void operator delete[](void* p) noexcept { __libc_free(p); }
void operator delete(void* p, size_t) noexcept { __libc_free(p); }
void operator delete[](void* p, size_t) noexcept { __libc_free(p); }
#endif  // FERRY_TRAP_ALLOCATIONS

namespace {

using namespace ferry::conv;

#ifndef FERRY_TRAP_ALLOCATIONS
#define REQUIRE_TRAP() GTEST_SKIP() << "allocation trap needs glibc and no sanitizer"
#else
#define REQUIRE_TRAP() (void)0
#endif

TEST(NoAlloc, TheTrapSeesAllocations) {
  REQUIRE_TRAP();
  AllocationTrap trap;
  void* p = malloc(16);
  std::vector<int>* v = new std::vector<int>(100);
  delete v;
  free(p);
  EXPECT_GE(trap.calls(), 3);
}

// Generated models covering every layer kind and path of the fast backends:
// fused steps, batched steps, projections, bidirectional stacks, variable
// lengths, Linear per time step and after `last`, activations, softmax.
// `dtype`: of the weight matrices (w_ih, w_hh, w_hr, the Linear's weight).
ModelBytes model(LayerOp op, uint32_t in, uint32_t hidden, uint32_t proj, uint32_t layers, bool bidirectional,
                 bool sequence_out, DType dtype = DType::F32) {
  std::mt19937 rng(static_cast<uint32_t>(hidden * 131 + in));
  ModelPlan plan;
  const auto tensor = [&](std::vector<uint32_t> shape, bool matrix = false) {
    TensorPlan t;
    t.name = "t" + std::to_string(plan.tensors.size());
    t.dtype = matrix ? dtype : DType::F32;
    t.shape = std::move(shape);
    std::vector<float> values(static_cast<size_t>(t.numel()));
    std::uniform_real_distribution<float> u(-0.3f, 0.3f);
    for (float& v : values) v = u(rng);
    t.fill = [values](float* dst, uint64_t begin, uint64_t count) {
      std::memcpy(dst, values.data() + begin, count * sizeof(float));
    };
    plan.tensors.push_back(std::move(t));
    return static_cast<int>(plan.tensors.size() - 1);
  };
  const uint32_t gates = op == LayerOp::LSTM ? 4 : op == LayerOp::GRU ? 3 : 1;
  const uint32_t dirs = bidirectional ? 2 : 1, h_out = proj ? proj : hidden;
  LayerPlan r;
  r.op = op;
  r.name = "rnn";
  r.input_size = in;
  r.hidden_size = hidden;
  r.proj_size = proj;
  r.num_layers = layers;
  r.bidirectional = bidirectional;
  r.output_size = dirs * h_out;
  for (uint32_t k = 0; k < layers; ++k) {
    for (uint32_t d = 0; d < dirs; ++d) {
      CellPlan c;
      c.w_ih = tensor({gates * hidden, k == 0 ? in : dirs * h_out}, true);
      c.w_hh = tensor({gates * hidden, h_out}, true);
      c.bias = tensor({gates * hidden});
      if (op == LayerOp::GRU) c.b_hn = tensor({hidden});
      if (proj) c.w_hr = tensor({proj, hidden}, true);
      r.cells.push_back(c);
    }
  }
  plan.layers.push_back(r);
  uint32_t width = r.output_size;
  if (!sequence_out) {
    LayerPlan last;
    last.op = LayerOp::Last;
    last.name = "last";
    last.input_size = last.output_size = width;
    plan.layers.push_back(last);
  }
  LayerPlan fc;
  fc.op = LayerOp::Linear;
  fc.name = "fc";
  fc.input_size = width;
  fc.output_size = 5;
  fc.weight = tensor({5, width}, true);
  fc.bias = tensor({5});
  plan.layers.push_back(fc);
  for (LayerOp act : {LayerOp::Tanh, LayerOp::Sigmoid, LayerOp::ReLU, LayerOp::Softmax}) {
    LayerPlan a;
    a.op = act;
    a.name = "act";
    a.input_size = a.output_size = 5;
    plan.layers.push_back(a);
  }
  plan.input_size = in;
  plan.output_size = 5;
  plan.output_is_sequence = sequence_out;
  return build_model(plan);
}

TEST(NoAlloc, RunStepAndStateAllocateNothing) {
  REQUIRE_TRAP();
  struct Spec {
    LayerOp op;
    uint32_t in, hidden, proj, layers;
    bool bidirectional, sequence_out;
  };
  const Spec specs[] = {
      {LayerOp::LSTM, 12, 96, 0, 2, false, true},  {LayerOp::LSTM, 9, 24, 7, 1, true, false},
      {LayerOp::GRU, 10, 33, 0, 1, false, false},  {LayerOp::RNN_TANH, 6, 70, 0, 2, true, true},
      {LayerOp::RNN_RELU, 5, 16, 0, 1, false, true},
  };
  const ferry_backend backends[] = {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_SIMD, FERRY_BACKEND_XNNPACK,
                                    FERRY_BACKEND_AUTO};
  for (DType dtype : {DType::F32, DType::F16, DType::I8, DType::I4})
  for (const Spec& spec : specs) {
    SCOPED_TRACE(dtype_name(dtype));
    // A pool (made before the trap: making one allocates) for the first
    // model only: its workers spin between calls, which a loaded 2-core CI
    // machine pays for dearly.
    void* pool = &spec == &specs[0] ? ferry_threadpool_create(2) : nullptr;
    const ModelBytes bytes = model(spec.op, spec.in, spec.hidden, spec.proj, spec.layers, spec.bidirectional,
                                   spec.sequence_out, dtype);
    std::vector<uint8_t> copy(bytes.data(), bytes.data() + bytes.size());
    ferry_model* m = nullptr;
    ASSERT_EQ(ferry_model_load(copy.data(), copy.size(), nullptr, &m), FERRY_OK) << ferry_last_error();
    ferry_model_info info{};
    info.struct_size = sizeof(info);
    ASSERT_EQ(ferry_model_get_info(m, &info), FERRY_OK);
    for (ferry_backend backend : backends) {
      for (int threaded = 0; threaded < (pool && backend != FERRY_BACKEND_REFERENCE ? 2 : 1); ++threaded) {
        void* threads = threaded ? pool : nullptr;
        SCOPED_TRACE(std::to_string(static_cast<int>(backend)) + (threads ? " threaded" : ""));
        const size_t B = 8, T = 5;  // 40 rows: every path, XNNPACK in auto where it is used
        ferry_session_options o;
        ferry_session_options_init(&o);
        o.backend = backend;
        o.max_batch = B;
        o.max_seq = T;
        o.threadpool = threads;
        size_t need = 0;
        const ferry_status st = ferry_session_arena_size(m, &o, &need);
        if (st == FERRY_UNSUPPORTED) continue;  // not on this machine / build
        ASSERT_EQ(st, FERRY_OK) << ferry_last_error();
        std::vector<uint8_t> arena(need + 64);
        uint8_t* aligned = arena.data() + (64 - reinterpret_cast<uintptr_t>(arena.data()) % 64) % 64;
        ferry_session* s = nullptr;
        ASSERT_EQ(ferry_session_init(m, &o, aligned, need, &s), FERRY_OK) << ferry_last_error();
        std::vector<float> x(B * T * spec.in, 0.25f), y(B * T * 5), state(B * info.state_floats, 0.1f);
        std::vector<int32_t> lengths(B);
        for (size_t b = 0; b < B; ++b) lengths[b] = static_cast<int32_t>(1 + b % T);
        AllocationTrap trap;
        EXPECT_EQ(ferry_run(s, x.data(), B, T, nullptr, y.data(), y.size()), FERRY_OK);
        if (threads) {  // the parallel paths; kept short (see above)
          EXPECT_EQ(ferry_step(s, x.data(), B, y.data(), y.size()), FERRY_OK);
          EXPECT_EQ(trap.calls(), 0) << "allocations during run/step with a thread pool";
          continue;
        }
        EXPECT_EQ(ferry_run(s, x.data(), B, T, lengths.data(), y.data(), y.size()), FERRY_OK);
        EXPECT_EQ(ferry_run(s, x.data(), 1, T, nullptr, y.data(), y.size()), FERRY_OK);
        EXPECT_EQ(ferry_run(s, x.data(), 3, 2, nullptr, y.data(), y.size()), FERRY_OK);
        if (info.streamable) {
          for (size_t t = 0; t < 3; ++t) {
            EXPECT_EQ(ferry_step(s, x.data(), 1, y.data(), y.size()), FERRY_OK);
            EXPECT_EQ(ferry_step(s, x.data(), B, y.data(), y.size()), FERRY_OK);
          }
        }
        EXPECT_EQ(ferry_state_set(s, B, state.data(), state.size()), FERRY_OK);
        EXPECT_EQ(ferry_state_get(s, B, state.data(), state.size()), FERRY_OK);
        EXPECT_EQ(ferry_state_reset(s), FERRY_OK);
        EXPECT_EQ(trap.calls(), 0) << "allocations during run/step/state";
      }
    }
    ferry_model_free(m);
    ferry_threadpool_destroy(pool);
  }
}

// The same with a profiler (ferry_session_options.profiler): the profiled
// entry's run and step, whose only difference is the callbacks, allocate
// nothing either.
TEST(NoAlloc, ProfiledSessionsAllocateNothing) {
  REQUIRE_TRAP();
  struct Counter {
    long begins = 0, ends = 0;
    static void on_layer(void* context, size_t, int end) {
      Counter* c = static_cast<Counter*>(context);
      (end ? c->ends : c->begins) += 1;
    }
  } counter;
  const ferry_profiler profiler{&counter, &Counter::on_layer};
  for (DType dtype : {DType::F32, DType::I8}) {
    SCOPED_TRACE(dtype_name(dtype));
    const ModelBytes bytes = model(LayerOp::LSTM, 12, 40, 0, 2, false, true, dtype);
    std::vector<uint8_t> copy(bytes.data(), bytes.data() + bytes.size());
    ferry_model* m = nullptr;
    ASSERT_EQ(ferry_model_load(copy.data(), copy.size(), nullptr, &m), FERRY_OK) << ferry_last_error();
    for (ferry_backend backend : {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_SIMD, FERRY_BACKEND_XNNPACK,
                                  FERRY_BACKEND_AUTO}) {
      SCOPED_TRACE(static_cast<int>(backend));
      const size_t B = 4, T = 5;
      ferry_session_options o;
      ferry_session_options_init(&o);
      o.backend = backend;
      o.max_batch = B;
      o.max_seq = T;
      o.profiler = &profiler;
      size_t need = 0;
      const ferry_status st = ferry_session_arena_size(m, &o, &need);
      if (st == FERRY_UNSUPPORTED) continue;
      ASSERT_EQ(st, FERRY_OK) << ferry_last_error();
      std::vector<uint8_t> arena(need + 64);
      uint8_t* aligned = arena.data() + (64 - reinterpret_cast<uintptr_t>(arena.data()) % 64) % 64;
      ferry_session* s = nullptr;
      ASSERT_EQ(ferry_session_init(m, &o, aligned, need, &s), FERRY_OK) << ferry_last_error();
      std::vector<float> x(B * T * 12, 0.25f), y(B * T * 5);
      counter = Counter{};
      AllocationTrap trap;
      EXPECT_EQ(ferry_run(s, x.data(), B, T, nullptr, y.data(), y.size()), FERRY_OK);
      EXPECT_EQ(ferry_step(s, x.data(), 1, y.data(), y.size()), FERRY_OK);
      EXPECT_EQ(ferry_step(s, x.data(), B, y.data(), y.size()), FERRY_OK);
      EXPECT_EQ(trap.calls(), 0) << "allocations during profiled run/step";
      EXPECT_GT(counter.begins, 0);
      EXPECT_EQ(counter.begins, counter.ends);
    }
    ferry_model_free(m);
  }
}

}  // namespace
