// The fast backends' layer executors: recurrent modules and Linear layers on
// the simd kernels, with XNNPACK for the large input products where the
// session chose it; the work split over the caller's thread pool.
//
// A recurrent (layer k, direction d) runs in chunks of time steps:
//   1. input part of the gates for every (t, b) of the chunk at once,
//        P[t][b] = bias + W_ih x[t][b]             (gemm or XNNPACK)
//   2. per step t, in the direction's order:
//        B == 1: one fused kernel per panel group: P row (or, for a lone
//                step, bias + W_ih x itself) + W_hh h, nonlinearities, state
//        B >= 2: gemm P[t] += W_hh h for all rows, then the update per row
//      then the LSTM projection, and the new h is committed to the state and
//      the output (samples past their length keep their state, output 0).
// Every gate is one FMA chain (simd.h), so chunking, fusing and threading
// never change a bit: ferry_step gives exactly what ferry_run gives.
#include <string.h>

#include "kernels/simd/simd.h"
#include "kernels/xnnpack/xnnpack_fc.h"
#include "session.h"
#include "status.h"
#include "threads.h"

namespace ferry {
namespace {

uint32_t gate_cols(const Layer& l) { return panels_of(l.hidden) * kPanel * l.gates; }

// A state row's copy: inline for the short rows of streaming (no call into
// libc's dispatch for 64 bytes), memcpy beyond.
inline void copy_floats(float* dst, const float* src, size_t n) {
  if (n > 64) {
    memcpy(dst, src, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) dst[i] = src[i];
}

// ------------------------------------------------------------- GEMM tasks --

struct GemmTask {
  const simd::Kernels* k;
  simd::GemmArgs args;
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

// C = init + A W over all rows and vectors, split over output vectors (or,
// when there are few, over rows): never inside a sum.
void gemm(ferry_session* s, const simd::GemmArgs& args, size_t rows, uint32_t vectors) {
  GemmTask t{s->engines.simd, args, rows, vectors};
  const size_t work = rows * args.k * vectors * 8;
  const size_t threads = s->threads;
  if (threads > 1 && vectors < 4 * threads && rows >= 12 * threads) {
    parallel_ranges(s->threadpool, rows, 6 * ((rows / threads + 11) / 12), work, gemm_over_rows, &t);
    return;
  }
  // Multiples of 4 vectors: whole AVX-512 tiles (two zmm of an LSTM panel).
  const size_t tile = vectors <= 4 * threads ? 4 : ((vectors / (2 * threads)) + 3) & ~size_t{3};
  parallel_ranges(s->threadpool, vectors, tile, work, gemm_over_vectors, &t);
}

// Rows of `x` (stride cell.in) times the cell's W_ih plus bias, into `dst`
// (panel order, stride gate_cols).
void input_projection(ferry_session* s, uint32_t cell_index, const Layer& layer, const Cell& cell,
                      const float* x, size_t rows, float* dst) {
  const uint32_t cols = gate_cols(layer);
  if (s->xnn_cell[cell_index] && (s->engines.xnn_always || (s->xnn_cell_ok[cell_index] && rows >= kXnnpackMinRows))) {
    // Cannot fail once created (setup checks only what create checked), so
    // its status is not looked at on this path.
    xnn::run_fc(s->xnn_cell[cell_index], rows, x, dst, s->threadpool);
    return;
  }
  simd::GemmArgs g{cell.w_ih.data, layer.gates, cell.in, x, cell.in, cell.bias.data, nullptr, dst, cols, cols};
  gemm(s, g, rows, cols / kPanel);
}

// ------------------------------------------------------------ step tasks --

struct StepTask {
  const simd::Kernels* k;
  Op op;
  simd::StepArgs args;
};

void step_panels(void* ctx, size_t begin, size_t end) {
  const StepTask* t = static_cast<const StepTask*>(ctx);
  const uint32_t p0 = static_cast<uint32_t>(begin), p1 = static_cast<uint32_t>(end);
  switch (t->op) {
    case Op::kLstm: t->k->lstm_step(t->args, p0, p1); break;
    case Op::kGru: t->k->gru_step(t->args, p0, p1); break;
    default: t->k->rnn_step(t->args, p0, p1); break;
  }
}

// Batched step: per panel range, the recurrent gemm of every row and the
// updates of the active rows.
struct BatchTask {
  ferry_session* s;
  const Layer* layer;
  const Cell* cell;
  uint32_t cell_in_layer;
  size_t B;
  size_t t;
  const int32_t* lengths;
  float* pre;       // P rows of this step [B][cols]
  float* rec;       // rows the gemm accumulates into: P itself, or (GRU) gates_rec
  const float* h;   // the hidden state before the step: B rows, `ldh` apart
  size_t ldh;
  float* h_new;     // where the update writes the new hidden: B rows, `ldh_new` apart
  size_t ldh_new;
};

bool active(const int32_t* lengths, size_t b, size_t t) {
  return !lengths || t < static_cast<size_t>(lengths[b]);
}

void batch_panels(void* ctx, size_t begin, size_t end) {
  const BatchTask* bt = static_cast<const BatchTask*>(ctx);
  ferry_session* s = bt->s;
  const Layer& layer = *bt->layer;
  const Cell& cell = *bt->cell;
  const simd::Kernels* k = s->engines.simd;
  const uint32_t G = layer.gates, cols = gate_cols(layer);
  const uint32_t p0 = static_cast<uint32_t>(begin), p1 = static_cast<uint32_t>(end);
  if (layer.op == Op::kGru) {
    // The recurrent accumulators: r, z continue the input chains; n starts
    // from b_hn (r multiplies it, so it cannot join the input part).
    for (size_t b = 0; b < bt->B; ++b) {
      const float* pre = bt->pre + b * cols;
      float* rec = bt->rec + b * cols;
      for (uint32_t p = p0; p < p1; ++p) {
        memcpy(rec + p * 24, pre + p * 24, 16 * sizeof(float));
        if (cell.b_hn) {
          memcpy(rec + p * 24 + 16, cell.b_hn.data + p * 8, 8 * sizeof(float));
        } else {
          memset(rec + p * 24 + 16, 0, 8 * sizeof(float));
        }
      }
    }
  }
  const simd::GemmArgs g{cell.w_hh.data, G, layer.h_out, bt->h, bt->ldh, nullptr, bt->rec, bt->rec, cols, cols};
  k->gemm(g, 0, bt->B, p0 * G, p1 * G);
  for (size_t b = 0; b < bt->B; ++b) {
    if (!active(bt->lengths, b, bt->t)) continue;
    simd::UpdateArgs u{bt->rec + b * cols,
                       bt->pre + b * cols,
                       layer.op == Op::kLstm ? state_c(s, layer, bt->cell_in_layer, b) : nullptr,
                       bt->h + b * bt->ldh,
                       bt->h_new + b * bt->ldh_new,
                       layer.hidden,
                       layer.op == Op::kRnnRelu};
    switch (layer.op) {
      case Op::kLstm: k->lstm_update(u, p0, p1); break;
      case Op::kGru: k->gru_update(u, p0, p1); break;
      default: k->rnn_update(u, p0, p1); break;
    }
  }
}

// Panels per task: whole groups of the fused kernel's panel count, about two
// tasks per thread.
size_t panel_tile(ferry_session* s, uint32_t panels, uint32_t group) {
  const size_t threads = s->threads;
  size_t tile = (panels + 2 * threads - 1) / (2 * threads);
  tile = (tile + group - 1) / group * group;
  return tile ? tile : group;
}

}  // namespace

float* fast_recurrent(ferry_session* s, const Layer& layer, float* in, float* out, size_t T, size_t B,
                      const int32_t* lengths) {
  const ferry_model* m = s->model;
  const simd::Kernels* k = s->engines.simd;
  const uint32_t cols = gate_cols(layer);
  const uint32_t panels = panels_of(layer.hidden);
  const uint32_t group = k->step_group[layer.op == Op::kLstm ? 0 : layer.op == Op::kGru ? 1 : 2];
  const size_t tile = panel_tile(s, panels, group);
  const size_t macs_per_row = size_t{cols} * layer.h_out;
  for (uint32_t kl = 0; kl < layer.num_layers; ++kl) {
    const uint32_t in_w = kl == 0 ? layer.in : layer.out;
    for (uint32_t d = 0; d < layer.dirs; ++d) {
      const uint32_t ci = kl * layer.dirs + d;
      const uint32_t cell_index = layer.first_cell + ci;
      const Cell& cell = m->cells[cell_index];
      for (size_t done = 0; done < T; done += s->chunk_steps) {
        const size_t n = T - done < s->chunk_steps ? T - done : s->chunk_steps;
        const size_t t_lo = d == 0 ? done : T - done - n;  // the chunk is times [t_lo, t_lo + n)
        // A lone step of one sample fuses its input part into the step kernel
        // (same chain) unless XNNPACK is to compute it.
        const bool fuse_input = B == 1 && n == 1 && !(s->xnn_cell[cell_index] && s->engines.xnn_always);
        if (!fuse_input) input_projection(s, cell_index, layer, cell, in + t_lo * B * in_w, n * B, s->gates);
        for (size_t i = 0; i < n; ++i) {
          const size_t t = d == 0 ? t_lo + i : t_lo + n - 1 - i;
          float* pre = s->gates + (t - t_lo) * B * cols;
          if (B == 1) {
            float* y = out + t * layer.out + d * layer.h_out;
            if (!active(lengths, 0, t)) {
              memset(y, 0, layer.h_out * sizeof(float));
              continue;
            }
            // Without a projection the kernel writes h straight into the
            // output row (it cannot write the state: later panels still
            // read the old h); with one, into h_new for the projection.
            float* h_target = cell.w_hr ? s->h_new : y;
            StepTask st;
            st.k = k;
            st.op = layer.op;
            st.args = simd::StepArgs{fuse_input ? cell.w_ih.data : nullptr,
                                     cell.in,
                                     in + t * in_w,
                                     fuse_input ? nullptr : pre,
                                     cell.bias.data,
                                     cell.w_hh.data,
                                     layer.h_out,
                                     state_h(s, layer, ci, 0),
                                     cell.b_hn.data,
                                     layer.op == Op::kLstm ? state_c(s, layer, ci, 0) : nullptr,
                                     h_target,
                                     layer.hidden,
                                     layer.op == Op::kRnnRelu};
            if (s->threads == 1) {
              step_panels(&st, 0, panels);  // the streaming fast path: no pool, no indirection
            } else {
              const size_t work = macs_per_row + (fuse_input ? size_t{cols} * cell.in : 0);
              parallel_ranges(s->threadpool, panels, tile, work, step_panels, &st);
            }
            if (!cell.w_hr) {
              copy_floats(state_h(s, layer, ci, 0), y, layer.h_out);
              continue;
            }
          } else {
            // Without lengths every row advances together: the hidden state
            // is read from the previous step's output rows and the update
            // writes the new one straight into this step's (the state is
            // written once, after the last step). With lengths, rows that
            // have ended keep theirs, so h goes through the state.
            const bool direct = !lengths && !cell.w_hr;
            const bool first = i == 0 && done == 0;
            const size_t t_prev = d == 0 ? t - 1 : t + 1;
            const float* h_old = direct && !first ? out + t_prev * B * layer.out + d * layer.h_out
                                                  : state_h(s, layer, ci, 0);
            const size_t ldh = direct && !first ? layer.out : layer.h_out;
            BatchTask bt{s,     &layer, &cell, ci,    B,   t,
                         lengths, pre,  layer.op == Op::kGru ? s->gates_rec : pre,
                         h_old, ldh,
                         direct ? out + t * B * layer.out + d * layer.h_out : s->h_new,
                         direct ? layer.out : layer.hidden};
            parallel_ranges(s->threadpool, panels, tile, B * macs_per_row, batch_panels, &bt);
            if (direct) {
              if (done + i + 1 == T) {  // the last step: the state takes the final h
                for (size_t b = 0; b < B; ++b) {
                  copy_floats(state_h(s, layer, ci, b), out + (t * B + b) * layer.out + d * layer.h_out,
                              layer.h_out);
                }
              }
              continue;
            }
          }
          // Projection (LSTM proj_size), then commit h to the state and y.
          const float* h = s->h_new;
          size_t ldh = layer.hidden;
          if (cell.w_hr) {
            const simd::GemmArgs g{cell.w_hr.data, 1,       layer.hidden, s->h_new, layer.hidden,
                                   nullptr,        nullptr, s->h_proj,    layer.h_out, layer.h_out};
            gemm(s, g, B, panels_of(layer.h_out));
            h = s->h_proj;
            ldh = layer.h_out;
          }
          for (size_t b = 0; b < B; ++b) {
            float* y = out + (t * B + b) * layer.out + d * layer.h_out;
            if (!active(lengths, b, t)) {
              memset(y, 0, layer.h_out * sizeof(float));
              continue;
            }
            copy_floats(state_h(s, layer, ci, b), h + b * ldh, layer.h_out);
            copy_floats(y, h + b * ldh, layer.h_out);
          }
        }
      }
    }
    if (kl + 1 < layer.num_layers) {
      float* t = in;
      in = out;
      out = t;
    }
  }
  return out;
}

ferry_status fast_linear(ferry_session* s, const Layer& layer, uint32_t layer_index, const float* in, float* out,
                         size_t rows) {
  if (s->xnn_linear[layer_index] &&
      (s->engines.xnn_always || (s->xnn_linear_ok[layer_index] && rows >= kXnnpackMinRows))) {
    return xnn::run_fc(s->xnn_linear[layer_index], rows, in, out, s->threadpool);
  }
  const simd::GemmArgs g{layer.weight.data, 1, layer.in, in, layer.in, layer.bias.data, nullptr, out, layer.out,
                         layer.out};
  gemm(s, g, rows, panels_of(layer.out));
  return FERRY_OK;
}

void fast_activation(ferry_session* s, Op op, float* x, size_t n) {
  const simd::Kernels* k = s->engines.simd;
  switch (op) {
    case Op::kRelu: k->relu(x, n); break;
    case Op::kTanh: k->tanh(x, n); break;
    case Op::kSigmoid: k->sigmoid(x, n); break;
    default: break;
  }
}

// ---------------------------------------------------------------- XNNPACK --

namespace {

// The XNNPACK matrices of a session in a fixed order: every chosen cell's
// W_ih ([gate_cols, in], panel order), then every chosen Linear weight.
struct XnnMatrix {
  size_t n, k;
  const Matrix* w;
  const Matrix* bias;
  uint32_t gates;
  bool is_cell;
  uint32_t index;  // cell index or layer index
};

template <typename F>
ferry_status for_each_xnn_matrix(const ferry_model* m, const Engines& e, F&& f) {
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& l = m->layers[li];
    if (op_is_recurrent(l.op)) {
      for (uint32_t c = 0; c < l.num_layers * l.dirs; ++c) {
        const uint32_t ci = l.first_cell + c;
        if (!e.xnn_cell[ci]) continue;
        const Cell& cell = m->cells[ci];
        const ferry_status st = f(XnnMatrix{gate_cols(l), cell.in, &cell.w_ih, &cell.bias, l.gates, true, ci});
        if (st != FERRY_OK) return st;
      }
    } else if (l.op == Op::kLinear && e.xnn_linear[li]) {
      const ferry_status st = f(XnnMatrix{l.out, l.in, &l.weight, &l.bias, 1, false, li});
      if (st != FERRY_OK) return st;
    }
  }
  return FERRY_OK;
}

// Row-major [n][k] copy of a Panel8 matrix, rows in panel order (for a
// Linear, panel order is the natural order and only the first n rows exist).
void unpack_panel8(const XnnMatrix& x, float* dst) {
  const uint32_t G = x.gates;
  const float* w = x.w->data;
  for (size_t r = 0; r < x.n; ++r) {
    const size_t q = r / kPanel, j = r % kPanel;
    const size_t p = q / G, g = q % G;
    const float* src = w + (p * x.k * G + g) * kPanel + j;
    float* row = dst + r * x.k;
    for (size_t kk = 0; kk < x.k; ++kk) row[kk] = src[kk * G * kPanel];
  }
}

// Rows the auto probe compares: enough to run XNNPACK's widest row tile and
// its single-row tile.
constexpr size_t kProbeRows = 8;

}  // namespace

ferry_status xnn_region_bytes(const ferry_model* m, const Engines& e, size_t* bytes_out) {
  // Sizes depend on (n, k) only: measure each distinct shape once.
  struct Seen {
    size_t n, k, bytes;
  } seen[16];
  size_t nseen = 0, total = 0;
  const ferry_status st = for_each_xnn_matrix(m, e, [&](const XnnMatrix& x) {
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

size_t xnn_temp_floats(const ferry_model* m, const Engines& e) {
  size_t most = 0;
  for_each_xnn_matrix(m, e, [&](const XnnMatrix& x) {
    const size_t unpack = x.n * x.k;
    const size_t probe = kProbeRows * x.k + 2 * kProbeRows * x.n;
    if (unpack > most) most = unpack;
    if (probe > most) most = probe;
    return FERRY_OK;
  });
  return most;
}

ferry_status xnn_create_ops(ferry_session* s, uint8_t* region, size_t xnn_bytes, float* temp) {
  size_t used = 0;
  const ferry_model* m = s->model;
  return for_each_xnn_matrix(m, s->engines, [&](const XnnMatrix& x) {
    unpack_panel8(x, temp);
    void* op = nullptr;
    ferry_status st = xnn::create_fc(region, xnn_bytes, &used, x.n, x.k, x.k, x.n, temp,
                                     x.bias->data, &op);
    if (st != FERRY_OK) return st;
    bool ok = true;
    if (!s->engines.xnn_always) {
      // auto mixes XNNPACK (large calls) with the simd gemm (small ones and
      // lone steps): only if both give the same bits on this CPU.
      float* probe_x = temp;
      float* y_xnn = temp + kProbeRows * x.k;
      float* y_simd = y_xnn + kProbeRows * x.n;
      uint32_t seed = 0x9e3779b9u;
      for (size_t i = 0; i < kProbeRows * x.k; ++i) {
        seed = seed * 1664525u + 1013904223u;
        probe_x[i] = static_cast<float>(static_cast<int32_t>(seed >> 8) - (1 << 23)) * (1.0f / (1 << 23));
      }
      st = xnn::run_fc(op, kProbeRows, probe_x, y_xnn, nullptr);
      if (st != FERRY_OK) return st;
      const simd::GemmArgs g{x.w->data, x.gates, static_cast<uint32_t>(x.k), probe_x, x.k, x.bias->data,
                             nullptr, y_simd, x.n, static_cast<uint32_t>(x.n)};
      s->engines.simd->gemm(g, 0, kProbeRows, 0, static_cast<uint32_t>((x.n + kPanel - 1) / kPanel));
      ok = memcmp(y_xnn, y_simd, kProbeRows * x.n * sizeof(float)) == 0;
    }
    if (x.is_cell) {
      s->xnn_cell[x.index] = op;
      s->xnn_cell_ok[x.index] = ok;
    } else {
      s->xnn_linear[x.index] = op;
      s->xnn_linear_ok[x.index] = ok;
    }
    return FERRY_OK;
  });
}

}  // namespace ferry
