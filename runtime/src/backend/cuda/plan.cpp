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

// Bytes a weight occupies in the model (Panel8 f32, as check_model requires;
// a RowMajor tensor's own size otherwise).
size_t weight_bytes(const Weight& w) {
  const uint64_t elements = w.panel8() ? layout::panel8_elements(w.gates, w.units, w.cols)
                                       : uint64_t{w.rows()} * w.cols;
  return static_cast<size_t>(elements * sizeof(float));
}

template <typename Fn>
void for_each_weight(const ferry_model* m, Fn fn) {
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& l = m->layers[li];
    if (l.op == Op::kLinear) {
      fn(l.weight);
      fn(l.bias);
    } else if (op_is_recurrent(l.op)) {
      for (uint32_t c = 0; c < l.num_layers * l.dirs; ++c) {
        const Cell& cell = m->cells[l.first_cell + c];
        fn(cell.w_ih);
        fn(cell.w_hh);
        fn(cell.bias);
        fn(cell.b_hn);
        fn(cell.w_hr);
      }
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
  for_each_weight(m, [&](const Weight& w) {
    if (!w) return;
    const uint8_t* p = static_cast<const uint8_t*>(w.data);
    if (!lo || p < lo) lo = p;
    if (!hi || p + weight_bytes(w) > hi) hi = p + weight_bytes(w);
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
    out->xproj = p.reserve_floats(max_seq, max_batch, max_cols);
    out->xproj_bytes = p.end() - before;
  }
  if (max_proj_hidden) {
    const size_t before = p.end();
    out->h_full = p.reserve_floats(max_batch, max_proj_hidden);
    out->h_full_bytes = p.end() - before;
  }
  {
    const size_t before = p.end();
    out->desc = p.reserve(sizeof(CallDesc) + max_batch * sizeof(int32_t));
    out->desc_bytes = p.end() - before;
  }
  {
    const size_t before = p.end();
    out->act[0] = p.reserve_floats(max_seq, max_batch, m->max_features);
    out->act_bytes = p.end() - before;
    out->act[1] = p.reserve_floats(max_seq, max_batch, m->max_features);
  }
  if (p.overflowed() || max_batch > SIZE_MAX / sizeof(int32_t)) {
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
      __builtin_mul_overflow(m->output_is_sequence ? max_seq : 1, max_batch, &out_floats) ||
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
  return s;
}

ferry_status choose_recurrence(const CellShape& shape, size_t max_batch, const DeviceCaps& caps, Recurrence* out) {
  *out = Recurrence();
  const uint32_t G = shape.gates, H = shape.hidden, P = shape.h_out;
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
  const size_t step_floats = kStepSharedBytes / sizeof(float);

  Decomposition& st = out->step;
  st.panels_per_block = min_u32(pref, panels);
  st.blocks = ceil_div(panels, st.panels_per_block);
  const size_t per_sample_a = size_t{P} + size_t{splits} * st.panels_per_block * G * 8;
  st.batch_tile = static_cast<uint32_t>(clamp_tile(step_floats / per_sample_a, max_batch));
  st.shared_a = phase_a_floats(G, P, st.panels_per_block, st.batch_tile) * sizeof(float);
  if (st.batch_tile == 0) {
    return fail(FERRY_UNSUPPORTED,
                "cuda: a recurrent cell with hidden state of %u floats needs %zu bytes of shared memory per sample, "
                "more than the %zu a step kernel uses",
                P, per_sample_a * sizeof(float), kStepSharedBytes);
  }
  if (projection) {
    st.proj_panels_per_block = min_u32(proj_pref, proj_panels);
    st.proj_blocks = ceil_div(proj_panels, st.proj_panels_per_block);
    const size_t per_sample_b = size_t{H} + size_t{proj_splits} * st.proj_panels_per_block * 8;
    st.proj_batch_tile = static_cast<uint32_t>(clamp_tile(step_floats / per_sample_b, max_batch));
    st.shared_b = phase_b_floats(H, st.proj_panels_per_block, st.proj_batch_tile) * sizeof(float);
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
  const size_t weights = size_t{rs.panels_per_block} * P * G * 8 * sizeof(float);
  size_t limit = caps.shared_per_block_optin;
  if (caps.shared_per_sm >= 1024 && caps.shared_per_sm - 1024 < limit) limit = caps.shared_per_sm - 1024;
  if (weights >= limit) {
    out->reason = "W_hh does not fit in the shared memory of one block per SM";
    return FERRY_OK;
  }
  const size_t budget = (limit - weights) / sizeof(float);
  rs.batch_tile = static_cast<uint32_t>(clamp_tile(budget / (size_t{P} + size_t{splits} * rs.panels_per_block * G * 8),
                                                   max_batch));
  rs.shared_a = phase_a_floats(G, P, rs.panels_per_block, rs.batch_tile) * sizeof(float);
  size_t work = rs.shared_a;
  if (projection) {
    rs.proj_blocks = rs.blocks;
    rs.proj_panels_per_block = ceil_div(proj_panels, rs.blocks);
    rs.proj_batch_tile = static_cast<uint32_t>(
        clamp_tile(budget / (size_t{H} + size_t{proj_splits} * rs.proj_panels_per_block * 8), max_batch));
    rs.shared_b = phase_b_floats(H, rs.proj_panels_per_block, rs.proj_batch_tile) * sizeof(float);
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

ferry_status check_model(const ferry_model* m, const SessionConfig& config, const DeviceCaps& caps) {
  if (m->num_cells > static_cast<uint32_t>(kDescCells)) {
    return fail(FERRY_UNSUPPORTED, "backend cuda: %u recurrent cells, at most %d", m->num_cells, kDescCells);
  }
  // The kernels index batch, steps and widths with 32-bit integers.
  if (config.max_batch > (1u << 24) || config.max_seq > (1u << 30) ||
      config.max_batch * config.max_seq > (size_t{1} << 31)) {
    return fail(FERRY_UNSUPPORTED, "backend cuda: max_batch %zu x max_seq %zu is beyond what the kernels index",
                config.max_batch, config.max_seq);
  }
  if (m->channels_first || m->input_is_tokens) {
    return fail(FERRY_UNSUPPORTED, "backend cuda: %s input is not run by the CUDA kernels yet; use a CPU backend",
                m->input_is_tokens ? "token-id" : "channels-first");
  }
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& l = m->layers[li];
    // The ops of format 1.0/1.1 only: the 1.2 ops (conv, norms, the newer
    // activations, pooling, embedding, residual slots) run on the CPU backends.
    if (l.op > Op::kIdentity) {
      return fail(FERRY_UNSUPPORTED,
                  "backend cuda: layers[%u] is a format 1.2 op (%u) the CUDA kernels do not run yet; use a CPU "
                  "backend (reference, simd, xnnpack)", li, static_cast<unsigned>(l.op));
    }
    if (!op_has_weights(l.op)) continue;
    if (l.dtype != DType::kF32) {
      return fail(FERRY_UNSUPPORTED, "backend cuda: layers[%u] stores weights of a type other than f32", li);
    }
    if (!l.panel8) {
      return fail(FERRY_UNSUPPORTED,
                  "backend cuda: layers[%u] stores RowMajor weights (a format 1.0 file); the CUDA kernels read "
                  "Panel8: convert the model again, or use the reference backend", li);
    }
    if (op_is_recurrent(l.op)) {
      Recurrence r;
      const ferry_status st = choose_recurrence(cell_shape(l), config.max_batch, caps, &r);
      if (st != FERRY_OK) return st;
    }
  }
  return FERRY_OK;
}

}  // namespace cuda
}  // namespace ferry
