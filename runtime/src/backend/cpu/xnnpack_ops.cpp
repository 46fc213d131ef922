// XNNPACK's operators for a CPU session (cpu_backend.h): sized by a dry run
// at plan time, created at init in the arena from a row-major staging copy
// of the Panel8 weights, and (auto) probed once for bit-identical results
// against the layer's kernel set. In a build without XNNPACK nothing here is
// compiled: no layer can choose it (xnn::available() is false).
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "kernels/xnnpack/xnnpack_fc.h"
#include "shared/seeded_floats.h"

namespace ferry {
namespace cpu {

#if defined(FERRY_HAVE_XNNPACK)

namespace {

// The XNNPACK matrices of a session in a fixed order: every chosen cell's
// W_ih ([gate_cols, in], panel order), then every chosen Linear weight.
struct XnnMatrix {
  size_t n, k;
  const Weight* w;
  const Weight* bias;
  bool is_cell;
  uint32_t index;        // cell index or layer index
  uint32_t layer_index;  // the layer it belongs to
};

template <typename F>
ferry_status for_each_xnn_matrix(const ferry_model* m, const KernelChoice& c, F&& f) {
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& l = m->layers[li];
    if (op_is_recurrent(l.op)) {
      for (uint32_t k = 0; k < l.num_layers * l.dirs; ++k) {
        const uint32_t ci = l.first_cell + k;
        if (!c.xnn_cell[ci]) continue;
        const Cell& cell = m->cells[ci];
        const ferry_status st =
            f(XnnMatrix{layout::gate_row_floats(l.gates, l.hidden), cell.in, &cell.w_ih, &cell.bias, true, ci, li});
        if (st != FERRY_OK) return st;
      }
    } else if (l.op == Op::kLinear && c.xnn_linear[li]) {
      const ferry_status st = f(XnnMatrix{l.out, l.in, &l.weight, &l.bias, false, li, li});
      if (st != FERRY_OK) return st;
    }
  }
  return FERRY_OK;
}

// Row-major [n][k] copy of a Panel8 matrix, rows in panel order (for a
// Linear, panel order is the natural order and only the first n rows exist).
void unpack_panel8(const XnnMatrix& x, float* dst) {
  const uint32_t G = x.w->gates;
  const uint64_t stride = layout::panel8_column_stride(G);
  for (size_t r = 0; r < x.n; ++r) {
    const uint32_t q = static_cast<uint32_t>(r / layout::kPanel), j = static_cast<uint32_t>(r % layout::kPanel);
    const float* src = x.w->f32() + layout::panel8_vector_index(G, x.k, q) + j;
    float* row = dst + r * x.k;
    for (size_t kk = 0; kk < x.k; ++kk) row[kk] = src[kk * stride];
  }
}

// Rows the auto probe compares: enough to run XNNPACK's widest row tile and
// its single-row tile.
constexpr size_t kProbeRows = 8;

}  // namespace

ferry_status xnn_region_bytes(const ferry_model* m, const KernelChoice& c, size_t* bytes_out) {
  // Sizes depend on (n, k) only: measure each distinct shape once.
  struct Seen {
    size_t n, k, bytes;
  } seen[16];
  size_t nseen = 0, total = 0;
  const ferry_status st = for_each_xnn_matrix(m, c, [&](const XnnMatrix& x) {
    for (size_t i = 0; i < nseen; ++i) {
      if (seen[i].n == x.n && seen[i].k == x.k) {
        total += seen[i].bytes;
        return FERRY_OK;
      }
    }
    size_t bytes = 0;
    const ferry_status s = xnn::measure_fc(x.n, x.k, &bytes);
    if (s != FERRY_OK) return s;
    if (nseen < 16) seen[nseen++] = {x.n, x.k, bytes};
    total += bytes;
    return FERRY_OK;
  });
  if (st != FERRY_OK) return st;
  *bytes_out = total;
  return FERRY_OK;
}

size_t xnn_temp_floats(const ferry_model* m, const KernelChoice& c) {
  size_t most = 0;
  for_each_xnn_matrix(m, c, [&](const XnnMatrix& x) {
    const size_t unpack = x.n * x.k;
    const size_t probe = kProbeRows * x.k + 2 * kProbeRows * x.n;
    if (unpack > most) most = unpack;
    if (probe > most) most = probe;
    return FERRY_OK;
  });
  return most;
}

ferry_status xnn_create_ops(ferry_session* s, const KernelChoice& c, uint8_t* region, size_t xnn_bytes,
                            float* temp) {
  size_t used = 0;
  CpuSession* cpu = cpu_of(s);
  return for_each_xnn_matrix(s->model, c, [&](const XnnMatrix& x) {
    unpack_panel8(x, temp);
    void* op = nullptr;
    ferry_status st = xnn::create_fc(region, xnn_bytes, &used, x.n, x.k, x.k, x.n, temp,
                                     x.bias->f32(), &op);
    if (st != FERRY_OK) return st;
    bool ok = true;
    if (!c.xnn_always) {
      // auto mixes XNNPACK (large calls) with the layer's gemm (small ones
      // and lone steps): only if both give the same bits on this CPU.
      float* probe_x = temp;
      float* y_xnn = temp + kProbeRows * x.k;
      float* y_simd = y_xnn + kProbeRows * x.n;
      uint32_t seed = 0x9e3779b9u;
      for (size_t i = 0; i < kProbeRows * x.k; ++i) probe_x[i] = seeded_float(&seed);
      st = xnn::run_fc(op, kProbeRows, probe_x, y_xnn, nullptr);
      if (st != FERRY_OK) return st;
      const kernels::GemmArgs g{x.w, probe_x, x.k, *x.bias ? x.bias : nullptr, nullptr, y_simd, x.n,
                                static_cast<uint32_t>(x.n)};
      c.kernels.layer(x.layer_index)->gemm(g, 0, kProbeRows, 0, layout::panels_of(static_cast<uint32_t>(x.n)));
      ok = memcmp(y_xnn, y_simd, kProbeRows * x.n * sizeof(float)) == 0;
    }
    if (x.is_cell) {
      cpu->xnn_cell[x.index] = op;
      cpu->xnn_cell_ok[x.index] = ok;
    } else {
      cpu->xnn_linear[x.index] = op;
      cpu->xnn_linear_ok[x.index] = ok;
    }
    return FERRY_OK;
  });
}

#else  // !FERRY_HAVE_XNNPACK

ferry_status xnn_region_bytes(const ferry_model*, const KernelChoice&, size_t* bytes_out) {
  *bytes_out = 0;
  return FERRY_OK;
}

size_t xnn_temp_floats(const ferry_model*, const KernelChoice&) { return 0; }

ferry_status xnn_create_ops(ferry_session*, const KernelChoice&, uint8_t*, size_t, float*) { return FERRY_OK; }

#endif  // FERRY_HAVE_XNNPACK

}  // namespace cpu
}  // namespace ferry
