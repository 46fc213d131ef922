// The session entry points of the C API: options, arena sizes, init, run,
// step, state. They check the caller's arguments (one place, the same
// messages for every backend), then call the backend that the options name,
// through backend/backend.h, and nothing else.
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include <stddef.h>
#include <string.h>

#include <new>
#include <type_traits>

#include "backend/backend.h"
#include "shared/arena_parts.h"
#include "common/status.h"
#include "model/model.h"
#include "platform/fp_env.h"
#include "platform/threads.h"

namespace ferry {
namespace {

constexpr size_t kAlign = FERRY_ALIGNMENT;
constexpr size_t kOptionsV1Size = offsetof(ferry_session_options, threadpool);

ferry_status read_options(const ferry_session_options* o, SessionConfig* out) {
  if (!o) return fail(FERRY_INVALID_ARGUMENT, "options is NULL");
  if (o->struct_size < kOptionsV1Size) {
    return fail(FERRY_INVALID_ARGUMENT, "options->struct_size is %zu: call ferry_session_options_init first",
                o->struct_size);
  }
  out->max_batch = o->max_batch;
  out->max_seq = o->max_seq;
  // Read the enum's bytes as an integer first: a caller may pass any value
  // (e.g. from a newer header), and loading an out-of-range enum is UB.
  // (Its size is the ABI's: 1 byte with the -fshort-enums of bare-metal Arm.)
  std::underlying_type<ferry_backend>::type raw;
  static_assert(sizeof(raw) == sizeof(o->backend), "enum and its underlying type differ in size");
  memcpy(&raw, &o->backend, sizeof(raw));
  const long long backend = static_cast<long long>(raw);
  if (backend < FERRY_BACKEND_AUTO || backend > FERRY_BACKEND_CUDA) {
    return fail(FERRY_INVALID_ARGUMENT, "backend %lld is unknown", backend);
  }
  out->backend = static_cast<ferry_backend>(backend);
  if (o->struct_size >= offsetof(ferry_session_options, threadpool) + sizeof(void*)) {
    out->threadpool = o->threadpool;
  }
  if (out->threadpool && !threads_supported()) {
    return fail(FERRY_UNSUPPORTED, "options->threadpool: this runtime was built without pthreadpool");
  }
  if (o->struct_size >= offsetof(ferry_session_options, fp_mode) + sizeof(o->fp_mode)) {
    std::underlying_type<ferry_fp_mode>::type mode;
    static_assert(sizeof(mode) == sizeof(o->fp_mode), "enum and its underlying type differ in size");
    memcpy(&mode, &o->fp_mode, sizeof(mode));
    const long long value = static_cast<long long>(mode);  // the enum's type is unsigned on some compilers
    if (value < 0 || value > FERRY_FP_CALLER) return fail(FERRY_INVALID_ARGUMENT, "fp_mode %lld is unknown", value);
    out->fp_mode = static_cast<ferry_fp_mode>(mode);
  } else {
    out->fp_mode = FERRY_FP_RESTORE;  // what a caller of the 0.1 header was promised
  }
  // The device fields (0.2), each read only when the caller's struct has it.
  if (o->struct_size >= offsetof(ferry_session_options, device_allocator) + sizeof(o->device_allocator)) {
    out->device_allocator = o->device_allocator;
    if (out->device_allocator && (!out->device_allocator->allocate || !out->device_allocator->deallocate)) {
      return fail(FERRY_INVALID_ARGUMENT, "options->device_allocator: allocate and deallocate must both be set");
    }
  }
  if (o->struct_size >= offsetof(ferry_session_options, device_io) + sizeof(o->device_io)) {
    std::underlying_type<ferry_device_io>::type io;
    memcpy(&io, &o->device_io, sizeof(io));
    if (static_cast<long long>(io) < FERRY_DEVICE_IO_AUTO || static_cast<long long>(io) > FERRY_DEVICE_IO_ZERO_COPY) {
      return fail(FERRY_INVALID_ARGUMENT, "options->device_io %lld is unknown", static_cast<long long>(io));
    }
    out->device_io = static_cast<ferry_device_io>(io);
  }
  if (o->struct_size >= offsetof(ferry_session_options, device) + sizeof(o->device)) {
    if (o->device < 0) return fail(FERRY_INVALID_ARGUMENT, "options->device is %d, must be >= 0", o->device);
    out->device = o->device;
  }
  if (o->struct_size >= offsetof(ferry_session_options, profiler) + sizeof(o->profiler)) {
    out->profiler = o->profiler;
    if (out->profiler && !out->profiler->layer) {
      return fail(FERRY_INVALID_ARGUMENT, "options->profiler: its `layer` callback is NULL");
    }
  }
  return FERRY_OK;
}

// The arena bytes of a session: the header, then what the backend plans;
// and the device bytes the backend will allocate at init (may be null).
ferry_status plan_session(const ferry_model* m, const SessionConfig& config, size_t* bytes_out,
                          size_t* device_bytes_out = nullptr) {
  if (!m) return fail(FERRY_INVALID_ARGUMENT, "model is NULL");
  if (config.max_batch == 0 || config.max_seq == 0) {
    return fail(FERRY_INVALID_ARGUMENT, "max_batch and max_seq must be >= 1 (got %zu, %zu)", config.max_batch,
                config.max_seq);
  }
  const Backend& backend = backend_for(config.backend);
  if (config.profiler && !backend.profiled) {
    return fail(FERRY_UNSUPPORTED,
                "options->profiler: the %s backend has no per-layer profile here (the CUDA backend runs the chain "
                "as a whole: time ferry_run / ferry_step whole; a CPU runtime built with FERRY_PROFILER 0 leaves "
                "it out)",
                backend.name);
  }
  ferry_status st = backend.probe(m, config);
  if (st != FERRY_OK) return st;
  ArenaPlan arena;
  arena.reserve(sizeof(ferry_session));
  size_t device_bytes = 0;
  if ((st = backend.plan(m, config, &arena, &device_bytes)) != FERRY_OK) return st;
  *bytes_out = arena.end();
  if (device_bytes_out) *device_bytes_out = device_bytes;
  return FERRY_OK;
}

ferry_status check_session(const ferry_session* s) {
  if (!s) return fail(FERRY_INVALID_ARGUMENT, "session is NULL");
  return FERRY_OK;
}

// Sequence steps after the chain for `seq` input steps (1 for an output
// without a time axis), or a status naming the Conv1d whose kernel exceeds
// its padded input, or whose reflect padding reaches past its input.
ferry_status output_steps(const ferry_model* m, size_t seq, size_t* steps_out) {
  size_t steps = seq;
  for (uint32_t i = 0; i < m->num_layers; ++i) {
    const Layer& l = m->layers[i];
    if (l.op == Op::kConv1d) {
      if (l.pad_mode == PaddingMode::kReflect && (l.pad_left >= steps || l.pad_right >= steps)) {
        return fail(FERRY_INVALID_ARGUMENT,
                    "layers[%u] (Conv1d): reflect padding %u/%u needs more than %zu steps; this model takes at least "
                    "%zu input steps (ferry_model_info.min_seq)",
                    i, l.pad_left, l.pad_right, steps, min_input_steps(m));
      }
      const size_t next = conv_output_steps(l, steps);
      if (next == 0) {
        return fail(FERRY_INVALID_ARGUMENT,
                    "layers[%u] (Conv1d): %zu steps are fewer than its kernel spans (%u, dilation %u) with padding; "
                    "this model takes at least %zu input steps (ferry_model_info.min_seq)",
                    i, steps, l.kernel, l.dilation, min_input_steps(m));
      }
      steps = next;
    } else if (op_collapses_time(l.op)) {
      steps = 1;
    }
  }
  *steps_out = m->output_is_sequence ? steps : 1;
  return FERRY_OK;
}

// The arguments of ferry_run / ferry_step, against the session and model;
// sets call->out_steps.
ferry_status check_run(const ferry_session* s, RunCall* run, size_t capacity) {
  const RunCall& call = *run;
  const ferry_model* m = s->model;
  const size_t B = call.batch, T = call.seq;
  if (m->input_is_tokens != (call.tokens != nullptr)) {
    return fail(FERRY_INVALID_ARGUMENT, m->input_is_tokens
                                            ? "this model takes token ids: use ferry_run_tokens / ferry_step_tokens"
                                            : "this model takes floats: use ferry_run / ferry_step");
  }
  if ((!call.input && !call.tokens) || !call.output) return fail(FERRY_INVALID_ARGUMENT, "input or output is NULL");
  if (B == 0 || T == 0) return fail(FERRY_INVALID_ARGUMENT, "batch and seq must be >= 1");
  if (B > s->max_batch || T > s->max_seq) {
    return fail(FERRY_INVALID_STATE, "batch %zu x seq %zu exceeds the session's max_batch %zu x max_seq %zu", B,
                T, s->max_batch, s->max_seq);
  }
  if (!m->has_time_axis && T != 1) {
    return fail(FERRY_INVALID_ARGUMENT, "this model has no time axis: seq must be 1, got %zu", T);
  }
  if (call.lengths) {
    for (size_t b = 0; b < B; ++b) {
      if (call.lengths[b] < 1 || static_cast<size_t>(call.lengths[b]) > T) {
        return fail(FERRY_INVALID_ARGUMENT, "lengths[%zu] = %d, must be in 1..%zu", b,
                    static_cast<int>(call.lengths[b]), T);
      }
    }
  }
  if (call.lengths && !m->lengths_ok) {
    return fail(FERRY_UNSUPPORTED, "per-sample lengths: a Conv1d of this model changes the number of steps");
  }
  ferry_status st = FERRY_OK;
  if (m->max_conv_patch == 0) {  // no Conv1d: the steps stay the steps
    run->out_steps = m->output_is_sequence ? T : 1;
  } else if ((st = output_steps(m, T, &run->out_steps)) != FERRY_OK) {
    return st;
  }
  const size_t out_floats = run->out_steps * B * m->output_size;
  if (capacity < out_floats) {
    return fail(FERRY_INVALID_ARGUMENT, "output capacity %zu floats, the run needs %zu", capacity, out_floats);
  }
  if (call.tokens) {
    const uint32_t num = m->layers[0].weight.units;
    for (size_t i = 0; i < B * T; ++i) {
      if (call.tokens[i] < 0 || static_cast<uint32_t>(call.tokens[i]) >= num) {
        return fail(FERRY_INVALID_ARGUMENT, "tokens[%zu] = %d: out of range, the embedding has %u rows (0..%u)", i,
                    static_cast<int>(call.tokens[i]), num, num - 1);
      }
    }
  }
  return FERRY_OK;
}

// ferry_step's refusal of a model it cannot stream, naming the layer.
ferry_status check_streamable(const ferry_model* m) {
  if (m->streamable) return FERRY_OK;
  const Layer& l = m->layers[m->unstreamable_layer];
  if (l.op == Op::kConv1d) {
    return fail(FERRY_UNSUPPORTED,
                "ferry_step: layers[%u] (Conv1d) looks at steps after the current one (padding %u left, %u right, "
                "stride %u, %s; only a causal conv streams): use ferry_run",
                m->unstreamable_layer, l.pad_left, l.pad_right, l.stride,
                l.pad_mode == PaddingMode::kZeros ? "zeros" : "reflect/replicate padding");
  }
  return fail(FERRY_UNSUPPORTED,
              "ferry_step: the model has a bidirectional layer, which needs the whole sequence; use ferry_run");
}

ferry_status run_checked(ferry_session* session, RunCall call, size_t capacity) {
  ferry_status st = check_session(session);
  if (st != FERRY_OK) return st;
  FlushDenormals flush(session->fp_mode);
  if ((st = check_run(session, &call, capacity)) != FERRY_OK) return st;
  return session->backend->run(session, call);
}

ferry_status step_checked(ferry_session* session, RunCall call, size_t capacity) {
  ferry_status st = check_session(session);
  if (st != FERRY_OK) return st;
  if ((st = check_streamable(session->model)) != FERRY_OK) return st;
  FlushDenormals flush(session->fp_mode);
  if ((st = check_run(session, &call, capacity)) != FERRY_OK) return st;
  return session->backend->step(session, call);
}

// The arguments of ferry_state_get / ferry_state_set.
ferry_status check_state(const ferry_session* s, size_t batch, const float* user, size_t count) {
  if (!user) return fail(FERRY_INVALID_ARGUMENT, "state buffer is NULL");
  if (batch == 0 || batch > s->max_batch) {
    return fail(FERRY_INVALID_ARGUMENT, "batch %zu, the session holds 1..%zu", batch, s->max_batch);
  }
  if (count < batch * s->model->state_floats) {
    return fail(FERRY_INVALID_ARGUMENT, "state buffer holds %zu floats, %zu needed", count,
                batch * size_t{s->model->state_floats});
  }
  return FERRY_OK;
}

}  // namespace
}  // namespace ferry

using namespace ferry;

extern "C" ferry_status ferry_arena_size(const ferry_model* model, size_t max_batch, size_t max_seq,
                                         size_t* bytes_out) {
  if (!bytes_out) return fail(FERRY_INVALID_ARGUMENT, "bytes_out is NULL");
  SessionConfig config;
  config.max_batch = max_batch;
  config.max_seq = max_seq;
  return plan_session(model, config, bytes_out);
}

extern "C" ferry_status ferry_session_arena_size(const ferry_model* model, const ferry_session_options* options,
                                                 size_t* bytes_out) {
  if (!bytes_out) return fail(FERRY_INVALID_ARGUMENT, "bytes_out is NULL");
  SessionConfig config;
  const ferry_status st = read_options(options, &config);
  if (st != FERRY_OK) return st;
  return plan_session(model, config, bytes_out);
}

ferry_status ferry::session_arena_parts(const ferry_model* model, const ferry_session_options* options,
                                        ArenaParts* out) {
  if (!model || !out) return fail(FERRY_INVALID_ARGUMENT, "model or out is NULL");
  SessionConfig config;
  ferry_status st = read_options(options, &config);
  if (st != FERRY_OK) return st;
  const Backend& backend = backend_for(config.backend);
  if (!backend.arena_parts) {
    return fail(FERRY_UNSUPPORTED, "a %s session's arena has no target-independent figure", backend.name);
  }
  if ((st = plan_session(model, config, &out->total)) != FERRY_OK) return st;  // the checks, and the figure to match
  const size_t total = out->total;
  if ((st = backend.arena_parts(model, config, out)) != FERRY_OK) return st;
  if (out->total != total) return fail(FERRY_INVALID_STATE, "internal: the arena parts do not add up");
  return FERRY_OK;
}

void ferry::model_capacities(const ferry_model* model, uint32_t* chain, uint32_t* cells) {
  *chain = model->num_layers;
  *cells = model->num_cells;
}

uint32_t ferry::layer_state_floats(const ferry_model* model, uint32_t layer) {
  return layer < model->num_layers ? model->layers[layer].state_floats : 0;
}

extern "C" void ferry_session_options_init(ferry_session_options* options) {
  if (!options) return;
  options->struct_size = sizeof(ferry_session_options);
  options->max_batch = 1;
  options->max_seq = 1;
  options->backend = FERRY_BACKEND_AUTO;
  options->threadpool = nullptr;
  options->fp_mode = FERRY_FP_FLUSH;
  options->device_allocator = nullptr;
  options->device_io = FERRY_DEVICE_IO_AUTO;
  options->device = 0;
  options->profiler = nullptr;
}

extern "C" ferry_status ferry_session_memory(const ferry_model* model, const ferry_session_options* options,
                                             size_t* host_bytes_out, size_t* device_bytes_out) {
  SessionConfig config;
  ferry_status st = read_options(options, &config);
  if (st != FERRY_OK) return st;
  size_t host = 0, device = 0;
  if ((st = plan_session(model, config, &host, &device)) != FERRY_OK) return st;
  if (host_bytes_out) *host_bytes_out = host;
  if (device_bytes_out) *device_bytes_out = device;
  return FERRY_OK;
}

extern "C" ferry_status ferry_session_release(ferry_session* session) {
  if (!session) return FERRY_OK;
  if (session->backend->release) session->backend->release(session);
  return FERRY_OK;
}

extern "C" ferry_status ferry_session_init(const ferry_model* model, const ferry_session_options* options,
                                           void* arena, size_t arena_size, ferry_session** session_out) {
  clear_error();
  if (!session_out) return fail(FERRY_INVALID_ARGUMENT, "session_out is NULL");
  *session_out = nullptr;
  if (!model || !options) return fail(FERRY_INVALID_ARGUMENT, "model or options is NULL");
  SessionConfig config;
  ferry_status st = read_options(options, &config);
  if (st != FERRY_OK) return st;
  size_t needed = 0;
  if ((st = plan_session(model, config, &needed)) != FERRY_OK) return st;
  if (!arena) return fail(FERRY_INVALID_ARGUMENT, "arena is NULL");
  if (reinterpret_cast<uintptr_t>(arena) % kAlign != 0) {
    return fail(FERRY_INVALID_ARGUMENT, "arena must be %zu-byte aligned", kAlign);
  }
  if (arena_size < needed) {
    return fail(FERRY_ARENA_TOO_SMALL, "arena is %zu bytes, the session needs %zu", arena_size, needed);
  }
  uint8_t* base = static_cast<uint8_t*>(arena);
  const Backend& backend = backend_for(config.backend);
  const bool plain_step = model->streamable && !model->input_is_tokens && model->max_conv_patch == 0;
  // A profiled session runs through the backend's profiled entry (checked
  // by plan_session); any other through the plain one.
  const Backend* runner = config.profiler ? backend.profiled : &backend;
  ferry_session* s = new (base) ferry_session{runner,         model,          config.max_batch, config.max_seq,
                                              nullptr,        config.fp_mode, plain_step,       config.profiler};
  if ((st = backend.init(s, config, base)) != FERRY_OK) return st;
  *session_out = s;
  return FERRY_OK;
}

extern "C" ferry_status ferry_run(ferry_session* session, const float* input, size_t batch, size_t seq,
                                  const int32_t* lengths, float* output, size_t output_capacity) {
  return run_checked(session, RunCall{input, nullptr, batch, seq, lengths, output, 1}, output_capacity);
}

extern "C" ferry_status ferry_step(ferry_session* session, const float* input, size_t batch, float* output,
                                   size_t output_capacity) {
  // The firmware loop's call (one sample of a plain model): what check_run
  // would test for it, in four comparisons; anything else takes the full
  // checks and their messages.
  if (session && session->plain_step && batch == 1 && input && output &&
      output_capacity >= session->model->output_size) {
    FlushDenormals flush(session->fp_mode);
    return session->backend->step(session, RunCall{input, nullptr, 1, 1, nullptr, output, 1});
  }
  return step_checked(session, RunCall{input, nullptr, batch, 1, nullptr, output, 1}, output_capacity);
}

extern "C" ferry_status ferry_run_tokens(ferry_session* session, const int32_t* tokens, size_t batch, size_t seq,
                                         const int32_t* lengths, float* output, size_t output_capacity) {
  if (!tokens) return fail(FERRY_INVALID_ARGUMENT, "tokens is NULL");
  return run_checked(session, RunCall{nullptr, tokens, batch, seq, lengths, output, 1}, output_capacity);
}

extern "C" ferry_status ferry_step_tokens(ferry_session* session, const int32_t* tokens, size_t batch,
                                          float* output, size_t output_capacity) {
  if (!tokens) return fail(FERRY_INVALID_ARGUMENT, "tokens is NULL");
  return step_checked(session, RunCall{nullptr, tokens, batch, 1, nullptr, output, 1}, output_capacity);
}

extern "C" ferry_status ferry_output_floats(const ferry_model* model, size_t batch, size_t seq,
                                            size_t* floats_out) {
  if (!model || !floats_out) return fail(FERRY_INVALID_ARGUMENT, "model or floats_out is NULL");
  size_t n = 0, steps = 0;
  const ferry_status st = output_steps(model, seq, &steps);
  if (st != FERRY_OK) return st;
  if (__builtin_mul_overflow(steps, batch, &n) ||
      __builtin_mul_overflow(n, size_t{model->output_size}, &n)) {
    return fail(FERRY_INVALID_ARGUMENT, "output size overflows");
  }
  *floats_out = n;
  return FERRY_OK;
}

extern "C" ferry_status ferry_state_get(const ferry_session* session, size_t batch, float* state_out,
                                        size_t capacity) {
  ferry_status st = check_session(session);
  if (st != FERRY_OK) return st;
  if ((st = check_state(session, batch, state_out, capacity)) != FERRY_OK) return st;
  session->backend->state_get(session, batch, state_out);
  return session->backend->state_status ? session->backend->state_status(session) : FERRY_OK;
}

extern "C" ferry_status ferry_state_set(ferry_session* session, size_t batch, const float* state, size_t count) {
  ferry_status st = check_session(session);
  if (st != FERRY_OK) return st;
  if ((st = check_state(session, batch, state, count)) != FERRY_OK) return st;
  session->backend->state_set(session, batch, state);
  return session->backend->state_status ? session->backend->state_status(session) : FERRY_OK;
}

extern "C" ferry_status ferry_state_reset(ferry_session* session) {
  const ferry_status st = check_session(session);
  if (st != FERRY_OK) return st;
  session->backend->state_reset(session);
  return session->backend->state_status ? session->backend->state_status(session) : FERRY_OK;
}
