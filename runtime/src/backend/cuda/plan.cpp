#include "backend/cuda/plan.h"

#include <string.h>

#include "common/status.h"

namespace ferry {
namespace cuda {
namespace {

static_assert(kDescCells == static_cast<int>(kMaxCells), "CallDesc holds one entry per cell");

// Regions of the device block: each kDeviceAlign-aligned, overflow-checked.
class DevicePlanner {
 public:
  size_t reserve(size_t bytes) {
    const size_t offset = end_;
    if (bytes > SIZE_MAX - (kDeviceAlign - 1)) {
      overflowed_ = true;
      return offset;
    }
    const size_t rounded = (bytes + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign;
    if (__builtin_add_overflow(end_, rounded, &end_)) overflowed_ = true;
    return offset;
  }
  size_t reserve_floats(size_t a, size_t b = 1, size_t c = 1) {
    size_t n = 0;
    if (__builtin_mul_overflow(a, b, &n) || __builtin_mul_overflow(n, c, &n) ||
        __builtin_mul_overflow(n, sizeof(float), &n)) {
      overflowed_ = true;
      return end_;
    }
    return reserve(n);
  }
  size_t end() const { return end_; }
  bool overflowed() const { return overflowed_; }

 private:
  size_t end_ = 0;
  bool overflowed_ = false;
};

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static_assert(static_cast<int>(DType::kF32) == kWeightF32 && static_cast<int>(DType::kF16) == kWeightF16 &&
                  static_cast<int>(DType::kI8) == kWeightI8 && static_cast<int>(DType::kI4) == kWeightI4,
              "the kernels number the weight types as ferry::DType does");

// Every span of the model's bytes a kernel reads: each weight tensor (a
// Conv1d's `groups` matrices one after the other) and the scales of the
// quantized ones.
template <typename Fn>
void for_each_extent(const ferry_model* m, Fn fn) {
  const auto weight = [&fn](const Weight& w, uint32_t groups, uint64_t group_stride) {
    if (!w) return;
    const uint64_t element = w.dtype == DType::kF32 ? 4 : w.dtype == DType::kF16 ? 2 : 1;
    fn(w.data, w.bytes() + uint64_t{groups - 1} * group_stride * element);
    if (w.dtype == DType::kI8 && w.scales) fn(w.scales, layout::row_scale_elements(w.gates, w.units) * 4);
    if (w.dtype == DType::kI4 && w.group_scales) {
      fn(w.group_scales, layout::group_scale_elements(w.gates, w.units, w.cols) * 2);
    }
  };
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& l = m->layers[li];
    if (op_is_recurrent(l.op)) {
      for (uint32_t c = 0; c < l.num_layers * l.dirs; ++c) {
        const Cell& cell = m->cells[l.first_cell + c];
        for (const Weight* w : {&cell.w_ih, &cell.w_hh, &cell.bias, &cell.b_hn, &cell.w_hr}) weight(*w, 1, 0);
      }
    } else if (l.op == Op::kConv1d) {
      weight(l.weight, l.groups, l.group_stride);
      weight(l.bias, l.groups, l.bias_group_stride);
    } else {
      weight(l.weight, 1, 0);  // Linear, BatchNorm, LayerNorm, PReLU, Embedding (or none)
      weight(l.bias, 1, 0);
    }
  }
}

// The K of every product whose A rows the GEMM reads quantized (the input
// projections and Linear layers of int8 / int4 layers): fn(type, K).
template <typename Fn>
void for_each_quantized_gemm(const ferry_model* m, Fn fn) {
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& l = m->layers[li];
    const int32_t type = static_cast<int32_t>(l.dtype);
    if (!quantizes_activations(type)) continue;
    if (l.op == Op::kLinear) fn(type, l.in);
    if (op_is_recurrent(l.op)) {
      fn(type, l.in);
      if (l.num_layers > 1) fn(type, l.out);
    }
  }
}

uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }
uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }
uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }
size_t clamp_tile(size_t tile, size_t max_batch) { return tile < max_batch ? tile : max_batch; }

}  // namespace

void weight_span(const ferry_model* m, size_t* begin, size_t* bytes) {
  const uint8_t* lo = nullptr;
  const uint8_t* hi = nullptr;
  for_each_extent(m, [&](const void* data, uint64_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    if (!lo || p < lo) lo = p;
    if (!hi || p + n > hi) hi = p + n;
  });
  *begin = lo ? static_cast<size_t>(lo - m->bytes) : 0;
  *bytes = lo ? static_cast<size_t>(hi - lo) : 0;
}

ferry_status plan_device(const ferry_model* m, size_t max_batch, size_t max_seq, DeviceLayout* out,
                         CellDevice* cells) {
  *out = DeviceLayout();
  DevicePlanner p;
  weight_span(m, &out->weights_begin, &out->weights_bytes);
  if (out->weights_bytes) p.reserve(out->weights_bytes);  // at offset 0
  const size_t steps = max_steps(m, max_seq);  // a Conv1d's padding may add steps
  out->max_steps = steps;
  uint32_t max_cols = 0, max_proj_hidden = 0;
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& l = m->layers[li];
    if (!op_is_recurrent(l.op)) continue;
    const uint32_t cols = layout::gate_row_floats(l.gates, l.hidden);
    if (cols > max_cols) max_cols = cols;
    if (l.h_out != l.hidden && l.hidden > max_proj_hidden) max_proj_hidden = l.hidden;
    for (uint32_t c = 0; c < l.num_layers * l.dirs; ++c) {
      CellDevice d;
      d.h[0] = p.reserve_floats(max_batch, l.h_out);
      d.h[1] = p.reserve_floats(max_batch, l.h_out);
      if (l.op == Op::kLstm) d.c = p.reserve_floats(max_batch, l.hidden);
      if (cells) cells[l.first_cell + c] = d;
    }
  }
  if (m->num_cells) {
    out->counters = p.reserve(size_t{m->num_cells} * 4 * sizeof(int32_t));
    if (cells) {
      for (uint32_t c = 0; c < m->num_cells; ++c) cells[c].counter = out->counters + size_t{c} * 4 * sizeof(int32_t);
    }
  }
  if (max_cols) {
    const size_t before = p.end();
    out->xproj = p.reserve_floats(steps, max_batch, max_cols);
    out->xproj_bytes = p.end() - before;
  }
  if (max_proj_hidden) {
    const size_t before = p.end();
    out->h_full = p.reserve_floats(max_batch, max_proj_hidden);
    out->h_full_bytes = p.end() - before;
  }
  size_t ldq = 0;
  for_each_quantized_gemm(m, [&ldq](int32_t type, uint32_t k) {
    const size_t bytes = activation_row_bytes(type, k);
    if (bytes > ldq) ldq = bytes;
  });
  bool overflow = false;
  if (ldq) {
    out->qact_ld = ldq;
    overflow = __builtin_mul_overflow(steps, max_batch, &out->qact_rows);
    size_t bytes = 0;
    overflow = overflow || __builtin_mul_overflow(out->qact_rows, ldq, &bytes);
    const size_t before = p.end();
    out->qact = p.reserve(bytes);
    out->qact_bytes = p.end() - before;
    out->qscales = p.reserve_floats(out->qact_rows);
  }
  bool layer_state = false;
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    layer_state = layer_state || (!op_is_recurrent(m->layers[li].op) && m->layers[li].state_floats);
  }
  if (layer_state) out->layer_state = p.reserve_floats(max_batch, m->state_floats);
  if (m->num_slots) {
    overflow = overflow || __builtin_mul_overflow(steps, max_batch, &out->slot_floats) ||
               __builtin_mul_overflow(out->slot_floats, size_t{m->max_features}, &out->slot_floats);
    out->slots = p.reserve_floats(m->num_slots, out->slot_floats);
  }
  {
    const size_t before = p.end();
    out->desc = p.reserve(sizeof(CallDesc) + max_batch * sizeof(int32_t));
    out->desc_bytes = p.end() - before;
  }
  {
    const size_t before = p.end();
    out->act[0] = p.reserve_floats(steps, max_batch, m->max_features);
    out->act_bytes = p.end() - before;
    out->act[1] = p.reserve_floats(steps, max_batch, m->max_features);
  }
  if (overflow || p.overflowed() || max_batch > SIZE_MAX / sizeof(int32_t)) {
    return fail(FERRY_INVALID_ARGUMENT, "cuda: device memory for max_batch %zu, max_seq %zu overflows size_t",
                max_batch, max_seq);
  }
  out->total = p.end();
  return FERRY_OK;
}

ferry_status plan_host(const ferry_model* m, size_t max_batch, size_t max_seq, const DeviceLayout& dev,
                       size_t page_size, size_t control_bytes, size_t cell_bytes, ArenaPlan* arena,
                       HostLayout* out) {
  *out = HostLayout();
  out->control = arena->reserve(control_bytes);
  out->cells = m->num_cells ? arena->reserve(cell_bytes * m->num_cells) : 0;
  size_t in_floats = 0, out_floats = 0;
  if (__builtin_mul_overflow(max_seq, max_batch, &in_floats) ||
      __builtin_mul_overflow(in_floats, size_t{m->input_size}, &in_floats) ||
      __builtin_mul_overflow(m->output_is_sequence ? max_steps(m, max_seq) : 1, max_batch, &out_floats) ||
      __builtin_mul_overflow(out_floats, size_t{m->output_size}, &out_floats) || in_floats > SIZE_MAX / 8 ||
      out_floats > SIZE_MAX / 8 || page_size == 0 || (page_size & (page_size - 1)) != 0) {
    return fail(FERRY_INVALID_ARGUMENT, "cuda: staging for max_batch %zu, max_seq %zu overflows size_t", max_batch,
                max_seq);
  }
  out->input = dev.desc_bytes;
  out->input_bytes = round_up(in_floats * sizeof(float), kDeviceAlign);
  out->output = out->input + out->input_bytes;
  out->output_bytes = round_up(out_floats * sizeof(float), kDeviceAlign);
  out->staging_bytes = out->output + out->output_bytes;
  if (out->staging_bytes > SIZE_MAX / 2 - 2 * page_size) {
    return fail(FERRY_INVALID_ARGUMENT, "cuda: staging for max_batch %zu, max_seq %zu overflows size_t", max_batch,
                max_seq);
  }
  out->staging_reserved = round_up(out->staging_bytes, page_size) + page_size;
  out->staging_region = arena->reserve(out->staging_reserved);
  if (arena->overflowed()) {
    return fail(FERRY_INVALID_ARGUMENT, "cuda: arena for max_batch %zu, max_seq %zu overflows size_t", max_batch,
                max_seq);
  }
  return FERRY_OK;
}

uint8_t* staging_in_region(uint8_t* region, size_t page_size) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(region);
  return region + (round_up(p, page_size) - p);
}

CellShape cell_shape(const Layer& layer) {
  CellShape s;
  s.op = layer.op == Op::kLstm ? kCellLstm : layer.op == Op::kGru ? kCellGru
       : layer.op == Op::kRnnRelu ? kCellRnnRelu : kCellRnnTanh;
  s.gates = layer.gates;
  s.hidden = layer.hidden;
  s.h_out = layer.h_out;
  s.type = static_cast<int32_t>(layer.dtype);
  return s;
}

size_t block_shared_limit(const DeviceCaps& caps) {
  size_t limit = caps.shared_per_block_optin;
  if (caps.shared_per_sm >= 1024 && caps.shared_per_sm - 1024 < limit) limit = caps.shared_per_sm - 1024;
  return limit;
}

RecurrentParams with_decomposition(const RecurrentParams& p, const Decomposition& d) {
  RecurrentParams q = p;
  q.panels_per_block = static_cast<int32_t>(d.panels_per_block);
  q.batch_tile = static_cast<int32_t>(d.batch_tile);
  q.proj_panels_per_block = static_cast<int32_t>(d.proj_panels_per_block);
  q.proj_batch_tile = static_cast<int32_t>(d.proj_batch_tile);
  q.batch_slices = static_cast<int32_t>(d.batch_slices);
  return q;
}

ferry_status choose_recurrence(const CellShape& shape, size_t max_batch, const DeviceCaps& caps, Recurrence* out) {
  *out = Recurrence();
  const uint32_t G = shape.gates, H = shape.hidden, P = shape.h_out;
  const int32_t type = shape.type;
  const bool projection = P != H;
  const uint32_t panels = panels_of(H), proj_panels = panels_of(P);
  const uint32_t splits = k_splits_for(P), proj_splits = k_splits_for(H);
  const size_t batch = max_batch < (size_t{1} << 20) ? max_batch : (size_t{1} << 20);
  const uint32_t groups = static_cast<uint32_t>((batch + kBatchGroup - 1) / kBatchGroup);
  // Panels per block: enough warp items (vector quads x column splits x
  // batch groups) to keep the block's 8 warps busy, no more, so that small
  // cells use few blocks.
  const uint32_t pref = max_u32(1, kWarps / max_u32(1, splits * groups));
  const uint32_t proj_pref = max_u32(1, kWarps * kVectorsPerWarp / max_u32(1, proj_splits * groups));
  const size_t step_budget = kStepSharedBytes - kPhaseAlignSpare;

  Decomposition& st = out->step;
  st.panels_per_block = min_u32(pref, panels);
  st.blocks = ceil_div(panels, st.panels_per_block);
  const size_t per_sample_a = phase_sample_bytes(type, P, st.panels_per_block * G * 8);
  st.batch_tile = static_cast<uint32_t>(clamp_tile(step_budget / per_sample_a, max_batch));
  st.shared_a = phase_a_bytes(type, G, P, st.panels_per_block, st.batch_tile);
  if (st.batch_tile == 0) {
    return fail(FERRY_UNSUPPORTED,
                "cuda: a recurrent cell with hidden state of %u floats needs %zu bytes of shared memory per sample, "
                "more than the %zu a step kernel uses",
                P, per_sample_a, kStepSharedBytes);
  }
  if (projection) {
    st.proj_panels_per_block = min_u32(proj_pref, proj_panels);
    st.proj_blocks = ceil_div(proj_panels, st.proj_panels_per_block);
    const size_t per_sample_b = phase_sample_bytes(type, H, st.proj_panels_per_block * 8);
    st.proj_batch_tile = static_cast<uint32_t>(clamp_tile(step_budget / per_sample_b, max_batch));
    st.shared_b = phase_b_bytes(type, H, st.proj_panels_per_block, st.proj_batch_tile);
    if (st.proj_batch_tile == 0) {
      return fail(FERRY_UNSUPPORTED, "cuda: an LSTM projection of hidden size %u needs more than the %zu bytes of "
                  "shared memory a step kernel uses", H, kStepSharedBytes);
    }
  }

  // Persistent: at most one block per SM, each holding its W_hh panels.
  if (!caps.cooperative_launch || caps.sm_count == 0) {
    out->reason = "the device has no cooperative launch";
    return FERRY_OK;
  }
  Decomposition& rs = out->resident;
  rs.panels_per_block = max_u32(ceil_div(panels, caps.sm_count), st.panels_per_block);
  rs.blocks = ceil_div(panels, rs.panels_per_block);
  // SMs left over: split the batch, kBatchGroup samples a slice at least
  // (W3 on an H100: 32 panel groups x 4 slices of 16 samples, 128 of 132
  // SMs instead of 32). Each slice's blocks hold the same panels.
  rs.batch_slices = max_u32(1, min_u32(caps.sm_count / rs.blocks, groups));
  rs.blocks *= rs.batch_slices;
  const size_t weights = align16(size_t{rs.panels_per_block} * panel_bytes(type, G, P));
  const size_t limit = block_shared_limit(caps);
  if (weights + kPhaseAlignSpare >= limit) {
    out->reason = "W_hh does not fit in the shared memory of one block per SM";
    return FERRY_OK;
  }
  const size_t budget = limit - weights - kPhaseAlignSpare;
  rs.batch_tile = static_cast<uint32_t>(
      clamp_tile(budget / phase_sample_bytes(type, P, rs.panels_per_block * G * 8), max_batch));
  rs.shared_a = phase_a_bytes(type, G, P, rs.panels_per_block, rs.batch_tile);
  size_t work = rs.shared_a;
  if (projection) {
    rs.proj_blocks = rs.blocks;
    rs.proj_panels_per_block = ceil_div(proj_panels, rs.blocks);
    rs.proj_batch_tile = static_cast<uint32_t>(
        clamp_tile(budget / phase_sample_bytes(type, H, rs.proj_panels_per_block * 8), max_batch));
    rs.shared_b = phase_b_bytes(type, H, rs.proj_panels_per_block, rs.proj_batch_tile);
    if (rs.shared_b > work) work = rs.shared_b;
  }
  if (rs.batch_tile == 0 || (projection && rs.proj_batch_tile == 0)) {
    *out = Recurrence{out->step, false, Decomposition(), 0, 0, "W_hh leaves no shared memory for the step's work"};
    return FERRY_OK;
  }
  out->persistent = true;
  out->resident_weights = weights;
  out->resident_shared = weights + work;
  return FERRY_OK;
}

ferry_status choose_io(const DeviceCaps& caps, ferry_device_io requested, const char* env, bool* zero_copy) {
  const bool can = caps.can_map_host_memory && caps.host_register_supported;
  bool want = false;
  const char* source = "options->device_io";
  switch (requested) {
    case FERRY_DEVICE_IO_COPY: want = false; break;
    case FERRY_DEVICE_IO_ZERO_COPY: want = true; break;
    default:
      if (env && *env) {
        source = "FERRY_CUDA_IO";
        if (strcmp(env, "zero_copy") == 0) {
          want = true;
        } else if (strcmp(env, "copy") == 0) {
          want = false;
        } else {
          return fail(FERRY_INVALID_ARGUMENT, "cuda: FERRY_CUDA_IO='%s': expected copy or zero_copy", env);
        }
      } else {
        *zero_copy = caps.integrated && can;
        return FERRY_OK;
      }
  }
  if (want && !can) {
    return fail(FERRY_UNSUPPORTED, "cuda: %s asks for zero copy, but this device cannot map registered host memory "
                "(canMapHostMemory %d, hostRegisterSupported %d)", source, caps.can_map_host_memory ? 1 : 0,
                caps.host_register_supported ? 1 : 0);
  }
  *zero_copy = want;
  return FERRY_OK;
}

ferry_status choose_step(const DeviceCaps& caps, ferry_device_io requested, const char* env, StepMode* mode,
                         bool* zero_copy) {
  *mode = StepMode::kLaunch;
  if (!env || !*env || strcmp(env, "launch") == 0) return FERRY_OK;
  const bool only = strcmp(env, "resident_only") == 0;
  if (!only && strcmp(env, "resident") != 0) {
    return fail(FERRY_INVALID_ARGUMENT, "cuda: FERRY_CUDA_STEP='%s': expected launch, resident or resident_only",
                env);
  }
  if (!caps.can_map_host_memory || !caps.host_register_supported) {
    return fail(FERRY_UNSUPPORTED, "cuda: FERRY_CUDA_STEP=%s needs host memory the device can map "
                "(canMapHostMemory %d, hostRegisterSupported %d)", env, caps.can_map_host_memory ? 1 : 0,
                caps.host_register_supported ? 1 : 0);
  }
  if (requested == FERRY_DEVICE_IO_COPY) {
    return fail(FERRY_UNSUPPORTED, "cuda: FERRY_CUDA_STEP=%s reads and writes mapped host memory, but "
                "options->device_io asks for copies", env);
  }
  *mode = only ? StepMode::kResidentOnly : StepMode::kResident;
  *zero_copy = true;
  return FERRY_OK;
}

ferry_status check_file(const ferry_model* m) {
  if (m->num_cells > static_cast<uint32_t>(kDescCells)) {
    return fail(FERRY_UNSUPPORTED, "backend cuda: %u recurrent cells, at most %d", m->num_cells, kDescCells);
  }
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& l = m->layers[li];
    if (!op_has_weights(l.op)) continue;  // every other op reads vectors, whatever their layout
    if (!l.panel8) {
      return fail(FERRY_UNSUPPORTED,
                  "backend cuda: layers[%u] stores RowMajor weights (a format 1.0 file); the CUDA kernels read "
                  "the panel layouts: convert the model again, or use the reference backend", li);
    }
    if (op_is_recurrent(l.op)) {
      Recurrence r;  // the step kernels' decomposition: one sample must fit, whatever the device
      const ferry_status st = choose_recurrence(cell_shape(l), 1, DeviceCaps(), &r);
      if (st != FERRY_OK) return st;
    }
  }
  return FERRY_OK;
}

ferry_status check_model(const ferry_model* m, const SessionConfig& config, const DeviceCaps& caps) {
  ferry_status st = check_file(m);
  if (st != FERRY_OK) return st;
  // The kernels index batch, steps and widths with 32-bit integers.
  if (config.max_batch > (1u << 24) || config.max_seq > (1u << 30) ||
      config.max_batch * max_steps(m, config.max_seq) > (size_t{1} << 31)) {
    return fail(FERRY_UNSUPPORTED, "backend cuda: max_batch %zu x max_seq %zu is beyond what the kernels index",
                config.max_batch, config.max_seq);
  }
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& l = m->layers[li];
    if (!op_is_recurrent(l.op)) continue;
    Recurrence r;
    if ((st = choose_recurrence(cell_shape(l), config.max_batch, caps, &r)) != FERRY_OK) return st;
  }
  return FERRY_OK;
}

}  // namespace cuda
}  // namespace ferry
