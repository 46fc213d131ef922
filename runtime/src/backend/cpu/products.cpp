// Matrix products over the session's thread pool (cpu_backend.h): the input
// projections of a chunk of time steps, Linear layers and LSTM projections,
// on the layer's kernel set or, where chosen, XNNPACK.
#include "backend/cpu/cpu_backend.h"
#include "kernels/xnnpack/xnnpack_fc.h"
#include "platform/threads.h"

namespace ferry {
namespace cpu {
namespace {

struct GemmTask {
  const kernels::KernelSet* k;
  kernels::GemmArgs args;
  size_t rows;
  uint32_t vectors;
};

void gemm_over_vectors(void* ctx, size_t begin, size_t end) {
  const GemmTask* t = static_cast<const GemmTask*>(ctx);
  t->k->gemm(t->args, 0, t->rows, static_cast<uint32_t>(begin), static_cast<uint32_t>(end));
}

void gemm_over_rows(void* ctx, size_t begin, size_t end) {
  const GemmTask* t = static_cast<const GemmTask*>(ctx);
  t->k->gemm(t->args, begin, end, 0, t->vectors);
}

// XNNPACK takes a call where it was chosen: always on the xnnpack backend;
// on auto when the probe agreed and the call is large enough.
bool xnn_takes(const CpuSession* cpu, void* op, bool probe_ok, size_t rows) {
  return op && (cpu->xnn_always || (probe_ok && rows >= kXnnpackMinRows));
}

}  // namespace

// C = init + A W over all rows and vectors, split over output vectors (or,
// when there are few, over rows): never inside a sum.
void gemm(ferry_session* s, const kernels::KernelSet* k, const kernels::GemmArgs& args, size_t rows,
          uint32_t vectors) {
  const CpuSession* cpu = cpu_of(s);
  GemmTask t{k, args, rows, vectors};
  const size_t work = rows * args.w->cols * vectors * 8;
  const size_t threads = cpu->threads;
  if (threads > 1 && vectors < 4 * threads && rows >= 12 * threads) {
    parallel_ranges(cpu->threadpool, rows, 6 * ((rows / threads + 11) / 12), work, gemm_over_rows, &t);
    return;
  }
  // Multiples of 4 vectors: whole AVX-512 tiles (two zmm of an LSTM panel).
  const size_t tile = vectors <= 4 * threads ? 4 : ((vectors / (2 * threads)) + 3) & ~size_t{3};
  parallel_ranges(cpu->threadpool, vectors, tile, work, gemm_over_vectors, &t);
}

void input_projection(ferry_session* s, const kernels::KernelSet* k, uint32_t cell_index, const Layer& layer,
                      const float* x, size_t rows, float* dst) {
  const CpuSession* cpu = cpu_of(s);
  const Cell& cell = s->model->cells[cell_index];
  const uint32_t cols = layout::gate_row_floats(layer.gates, layer.hidden);
  if (xnn_takes(cpu, cpu->xnn_cell[cell_index], cpu->xnn_cell_ok[cell_index], rows)) {
    // Cannot fail once created (setup checks only what create checked), so
    // its status is not looked at on this path.
    xnn::run_fc(cpu->xnn_cell[cell_index], rows, x, dst, cpu->threadpool);
    return;
  }
  const kernels::GemmArgs g{&cell.w_ih, x, cell.in, cell.bias ? &cell.bias : nullptr, nullptr, dst, cols, cols};
  gemm(s, k, g, rows, cols / layout::kPanel);
}

ferry_status linear(ferry_session* s, uint32_t layer_index, const float* in, float* out, size_t rows) {
  const CpuSession* cpu = cpu_of(s);
  const Layer& layer = s->model->layers[layer_index];
  if (xnn_takes(cpu, cpu->xnn_linear[layer_index], cpu->xnn_linear_ok[layer_index], rows)) {
    return xnn::run_fc(cpu->xnn_linear[layer_index], rows, in, out, cpu->threadpool);
  }
  const kernels::GemmArgs g{&layer.weight, in, layer.in, layer.bias ? &layer.bias : nullptr, nullptr,
                            out,           layer.out, layer.out};
  gemm(s, cpu->kernels.layer(layer_index), g, rows, layout::panels_of(layer.out));
  return FERRY_OK;
}

}  // namespace cpu
}  // namespace ferry
