#include "backend/cuda/executor.h"

#include <string.h>

#include "common/status.h"

namespace ferry {
namespace cuda {
namespace {

float* act(const ExecState& x, uint32_t index) {
  return reinterpret_cast<float*>(x.device + x.dev.act[index & 1]);
}

ferry_status run_cell_steps(const CellRuntime& cell, size_t steps, const DeviceOps& ops, void* ctx) {
  if (cell.use_persistent && steps > 1) return ops.recurrent(ctx, cell, StepLaunch::kPersistent);
  size_t done = 0;
  ferry_status st = FERRY_OK;
  for (; steps - done >= static_cast<size_t>(kGraphSteps); done += kGraphSteps) {
    if ((st = ops.recurrent(ctx, cell, StepLaunch::kGraphMany)) != FERRY_OK) return st;
  }
  for (; done < steps; ++done) {
    if ((st = ops.recurrent(ctx, cell, StepLaunch::kGraphOne)) != FERRY_OK) return st;
  }
  return FERRY_OK;
}

// The input projections of every step of one cell: xproj = bias + W_ih x.
GemmParams input_projection(const ExecState& x, const Cell& cell, const Layer& layer, const float* in,
                            uint32_t in_width, size_t rows) {
  GemmParams g{};
  g.a = in;
  g.lda = in_width;
  g.m = static_cast<int64_t>(rows);
  g.w = device_weight(x, cell.w_ih);
  g.gates = static_cast<int32_t>(layer.gates);
  g.k = static_cast<int32_t>(in_width);
  g.bias = cell.bias ? device_weight(x, cell.bias) : nullptr;
  g.c = reinterpret_cast<float*>(x.device + x.dev.xproj);
  g.n = static_cast<int32_t>(layout::gate_row_floats(layer.gates, layer.hidden));
  g.ldc = g.n;
  return g;
}

}  // namespace

const float* device_weight(const ExecState& x, const Weight& w) {
  if (!w) return nullptr;
  const uint8_t* span = x.model->bytes + x.dev.weights_begin;
  return reinterpret_cast<const float*>(x.device + (static_cast<const uint8_t*>(w.data) - span));
}

uint32_t act_index_before(const ferry_model* m, uint32_t li) {
  uint32_t index = 0;
  for (uint32_t i = 0; i < li && i < m->num_layers; ++i) {
    const Layer& l = m->layers[i];
    if (op_is_recurrent(l.op)) {
      index ^= l.num_layers & 1;  // each stacked layer flips
    } else if (l.op == Op::kLast || l.op == Op::kLinear) {
      index ^= 1;
    }  // activations work in place
  }
  return index;
}

size_t steps_at(const ferry_model* m, uint32_t li, size_t seq) {
  for (uint32_t i = 0; i < li && i < m->num_layers; ++i) {
    if (m->layers[i].op == Op::kLast) return 1;
  }
  return seq;
}

ferry_status build_exec_state(const ferry_model* m, const SessionConfig& config, const DeviceCaps& caps,
                              bool zero_copy, uint8_t* device, uint8_t* staging, uint8_t* staging_device,
                              CellRuntime* cells, ExecState* x) {
  *x = ExecState();
  x->model = m;
  x->max_batch = config.max_batch;
  x->max_seq = config.max_seq;
  x->zero_copy = zero_copy;
  CellDevice cell_device[kMaxCells];
  ferry_status st = plan_device(m, config.max_batch, config.max_seq, &x->dev, cell_device);
  if (st != FERRY_OK) return st;
  ArenaPlan scratch;  // only the staging-relative offsets are used
  st = plan_host(m, config.max_batch, config.max_seq, x->dev, caps.host_page_size, 0, 0, &scratch, &x->host);
  if (st != FERRY_OK) return st;
  x->device = device;
  x->staging = staging;
  x->staging_device = zero_copy ? staging_device : nullptr;
  x->cells = cells;
  const CallDesc* desc = x->desc_for_kernels();

  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& layer = m->layers[li];
    if (!op_is_recurrent(layer.op)) continue;
    const uint32_t start = act_index_before(m, li);
    for (uint32_t k = 0; k < layer.num_layers; ++k) {
      for (uint32_t d = 0; d < layer.dirs; ++d) {
        const uint32_t ci = layer.first_cell + k * layer.dirs + d;
        const Cell& cell = m->cells[ci];
        CellRuntime& r = cells[ci];
        r = CellRuntime();
        if ((st = choose_recurrence(cell_shape(layer), config.max_batch, caps, &r.recurrence)) != FERRY_OK) return st;
        const CellDevice& cd = cell_device[ci];
        RecurrentParams p{};
        p.op = cell_shape(layer).op;
        p.gates = static_cast<int32_t>(layer.gates);
        p.hidden = static_cast<int32_t>(layer.hidden);
        p.h_out = static_cast<int32_t>(layer.h_out);
        p.cols = static_cast<int32_t>(layout::gate_row_floats(layer.gates, layer.hidden));
        p.dir = static_cast<int32_t>(d);
        p.cell = static_cast<int32_t>(ci);
        p.y_stride = static_cast<int32_t>(layer.out);
        p.y_offset = static_cast<int32_t>(d * layer.h_out);
        p.w_hh = device_weight(*x, cell.w_hh);
        p.b_hn = device_weight(*x, cell.b_hn);
        p.w_hr = device_weight(*x, cell.w_hr);
        p.xproj = reinterpret_cast<const float*>(device + x->dev.xproj);
        p.h[0] = reinterpret_cast<float*>(device + cd.h[0]);
        p.h[1] = reinterpret_cast<float*>(device + cd.h[1]);
        p.c = cd.c != kNone ? reinterpret_cast<float*>(device + cd.c) : nullptr;
        p.h_full = layer.h_out != layer.hidden ? reinterpret_cast<float*>(device + x->dev.h_full) : nullptr;
        // Stacked layer k reads act[start ^ (k & 1)] and writes the other.
        p.y = act(*x, start ^ (k & 1) ^ 1);
        p.counter = reinterpret_cast<int32_t*>(device + cd.counter);
        p.desc = desc;
        const auto with = [&p](const Decomposition& dec) {
          RecurrentParams q = p;
          q.panels_per_block = static_cast<int32_t>(dec.panels_per_block);
          q.batch_tile = static_cast<int32_t>(dec.batch_tile);
          q.proj_panels_per_block = static_cast<int32_t>(dec.proj_panels_per_block);
          q.proj_batch_tile = static_cast<int32_t>(dec.proj_batch_tile);
          q.batch_slices = static_cast<int32_t>(dec.batch_slices);
          return q;
        };
        r.step = with(r.recurrence.step);
        r.resident = with(r.recurrence.resident);
        r.use_persistent = r.recurrence.persistent;
        r.parity = 0;
        r.layer = li;
        r.in_width = k == 0 ? layer.in : layer.out;
      }
    }
  }
  return FERRY_OK;
}

ferry_status execute(ExecState& x, const DeviceOps& ops, void* ctx, const RunCall& call) {
  const ferry_model* m = x.model;
  const size_t B = call.batch, T = call.seq;
  ferry_status st = FERRY_OK;

  // 1. Descriptor and input in the staging block.
  CallDesc* desc = reinterpret_cast<CallDesc*>(x.staging);
  memset(desc, 0, sizeof(CallDesc));
  desc->batch = static_cast<int32_t>(B);
  desc->has_lengths = call.lengths ? 1 : 0;
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& layer = m->layers[li];
    if (!op_is_recurrent(layer.op)) continue;
    const size_t steps = steps_at(m, li, T);
    for (uint32_t c = 0; c < layer.num_layers * layer.dirs; ++c) {
      desc->steps[layer.first_cell + c] = static_cast<int32_t>(steps);
      desc->parity[layer.first_cell + c] = x.cells[layer.first_cell + c].parity;
    }
  }
  if (call.lengths) memcpy(desc + 1, call.lengths, B * sizeof(int32_t));
  const size_t in_bytes = B * T * m->input_size * sizeof(float);
  memcpy(x.staging + x.host.input, call.input, in_bytes);

  // 2. Input into act0, time-major.
  const bool transpose = m->batch_first && T > 1;
  IngestParams in{};
  in.steps = static_cast<int64_t>(T);
  in.batch = static_cast<int64_t>(B);
  in.features = m->input_size;
  if (!x.zero_copy) {
    // act0 follows the descriptor region: one transfer carries both.
    if ((st = ops.to_device(ctx, x.device + x.dev.desc, x.staging, x.dev.desc_bytes + in_bytes)) != FERRY_OK) return st;
    if (transpose) {
      in.src = act(x, 0);
      in.dst = act(x, 1);
      in.batch_first = 1;
      if ((st = ops.ingest(ctx, in)) != FERRY_OK) return st;
      in.src = act(x, 1);
      in.dst = act(x, 0);
      in.batch_first = 0;
      if ((st = ops.ingest(ctx, in)) != FERRY_OK) return st;
    }
  } else {
    in.src = reinterpret_cast<const float*>(x.staging_device + x.host.input);
    in.dst = act(x, 0);
    in.batch_first = transpose ? 1 : 0;
    if ((st = ops.ingest(ctx, in)) != FERRY_OK) return st;
  }
  const CallDesc* desc_dev = x.desc_for_kernels();
  const int32_t* lengths_dev = call.lengths ? reinterpret_cast<const int32_t*>(desc_dev + 1) : nullptr;

  // 3. The chain.
  size_t steps = T;
  const int32_t* lengths = lengths_dev;
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& layer = m->layers[li];
    const uint32_t ai = act_index_before(m, li);
    float* cur = act(x, ai);
    float* other = act(x, ai ^ 1);
    const size_t rows = steps * B;
    switch (layer.op) {
      case Op::kLstm: case Op::kGru: case Op::kRnnTanh: case Op::kRnnRelu: {
        float* in_buf = cur;
        float* out_buf = other;
        for (uint32_t k = 0; k < layer.num_layers; ++k) {
          for (uint32_t d = 0; d < layer.dirs; ++d) {
            const uint32_t ci = layer.first_cell + k * layer.dirs + d;
            const CellRuntime& cell = x.cells[ci];
            if (cell.step.y != out_buf) {
              return fail(FERRY_INVALID_STATE, "cuda: internal error: layers[%u] cell %u writes the wrong buffer", li, ci);
            }
            st = ops.gemm(ctx, input_projection(x, m->cells[ci], layer, in_buf, cell.in_width, rows));
            if (st != FERRY_OK) return st;
            if ((st = run_cell_steps(cell, steps, ops, ctx)) != FERRY_OK) return st;
          }
          float* t = in_buf;
          in_buf = out_buf;
          out_buf = t;
        }
        break;
      }
      case Op::kLast: {
        LastParams p{};
        p.src = cur;
        p.dst = other;
        p.steps = static_cast<int64_t>(steps);
        p.batch = static_cast<int64_t>(B);
        p.features = layer.in;
        p.lengths = lengths;
        if ((st = ops.last(ctx, p)) != FERRY_OK) return st;
        steps = 1;
        lengths = nullptr;
        break;
      }
      case Op::kLinear: {
        GemmParams g{};
        g.a = cur;
        g.lda = layer.in;
        g.m = static_cast<int64_t>(rows);
        g.w = device_weight(x, layer.weight);
        g.gates = 1;
        g.k = static_cast<int32_t>(layer.in);
        g.bias = device_weight(x, layer.bias);
        g.c = other;
        g.ldc = layer.out;
        g.n = static_cast<int32_t>(layer.out);
        if ((st = ops.gemm(ctx, g)) != FERRY_OK) return st;
        break;
      }
      case Op::kRelu: st = ops.activation(ctx, kActRelu, cur, rows * layer.in); break;
      case Op::kTanh: st = ops.activation(ctx, kActTanh, cur, rows * layer.in); break;
      case Op::kSigmoid: st = ops.activation(ctx, kActSigmoid, cur, rows * layer.in); break;
      case Op::kSoftmax: st = ops.softmax(ctx, cur, rows, layer.in); break;
      case Op::kIdentity: break;
      default:  // the format 1.2 ops: plan.cpp refuses them when the session is made
        return fail(FERRY_INVALID_STATE, "cuda: internal error: layers[%u] op %u reached the CUDA chain", li,
                    static_cast<unsigned>(layer.op));
    }
    if (st != FERRY_OK) return st;
  }

  // 4. Output in the model's layout, zeros past each sample's length.
  const uint32_t ai = act_index_before(m, m->num_layers);
  float* result = act(x, ai);
  const size_t F = m->output_size;
  const size_t out_bytes = steps * B * F * sizeof(float);
  const bool sequence = m->output_is_sequence;
  EmitParams e{};
  e.src = result;
  e.steps = static_cast<int64_t>(steps);
  e.batch = static_cast<int64_t>(B);
  e.features = static_cast<int64_t>(F);
  e.batch_first = sequence && m->batch_first && steps > 1 ? 1 : 0;
  e.lengths = sequence ? lengths : nullptr;
  if (x.zero_copy) {
    e.dst = reinterpret_cast<float*>(x.staging_device + x.host.output);
    if ((st = ops.emit(ctx, e)) != FERRY_OK) return st;
    if ((st = ops.finish(ctx)) != FERRY_OK) return st;
    memcpy(call.output, x.staging + x.host.output, out_bytes);
  } else {
    const float* src = result;
    if (e.batch_first || e.lengths) {
      e.dst = act(x, ai ^ 1);
      if ((st = ops.emit(ctx, e)) != FERRY_OK) return st;
      src = e.dst;
    }
    if ((st = ops.to_host(ctx, call.output, src, out_bytes)) != FERRY_OK) return st;
    if ((st = ops.finish(ctx)) != FERRY_OK) return st;
  }

  // 5. Every cell's state moved to its other buffer once per step.
  for (uint32_t c = 0; c < m->num_cells; ++c) {
    x.cells[c].parity = static_cast<uint8_t>((x.cells[c].parity + desc->steps[c]) & 1);
  }
  return FERRY_OK;
}

ferry_status copy_state(ExecState& x, const DeviceOps& ops, void* ctx, size_t batch, float* user, bool to_user) {
  const ferry_model* m = x.model;
  ferry_status st = FERRY_OK;
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& layer = m->layers[li];
    if (!op_is_recurrent(layer.op)) continue;
    float* u = user + size_t{layer.state_offset} * batch;
    const uint32_t cells = layer.num_layers * layer.dirs;
    for (int part = 0; part < (layer.op == Op::kLstm ? 2 : 1); ++part) {
      const size_t width = part == 0 ? layer.h_out : layer.hidden;
      for (uint32_t c = 0; c < cells; ++c) {
        const CellRuntime& cell = x.cells[layer.first_cell + c];
        float* internal = part == 0 ? cell.step.h[cell.parity] : cell.step.c;
        const size_t bytes = batch * width * sizeof(float);  // rows 0..batch-1 are contiguous
        st = to_user ? ops.to_host(ctx, u, internal, bytes) : ops.to_device(ctx, internal, u, bytes);
        if (st != FERRY_OK) return st;
        u += batch * width;
      }
    }
  }
  return ops.finish(ctx);
}

ferry_status reset_state(ExecState& x, const DeviceOps& ops, void* ctx) {
  const ferry_model* m = x.model;
  ferry_status st = FERRY_OK;
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& layer = m->layers[li];
    if (!op_is_recurrent(layer.op)) continue;
    for (uint32_t c = 0; c < layer.num_layers * layer.dirs; ++c) {
      const CellRuntime& cell = x.cells[layer.first_cell + c];
      if ((st = ops.zero(ctx, cell.step.h[cell.parity], x.max_batch * layer.h_out * sizeof(float))) != FERRY_OK) {
        return st;
      }
      if (cell.step.c && (st = ops.zero(ctx, cell.step.c, x.max_batch * layer.hidden * sizeof(float))) != FERRY_OK) {
        return st;
      }
    }
  }
  return ops.finish(ctx);
}

}  // namespace cuda
}  // namespace ferry
