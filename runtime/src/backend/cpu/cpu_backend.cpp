// The CPU backend's entry (backend/backend.h): its arena plan, session
// layout and state.
//
// Arena layout (one plan, used both for the size and by init, so the size
// reported is exact):
//   [ferry_session][CpuSession][state][act A][act B][scratch][gates][gates_next][gates_rec][h_new][h_proj]
//   ...[wave_gates][qact][qscales]
//   ...[slots][patches][lone][program][xnnpack]
// each region FERRY_ALIGNMENT-aligned and present only when the session's
// kernel sets need it. `state` is the recurrent state of every recurrent
// layer for max_batch samples (persistent); act A/B are ping-pong activation
// buffers of max_seq*max_batch*max_features floats, time-major [T][B][F];
// `scratch` is the kPerSample sets' per-step gate values; gates..h_proj are
// the kPanels sets' (cpu_backend.h); wave_gates a wavefront's gate rows (on a pool
// of two or more threads, layer_wavefronts); qact / qscales the quantized A rows of
// i8 / i4 layers (kernels/kernel_set.h, "Activations"); `xnnpack` holds the XNNPACK operators
// and their packed weights. At init, before anything has run, the span from
// act A on doubles as XNNPACK's packing scratch (extended if it is larger).
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include <string.h>

#include <new>

#include "backend/cpu/cpu_backend.h"
#include "shared/arena_parts.h"
#include "common/status.h"
#include "platform/threads.h"

namespace ferry {
namespace cpu {
namespace {

// The control block's size: FERRY_SIZEOF_CPU_CONTROL (ferry/ferry_sizes.h),
// so that a model header's arena macros are exact at compile time. On 64-bit
// targets it is fixed at what the session of the format 1.1 runtime took
// beside its header (2112 bytes in all), so that arena sizes, and the
// streaming arena size recorded in model files, did not change when the
// backends were split out of the session; on 32-bit ones it grows with the
// handle's capacities, as the struct does.
constexpr size_t kCpuControlBytes = FERRY_SIZEOF_CPU_CONTROL;
static_assert(sizeof(CpuSession) <= kCpuControlBytes, "CpuSession outgrew FERRY_SIZEOF_CPU_CONTROL (ferry_sizes.h)");
// The other parts of the arena that hold pointers, as ferry_sizes.h says.
static_assert(sizeof(LoneStep) == FERRY_SIZEOF_LONE_STEP, "FERRY_SIZEOF_LONE_STEP (ferry_sizes.h) is sizeof(LoneStep)");
static_assert(sizeof(StepProgram) == FERRY_SIZEOF_STEP_PROGRAM,
              "FERRY_SIZEOF_STEP_PROGRAM (ferry_sizes.h) is sizeof(StepProgram)");
static_assert(sizeof(StepOp) == FERRY_SIZEOF_STEP_OP, "FERRY_SIZEOF_STEP_OP (ferry_sizes.h) is sizeof(StepOp)");
static_assert(sizeof(ferry_session) <= FERRY_SIZEOF_SESSION_HEAD, "ferry_session outgrew FERRY_SIZEOF_SESSION_HEAD");

// Byte offsets of a session's regions (0 = absent, except control and state).
struct Regions {
  size_t control = 0, state = 0, act_a = 0, act_b = 0, scratch = 0, gates = 0, gates_next = 0, gates_rec = 0,
         h_new = 0,
         h_proj = 0, wave_gates = 0, slots = 0, patches = 0, lone = 0, program = 0, qact = 0, qscales = 0;
  size_t q_rows = 0, q_ld = 0;
  size_t slot_floats = 0;
  size_t xnn = 0, xnn_bytes = 0;
  size_t chunk_steps = 1;
};

// Reserves `floats` (a*b*c) when non-zero; the offset, or 0 for none.
size_t optional_region(ArenaPlan* arena, size_t a, size_t b, size_t c = 1) {
  return a && b && c ? arena->reserve_floats(a, b, c) : 0;
}

ferry_status plan_regions(const ferry_model* m, const SessionConfig& o, const KernelChoice& c, ArenaPlan* arena,
                          Regions* r) {
  const size_t B = o.max_batch;
  r->chunk_steps = chunk_steps(B, o.max_seq);
  const size_t cols = max_gate_cols(m);
  r->control = arena->reserve(kCpuControlBytes);
  r->state = arena->reserve_floats(B, m->state_floats);
  const size_t run_begin = arena->end();
  const size_t steps = max_steps(m, o.max_seq);  // a Conv1d's padding may add steps
  r->act_a = arena->reserve_floats(steps, B, m->max_features);
  r->act_b = arena->reserve_floats(steps, B, m->max_features);
  if (c.any_per_sample) r->scratch = optional_region(arena, B, 2 * size_t{m->max_gate_rows} + m->max_hidden);
  if (c.any_panel_recurrent) {
    r->gates = optional_region(arena, B, r->chunk_steps, cols);
    if (c.any_project_overlap) r->gates_next = optional_region(arena, B, r->chunk_steps, cols);
    if (c.any_panel_gru) r->gates_rec = optional_region(arena, B, cols);
    r->h_new = optional_region(arena, B, m->max_hidden);
    if (c.any_panel_projection) r->h_proj = optional_region(arena, B, m->max_h_out);
  }
  if (c.wave_runners) {
    r->wave_gates = optional_region(arena, c.wave_runners * (c.wave_overlap ? 2 : 1), r->chunk_steps, cols);
  }
  quantized_rows_needed(m, c, B, B * r->chunk_steps, &r->q_rows, &r->q_ld);
  if (r->q_rows) {
    const size_t bands = c.wave_quantized ? c.wave_runners : 1;  // a wavefront's runners: one band each
    size_t bytes = 0;
    if (__builtin_mul_overflow(r->q_rows * bands, r->q_ld, &bytes)) {
      return fail(FERRY_INVALID_ARGUMENT, "quantized activations for max_batch %zu overflow size_t", o.max_batch);
    }
    r->qact = arena->reserve(bytes);
    r->qscales = arena->reserve_floats(r->q_rows, bands);
  }
  if (m->num_slots) {
    r->slot_floats = steps * B * m->max_features;  // cannot overflow: act_a has as many
    r->slots = optional_region(arena, m->num_slots, r->slot_floats);
  }
  if (m->max_conv_patch) r->patches = optional_region(arena, kConvRows, m->max_conv_patch);
  if (m->streamable && c.any_panel_recurrent) {
    r->lone = arena->reserve(FERRY_SIZEOF_LONE_STEP * m->num_cells);  // <= 128 cells: no overflow
  }
  if (m->streamable) r->program = arena->reserve(FERRY_SIZEOF_STEP_PROGRAM + FERRY_SIZEOF_STEP_OP * step_program_ops(m));
  if (arena->overflowed()) {
    return fail(FERRY_INVALID_ARGUMENT, "arena for max_batch %zu, max_seq %zu overflows size_t", o.max_batch,
                o.max_seq);
  }
  if (c.any_xnnpack) {
    // XNNPACK packs from a row-major copy made in the run buffers at init.
    const size_t temp = xnn_temp_floats(m, c);
    if (temp > SIZE_MAX / sizeof(float) || (arena->overlay(run_begin, temp * sizeof(float)), arena->overflowed())) {
      return fail(FERRY_INVALID_ARGUMENT, "XNNPACK packing scratch overflows size_t");
    }
    const ferry_status st = xnn_region_bytes(m, c, &r->xnn_bytes);
    if (st != FERRY_OK) return st;
    r->xnn = arena->reserve_last(r->xnn_bytes);
    if (arena->overflowed()) return fail(FERRY_INVALID_ARGUMENT, "XNNPACK region overflows size_t");
  }
  return FERRY_OK;
}

ferry_status probe(const ferry_model* m, const SessionConfig& config) {
  KernelChoice choice;
  return choose_kernels(m, config, &choice);
}

ferry_status plan(const ferry_model* m, const SessionConfig& config, ArenaPlan* arena, size_t* device_bytes) {
  KernelChoice choice;
  ferry_status st = choose_kernels(m, config, &choice);
  if (st != FERRY_OK) return st;
  Regions regions;
  if ((st = plan_regions(m, config, choice, arena, &regions)) != FERRY_OK) return st;
  *device_bytes = 0;
  return FERRY_OK;
}

// The whole arena of a session, as init lays it out: the kernel choice, the
// ferry_session header, then the backend's regions.
ferry_status lay_out(const ferry_model* m, const SessionConfig& config, KernelChoice* choice, ArenaPlan* arena,
                     Regions* r) {
  const ferry_status st = choose_kernels(m, config, choice);
  if (st != FERRY_OK) return st;
  arena->reserve(sizeof(ferry_session));
  return plan_regions(m, config, *choice, arena, r);
}

ferry_status init(ferry_session* s, const SessionConfig& config, uint8_t* base) {
  const ferry_model* m = s->model;
  KernelChoice choice;
  ArenaPlan arena;
  Regions r;
  ferry_status st = lay_out(m, config, &choice, &arena, &r);
  if (st != FERRY_OK) return st;
  const auto region = [base](size_t offset) {
    return offset ? reinterpret_cast<float*>(base + offset) : nullptr;
  };
  CpuSession* cpu = new (base + r.control) CpuSession();
  s->impl = cpu;
  cpu->threadpool = config.threadpool;
  cpu->threads = pool_threads(config.threadpool);
  cpu->kernels = choice.kernels;
  cpu->xnn_always = choice.xnn_always;
  cpu->state = reinterpret_cast<float*>(base + r.state);
  cpu->act[0] = region(r.act_a);
  cpu->act[1] = region(r.act_b);
  cpu->scratch = region(r.scratch);
  cpu->gates = region(r.gates);
  cpu->gates_next = region(r.gates_next);
  cpu->gates_rec = region(r.gates_rec);
  cpu->h_new = region(r.h_new);
  cpu->h_proj = region(r.h_proj);
  cpu->wave_gates = region(r.wave_gates);
  cpu->wave_runners = r.wave_gates ? choice.wave_runners : 0;
  cpu->wave_overlap = choice.wave_overlap;
  cpu->slots = region(r.slots);
  cpu->patches = region(r.patches);
  cpu->slot_floats = r.slot_floats;
  cpu->qact = r.qact ? reinterpret_cast<int8_t*>(base + r.qact) : nullptr;
  cpu->qscales = region(r.qscales);
  cpu->q_rows = r.q_rows;
  cpu->q_ld = r.q_ld;

  cpu->chunk_steps = r.chunk_steps;
  if (choice.any_xnnpack) {
    // The run buffers are free until the first run: XNNPACK's row-major
    // staging copy and the auto probe use them.
    st = xnn_create_ops(s, choice, base + r.xnn, r.xnn_bytes, cpu->act[0]);
    if (st != FERRY_OK) return st;
  }
  if (r.lone) {  // after XNNPACK's packing, whose scratch may overlay this region
    cpu->lone = reinterpret_cast<LoneStep*>(base + r.lone);
    prepare_lone_steps(s, choice);
  }
  if (r.program) {
    cpu->program = reinterpret_cast<StepProgram*>(base + r.program);
    if (!build_step_program(s, choice, cpu->program)) cpu->program = nullptr;
  }
  memset(cpu->state, 0, s->max_batch * m->state_floats * sizeof(float));
  return FERRY_OK;
}

ferry_status run(ferry_session* s, const RunCall& call) { return execute(s, call); }

ferry_status step(ferry_session* s, const RunCall& call) {
  const StepProgram* program = cpu_of(s)->program;
  if (call.batch == 1 && program) {
    if (program->direct) {
      run_direct_step(program->direct, call.input, call.output);
      return FERRY_OK;
    }
    run_step_program(s, call.input, call.output);
    return FERRY_OK;
  }
  return execute(s, call);
}

#if FERRY_PROFILER
// The profiled entry's run and step: the same paths, each layer reported
// (a program's direct cell goes through the program, which reports it).
ferry_status run_profiled(ferry_session* s, const RunCall& call) { return execute_profiled(s, call); }

ferry_status step_profiled(ferry_session* s, const RunCall& call) {
  if (call.batch == 1 && cpu_of(s)->program) {
    run_step_program_profiled(s, call.input, call.output);
    return FERRY_OK;
  }
  return execute_profiled(s, call);
}
#endif

// Copies between the session's internal state (max_batch rows) and the
// public packed layout (`batch` rows). to_user selects the direction.
void copy_state(const ferry_session* s, size_t batch, float* user, bool to_user) {
  const ferry_model* m = s->model;
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& layer = m->layers[li];
    if (!layer.state_floats) continue;
    float* u = user + layer.state_offset * batch;
    if (!op_is_recurrent(layer.op)) {  // Conv1d history, pooling sums: one block per sample
      float* internal = cpu_of(s)->state + layer.state_offset * s->max_batch;
      if (to_user) memcpy(u, internal, batch * layer.state_floats * sizeof(float));
      else memcpy(internal, u, batch * layer.state_floats * sizeof(float));
      continue;
    }
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
}

void state_get(const ferry_session* s, size_t batch, float* state) { copy_state(s, batch, state, true); }

void state_set(ferry_session* s, size_t batch, const float* state) {
  copy_state(s, batch, const_cast<float*>(state), false);
}

void state_reset(ferry_session* s) {
  memset(cpu_of(s)->state, 0, s->max_batch * s->model->state_floats * sizeof(float));
}

// The Backend entry arena_parts (shared/arena_parts.h).
ferry_status arena_parts(const ferry_model* m, const SessionConfig& config, ArenaParts* out) {
  KernelChoice choice;
  ArenaPlan arena;
  Regions r;
  const ferry_status st = lay_out(m, config, &choice, &arena, &r);
  if (st != FERRY_OK) return st;
  if (choice.any_xnnpack) {
    return fail(FERRY_UNSUPPORTED, "an XNNPACK session's arena has no portable figure (XNNPACK sizes its own region)");
  }
  out->total = arena.end();
  out->lone_cells = r.lone ? m->num_cells : 0;
  out->program_ops = r.program ? step_program_ops(m) : 0;
  const size_t pointers = FERRY_ARENA_BYTES_CPU(size_t{0}, size_t{out->lone_cells}, out->program_ops);
  out->portable = out->total - pointers;  // the regions in between, each a multiple of 64 bytes
  // The regions in the order plan_regions lays them out (offset 0: absent,
  // but for the session head), each up to the next present one.
  const struct {
    const char* name;
    size_t offset;
    bool pointers;
  } named[] = {
      {"session head", 0, true},          {"control block", r.control, true},
      {"state", r.state, false},          {"activations (A)", r.act_a, false},
      {"activations (B)", r.act_b, false}, {"gate scratch", r.scratch, false},
      {"gates", r.gates, false},          {"gates (next chunk)", r.gates_next, false},
      {"gates (GRU recurrent)", r.gates_rec, false}, {"hidden (new)", r.h_new, false},
      {"projection", r.h_proj, false},    {"wavefront gates", r.wave_gates, false},
      {"quantized activations", r.qact, false}, {"quantized scales", r.qscales, false},
      {"residual slots", r.slots, false}, {"conv patches", r.patches, false},
      {"lone steps", r.lone, true},       {"step program", r.program, true},
  };
  static_assert(sizeof(named) / sizeof(named[0]) <= kMaxArenaRegions, "ArenaParts::regions");
  out->region_count = 0;
  size_t offsets[kMaxArenaRegions];
  for (const auto& n : named) {
    if (n.offset == 0 && n.name != named[0].name) continue;
    offsets[out->region_count] = n.offset;
    out->regions[out->region_count].name = n.name;
    out->regions[out->region_count].pointers = n.pointers;
    ++out->region_count;
  }
  for (uint32_t i = 0; i < out->region_count; ++i) {
    out->regions[i].bytes = (i + 1 < out->region_count ? offsets[i + 1] : out->total) - offsets[i];
  }
  return FERRY_OK;
}

}  // namespace

#if FERRY_PROFILER
const Backend kCpuBackend = {
    "cpu", probe, plan, init, run, step, state_get, state_set, state_reset, nullptr, nullptr, arena_parts,
    &kCpuProfiledBackend,
};
const Backend kCpuProfiledBackend = {
    "cpu", probe, plan, init, run_profiled, step_profiled, state_get, state_set, state_reset, nullptr, nullptr,
    arena_parts, &kCpuProfiledBackend,
};
#else
const Backend kCpuBackend = {
    "cpu", probe, plan, init, run, step, state_get, state_set, state_reset, nullptr, nullptr, arena_parts, nullptr,
};
#endif

}  // namespace cpu
}  // namespace ferry
