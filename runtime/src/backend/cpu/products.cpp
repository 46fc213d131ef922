// Matrix products over the session's thread pool (cpu_backend.h): the input
// projections of a chunk of time steps, Linear layers and LSTM projections,
// on the layer's kernel set or, where chosen, XNNPACK.
#include "common/build_flags.h"  // first: the flags the numbers depend on
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

void quantize_activations(ferry_session* s, const kernels::KernelSet* k, const float* x, size_t rows, size_t ld,
                          uint32_t cols, size_t first_row, const int8_t** q, const float** scales) {
  const CpuSession* cpu = cpu_of(s);
  int8_t* dst = cpu->qact + first_row * cpu->q_ld;
  float* sc = cpu->qscales + first_row;
  k->quantize_rows(x, rows, ld, cols, dst, cpu->q_ld, sc);
  *q = dst;
  *scales = sc;
}

void quantized_rows_needed(const ferry_model* m, const KernelChoice& c, size_t max_batch, size_t chunk_rows,
                           size_t* rows, size_t* ld) {
  size_t widest = 0;
  for (uint32_t i = 0; i < m->num_layers; ++i) {
    const Layer& l = m->layers[i];
    const kernels::KernelSet* k = c.kernels.layer(i);
    if (!k->quantize_rows || !op_has_weights(l.op)) continue;
    uint32_t ks[4] = {l.in, l.out, l.h_out, l.hidden};  // every K its products read
    for (uint32_t kk : ks) {
      const size_t bytes = (size_t{k->activation_bytes(kk)} + FERRY_ALIGNMENT - 1) / FERRY_ALIGNMENT * FERRY_ALIGNMENT;
      if (bytes > widest) widest = bytes;
    }
  }
  if (!widest) {
    *rows = *ld = 0;
    return;
  }
  // A chunk's input rows, a batch of hidden rows, and the fused step's x and h.
  size_t n = chunk_rows > max_batch ? chunk_rows : max_batch;
  *rows = n > 2 ? n : 2;
  *ld = widest;
}

void gemm_on(ferry_session* s, const kernels::KernelSet* k, const kernels::GemmArgs& args, size_t rows,
             uint32_t vectors, size_t q_band, bool pool) {
  const CpuSession* cpu = cpu_of(s);
  if (k->quantize_rows && !args.qa) {
    // i8 / i4: the A rows quantized, q_rows at a time (each output row
    // reads only its own A row, so the blocking changes no bit).
    for (size_t r0 = 0; r0 < rows; r0 += cpu->q_rows) {
      const size_t n = rows - r0 < cpu->q_rows ? rows - r0 : cpu->q_rows;
      kernels::GemmArgs block = args;
      block.a = args.a + r0 * args.lda;
      block.c = args.c + r0 * args.ldc;
      if (args.c_init) block.c_init = args.c_init + r0 * args.ldc;
      quantize_activations(s, k, block.a, n, args.lda, args.w->cols, q_band * cpu->q_rows, &block.qa,
                           &block.a_scales);
      block.ldqa = cpu->q_ld;
      gemm_on(s, k, block, n, vectors, q_band, pool);
    }
    return;
  }
  if (!pool) {
    k->gemm(args, 0, rows, 0, vectors);
    return;
  }
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

void gemm(ferry_session* s, const kernels::KernelSet* k, const kernels::GemmArgs& args, size_t rows,
          uint32_t vectors) {
  gemm_on(s, k, args, rows, vectors, 0, true);
}

void input_projection(ferry_session* s, const kernels::KernelSet* k, uint32_t cell_index, const Layer& layer,
                      const float* x, size_t rows, float* dst, size_t q_band, bool pool) {
  const CpuSession* cpu = cpu_of(s);
  const Cell& cell = s->model->cells[cell_index];
  const uint32_t cols = layout::gate_row_floats(layer.gates, layer.hidden);
  if (pool && xnn_takes(cpu, cpu->xnn_cell[cell_index], cpu->xnn_cell_ok[cell_index], rows)) {
    // Cannot fail once created (setup checks only what create checked), so
    // its status is not looked at on this path.
    xnn::run_fc(cpu->xnn_cell[cell_index], rows, x, dst, cpu->threadpool);
    return;
  }
  const kernels::GemmArgs g{&cell.w_ih, x, cell.in, cell.bias ? &cell.bias : nullptr, nullptr, dst, cols, cols};
  gemm_on(s, k, g, rows, cols / layout::kPanel, q_band, pool);
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
