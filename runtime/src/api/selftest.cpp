// ferry_selftest: runs the golden vectors stored in Model.selftest through a
// session in the caller's arena and compares the output with the stored one.
//
// Arena layout: [session arena for (batch, seq)][output floats], the output
// region starting FERRY_ALIGNMENT-aligned. The stored input is read in place
// from the model bytes (FlatBuffers float vectors are 4-byte aligned and
// little-endian, as every target ferry runs on).
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include <math.h>
#include <string.h>

#include "ferry/ferry_generated.h"
#include "model/model.h"
#include "common/status.h"

namespace ferry {
namespace {

namespace fb = ::ferry::fb;

// Bounds that keep every product below in range on 32-bit targets too.
constexpr uint32_t kMaxSelfTestBatch = 1u << 10;
constexpr uint32_t kMaxSelfTestSeq = 1u << 16;

struct Vectors {
  const float* input = nullptr;
  const float* expected = nullptr;
  size_t batch = 0, seq = 0, output_floats = 0;
  float tolerance = 0;
  size_t session_bytes = 0;  // aligned up to FERRY_ALIGNMENT
  size_t total_bytes = 0;    // session + output
};

void session_options(ferry_backend backend, const Vectors& v, ferry_session_options* options) {
  ferry_session_options_init(options);
  options->max_batch = v.batch;
  options->max_seq = v.seq;
  options->backend = backend;
}

// Finds and checks the stored vectors against the model (the FlatBuffers
// verifier has already bounded every vector inside the buffer at load) and
// sizes the arena for `*backend`, or with backend NULL for every backend.
ferry_status find_vectors(const ferry_model* model, const ferry_backend* backend, Vectors* v) {
  if (!model) return fail(FERRY_INVALID_ARGUMENT, "selftest: model is NULL");
  const fb::SelfTest* st = fb::GetModel(model->bytes)->selftest();
  if (!st || st->batch() == 0) {
    return fail(FERRY_UNSUPPORTED,
                "selftest: the model holds no self-test vectors (convert it again with this ferry)");
  }
  if (st->batch() > kMaxSelfTestBatch || st->seq() == 0 || st->seq() > kMaxSelfTestSeq ||
      (!model->has_time_axis && st->seq() != 1)) {
    return fail(FERRY_INVALID_MODEL, "selftest: batch %u, seq %u out of range", st->batch(),
                st->seq());
  }
  const size_t min_seq = min_input_steps(model);
  if (st->seq() < min_seq) {
    return fail(FERRY_INVALID_MODEL, "selftest: seq %u is fewer than the %zu steps the model takes", st->seq(),
                min_seq);
  }
  v->batch = st->batch();
  v->seq = st->seq();
  uint64_t want_in = 0;
  const uint64_t got_in = st->input() ? st->input()->size() : 0;
  if (__builtin_mul_overflow(uint64_t{st->batch()} * st->seq(), uint64_t{model->input_size},
                             &want_in) ||
      got_in != want_in) {
    return fail(FERRY_INVALID_MODEL, "selftest.input: %llu floats, batch %zu x seq %zu x %u needs %llu",
                static_cast<unsigned long long>(got_in), v->batch, v->seq, model->input_size,
                static_cast<unsigned long long>(want_in));
  }
  ferry_status status = ferry_output_floats(model, v->batch, v->seq, &v->output_floats);
  if (status != FERRY_OK) return status;
  const size_t got_out = st->output() ? st->output()->size() : 0;
  if (got_out != v->output_floats) {
    return fail(FERRY_INVALID_MODEL, "selftest.output: %zu floats, the model gives %zu", got_out,
                v->output_floats);
  }
  v->tolerance = st->tolerance();
  if (!(v->tolerance >= 0.0f) || isinf(v->tolerance)) {
    // No %g: firmware links newlib-nano, whose printf has no floats.
    return fail(FERRY_INVALID_MODEL, "selftest.tolerance is not a finite value >= 0");
  }
  v->input = st->input()->data();
  v->expected = st->output()->data();

  // The session's arena for *backend; without one the largest over every
  // backend this runtime can run on this machine.
  size_t session = 0;
  if (backend) {
    ferry_session_options options;
    session_options(*backend, *v, &options);
    status = ferry_session_arena_size(model, &options, &session);
    if (status != FERRY_OK) return status;
  } else {
    static const ferry_backend kBackends[] = {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_SIMD,
                                              FERRY_BACKEND_XNNPACK, FERRY_BACKEND_CUDA,
                                              FERRY_BACKEND_AUTO};
    for (const ferry_backend b : kBackends) {
      ferry_session_options options;
      session_options(b, *v, &options);
      size_t bytes = 0;
      status = ferry_session_arena_size(model, &options, &bytes);
      if (status == FERRY_UNSUPPORTED) continue;
      if (status != FERRY_OK) return status;
      if (bytes > session) session = bytes;
    }
  }
  clear_error();
  const size_t align = FERRY_ALIGNMENT;
  if (session > SIZE_MAX - align) return fail(FERRY_INVALID_MODEL, "selftest: arena size overflows");
  v->session_bytes = (session + align - 1) / align * align;
  size_t out_bytes = 0;
  if (__builtin_mul_overflow(v->output_floats, sizeof(float), &out_bytes) ||
      __builtin_add_overflow(v->session_bytes, out_bytes, &v->total_bytes)) {
    return fail(FERRY_INVALID_MODEL, "selftest: arena size overflows");
  }
  return FERRY_OK;
}

}  // namespace
}  // namespace ferry

extern "C" ferry_status ferry_selftest_arena_size(const ferry_model* model, size_t* bytes_out) {
  using namespace ferry;
  clear_error();
  if (!bytes_out) return fail(FERRY_INVALID_ARGUMENT, "selftest: bytes_out is NULL");
  Vectors v;
  const ferry_status status = find_vectors(model, nullptr, &v);
  if (status != FERRY_OK) return status;
  *bytes_out = v.total_bytes;
  return FERRY_OK;
}

extern "C" ferry_status ferry_selftest(const ferry_model* model, ferry_backend backend,
                                       void* arena, size_t arena_size, int* passed_out,
                                       float* max_error_out) {
  using namespace ferry;
  clear_error();
  Vectors v;
  ferry_status status = find_vectors(model, &backend, &v);
  if (status != FERRY_OK) return status;
  if (!arena) return fail(FERRY_INVALID_ARGUMENT, "selftest: arena is NULL");
  if (arena_size < v.total_bytes) {
    return fail(FERRY_ARENA_TOO_SMALL, "selftest: arena of %zu bytes, needs %zu", arena_size,
                v.total_bytes);
  }

  ferry_session_options options;
  session_options(backend, v, &options);
  ferry_session* session = nullptr;
  status = ferry_session_init(model, &options, arena, v.session_bytes, &session);
  if (status != FERRY_OK) return status;
  float* output = reinterpret_cast<float*>(static_cast<uint8_t*>(arena) + v.session_bytes);
  memset(output, 0, v.output_floats * sizeof(float));
  status = ferry_run(session, v.input, v.batch, v.seq, nullptr, output, v.output_floats);
  // A device backend's session holds device memory beyond the arena.
  ferry_session_release(session);
  if (status != FERRY_OK) return status;

  // A NaN (in the output or the stored vector) counts as an infinite error.
  float max_error = 0.0f;
  for (size_t i = 0; i < v.output_floats; ++i) {
    const float e = fabsf(output[i] - v.expected[i]);
    if (!(e <= max_error)) max_error = isnan(e) ? HUGE_VALF : e;
  }
  if (passed_out) *passed_out = max_error <= v.tolerance ? 1 : 0;
  if (max_error_out) *max_error_out = max_error;
  return FERRY_OK;
}
