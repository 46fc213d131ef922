// The format 1.2 ops of the CPU backend (cpu_backend.h): Conv1d over time,
// pooling over time, embeddings, and the parameterised activations. Each
// runs on the layer's kernel set; nothing here depends on the ISA.
//
// Conv1d is patches (im2col) + the set's GEMM: for output step t and sample
// b, the patch of group g holds input (t*stride + k*dilation - pad_left,
// b, g*in_g + ci) at column ci*kernel + k, the order of PyTorch's
// weight[o][ci][k], and row (t, b) of the output is the group's weight
// matrix times that patch plus its bias. A causal conv (cpu_backend.h)
// takes the steps before the call from its state instead of zeros and
// leaves its last (kernel-1)*dilation inputs there, so a sequence split into
// ferry_step calls computes exactly the same patches and products as one
// ferry_run: bit for bit.
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include <string.h>

#include "backend/cpu/cpu_backend.h"

namespace ferry {
namespace cpu {
namespace {

// Input step t (any integer) of sample b, channel c, as the padding mode
// (or, for a causal conv, the state) says.
struct ConvSource {
  const Layer* l;
  const float* in;     // [T][B][C]
  const float* state;  // causal: [max_batch][history][C], oldest first
  size_t T, B, C, history;

  float at(ptrdiff_t t, size_t b, size_t c) const {
    if (t >= 0 && static_cast<size_t>(t) < T) return in[(static_cast<size_t>(t) * B + b) * C + c];
    if (state) return t < 0 ? state[(b * history + history + t) * C + c] : 0.0f;
    switch (l->pad_mode) {
      case PaddingMode::kReflect: {  // checked at the call: pad < T
        const ptrdiff_t r = t < 0 ? -t : 2 * (static_cast<ptrdiff_t>(T) - 1) - t;
        return in[(static_cast<size_t>(r) * B + b) * C + c];
      }
      case PaddingMode::kReplicate:
        return in[((t < 0 ? 0 : T - 1) * B + b) * C + c];
      default:
        return 0.0f;
    }
  }
};

size_t dtype_bytes(DType d) { return d == DType::kF32 ? 4 : d == DType::kF16 ? 2 : 1; }

}  // namespace

void conv1d(ferry_session* s, uint32_t li, const float* in, float* out, size_t T, size_t B,
            const int32_t* lengths) {
  CpuSession* cpu = cpu_of(s);
  const Layer& l = s->model->layers[li];
  const kernels::KernelSet* k = cpu->kernels.layer(li);
  const size_t C = l.in, O = l.out, groups = l.groups, in_g = C / groups, out_g = O / groups;
  const size_t K = l.kernel, patch = in_g * K;
  const size_t history = l.causal ? size_t{l.dilation} * (K - 1) : 0;
  float* state = l.causal ? cpu->state + l.state_offset * s->max_batch : nullptr;
  const ConvSource src{&l, in, state, T, B, C, history};
  const ptrdiff_t pad = l.causal ? static_cast<ptrdiff_t>(history) : l.pad_left;
  const size_t T_out = conv_output_steps(l, T), rows = T_out * B;
  for (size_t g = 0; g < groups; ++g) {
    Weight w = l.weight;
    w.data = static_cast<const uint8_t*>(l.weight.data) + g * l.group_stride * dtype_bytes(w.dtype);
    Weight bias = l.bias;
    if (bias) bias.data = l.bias.f32() + g * l.bias_group_stride;
    for (size_t r0 = 0; r0 < rows; r0 += kConvRows) {
      const size_t n = rows - r0 < kConvRows ? rows - r0 : kConvRows;
      for (size_t i = 0; i < n; ++i) {
        const size_t t = (r0 + i) / B, b = (r0 + i) % B;
        float* p = cpu->patches + i * patch;
        for (size_t ci = 0; ci < in_g; ++ci) {
          for (size_t kk = 0; kk < K; ++kk) {
            const ptrdiff_t ti = static_cast<ptrdiff_t>(t * l.stride + kk * l.dilation) - pad;
            p[ci * K + kk] = src.at(ti, b, g * in_g + ci);
          }
        }
      }
      const kernels::GemmArgs args{&w, cpu->patches, patch, bias ? &bias : nullptr, nullptr,
                                   out + r0 * O + g * out_g, O, static_cast<uint32_t>(out_g)};
      gemm(s, k, args, n, layout::panels_of(static_cast<uint32_t>(out_g)));
    }
  }
  if (!state) return;
  // The state takes each sample's last `history` valid inputs (a sample
  // past its length keeps what it had, as a recurrent layer does).
  for (size_t b = 0; b < B; ++b) {
    const size_t end = lengths ? static_cast<size_t>(lengths[b]) : T;
    float* st = state + b * history * C;
    if (end >= history) {
      for (size_t h = 0; h < history; ++h) memcpy(st + h * C, in + ((end - history + h) * B + b) * C, C * sizeof(float));
    } else {
      memmove(st, st + end * C, (history - end) * C * sizeof(float));
      for (size_t h = 0; h < end; ++h) memcpy(st + (history - end + h) * C, in + (h * B + b) * C, C * sizeof(float));
    }
  }
}

void pool(ferry_session* s, uint32_t li, const float* in, float* out, size_t T, size_t B, const int32_t* lengths) {
  const Layer& l = s->model->layers[li];
  const size_t F = l.in;
  float* state = cpu_of(s)->state + l.state_offset * s->max_batch;  // per sample: [F] then the count
  const bool mean = l.op == Op::kMeanPool;
  for (size_t b = 0; b < B; ++b) {
    float* acc = state + b * (F + 1);
    float& count = acc[F];
    const size_t end = lengths ? static_cast<size_t>(lengths[b]) : T;
    for (size_t t = 0; t < end; ++t) {
      const float* x = in + (t * B + b) * F;
      if (mean) {
        for (size_t f = 0; f < F; ++f) acc[f] += x[f];
      } else if (count == 0.0f) {
        memcpy(acc, x, F * sizeof(float));
      } else {
        for (size_t f = 0; f < F; ++f) acc[f] = (x[f] > acc[f] || x[f] != x[f]) ? x[f] : acc[f];  // NaN wins
      }
      count += 1.0f;
    }
    float* y = out + b * F;
    for (size_t f = 0; f < F; ++f) y[f] = mean ? acc[f] / count : acc[f];
  }
}

void embed(const ferry_session* s, const int32_t* tokens, size_t T, size_t B, float* out) {
  const ferry_model* m = s->model;
  const Layer& l = m->layers[0];
  const size_t dim = l.out;
  for (size_t t = 0; t < T; ++t) {
    for (size_t b = 0; b < B; ++b) {
      const int32_t id = m->batch_first ? tokens[b * T + t] : tokens[t * B + b];  // checked by the C API
      memcpy(out + (t * B + b) * dim, l.weight.f32() + static_cast<size_t>(id) * dim, dim * sizeof(float));
    }
  }
}

void activation(const ferry_session* s, uint32_t li, float* x, size_t rows) {
  const Layer& l = s->model->layers[li];
  const kernels::KernelSet* k = cpu_of(s)->kernels.layer(li);
  const size_t F = l.in, n = rows * F;
  switch (l.op) {
    case Op::kBatchNorm: k->scale_shift(x, rows, F, l.weight.f32(), l.bias.f32()); break;
    case Op::kLayerNorm:
      for (size_t r = 0; r < rows; ++r) {
        k->layer_norm(x + r * F, F, l.weight ? l.weight.f32() : nullptr, l.bias ? l.bias.f32() : nullptr, l.eps);
      }
      break;
    case Op::kPRelu: k->prelu(x, rows, F, l.weight.f32(), l.weight.rows()); break;
    case Op::kLeakyRelu: k->leaky_relu(x, n, l.alpha); break;
    case Op::kElu: k->elu(x, n, l.alpha); break;
    case Op::kGelu: (l.approximate_tanh ? k->gelu_tanh : k->gelu)(x, n); break;
    case Op::kSilu: k->silu(x, n); break;
    case Op::kHardtanh: k->hardtanh(x, n, l.alpha, l.beta); break;
    case Op::kLogSoftmax:
      for (size_t r = 0; r < rows; ++r) k->log_softmax(x + r * F, F);
      break;
    default: break;
  }
}

}  // namespace cpu
}  // namespace ferry
