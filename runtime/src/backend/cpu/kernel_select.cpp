// The per-layer choice of kernel set and of XNNPACK (cpu_backend.h), made
// once per plan and init: the only place where ferry_backend turns into
// kernels.
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "backend/cpu/cpu_backend.h"
#include "common/status.h"
#include "kernels/registry.h"
#include "kernels/xnnpack/xnnpack_fc.h"
#include "platform/threads.h"

namespace ferry {
namespace cpu {
namespace {

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

// Index of `set` in `k->sets`, adding it if new.
uint8_t set_index(LayerKernels* k, const kernels::KernelSet* set) {
  uint8_t i = 0;
  while (i < kMaxSessionKernelSets && k->sets[i] && k->sets[i] != set) ++i;
  if (i < kMaxSessionKernelSets && !k->sets[i]) k->sets[i] = set;
  return i;  // < kMaxSessionKernelSets: 4 dtypes x (simd, reference) (checked by the caller)
}

}  // namespace

size_t chunk_steps(size_t max_batch, size_t max_seq) {
  size_t steps = (kChunkRows + max_batch - 1) / max_batch;
  if (steps > max_seq) steps = max_seq;
  return steps ? steps : 1;
}

bool project_overlaps(const kernels::KernelSet* k, int kind, const Cell& cell, bool xnn_cell) {
  return k->step_project[kind] && !xnn_cell && cell.w_hh.bytes() >= kProjectOverlapMinBytes;
}

bool layer_wavefronts(const ferry_model* m, const kernels::KernelSet* k, const Layer& l, bool xnn) {
  if (!op_is_recurrent(l.op) || k->strategy != kernels::StepStrategy::kPanels || wave_width(l) < 2 ||
      l.h_out != l.hidden || xnn) {
    return false;
  }
  for (uint32_t i = 0; i < l.num_layers * l.dirs; ++i) {
    if (m->cells[l.first_cell + i].w_hh.bytes() >= kWavefrontMaxBytes) return false;
  }
  return true;
}

uint32_t max_gate_cols(const ferry_model* m) {
  uint32_t most = 0;
  for (uint32_t i = 0; i < m->num_layers; ++i) {
    const Layer& l = m->layers[i];
    if (!op_is_recurrent(l.op)) continue;
    const uint32_t cols = layout::gate_row_floats(l.gates, l.hidden);
    if (cols > most) most = cols;
  }
  return most;
}

ferry_status choose_kernels(const ferry_model* m, const SessionConfig& config, KernelChoice* c) {
  *c = KernelChoice();
  const ferry_backend backend = config.backend;
  // The SIMD sets this policy may use; null: every layer on the reference.
  bool use_simd = false;
  switch (backend) {
    case FERRY_BACKEND_REFERENCE:
      break;
    case FERRY_BACKEND_AUTO:
      use_simd = true;
      break;
    case FERRY_BACKEND_SIMD:
    case FERRY_BACKEND_XNNPACK: {
      const char* name = backend == FERRY_BACKEND_SIMD ? "simd" : "xnnpack";
      if (backend == FERRY_BACKEND_XNNPACK && !xnn::available()) {
        return fail(FERRY_UNSUPPORTED, "backend xnnpack: %s", xnn::unavailable_reason());
      }
      for (uint32_t i = 0; i < m->num_layers; ++i) {
        const Layer& l = m->layers[i];
        if (!kernels::best_simd_kernel_set(l.dtype)) {
          return fail(FERRY_UNSUPPORTED, "backend %s: this CPU has no SIMD kernels in this build (x86-64 needs AVX2 "
                      "and FMA)%s", backend == FERRY_BACKEND_SIMD ? "simd" : "xnnpack (its recurrence runs on simd)",
                      kernels::simd_isa_cap().active ? ", or FERRY_MAX_ISA allows none" : "");
        }
        if (op_has_weights(l.op) && !l.panel8) {
          return fail(FERRY_UNSUPPORTED,
                      "backend %s: layers[%u] stores RowMajor weights (a format 1.0 file); the simd kernels "
                      "read Panel8: convert the model again, or use the reference backend",
                      name, i);
        }
      }
      use_simd = true;
      c->xnn_always = backend == FERRY_BACKEND_XNNPACK;
      break;
    }
    default:
      return fail(FERRY_UNSUPPORTED, "backend %s is not served by the CPU backend", ferry_backend_name(backend));
  }
  const bool auto_xnn = backend == FERRY_BACKEND_AUTO && use_simd && xnnpack_is_wider_here() && xnn::available();
  const size_t chunk = chunk_steps(config.max_batch, config.max_seq);
  const size_t chunk_rows = config.max_batch * chunk;
  const bool chunks = config.max_seq > chunk;  // a run may take more than one chunk
  const size_t threads = pool_threads(config.threadpool);
  bool time_axis = false;
  for (uint32_t i = 0; i < m->num_layers; ++i) {
    const Layer& l = m->layers[i];
    const kernels::KernelSet* simd = use_simd ? kernels::best_simd_kernel_set(l.dtype) : nullptr;
    const bool simd_ok = simd && (!op_has_weights(l.op) || l.panel8);
    // XNNPACK's (2022) fully-connected operator is f32 only: the products of
    // an f16 / int8 / int4 layer stay on ferry's own kernels on every backend.
    const bool xnn_ok = simd_ok && l.dtype == DType::kF32;
    const kernels::KernelSet* set = simd_ok ? simd : kernels::reference_kernel_set(l.dtype);
    if (!set) {
      return fail(FERRY_UNSUPPORTED, "layers[%u]: no kernels for its weights' dtype in this runtime", i);
    }
    c->kernels.layer_set[i] = set_index(&c->kernels, set);
    if (c->kernels.layer_set[i] >= kMaxSessionKernelSets) {  // unreachable with 4 dtypes; never index past
      return fail(FERRY_UNSUPPORTED, "layers[%u]: more than %u kernel sets in one session", i, kMaxSessionKernelSets);
    }
    const bool panels = set->strategy == kernels::StepStrategy::kPanels;
    if (!panels) c->any_per_sample = true;
    if (op_is_recurrent(l.op)) {
      time_axis = true;
      if (panels) {
        c->any_panel_recurrent = true;
        c->any_panel_gru = c->any_panel_gru || l.op == Op::kGru;
        c->any_panel_projection = c->any_panel_projection || l.h_out != l.hidden;
      }
      const bool xnn = xnn_ok && (c->xnn_always || (auto_xnn && chunk_rows >= kXnnpackMinRows));
      for (uint32_t k = 0; k < l.num_layers * l.dirs; ++k) c->xnn_cell[l.first_cell + k] = xnn;
      c->any_xnnpack = c->any_xnnpack || xnn;
      // Whether some cell of the module computes projections in its steps
      // (a second chunk of gate rows: on one thread, or per wavefront runner).
      bool overlap = false;
      const int kind = kernels::kind_index(cell_kind(l.op));
      for (uint32_t k = 0; k < l.num_layers * l.dirs; ++k) {
        overlap = overlap || project_overlaps(set, kind, m->cells[l.first_cell + k], xnn);
      }
      // A wavefront over this module's cells, one runner per layer or per
      // direction at a time (recurrent.cpp), for one-sample runs where it
      // pays (wave_pays).
      if (threads >= 2 && wave_pays(l, config.max_seq, chunk) && layer_wavefronts(m, set, l, xnn)) {
        const uint32_t width = wave_width(l);
        const uint32_t runners = width < threads ? width : static_cast<uint32_t>(threads);
        if (runners > c->wave_runners) c->wave_runners = runners;
        c->wave_quantized = c->wave_quantized || set->quantize_rows;
        c->wave_overlap = c->wave_overlap || overlap;
      }
      if (panels && threads == 1 && chunks) c->any_project_overlap = c->any_project_overlap || overlap;
    } else if (l.op == Op::kLast) {
      time_axis = false;
    } else if (l.op == Op::kLinear) {
      const size_t rows = config.max_batch * (time_axis ? config.max_seq : 1);
      c->xnn_linear[i] = xnn_ok && (c->xnn_always || (auto_xnn && rows >= kXnnpackMinRows));
      c->any_xnnpack = c->any_xnnpack || c->xnn_linear[i];
    }
  }
  return FERRY_OK;
}

}  // namespace cpu
}  // namespace ferry
