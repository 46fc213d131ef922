// Sessions: the arena plan, the chain executor, streaming and state.
//
// Arena layout (one plan, used both by ferry_arena_size and by
// ferry_session_init, so the size it reports is exact):
//   [ferry_session][state][act A][act B][scratch][gates][gates_rec][h_new][h_proj][xnnpack]
// each region starting FERRY_ALIGNMENT-aligned and present only when the
// session's engines need it. `state` is the recurrent state of every
// recurrent layer for max_batch samples (persistent); act A/B are ping-pong
// activation buffers of max_seq*max_batch*max_features floats in time-major
// order [T][B][F]; `scratch` holds the reference kernels' per-step gate
// values; gates..h_proj are the simd path's (session.h); `xnnpack` holds the
// XNNPACK operators and their packed weights. At init, before anything has
// run, the span from act A to h_proj doubles as XNNPACK's packing scratch
// (extended if it is the larger).
#include "session.h"

#include <stddef.h>
#include <string.h>

#include <new>
#include <type_traits>

#include "fp_env.h"
#include "kernels/reference/reference.h"
#include "kernels/xnnpack/xnnpack_fc.h"
#include "model.h"
#include "status.h"
#include "threads.h"

namespace ferry {

size_t chunk_steps(size_t max_batch, size_t max_seq) {
  size_t steps = (kChunkRows + max_batch - 1) / max_batch;
  if (steps > max_seq) steps = max_seq;
  return steps ? steps : 1;
}

uint32_t max_gate_cols(const ferry_model* m) {
  uint32_t most = 0;
  for (uint32_t i = 0; i < m->num_layers; ++i) {
    const Layer& l = m->layers[i];
    if (!op_is_recurrent(l.op)) continue;
    const uint32_t cols = panels_of(l.hidden) * kPanel * l.gates;
    if (cols > most) most = cols;
  }
  return most;
}

namespace {

bool has_weights(Op op) { return op_is_recurrent(op) || op == Op::kLinear; }

// Where auto lets XNNPACK take the large products: Arm, where Debian's
// XNNPACK has hand-scheduled assembly GEMMs that intrinsics do not match.
// Not x86-64: measured on an AVX-512 Xeon (Ice Lake), XNNPACK's 7x16
// AVX-512 GEMM ran the W3 shapes no faster than the simd 6x16 tile (about
// half the FMA peak each), so the extra arena (its packed copy of W_ih) buys
// nothing there.
bool xnnpack_is_wider_here() {
#if defined(__aarch64__) || defined(__arm__)
  return true;
#else
  return false;
#endif
}

}  // namespace

ferry_status choose_engines(const ferry_model* m, ferry_backend backend, size_t max_batch, size_t max_seq,
                            Engines* e) {
  *e = Engines();
  const simd::Kernels* k = simd::kernels_for_this_cpu();
  switch (backend) {
    case FERRY_BACKEND_REFERENCE:
      break;
    case FERRY_BACKEND_AUTO:
      e->simd = k;
      break;
    case FERRY_BACKEND_SIMD:
    case FERRY_BACKEND_XNNPACK:
      if (backend == FERRY_BACKEND_XNNPACK && !xnn::available()) {
        return fail(FERRY_UNSUPPORTED, "backend xnnpack: %s", xnn::unavailable_reason());
      }
      if (!k) {
        return fail(FERRY_UNSUPPORTED, "backend %s: this CPU has no SIMD kernels in this build (x86-64 needs AVX2 "
                    "and FMA)", backend == FERRY_BACKEND_SIMD ? "simd" : "xnnpack (its recurrence runs on simd)");
      }
      for (uint32_t i = 0; i < m->num_layers; ++i) {
        if (has_weights(m->layers[i].op) && !m->layers[i].panel8) {
          return fail(FERRY_UNSUPPORTED,
                      "backend %s: layers[%u] stores RowMajor weights (a format 1.0 file); the simd kernels "
                      "read Panel8: convert the model again, or use the reference backend",
                      backend == FERRY_BACKEND_SIMD ? "simd" : "xnnpack", i);
        }
      }
      e->simd = k;
      e->xnn_always = backend == FERRY_BACKEND_XNNPACK;
      break;
    case FERRY_BACKEND_CUDA:
      return fail(FERRY_UNSUPPORTED, "backend cuda is not built into this runtime");
    default:
      return fail(FERRY_INVALID_ARGUMENT, "backend %d is unknown", static_cast<int>(backend));
  }
  const bool auto_xnn = backend == FERRY_BACKEND_AUTO && e->simd && xnnpack_is_wider_here() && xnn::available();
  const size_t chunk_rows = max_batch * chunk_steps(max_batch, max_seq);
  bool time_axis = false;
  for (uint32_t i = 0; i < m->num_layers; ++i) {
    const Layer& l = m->layers[i];
    const bool simd_ok = e->simd && (!has_weights(l.op) || l.panel8);
    e->layer[i] = simd_ok ? Engine::kSimd : Engine::kReference;
    if (!simd_ok) e->any_reference = true;
    if (op_is_recurrent(l.op)) {
      time_axis = true;
      const bool xnn = simd_ok && (e->xnn_always || (auto_xnn && chunk_rows >= kXnnpackMinRows));
      for (uint32_t c = 0; c < l.num_layers * l.dirs; ++c) e->xnn_cell[l.first_cell + c] = xnn;
      e->any_xnnpack = e->any_xnnpack || xnn;
    } else if (l.op == Op::kLast) {
      time_axis = false;
    } else if (l.op == Op::kLinear) {
      const size_t rows = max_batch * (time_axis ? max_seq : 1);
      e->xnn_linear[i] = simd_ok && (e->xnn_always || (auto_xnn && rows >= kXnnpackMinRows));
      e->any_xnnpack = e->any_xnnpack || e->xnn_linear[i];
    }
  }
  return FERRY_OK;
}

namespace {

constexpr size_t kAlign = FERRY_ALIGNMENT;

struct Plan {
  Engines engines;
  size_t chunk_steps = 1;
  // Byte offsets (0 = region absent, except state which always exists).
  size_t state = 0, act_a = 0, act_b = 0, scratch = 0, gates = 0, gates_rec = 0, h_new = 0, h_proj = 0;
  size_t xnn = 0, xnn_bytes = 0;
  size_t total = 0;
};

bool add_region(size_t* cursor, size_t floats, size_t* offset_out) {
  size_t bytes = 0, end = 0;
  if (__builtin_mul_overflow(floats, sizeof(float), &bytes)) return false;
  if (bytes > SIZE_MAX - kAlign) return false;
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  *offset_out = *cursor;
  if (__builtin_add_overflow(*cursor, bytes, &end)) return false;
  *cursor = end;
  return true;
}

// Multiplies into *out, false on overflow.
bool mul3(size_t a, size_t b, size_t c, size_t* out) {
  return !__builtin_mul_overflow(a, b, out) && !__builtin_mul_overflow(*out, c, out);
}

// Session options as this runtime reads them: the fields a caller compiled
// against an older header did not have take their defaults.
struct Options {
  size_t max_batch = 1, max_seq = 1;
  ferry_backend backend = FERRY_BACKEND_AUTO;
  void* threadpool = nullptr;
};

constexpr size_t kOptionsV1Size = offsetof(ferry_session_options, threadpool);

ferry_status read_options(const ferry_session_options* o, Options* out) {
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
  return FERRY_OK;
}

ferry_status make_plan(const ferry_model* m, const Options& o, Plan* plan) {
  if (!m) return fail(FERRY_INVALID_ARGUMENT, "model is NULL");
  if (o.max_batch == 0 || o.max_seq == 0) {
    return fail(FERRY_INVALID_ARGUMENT, "max_batch and max_seq must be >= 1 (got %zu, %zu)", o.max_batch,
                o.max_seq);
  }
  ferry_status st = choose_engines(m, o.backend, o.max_batch, o.max_seq, &plan->engines);
  if (st != FERRY_OK) return st;
  const Engines& e = plan->engines;
  bool simd_recurrent = false, simd_gru = false, simd_proj = false;
  for (uint32_t i = 0; i < m->num_layers; ++i) {
    const Layer& l = m->layers[i];
    if (e.layer[i] != Engine::kSimd || !op_is_recurrent(l.op)) continue;
    simd_recurrent = true;
    simd_gru = simd_gru || l.op == Op::kGru;
    simd_proj = simd_proj || l.h_out != l.hidden;
  }
  plan->chunk_steps = chunk_steps(o.max_batch, o.max_seq);

  size_t cursor = (sizeof(ferry_session) + kAlign - 1) / kAlign * kAlign;
  size_t state = 0, act = 0, rows = 0, scratch = 0, gates = 0, gates_rec = 0, h_new = 0, h_proj = 0;
  const size_t cols = max_gate_cols(m);
  bool ok = !__builtin_mul_overflow(o.max_batch, size_t{m->state_floats}, &state) &&
            !__builtin_mul_overflow(o.max_seq, o.max_batch, &rows) &&
            !__builtin_mul_overflow(rows, size_t{m->max_features}, &act) &&
            (!e.any_reference ||
             !__builtin_mul_overflow(o.max_batch, 2 * size_t{m->max_gate_rows} + m->max_hidden, &scratch));
  if (simd_recurrent) {
    ok = ok && mul3(o.max_batch, plan->chunk_steps, cols, &gates) &&
         !__builtin_mul_overflow(o.max_batch, size_t{m->max_hidden}, &h_new);
    if (simd_gru) ok = ok && !__builtin_mul_overflow(o.max_batch, cols, &gates_rec);
    if (simd_proj) ok = ok && !__builtin_mul_overflow(o.max_batch, size_t{m->max_h_out}, &h_proj);
  }
  ok = ok && add_region(&cursor, state, &plan->state);
  const size_t run_begin = cursor;
  ok = ok && add_region(&cursor, act, &plan->act_a);
  ok = ok && add_region(&cursor, act, &plan->act_b);
  if (scratch) ok = ok && add_region(&cursor, scratch, &plan->scratch);
  if (gates) ok = ok && add_region(&cursor, gates, &plan->gates);
  if (gates_rec) ok = ok && add_region(&cursor, gates_rec, &plan->gates_rec);
  if (h_new) ok = ok && add_region(&cursor, h_new, &plan->h_new);
  if (h_proj) ok = ok && add_region(&cursor, h_proj, &plan->h_proj);
  if (!ok) {
    return fail(FERRY_INVALID_ARGUMENT, "arena for max_batch %zu, max_seq %zu overflows size_t", o.max_batch,
                o.max_seq);
  }
  if (e.any_xnnpack) {
    // XNNPACK packs from a row-major copy made in the run buffers at init.
    size_t temp_end = run_begin;
    if (!add_region(&temp_end, xnn_temp_floats(m, e), &plan->xnn)) {
      return fail(FERRY_INVALID_ARGUMENT, "XNNPACK packing scratch overflows size_t");
    }
    if (temp_end > cursor) cursor = temp_end;
    if ((st = xnn_region_bytes(m, e, &plan->xnn_bytes)) != FERRY_OK) return st;
    plan->xnn = cursor;
    if (__builtin_add_overflow(cursor, plan->xnn_bytes, &cursor)) {
      return fail(FERRY_INVALID_ARGUMENT, "XNNPACK region overflows size_t");
    }
  }
  plan->total = cursor;
  return FERRY_OK;
}

// Runs a recurrent module on the reference kernels over time-major `in`
// [T][B][layer.in], writing [T][B][layer.out] into `out`. Multi-layer modules
// ping-pong between `out` and `in` (the module's input is dead once layer 0
// has read it); returns the buffer that holds the result.
float* reference_recurrent(ferry_session* s, const Layer& layer, float* in, float* out, size_t T, size_t B,
                           const int32_t* lengths) {
  const ferry_model* m = s->model;
  float* scratch = s->scratch;
  for (uint32_t k = 0; k < layer.num_layers; ++k) {
    const uint32_t in_w = k == 0 ? layer.in : layer.out;
    for (uint32_t d = 0; d < layer.dirs; ++d) {
      const uint32_t ci = k * layer.dirs + d;
      const Cell& cell = m->cells[layer.first_cell + ci];
      for (size_t step = 0; step < T; ++step) {
        const size_t t = d == 0 ? step : T - 1 - step;
        for (size_t b = 0; b < B; ++b) {
          float* y = out + (t * B + b) * layer.out + d * layer.h_out;
          const size_t len = lengths ? static_cast<size_t>(lengths[b]) : T;
          if (t >= len) {  // past this sample's end: no update, zero output
            memset(y, 0, layer.h_out * sizeof(float));
            continue;
          }
          const float* x = in + (t * B + b) * in_w;
          float* h = state_h(s, layer, ci, b);
          switch (layer.op) {
            case Op::kLstm:
              ref::f32_lstm_step(cell, layer.hidden, x, h, state_c(s, layer, ci, b), scratch);
              break;
            case Op::kGru:
              ref::f32_gru_step(cell, layer.hidden, x, h, scratch);
              break;
            default:
              ref::f32_rnn_step(cell, layer.hidden, layer.op == Op::kRnnRelu, x, h, scratch);
              break;
          }
          memcpy(y, h, layer.h_out * sizeof(float));
        }
      }
    }
    if (k + 1 < layer.num_layers) {
      float* t = in;
      in = out;
      out = t;
    }
  }
  return out;
}

ferry_status check_session(const ferry_session* s) {
  if (!s) return fail(FERRY_INVALID_ARGUMENT, "session is NULL");
  return FERRY_OK;
}

void swap(float** a, float** b) {
  float* t = *a;
  *a = *b;
  *b = t;
}

// The chain executor shared by ferry_run and ferry_step.
ferry_status execute(ferry_session* s, const float* input, size_t B, size_t T, const int32_t* lengths,
                     float* output, size_t capacity) {
  const ferry_model* m = s->model;
  if (!input || !output) return fail(FERRY_INVALID_ARGUMENT, "input or output is NULL");
  if (B == 0 || T == 0) return fail(FERRY_INVALID_ARGUMENT, "batch and seq must be >= 1");
  if (B > s->max_batch || T > s->max_seq) {
    return fail(FERRY_INVALID_STATE, "batch %zu x seq %zu exceeds the session's max_batch %zu x max_seq %zu", B,
                T, s->max_batch, s->max_seq);
  }
  if (!m->has_time_axis && T != 1) {
    return fail(FERRY_INVALID_ARGUMENT, "this model has no time axis: seq must be 1, got %zu", T);
  }
  if (lengths) {
    for (size_t b = 0; b < B; ++b) {
      if (lengths[b] < 1 || static_cast<size_t>(lengths[b]) > T) {
        return fail(FERRY_INVALID_ARGUMENT, "lengths[%zu] = %d, must be in 1..%zu", b,
                    static_cast<int>(lengths[b]), T);
      }
    }
  }
  const size_t out_floats = (m->output_is_sequence ? T : 1) * B * m->output_size;
  if (capacity < out_floats) {
    return fail(FERRY_INVALID_ARGUMENT, "output capacity %zu floats, the run needs %zu", capacity, out_floats);
  }

  // Input to time-major [T][B][I].
  const size_t I = m->input_size;
  float* cur = s->act[0];
  float* other = s->act[1];
  if (m->batch_first && T > 1) {
    for (size_t b = 0; b < B; ++b)
      for (size_t t = 0; t < T; ++t) memcpy(cur + (t * B + b) * I, input + (b * T + t) * I, I * sizeof(float));
  } else {
    memcpy(cur, input, T * B * I * sizeof(float));
  }

  size_t steps = T;  // time steps in `cur`; 1 after `last`
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& layer = m->layers[li];
    const bool fast = s->engines.layer[li] == Engine::kSimd;
    const size_t rows = steps * B;
    switch (layer.op) {
      case Op::kLstm: case Op::kGru: case Op::kRnnTanh: case Op::kRnnRelu: {
        float* result = fast ? fast_recurrent(s, layer, cur, other, steps, B, lengths)
                             : reference_recurrent(s, layer, cur, other, steps, B, lengths);
        other = result == other ? cur : other;
        cur = result;
        break;
      }
      case Op::kLast:
        for (size_t b = 0; b < B; ++b) {
          const size_t t = lengths ? static_cast<size_t>(lengths[b]) - 1 : steps - 1;
          memcpy(other + b * layer.in, cur + (t * B + b) * layer.in, layer.in * sizeof(float));
        }
        steps = 1;
        lengths = nullptr;
        swap(&cur, &other);
        break;
      case Op::kLinear:
        if (fast) {
          const ferry_status st = fast_linear(s, layer, li, cur, other, rows);
          if (st != FERRY_OK) return st;
        } else {
          for (size_t r = 0; r < rows; ++r) {
            ref::f32_gemv(layer.weight, cur + r * layer.in, layer.bias, other + r * layer.out);
          }
        }
        swap(&cur, &other);
        break;
      case Op::kRelu: case Op::kTanh: case Op::kSigmoid:
        if (fast) {
          fast_activation(s, layer.op, cur, rows * layer.in);
        } else if (layer.op == Op::kRelu) {
          ref::f32_relu(cur, static_cast<uint32_t>(rows * layer.in));
        } else if (layer.op == Op::kTanh) {
          ref::f32_tanh(cur, static_cast<uint32_t>(rows * layer.in));
        } else {
          ref::f32_sigmoid(cur, static_cast<uint32_t>(rows * layer.in));
        }
        break;
      case Op::kSoftmax:
        for (size_t r = 0; r < rows; ++r) ref::f32_softmax(cur + r * layer.in, layer.in);
        break;
      case Op::kIdentity: break;
    }
  }

  // Zero every output position past a sample's length (sequence output).
  const size_t F = m->output_size;
  if (lengths && m->output_is_sequence) {
    for (size_t b = 0; b < B; ++b)
      for (size_t t = static_cast<size_t>(lengths[b]); t < steps; ++t) memset(cur + (t * B + b) * F, 0, F * sizeof(float));
  }
  // Time-major [T][B][F] back to the model's layout.
  if (m->output_is_sequence && m->batch_first && steps > 1) {
    for (size_t b = 0; b < B; ++b)
      for (size_t t = 0; t < steps; ++t) memcpy(output + (b * steps + t) * F, cur + (t * B + b) * F, F * sizeof(float));
  } else {
    memcpy(output, cur, steps * B * F * sizeof(float));
  }
  return FERRY_OK;
}

}  // namespace
}  // namespace ferry

using namespace ferry;

extern "C" ferry_status ferry_arena_size(const ferry_model* model, size_t max_batch, size_t max_seq,
                                         size_t* bytes_out) {
  if (!bytes_out) return fail(FERRY_INVALID_ARGUMENT, "bytes_out is NULL");
  Options o;
  o.max_batch = max_batch;
  o.max_seq = max_seq;
  Plan plan;
  const ferry_status st = make_plan(model, o, &plan);
  if (st != FERRY_OK) return st;
  *bytes_out = plan.total;
  return FERRY_OK;
}

extern "C" ferry_status ferry_session_arena_size(const ferry_model* model, const ferry_session_options* options,
                                                 size_t* bytes_out) {
  if (!bytes_out) return fail(FERRY_INVALID_ARGUMENT, "bytes_out is NULL");
  Options o;
  ferry_status st = read_options(options, &o);
  if (st != FERRY_OK) return st;
  Plan plan;
  if ((st = make_plan(model, o, &plan)) != FERRY_OK) return st;
  *bytes_out = plan.total;
  return FERRY_OK;
}

extern "C" void ferry_session_options_init(ferry_session_options* options) {
  if (!options) return;
  options->struct_size = sizeof(ferry_session_options);
  options->max_batch = 1;
  options->max_seq = 1;
  options->backend = FERRY_BACKEND_AUTO;
  options->threadpool = nullptr;
}

extern "C" ferry_status ferry_session_init(const ferry_model* model, const ferry_session_options* options,
                                           void* arena, size_t arena_size, ferry_session** session_out) {
  clear_error();
  if (!session_out) return fail(FERRY_INVALID_ARGUMENT, "session_out is NULL");
  *session_out = nullptr;
  if (!model || !options) return fail(FERRY_INVALID_ARGUMENT, "model or options is NULL");
  Options o;
  ferry_status st = read_options(options, &o);
  if (st != FERRY_OK) return st;
  Plan plan;
  if ((st = make_plan(model, o, &plan)) != FERRY_OK) return st;
  if (!arena) return fail(FERRY_INVALID_ARGUMENT, "arena is NULL");
  if (reinterpret_cast<uintptr_t>(arena) % kAlign != 0) {
    return fail(FERRY_INVALID_ARGUMENT, "arena must be %zu-byte aligned", kAlign);
  }
  if (arena_size < plan.total) {
    return fail(FERRY_ARENA_TOO_SMALL, "arena is %zu bytes, the session needs %zu", arena_size, plan.total);
  }
  uint8_t* base = static_cast<uint8_t*>(arena);
  const auto region = [base](size_t offset) {
    return offset ? reinterpret_cast<float*>(base + offset) : nullptr;
  };
  ferry_session* s = new (base) ferry_session();
  s->model = model;
  s->max_batch = o.max_batch;
  s->max_seq = o.max_seq;
  s->threadpool = o.threadpool;
  s->threads = pool_threads(o.threadpool);
  s->engines = plan.engines;
  s->state = reinterpret_cast<float*>(base + plan.state);
  s->act[0] = region(plan.act_a);
  s->act[1] = region(plan.act_b);
  s->scratch = region(plan.scratch);
  s->gates = region(plan.gates);
  s->gates_rec = region(plan.gates_rec);
  s->h_new = region(plan.h_new);
  s->h_proj = region(plan.h_proj);
  s->chunk_steps = plan.chunk_steps;
  if (plan.engines.any_xnnpack) {
    // The run buffers are free until the first run: XNNPACK's row-major
    // staging copy and the auto probe use them.
    st = xnn_create_ops(s, base + plan.xnn, plan.xnn_bytes, s->act[0]);
    if (st != FERRY_OK) return st;
  }
  memset(s->state, 0, s->max_batch * model->state_floats * sizeof(float));
  *session_out = s;
  return FERRY_OK;
}

extern "C" ferry_status ferry_run(ferry_session* session, const float* input, size_t batch, size_t seq,
                                  const int32_t* lengths, float* output, size_t output_capacity) {
  const ferry_status st = check_session(session);
  if (st != FERRY_OK) return st;
  FlushDenormals flush;
  return execute(session, input, batch, seq, lengths, output, output_capacity);
}

extern "C" ferry_status ferry_step(ferry_session* session, const float* input, size_t batch, float* output,
                                   size_t output_capacity) {
  const ferry_status st = check_session(session);
  if (st != FERRY_OK) return st;
  if (!session->model->streamable) {
    return fail(FERRY_UNSUPPORTED,
                "ferry_step: the model has a bidirectional layer, which needs the whole sequence; use ferry_run");
  }
  // A step is a run of one time step: [B,1,I] and [1,B,I] are the same bytes.
  FlushDenormals flush;
  return execute(session, input, batch, 1, nullptr, output, output_capacity);
}

extern "C" ferry_status ferry_output_floats(const ferry_model* model, size_t batch, size_t seq,
                                            size_t* floats_out) {
  if (!model || !floats_out) return fail(FERRY_INVALID_ARGUMENT, "model or floats_out is NULL");
  size_t n = 0;
  if (__builtin_mul_overflow(model->output_is_sequence ? seq : 1, batch, &n) ||
      __builtin_mul_overflow(n, size_t{model->output_size}, &n)) {
    return fail(FERRY_INVALID_ARGUMENT, "output size overflows");
  }
  *floats_out = n;
  return FERRY_OK;
}

namespace {

// Copies between the session's internal state (max_batch rows) and the
// public packed layout (`batch` rows). to_user selects the direction.
ferry_status copy_state(ferry_session* s, size_t batch, float* user, size_t count, bool to_user) {
  const ferry_model* m = s->model;
  if (!user) return fail(FERRY_INVALID_ARGUMENT, "state buffer is NULL");
  if (batch == 0 || batch > s->max_batch) {
    return fail(FERRY_INVALID_ARGUMENT, "batch %zu, the session holds 1..%zu", batch, s->max_batch);
  }
  if (count < batch * m->state_floats) {
    return fail(FERRY_INVALID_ARGUMENT, "state buffer holds %zu floats, %zu needed", count,
                batch * size_t{m->state_floats});
  }
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& layer = m->layers[li];
    if (!op_is_recurrent(layer.op)) continue;
    float* u = user + layer.state_offset * batch;
    const uint32_t cells = layer.num_layers * layer.dirs;
    for (int part = 0; part < (layer.op == Op::kLstm ? 2 : 1); ++part) {
      const uint32_t width = part == 0 ? layer.h_out : layer.hidden;
      for (uint32_t c = 0; c < cells; ++c) {
        for (size_t b = 0; b < batch; ++b) {
          float* internal = part == 0 ? state_h(s, layer, c, b) : state_c(s, layer, c, b);
          if (to_user) memcpy(u, internal, width * sizeof(float));
          else memcpy(internal, u, width * sizeof(float));
          u += width;
        }
      }
    }
  }
  return FERRY_OK;
}

}  // namespace

extern "C" ferry_status ferry_state_get(const ferry_session* session, size_t batch, float* state_out,
                                        size_t capacity) {
  const ferry_status st = check_session(session);
  if (st != FERRY_OK) return st;
  return copy_state(const_cast<ferry_session*>(session), batch, state_out, capacity, true);
}

extern "C" ferry_status ferry_state_set(ferry_session* session, size_t batch, const float* state, size_t count) {
  const ferry_status st = check_session(session);
  if (st != FERRY_OK) return st;
  return copy_state(session, batch, const_cast<float*>(state), count, false);
}

extern "C" ferry_status ferry_state_reset(ferry_session* session) {
  const ferry_status st = check_session(session);
  if (st != FERRY_OK) return st;
  memset(session->state, 0, session->max_batch * session->model->state_floats * sizeof(float));
  return FERRY_OK;
}
