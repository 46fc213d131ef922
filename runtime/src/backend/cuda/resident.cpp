// The resident streaming kernel's plan (resident.h).
#include "backend/cuda/resident.h"

#include "backend/cuda/device_math.h"
#include "common/status.h"

namespace ferry {
namespace cuda {
namespace {

uint32_t ceil_div_u32(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

// The stored bytes of a panel-layout matrix (scales not counted).
size_t matrix_bytes(const Weight& w) {
  if (!w) return 0;
  return size_t{panels_of(w.units)} * panel_bytes(static_cast<int32_t>(w.dtype), w.gates, w.cols);
}

struct CellInfo {
  CellShape shape;
  uint32_t panels = 0, proj_panels = 0;
  size_t panel = 0, proj_panel = 0;  // bytes of one panel of W_hh / W_hr
};

// One cell's slices and working set per block with `groups` panel groups
// and `tile` samples per pass.
void size_cell(const CellInfo& c, uint32_t groups, uint32_t tile, ResidentCell* out) {
  out->panels = c.panels;
  out->proj_panels = c.proj_panels;
  out->panels_per_block = ceil_div_u32(c.panels, groups);
  out->proj_panels_per_block = c.proj_panels ? ceil_div_u32(c.proj_panels, groups) : 0;
  out->slice_bytes = align16(size_t{out->panels_per_block} * c.panel);
  size_t work = phase_a_bytes(c.shape.type, c.shape.gates, c.shape.h_out, out->panels_per_block, tile);
  if (c.proj_panels) {
    const size_t b = phase_b_bytes(c.shape.type, c.shape.hidden, out->proj_panels_per_block, tile);
    if (b > work) work = b;
  }
  out->work_bytes = work;
}

// Shared memory per block for this (groups, tile): the held slices plus the
// largest working set; the cells not in shared memory hold nothing.
size_t block_bytes(const CellInfo* info, uint32_t n, const bool* in_shared, uint32_t groups, uint32_t tile,
                   ResidentCell* cells, size_t* weights, size_t* work) {
  *weights = 0;
  *work = 0;
  for (uint32_t i = 0; i < n; ++i) {
    size_cell(info[i], groups, tile, &cells[i]);
    if (in_shared[i]) *weights += cells[i].slice_bytes;
    if (cells[i].work_bytes > *work) *work = cells[i].work_bytes;
  }
  return *weights + *work + kPhaseAlignSpare;
}

}  // namespace

RecurrentParams resident_cell_params(const RecurrentParams& step, const ResidentPlan& plan, uint32_t ci) {
  Decomposition d;
  d.blocks = d.proj_blocks = plan.blocks;
  d.panels_per_block = plan.cells[ci].panels_per_block;
  d.proj_panels_per_block = plan.cells[ci].proj_panels_per_block;
  d.batch_tile = d.proj_batch_tile = plan.batch_tile;
  d.batch_slices = plan.batch_slices;
  return with_decomposition(step, d);
}

ferry_status plan_resident(const ferry_model* m, size_t max_batch, const DeviceCaps& caps,
                           const ResidentOptions& options, ResidentPlan* out) {
  *out = ResidentPlan();
  if (max_batch == 0) return fail(FERRY_INVALID_ARGUMENT, "cuda resident plan: max_batch is 0");
  size_t limit = block_shared_limit(caps);
  limit = limit > options.kernel_static_shared ? limit - options.kernel_static_shared : 0;
  out->shared_limit = limit;
  if (!caps.cooperative_launch || caps.sm_count == 0) {
    out->reason = "the device has no cooperative launch";
    return FERRY_OK;
  }
  if (!caps.can_map_host_memory) {
    out->reason = "the device cannot map host memory, where the mailbox lives";
    return FERRY_OK;
  }
  if (!m->streamable) {
    out->reason = "the model cannot stream (a bidirectional layer or a Conv1d that is not causal)";
    return FERRY_OK;
  }
  if (m->num_cells > static_cast<uint32_t>(kDescCells)) {
    out->reason = "more recurrent cells than the kernel's descriptor holds";
    return FERRY_OK;
  }
  const uint32_t cap = options.max_sms != 0 && options.max_sms < caps.sm_count ? options.max_sms : caps.sm_count;
  const size_t batch = max_batch < (size_t{1} << 20) ? max_batch : (size_t{1} << 20);
  const uint32_t sample_groups = static_cast<uint32_t>((batch + kBatchGroup - 1) / kBatchGroup);

  // The cells, their step parallelism, and what the other layers stream.
  CellInfo info[kDescCells];
  uint32_t n = 0, want = 1, phases = 2;  // the request's broadcast and the reply
  size_t streamed = 0;
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& l = m->layers[li];
    const bool quantized = quantizes_activations(static_cast<int32_t>(l.dtype));
    if (op_is_recurrent(l.op)) {
      for (uint32_t k = 0; k < l.num_layers * l.dirs; ++k) {
        const Cell& cell = m->cells[l.first_cell + k];
        CellInfo& c = info[n];
        c.shape = cell_shape(l);
        Recurrence r;
        const ferry_status st = choose_recurrence(c.shape, max_batch, caps, &r);
        if (st != FERRY_OK) return st;
        if (r.step.blocks > want) want = r.step.blocks;
        c.panels = panels_of(c.shape.hidden);
        c.panel = panel_bytes(c.shape.type, c.shape.gates, c.shape.h_out);
        if (c.shape.h_out != c.shape.hidden) {
          c.proj_panels = panels_of(c.shape.h_out);
          c.proj_panel = panel_bytes(c.shape.type, 1, c.shape.hidden);
        }
        out->cells[n].layer = li;
        streamed += matrix_bytes(cell.w_ih);
        phases += (quantized ? 2u : 1u) + 1u + (c.proj_panels ? 1u : 0u);
        ++n;
      }
    } else if (l.op == Op::kLinear) {
      streamed += matrix_bytes(l.weight);
      phases += quantized ? 2u : 1u;
    } else if (l.op == Op::kConv1d) {
      streamed += size_t{l.groups} * matrix_bytes(l.weight);
      phases += quantized ? 2u : 1u;
    } else if (l.op == Op::kSoftmax || l.op == Op::kLogSoftmax || l.op == Op::kLayerNorm) {
      phases += 1;
    }
  }
  out->num_cells = n;
  out->phases = phases;

  // Panel groups: the fewest at or above the step's parallelism where every
  // cell's slices fit, else the cap with the largest slices spilled to L2.
  bool in_shared[kDescCells];
  for (uint32_t i = 0; i < n; ++i) in_shared[i] = true;
  ResidentCell sized[kDescCells];
  size_t weights = 0, work = 0;
  uint32_t groups = want < cap ? want : cap;
  while (block_bytes(info, n, in_shared, groups, 1, sized, &weights, &work) > limit && groups < cap) ++groups;
  while (block_bytes(info, n, in_shared, groups, 1, sized, &weights, &work) > limit) {
    uint32_t largest = n;
    for (uint32_t i = 0; i < n; ++i) {
      if (in_shared[i] && (largest == n || sized[i].slice_bytes > sized[largest].slice_bytes)) largest = i;
    }
    if (largest == n) {
      out->reason = "one sample of the step's working set does not fit a block's shared memory";
      return FERRY_OK;
    }
    in_shared[largest] = false;
  }
  // The fewest groups that give the same slices.
  uint32_t fewest = 1;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t g = ceil_div_u32(info[i].panels, sized[i].panels_per_block);
    if (g > fewest) fewest = g;
  }
  groups = fewest;

  // SMs left under the cap split the batch; then the largest tile that fits.
  uint32_t slices = cap / groups;
  if (slices > sample_groups) slices = sample_groups;
  if (slices < 1) slices = 1;
  const uint32_t slice_samples = static_cast<uint32_t>((batch + slices - 1) / slices);
  uint32_t lo = 1, hi = slice_samples;
  while (lo < hi) {  // the largest tile in [1, slice_samples] that fits
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    if (block_bytes(info, n, in_shared, groups, mid, sized, &weights, &work) <= limit) lo = mid;
    else hi = mid - 1;
  }
  block_bytes(info, n, in_shared, groups, lo, sized, &weights, &work);

  out->fits = true;
  out->panel_groups = groups;
  out->batch_slices = slices;
  out->blocks = groups * slices;
  out->batch_tile = lo;
  out->weights_per_block = weights;
  out->work_per_block = work;
  out->shared_per_block = weights + work;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t layer = out->cells[i].layer;
    out->cells[i] = sized[i];
    out->cells[i].layer = layer;
    out->cells[i].in_shared = in_shared[i];
    const size_t w_hh = size_t{info[i].panels} * info[i].panel;
    if (in_shared[i]) out->weights_in_shared += w_hh;
    else streamed += w_hh;
    streamed += size_t{info[i].proj_panels} * info[i].proj_panel;  // W_hr: through L2
  }
  out->weights_streamed = streamed;
  return FERRY_OK;
}

}  // namespace cuda
}  // namespace ferry
