// Sessions: the arena plan, the chain executor, streaming and state.
//
// Arena layout (one plan, used both by ferry_arena_size and by
// ferry_session_init, so the size it reports is exact):
//   [ferry_session][state][act A][act B][scratch]
// each region starting FERRY_ALIGNMENT-aligned. `state` is the recurrent
// state of every recurrent layer for max_batch samples (persistent);
// act A/B are ping-pong activation buffers of max_seq*max_batch*max_features
// floats in time-major order [T][B][F]; `scratch` holds per-step gate values.
#include <string.h>

#include <new>

#include "kernels/reference/reference.h"
#include "model.h"
#include "status.h"

struct ferry_session {
  const ferry_model* model;
  size_t max_batch;
  size_t max_seq;
  float* state;     // per layer: h [cells][max_batch][h_out], then c [cells][max_batch][H]
  float* act[2];
  float* scratch;
};

namespace ferry {
namespace {

constexpr size_t kAlign = FERRY_ALIGNMENT;

struct Plan {
  size_t state = 0, act_a = 0, act_b = 0, scratch = 0, total = 0;  // byte offsets / total
};

bool add_region(size_t* cursor, size_t floats, size_t* offset_out) {
  size_t bytes = 0, end = 0;
  if (__builtin_mul_overflow(floats, sizeof(float), &bytes)) return false;
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  *offset_out = *cursor;
  if (__builtin_add_overflow(*cursor, bytes, &end)) return false;
  *cursor = end;
  return true;
}

ferry_status make_plan(const ferry_model* m, size_t max_batch, size_t max_seq, Plan* plan) {
  if (!m) return fail(FERRY_INVALID_ARGUMENT, "model is NULL");
  if (max_batch == 0 || max_seq == 0) {
    return fail(FERRY_INVALID_ARGUMENT, "max_batch and max_seq must be >= 1 (got %zu, %zu)",
                max_batch, max_seq);
  }
  size_t cursor = (sizeof(ferry_session) + kAlign - 1) / kAlign * kAlign;
  size_t state = 0, act = 0, rows = 0, scratch = 0;
  bool ok = !__builtin_mul_overflow(max_batch, size_t{m->state_floats}, &state) &&
            !__builtin_mul_overflow(max_seq, max_batch, &rows) &&
            !__builtin_mul_overflow(rows, size_t{m->max_features}, &act) &&
            !__builtin_mul_overflow(max_batch,
                                    2 * size_t{m->max_gate_rows} + m->max_hidden, &scratch);
  ok = ok && add_region(&cursor, state, &plan->state);
  ok = ok && add_region(&cursor, act, &plan->act_a);
  ok = ok && add_region(&cursor, act, &plan->act_b);
  ok = ok && add_region(&cursor, scratch, &plan->scratch);
  if (!ok) {
    return fail(FERRY_INVALID_ARGUMENT, "arena for max_batch %zu, max_seq %zu overflows size_t",
                max_batch, max_seq);
  }
  plan->total = cursor;
  return FERRY_OK;
}

// Hidden state of cell `c` of `layer`, row `b` (internal layout, max_batch rows).
float* state_h(ferry_session* s, const Layer& layer, uint32_t c, size_t b) {
  float* base = s->state + layer.state_offset * s->max_batch;
  return base + (c * s->max_batch + b) * layer.h_out;
}

float* state_c(ferry_session* s, const Layer& layer, uint32_t c, size_t b) {
  const uint32_t cells = layer.num_layers * layer.dirs;
  float* base = s->state + layer.state_offset * s->max_batch + cells * s->max_batch * layer.h_out;
  return base + (c * s->max_batch + b) * layer.hidden;
}

// Runs a recurrent module over time-major `in` [T][B][layer.in], writing
// [T][B][layer.out] into `out`. Multi-layer modules ping-pong between `out`
// and `in` (the module's input is dead once layer 0 has read it); returns the
// buffer that holds the result.
float* run_recurrent(ferry_session* s, const Layer& layer, float* in, float* out, size_t T,
                     size_t B, const int32_t* lengths) {
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
              ref::f32_lstm_step(cell, layer.hidden, layer.h_out, x, h, state_c(s, layer, ci, b),
                                 scratch);
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

// The chain executor shared by ferry_run and ferry_step.
ferry_status execute(ferry_session* s, const float* input, size_t B, size_t T,
                     const int32_t* lengths, float* output, size_t capacity) {
  const ferry_model* m = s->model;
  if (!input || !output) return fail(FERRY_INVALID_ARGUMENT, "input or output is NULL");
  if (B == 0 || T == 0) return fail(FERRY_INVALID_ARGUMENT, "batch and seq must be >= 1");
  if (B > s->max_batch || T > s->max_seq) {
    return fail(FERRY_INVALID_STATE,
                "batch %zu x seq %zu exceeds the session's max_batch %zu x max_seq %zu", B, T,
                s->max_batch, s->max_seq);
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
    return fail(FERRY_INVALID_ARGUMENT, "output capacity %zu floats, the run needs %zu", capacity,
                out_floats);
  }

  // Input to time-major [T][B][I].
  const size_t I = m->input_size;
  float* cur = s->act[0];
  float* other = s->act[1];
  if (m->batch_first && T > 1) {
    for (size_t b = 0; b < B; ++b)
      for (size_t t = 0; t < T; ++t)
        memcpy(cur + (t * B + b) * I, input + (b * T + t) * I, I * sizeof(float));
  } else {
    memcpy(cur, input, T * B * I * sizeof(float));
  }

  size_t steps = T;  // time steps in `cur`; 1 after `last`
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& layer = m->layers[li];
    const size_t rows = steps * B;
    switch (layer.op) {
      case Op::kLstm: case Op::kGru: case Op::kRnnTanh: case Op::kRnnRelu: {
        float* result = run_recurrent(s, layer, cur, other, steps, B, lengths);
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
        {
          float* t = cur;
          cur = other;
          other = t;
        }
        break;
      case Op::kLinear:
        for (size_t r = 0; r < rows; ++r) {
          ref::f32_gemv(layer.weight, layer.out, layer.in, cur + r * layer.in, layer.bias,
                        other + r * layer.out);
        }
        {
          float* t = cur;
          cur = other;
          other = t;
        }
        break;
      case Op::kRelu: ref::f32_relu(cur, static_cast<uint32_t>(rows * layer.in)); break;
      case Op::kTanh: ref::f32_tanh(cur, static_cast<uint32_t>(rows * layer.in)); break;
      case Op::kSigmoid: ref::f32_sigmoid(cur, static_cast<uint32_t>(rows * layer.in)); break;
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
      for (size_t t = static_cast<size_t>(lengths[b]); t < steps; ++t)
        memset(cur + (t * B + b) * F, 0, F * sizeof(float));
  }
  // Time-major [T][B][F] back to the model's layout.
  if (m->output_is_sequence && m->batch_first && steps > 1) {
    for (size_t b = 0; b < B; ++b)
      for (size_t t = 0; t < steps; ++t)
        memcpy(output + (b * steps + t) * F, cur + (t * B + b) * F, F * sizeof(float));
  } else {
    memcpy(output, cur, steps * B * F * sizeof(float));
  }
  return FERRY_OK;
}

}  // namespace
}  // namespace ferry

using namespace ferry;

extern "C" ferry_status ferry_arena_size(const ferry_model* model, size_t max_batch,
                                         size_t max_seq, size_t* bytes_out) {
  if (!bytes_out) return fail(FERRY_INVALID_ARGUMENT, "bytes_out is NULL");
  Plan plan;
  const ferry_status st = make_plan(model, max_batch, max_seq, &plan);
  if (st != FERRY_OK) return st;
  *bytes_out = plan.total;
  return FERRY_OK;
}

extern "C" void ferry_session_options_init(ferry_session_options* options) {
  if (!options) return;
  options->struct_size = sizeof(ferry_session_options);
  options->max_batch = 1;
  options->max_seq = 1;
  options->backend = FERRY_BACKEND_AUTO;
}

extern "C" ferry_status ferry_session_init(const ferry_model* model,
                                           const ferry_session_options* options, void* arena,
                                           size_t arena_size, ferry_session** session_out) {
  clear_error();
  if (!session_out) return fail(FERRY_INVALID_ARGUMENT, "session_out is NULL");
  *session_out = nullptr;
  if (!model || !options) return fail(FERRY_INVALID_ARGUMENT, "model or options is NULL");
  if (options->struct_size < sizeof(ferry_session_options)) {
    return fail(FERRY_INVALID_ARGUMENT,
                "options->struct_size is %zu: call ferry_session_options_init first",
                options->struct_size);
  }
  switch (options->backend) {
    case FERRY_BACKEND_AUTO: case FERRY_BACKEND_REFERENCE: break;
    case FERRY_BACKEND_SIMD: case FERRY_BACKEND_XNNPACK: case FERRY_BACKEND_CUDA:
      return fail(FERRY_UNSUPPORTED, "backend %d is not built into this runtime",
                  static_cast<int>(options->backend));
    default:
      return fail(FERRY_INVALID_ARGUMENT, "backend %d is unknown", static_cast<int>(options->backend));
  }
  Plan plan;
  const ferry_status st = make_plan(model, options->max_batch, options->max_seq, &plan);
  if (st != FERRY_OK) return st;
  if (!arena) return fail(FERRY_INVALID_ARGUMENT, "arena is NULL");
  if (reinterpret_cast<uintptr_t>(arena) % kAlign != 0) {
    return fail(FERRY_INVALID_ARGUMENT, "arena must be %zu-byte aligned", kAlign);
  }
  if (arena_size < plan.total) {
    return fail(FERRY_ARENA_TOO_SMALL, "arena is %zu bytes, the session needs %zu", arena_size,
                plan.total);
  }
  uint8_t* base = static_cast<uint8_t*>(arena);
  ferry_session* s = new (base) ferry_session();
  s->model = model;
  s->max_batch = options->max_batch;
  s->max_seq = options->max_seq;
  s->state = reinterpret_cast<float*>(base + plan.state);
  s->act[0] = reinterpret_cast<float*>(base + plan.act_a);
  s->act[1] = reinterpret_cast<float*>(base + plan.act_b);
  s->scratch = reinterpret_cast<float*>(base + plan.scratch);
  memset(s->state, 0, s->max_batch * model->state_floats * sizeof(float));
  *session_out = s;
  return FERRY_OK;
}

extern "C" ferry_status ferry_run(ferry_session* session, const float* input, size_t batch,
                                  size_t seq, const int32_t* lengths, float* output,
                                  size_t output_capacity) {
  const ferry_status st = check_session(session);
  if (st != FERRY_OK) return st;
  return execute(session, input, batch, seq, lengths, output, output_capacity);
}

extern "C" ferry_status ferry_step(ferry_session* session, const float* input, size_t batch,
                                   float* output, size_t output_capacity) {
  const ferry_status st = check_session(session);
  if (st != FERRY_OK) return st;
  if (!session->model->streamable) {
    return fail(FERRY_UNSUPPORTED,
                "ferry_step: the model has a bidirectional layer, which needs the whole sequence; "
                "use ferry_run");
  }
  // A step is a run of one time step: [B,1,I] and [1,B,I] are the same bytes.
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

extern "C" ferry_status ferry_state_get(const ferry_session* session, size_t batch,
                                        float* state_out, size_t capacity) {
  const ferry_status st = check_session(session);
  if (st != FERRY_OK) return st;
  return copy_state(const_cast<ferry_session*>(session), batch, state_out, capacity, true);
}

extern "C" ferry_status ferry_state_set(ferry_session* session, size_t batch, const float* state,
                                        size_t count) {
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
