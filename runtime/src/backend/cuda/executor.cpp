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

// A product C = bias + A W of `rows` rows: quantizes A into qact first
// where W's type reads quantized rows.
ferry_status product(const ExecState& x, const DeviceOps& ops, void* ctx, const Weight& w, const Weight& bias,
                     const float* a, size_t lda, size_t rows, float* c, size_t ldc, uint32_t n) {
  GemmParams g{};
  g.a = a;
  g.lda = static_cast<int64_t>(lda);
  g.m = static_cast<int64_t>(rows);
  g.w = device_matrix(x, w);
  g.bias = device_floats(x, bias);
  g.c = c;
  g.ldc = static_cast<int64_t>(ldc);
  g.n = static_cast<int32_t>(n);
  if (quantizes_activations(g.w.type)) {
    if (rows > x.dev.qact_rows || activation_row_bytes(g.w.type, w.cols) > x.dev.qact_ld) {
      return fail(FERRY_INVALID_STATE, "cuda: internal error: %zu quantized rows of %u values exceed the plan", rows,
                  w.cols);
    }
    QuantizeParams q{};
    q.x = a;
    q.ldx = static_cast<int64_t>(lda);
    q.rows = static_cast<int64_t>(rows);
    q.k = static_cast<int32_t>(w.cols);
    q.kp = static_cast<int32_t>(padded_cols(g.w.type, w.cols));
    q.q = reinterpret_cast<int8_t*>(x.device + x.dev.qact);
    q.ldq = static_cast<int64_t>(x.dev.qact_ld);
    q.scales = reinterpret_cast<float*>(x.device + x.dev.qscales);
    const ferry_status st = ops.quantize(ctx, q);
    if (st != FERRY_OK) return st;
    g.qa = q.q;
    g.ldqa = q.ldq;
    g.a_scales = q.scales;
  }
  return ops.gemm(ctx, g);
}

// The layout of the model's input.
int32_t io_layout(const ferry_model* m) {
  return m->channels_first ? kChannelsFirst : m->batch_first ? kBatchFirst : kTimeMajor;
}

// The layout of a sequence output (the input's, or Model.output_layout).
int32_t output_layout(const ferry_model* m) {
  static_assert(int{FERRY_LAYOUT_TIME_MAJOR} == int{kTimeMajor} && int{FERRY_LAYOUT_BATCH_FIRST} == int{kBatchFirst} &&
                    int{FERRY_LAYOUT_CHANNELS_FIRST} == int{kChannelsFirst},
                "ferry_layout and IoLayout");
  return m->output_layout;
}

// A Conv1d layer's arguments (in -> out, `steps` input steps).
ConvParams conv_params(const ExecState& x, const Layer& l, const float* in, float* out, size_t steps, size_t batch,
                       const int32_t* lengths) {
  ConvParams p{};
  p.in = in;
  p.out = out;
  const size_t history = l.causal ? size_t{l.dilation} * (l.kernel - 1) : 0;
  p.state = l.causal ? reinterpret_cast<float*>(x.device + x.dev.layer_state) + size_t{l.state_offset} * x.max_batch
                     : nullptr;
  p.weight = device_floats(x, l.weight);
  p.bias = device_floats(x, l.bias);
  p.lengths = lengths;
  p.steps = static_cast<int64_t>(steps);
  p.steps_out = static_cast<int64_t>(conv_output_steps(l, steps));
  p.batch = static_cast<int64_t>(batch);
  p.group_stride = static_cast<int64_t>(l.group_stride);
  p.bias_group_stride = static_cast<int64_t>(l.bias_group_stride);
  p.channels = static_cast<int32_t>(l.in);
  p.out_channels = static_cast<int32_t>(l.out);
  p.groups = static_cast<int32_t>(l.groups);
  p.kernel = static_cast<int32_t>(l.kernel);
  p.stride = static_cast<int32_t>(l.stride);
  p.dilation = static_cast<int32_t>(l.dilation);
  p.pad = l.causal ? static_cast<int32_t>(history) : static_cast<int32_t>(l.pad_left);
  p.pad_mode = static_cast<int32_t>(l.pad_mode);
  p.history = static_cast<int32_t>(history);
  return p;
}

}  // namespace

const uint8_t* device_ptr(const ExecState& x, const void* host) {
  const uint8_t* span = x.model->bytes + x.dev.weights_begin;
  return x.device + (static_cast<const uint8_t*>(host) - span);
}

const float* device_floats(const ExecState& x, const Weight& w) {
  return w ? reinterpret_cast<const float*>(device_ptr(x, w.data)) : nullptr;
}

DeviceWeight device_matrix(const ExecState& x, const Weight& w) {
  DeviceWeight d{};
  if (!w) return d;
  d.data = device_ptr(x, w.data);
  d.scales = w.dtype == DType::kI8 || w.dtype == DType::kI4 ? device_ptr(x, w.scales) : nullptr;
  d.type = static_cast<int32_t>(w.dtype);
  d.gates = w.gates;
  d.cols = static_cast<int32_t>(w.cols);
  return d;
}

bool layer_op(const ExecState& x, const Layer& l, OpParams* op, bool* row_op) {
  OpParams p{};
  p.features = static_cast<int32_t>(l.in);
  p.alpha = l.alpha;
  p.beta = l.beta;
  p.eps = l.eps;
  p.weight = device_floats(x, l.weight);
  p.bias = device_floats(x, l.bias);
  p.weight_count = l.weight ? static_cast<int32_t>(l.weight.rows()) : 0;
  bool rows = false;
  switch (l.op) {
    case Op::kRelu: p.op = kOpRelu; break;
    case Op::kTanh: p.op = kOpTanh; break;
    case Op::kSigmoid: p.op = kOpSigmoid; break;
    case Op::kLeakyRelu: p.op = kOpLeakyRelu; break;
    case Op::kElu: p.op = kOpElu; break;
    case Op::kHardtanh: p.op = kOpHardtanh; break;
    case Op::kSilu: p.op = kOpSilu; break;
    case Op::kGelu: p.op = l.approximate_tanh ? kOpGeluTanh : kOpGelu; break;
    case Op::kPRelu: p.op = kOpPRelu; break;
    case Op::kBatchNorm: p.op = kOpScaleShift; break;
    case Op::kSoftmax: p.op = kOpSoftmax, rows = true; break;
    case Op::kLogSoftmax: p.op = kOpLogSoftmax, rows = true; break;
    case Op::kLayerNorm: p.op = kOpLayerNorm, rows = true; break;
    default: return false;
  }
  *op = p;
  *row_op = rows;
  return true;
}

uint32_t act_index_before(const ferry_model* m, uint32_t li) {
  uint32_t index = 0;
  for (uint32_t i = 0; i < li && i < m->num_layers; ++i) {
    const Layer& l = m->layers[i];
    if (op_is_recurrent(l.op)) {
      index ^= l.num_layers & 1;  // each stacked layer flips
    } else if (l.op == Op::kLast || l.op == Op::kLinear || l.op == Op::kConv1d || l.op == Op::kMeanPool ||
               l.op == Op::kMaxPool || l.op == Op::kEmbedding) {
      index ^= 1;
    }  // the others work in place (Save copies out, Add adds in)
  }
  return index;
}

size_t steps_at(const ferry_model* m, uint32_t li, size_t seq) { return steps_before(m, li, seq); }

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
        p.w_hh = device_matrix(*x, cell.w_hh);
        p.b_hn = device_floats(*x, cell.b_hn);
        p.w_hr = device_matrix(*x, cell.w_hr);
        p.xproj = reinterpret_cast<const float*>(device + x->dev.xproj);
        p.h[0] = reinterpret_cast<float*>(device + cd.h[0]);
        p.h[1] = reinterpret_cast<float*>(device + cd.h[1]);
        p.c = cd.c != kNone ? reinterpret_cast<float*>(device + cd.c) : nullptr;
        p.h_full = layer.h_out != layer.hidden ? reinterpret_cast<float*>(device + x->dev.h_full) : nullptr;
        // Stacked layer k reads act[start ^ (k & 1)] and writes the other.
        p.y = act(*x, start ^ (k & 1) ^ 1);
        p.counter = reinterpret_cast<int32_t*>(device + cd.counter);
        p.desc = desc;
        r.step = with_decomposition(p, r.recurrence.step);
        r.resident = with_decomposition(p, r.recurrence.resident);
        r.use_persistent = r.recurrence.persistent;
        r.parity = 0;
        r.layer = li;
        r.in_width = k == 0 ? layer.in : layer.out;
      }
    }
  }
  return FERRY_OK;
}

void stage_call(ExecState& x, const RunCall& call) {
  const ferry_model* m = x.model;
  const size_t B = call.batch, T = call.seq;
  // 1. Descriptor and input (floats, or token ids) in the staging block.
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
  const size_t in_bytes = B * T * m->input_size * sizeof(float);  // token ids: input_size 1, 4 bytes each
  memcpy(x.staging + x.host.input, call.tokens ? static_cast<const void*>(call.tokens) : call.input, in_bytes);
}

ferry_status device_call(ExecState& x, const DeviceOps& ops, void* ctx, const RunCall& call) {
  const ferry_model* m = x.model;
  const size_t B = call.batch, T = call.seq;
  const size_t in_bytes = B * T * m->input_size * sizeof(float);
  ferry_status st = FERRY_OK;

  // 2. Input into act0, time-major (token ids stay as they are: the
  //    Embedding layer reads them where they lie).
  const int32_t layout = io_layout(m);
  const bool transpose = !call.tokens && layout != kTimeMajor && T > 1;
  IngestParams in{};
  in.steps = static_cast<int64_t>(T);
  in.batch = static_cast<int64_t>(B);
  in.features = m->input_size;
  const int32_t* tokens = nullptr;
  if (!x.zero_copy) {
    // act0 follows the descriptor region: one transfer carries both.
    if ((st = ops.to_device(ctx, x.device + x.dev.desc, x.staging, x.dev.desc_bytes + in_bytes)) != FERRY_OK) return st;
    tokens = reinterpret_cast<const int32_t*>(act(x, 0));
    if (transpose) {
      in.src = act(x, 0);
      in.dst = act(x, 1);
      in.layout = layout;
      if ((st = ops.ingest(ctx, in)) != FERRY_OK) return st;
      in.src = act(x, 1);
      in.dst = act(x, 0);
      in.layout = kTimeMajor;
      if ((st = ops.ingest(ctx, in)) != FERRY_OK) return st;
    }
  } else {
    tokens = reinterpret_cast<const int32_t*>(x.staging_device + x.host.input);
    if (!call.tokens) {
      in.src = reinterpret_cast<const float*>(x.staging_device + x.host.input);
      in.dst = act(x, 0);
      in.layout = transpose ? layout : kTimeMajor;
      if ((st = ops.ingest(ctx, in)) != FERRY_OK) return st;
    }
  }
  const CallDesc* desc_dev = x.desc_for_kernels();
  const int32_t* lengths_dev = call.lengths ? reinterpret_cast<const int32_t*>(desc_dev + 1) : nullptr;

  // 3. The chain.
  size_t steps = T;  // time steps in the current buffer; 1 after `last` / pooling
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
        float* xproj = reinterpret_cast<float*>(x.device + x.dev.xproj);
        const uint32_t cols = layout::gate_row_floats(layer.gates, layer.hidden);
        for (uint32_t k = 0; k < layer.num_layers; ++k) {
          for (uint32_t d = 0; d < layer.dirs; ++d) {
            const uint32_t ci = layer.first_cell + k * layer.dirs + d;
            const CellRuntime& cell = x.cells[ci];
            if (cell.step.y != out_buf) {
              return fail(FERRY_INVALID_STATE, "cuda: internal error: layers[%u] cell %u writes the wrong buffer", li, ci);
            }
            // The input projections of every step: xproj = bias + W_ih x.
            const Cell& c = m->cells[ci];
            st = product(x, ops, ctx, c.w_ih, c.bias, in_buf, cell.in_width, rows, xproj, cols, cols);
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
        st = ops.last(ctx, p);
        steps = 1;
        lengths = nullptr;
        break;
      }
      case Op::kLinear:
        st = product(x, ops, ctx, layer.weight, layer.bias, cur, layer.in, rows, other, layer.out, layer.out);
        break;
      case Op::kConv1d: {
        const ConvParams p = conv_params(x, layer, cur, other, steps, B, lengths);
        if ((st = ops.conv(ctx, p)) != FERRY_OK) return st;
        if (p.state) st = ops.conv_state(ctx, p);
        steps = static_cast<size_t>(p.steps_out);
        break;
      }
      case Op::kMeanPool: case Op::kMaxPool: {
        PoolParams p{};
        p.in = cur;
        p.out = other;
        p.state = reinterpret_cast<float*>(x.device + x.dev.layer_state) + size_t{layer.state_offset} * x.max_batch;
        p.lengths = lengths;
        p.steps = static_cast<int64_t>(steps);
        p.batch = static_cast<int64_t>(B);
        p.features = static_cast<int32_t>(layer.in);
        p.mean = layer.op == Op::kMeanPool ? 1 : 0;
        st = ops.pool(ctx, p);
        steps = 1;
        lengths = nullptr;
        break;
      }
      case Op::kEmbedding: {
        EmbedParams p{};
        p.tokens = tokens;
        p.weight = device_floats(x, layer.weight);
        p.dst = other;
        p.steps = static_cast<int64_t>(steps);
        p.batch = static_cast<int64_t>(B);
        p.dim = static_cast<int32_t>(layer.out);
        p.batch_first = m->batch_first ? 1 : 0;
        st = ops.embed(ctx, p);
        break;
      }
      case Op::kSave:
        st = ops.copy(ctx, reinterpret_cast<float*>(x.device + x.dev.slots) + layer.slot * x.dev.slot_floats, cur,
                      rows * layer.in * sizeof(float));
        break;
      case Op::kAdd:
        st = ops.add(ctx, cur, reinterpret_cast<const float*>(x.device + x.dev.slots) + layer.slot * x.dev.slot_floats,
                     rows * layer.in);
        break;
      case Op::kIdentity:
        break;
      default: {
        OpParams op{};
        bool row = false;
        if (!layer_op(x, layer, &op, &row)) {
          return fail(FERRY_INVALID_STATE, "cuda: internal error: layers[%u] op %u has no CUDA kernel", li,
                      static_cast<unsigned>(layer.op));
        }
        st = row ? ops.rows(ctx, op, cur, rows) : ops.pointwise(ctx, op, cur, rows);
        break;
      }
    }
    if (st != FERRY_OK) return st;
  }

  // 4. Output in the output's layout, zeros past each sample's length.
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
  e.layout = sequence && steps > 1 ? output_layout(m) : kTimeMajor;
  e.lengths = sequence ? lengths : nullptr;
  if (x.zero_copy) {
    e.dst = reinterpret_cast<float*>(x.staging_device + x.host.output);
    if ((st = ops.emit(ctx, e)) != FERRY_OK) return st;
    return ops.finish(ctx);
  } else {
    const float* src = result;
    if (e.layout != kTimeMajor || e.lengths) {
      e.dst = act(x, ai ^ 1);
      if ((st = ops.emit(ctx, e)) != FERRY_OK) return st;
      src = e.dst;
    }
    if ((st = ops.to_host(ctx, call.output, src, out_bytes)) != FERRY_OK) return st;
    return ops.finish(ctx);
  }
}

void complete_call(ExecState& x, const RunCall& call) {
  const ferry_model* m = x.model;
  if (x.zero_copy) {
    const size_t steps = steps_at(m, m->num_layers, call.seq);
    memcpy(call.output, x.staging + x.host.output, steps * call.batch * m->output_size * sizeof(float));
  }
  // 5. Every cell's state moved to its other buffer once per step.
  const CallDesc* desc = reinterpret_cast<const CallDesc*>(x.staging);
  for (uint32_t c = 0; c < m->num_cells; ++c) {
    x.cells[c].parity = static_cast<uint8_t>((x.cells[c].parity + desc->steps[c]) & 1);
  }
}

ferry_status execute(ExecState& x, const DeviceOps& ops, void* ctx, const RunCall& call) {
  stage_call(x, call);
  const ferry_status st = device_call(x, ops, ctx, call);
  if (st != FERRY_OK) return st;
  complete_call(x, call);
  return FERRY_OK;
}

ferry_status copy_state(ExecState& x, const DeviceOps& ops, void* ctx, size_t batch, float* user, bool to_user) {
  const ferry_model* m = x.model;
  ferry_status st = FERRY_OK;
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& layer = m->layers[li];
    if (!layer.state_floats) continue;
    float* u = user + size_t{layer.state_offset} * batch;
    if (!op_is_recurrent(layer.op)) {  // Conv1d history, pooling sums: one block per sample, as on the CPU
      float* internal =
          reinterpret_cast<float*>(x.device + x.dev.layer_state) + size_t{layer.state_offset} * x.max_batch;
      const size_t bytes = batch * layer.state_floats * sizeof(float);
      st = to_user ? ops.to_host(ctx, u, internal, bytes) : ops.to_device(ctx, internal, u, bytes);
      if (st != FERRY_OK) return st;
      continue;
    }
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
  if (x.dev.layer_state != kNone &&
      (st = ops.zero(ctx, x.device + x.dev.layer_state, x.max_batch * m->state_floats * sizeof(float))) != FERRY_OK) {
    return st;
  }
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
