// The chain's ops other than the matrix products and the recurrence, each
// written once as host + device functions over a tile of (samples,
// features): the kernels of ops.cu call them (a grid-stride loop gives each
// thread its lanes), and so can any other kernel (the streaming step and a
// whole-sequence run use the same code, and a later resident kernel can
// call them between its phases); the CPU emulation of the kernels in
// tests/unit/test_cuda_host.cpp calls the same functions.
//
// Semantics are the CPU backend's (backend/cpu/executor.cpp, ops.cpp and
// the reference kernels, kernels/reference/reference.cpp), which are
// PyTorch's: the same formulas in the same order of operations, so a row op
// (softmax, log-softmax, LayerNorm) sums its row in index order, as the
// reference does, one thread per row. Only the libm functions differ
// (CUDA's expf, tanhf, erff, expm1f, logf: within 2 ulp), and the kernels
// are compiled with --fmad=false, so no multiply-add here is fused unless
// written fmaf.
//
// Buffers are time-major [T][B][F] ("rows" = T * B) except where a struct
// says otherwise.
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/device_math.h"

namespace ferry {
namespace cuda {

// A load of the caller's input in the mapped staging block (zero copy): not
// cached (ld.global.cv), so that a kernel that stays resident across calls
// reads what the host wrote for this one, never a line cached for the last.
#if defined(__CUDA_ARCH__)
#define FERRY_LOAD_MAPPED(ptr) __ldcv(ptr)
#else
#define FERRY_LOAD_MAPPED(ptr) (*(ptr))
#endif

// -------------------------------------------------------- input/output --

// How the model's input (and a sequence output) lies in the caller's
// buffer: [T][B][F], [B][T][F] or [B][F][T] (--layout tbf, btf, bft).
enum IoLayout : int32_t { kTimeMajor = 0, kBatchFirst = 1, kChannelsFirst = 2 };

// Index of (t, b, f) in a buffer of `layout`.
FERRY_HD size_t io_index(int32_t layout, size_t t, size_t b, size_t f, size_t T, size_t B, size_t F) {
  return layout == kBatchFirst ? (b * T + t) * F + f : layout == kChannelsFirst ? (b * F + f) * T + t
                                                                                 : (t * B + b) * F + f;
}

// The model's layout (src) into time-major (dst).
struct IngestParams {
  const float* src;
  float* dst;
  int64_t steps, batch, features;
  int32_t layout;
};

// Time-major element i of dst.
FERRY_HD void ingest_element(const IngestParams& p, size_t i) {
  const size_t F = static_cast<size_t>(p.features), B = static_cast<size_t>(p.batch);
  const size_t f = i % F, tb = i / F, b = tb % B, t = tb / B;
  p.dst[i] = FERRY_LOAD_MAPPED(p.src + io_index(p.layout, t, b, f, static_cast<size_t>(p.steps), B, F));
}

// Time-major (src) into the model's layout (dst), zeros past each sample's
// length (a sequence output).
struct EmitParams {
  const float* src;
  float* dst;
  int64_t steps, batch, features;
  int32_t layout;
  const int32_t* lengths;  // or null
};

FERRY_HD void emit_element(const EmitParams& p, size_t i) {
  const size_t F = static_cast<size_t>(p.features), B = static_cast<size_t>(p.batch);
  const size_t f = i % F, tb = i / F, b = tb % B, t = tb / B;
  const float v = p.lengths && static_cast<int64_t>(t) >= p.lengths[b] ? 0.0f : p.src[i];
  p.dst[io_index(p.layout, t, b, f, static_cast<size_t>(p.steps), B, F)] = v;
}

// out[b] = in[(len_b - 1) * B + b] (`last`); len_b = steps without lengths.
struct LastParams {
  const float* src;
  float* dst;
  int64_t steps, batch, features;
  const int32_t* lengths;
};

// Element i of dst ([B][F]).
FERRY_HD void last_element(const LastParams& p, size_t i) {
  const size_t F = static_cast<size_t>(p.features);
  const size_t f = i % F, b = i / F;
  const size_t t = p.lengths ? static_cast<size_t>(p.lengths[b]) - 1 : static_cast<size_t>(p.steps) - 1;
  p.dst[i] = p.src[(t * static_cast<size_t>(p.batch) + b) * F + f];
}

// Token ids (the model's layout: [B][T] batch-first, else [T][B]) into
// embedding rows, time-major.
struct EmbedParams {
  const int32_t* tokens;  // checked by the C API: 0 <= id < rows of weight
  const float* weight;    // [num][dim], row-major
  float* dst;             // [T][B][dim]
  int64_t steps, batch;
  int32_t dim;
  int32_t batch_first;
};

FERRY_HD void embed_element(const EmbedParams& p, size_t i) {
  const size_t D = static_cast<size_t>(p.dim), B = static_cast<size_t>(p.batch), T = static_cast<size_t>(p.steps);
  const size_t d = i % D, tb = i / D, b = tb % B, t = tb / B;
  const int32_t id = FERRY_LOAD_MAPPED(p.tokens + (p.batch_first ? b * T + t : t * B + b));
  p.dst[i] = p.weight[static_cast<size_t>(id) * D + d];
}

// --------------------------------------------------- element-wise ops --

// The ops applied to each element on its own (with a per-feature or shared
// parameter), and those over a whole row.
enum PointOp : int32_t {
  kOpRelu,
  kOpTanh,
  kOpSigmoid,
  kOpLeakyRelu,   // alpha: the slope
  kOpElu,         // alpha
  kOpHardtanh,    // [alpha, beta] (ReLU6: [0, 6])
  kOpSilu,
  kOpGelu,
  kOpGeluTanh,
  kOpPRelu,       // weight: 1 or `features` slopes
  kOpScaleShift,  // BatchNorm: x * weight[f] + bias[f]
};
enum RowOp : int32_t { kOpSoftmax, kOpLogSoftmax, kOpLayerNorm };

struct OpParams {
  int32_t op;        // PointOp or RowOp (which, the kernel says)
  int32_t features;  // F
  float alpha, beta, eps;
  int32_t weight_count;  // PReLU: 1 or F
  const float* weight;   // PReLU slopes, BatchNorm scale, LayerNorm weight (or null)
  const float* bias;     // BatchNorm shift, LayerNorm bias (or null)
};

// The reference's formulas (kernels/reference/reference.cpp).
FERRY_HD float pointwise_value(const OpParams& p, int32_t f, float x) {
  switch (p.op) {
    case kOpRelu: return x < 0.0f ? 0.0f : x;  // NaN stays NaN
    case kOpTanh: return tanhf(x);
    case kOpSigmoid: return sigmoid_f(x);
    case kOpLeakyRelu: return x > 0.0f ? x : x * p.alpha;
    case kOpElu: return x > 0.0f ? x : p.alpha * expm1f(x);
    case kOpHardtanh: return x < p.alpha ? p.alpha : x > p.beta ? p.beta : x;  // NaN stays NaN
    case kOpSilu: return x * sigmoid_f(x);
    case kOpGelu: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case kOpGeluTanh: return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case kOpPRelu: return x > 0.0f ? x : p.weight[p.weight_count == 1 ? 0 : f] * x;
    case kOpScaleShift: return x * p.weight[f] + p.bias[f];
    default: return x;
  }
}

// Thread `lane` of `lanes`: elements lane, lane + lanes, ... of `rows` rows
// of F features, in place.
FERRY_HD void pointwise_tile(const OpParams& p, float* x, size_t rows, size_t lane, size_t lanes) {
  const size_t F = static_cast<size_t>(p.features), n = rows * F;
  for (size_t i = lane; i < n; i += lanes) x[i] = pointwise_value(p, static_cast<int32_t>(i % F), x[i]);
}

// One row of F features, in place, summed in index order.
FERRY_HD void row_op(const OpParams& p, float* x) {
  const int32_t n = p.features;
  if (p.op == kOpLayerNorm) {
    float sum = 0.0f;
    for (int32_t i = 0; i < n; ++i) sum += x[i];
    const float mean = sum / static_cast<float>(n);
    float sq = 0.0f;
    for (int32_t i = 0; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
    const float inv = 1.0f / sqrtf(sq / static_cast<float>(n) + p.eps);
    for (int32_t i = 0; i < n; ++i) {
      const float v = (x[i] - mean) * inv;
      x[i] = (p.weight ? v * p.weight[i] : v) + (p.bias ? p.bias[i] : 0.0f);
    }
    return;
  }
  float m = x[0];
  for (int32_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  float sum = 0.0f;
  if (p.op == kOpLogSoftmax) {
    for (int32_t i = 0; i < n; ++i) sum += expf(x[i] - m);
    const float lse = m + logf(sum);
    for (int32_t i = 0; i < n; ++i) x[i] -= lse;
    return;
  }
  for (int32_t i = 0; i < n; ++i) {
    x[i] = expf(x[i] - m);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int32_t i = 0; i < n; ++i) x[i] *= inv;
}

// Thread `lane` of `lanes`: rows lane, lane + lanes, ...
FERRY_HD void rows_tile(const OpParams& p, float* x, size_t rows, size_t lane, size_t lanes) {
  for (size_t r = lane; r < rows; r += lanes) row_op(p, x + r * static_cast<size_t>(p.features));
}

// The residual's add: x += y over n floats (`( ... ) + input`).
FERRY_HD void add_tile(float* x, const float* y, size_t n, size_t lane, size_t lanes) {
  for (size_t i = lane; i < n; i += lanes) x[i] += y[i];
}

// ----------------------------------------------------------------- conv --

// PaddingMode values (model.h's).
enum ConvPadding : int32_t { kPadZeros = 0, kPadReflect = 1, kPadReplicate = 2 };

// A Conv1d over time (backend/cpu/ops.cpp): output step t, sample b,
// channel g*out_g + o is bias + sum over (ci, kk) of
//     W_g[o][ci*kernel + kk] * in(t*stride + kk*dilation - pad, b, g*in_g + ci)
// (PyTorch's weight[o][ci][k] order), i.e. a product of the group's Panel8
// weight (out_g x in_g*kernel, f32: the loader allows no other type) with
// the patch rows, which the GEMM reads through conv_patch (no im2col
// buffer). A causal conv reads the steps before the call from its state
// (the last `history` inputs of each sample) and conv_state_column updates
// it after the product, so a sequence split into ferry_step calls computes
// the same patches and products as one ferry_run: bit for bit.
struct ConvParams {
  const float* in;     // [T][B][C]
  float* out;          // [T_out][B][O]
  float* state;        // causal: [max_batch][history][C], oldest first; else null
  const float* weight; // group g's matrix at weight + g * group_stride
  const float* bias;   // group g's at bias + g * bias_group_stride, or null
  const int32_t* lengths;  // the state update: each sample's valid steps, or null
  int64_t steps, steps_out, batch;
  int64_t group_stride, bias_group_stride;
  int32_t channels, out_channels, groups, kernel, stride, dilation;
  int32_t pad;       // left padding (causal: history)
  int32_t pad_mode;  // ConvPadding
  int32_t history;   // causal: dilation * (kernel - 1); else 0
};

// Input step t (any integer) of sample b, channel c, as the padding mode
// (or, for a causal conv, the state) says. Reflect padding is narrower
// than the input (checked by the C API).
FERRY_HD float conv_input(const ConvParams& p, int64_t t, int64_t b, int32_t c) {
  const int64_t T = p.steps, B = p.batch, C = p.channels;
  if (t >= 0 && t < T) return p.in[(t * B + b) * C + c];
  if (p.state) return t < 0 ? p.state[(b * p.history + p.history + t) * C + c] : 0.0f;
  switch (p.pad_mode) {
    case kPadReflect: {
      const int64_t r = t < 0 ? -t : 2 * (T - 1) - t;
      return p.in[(r * B + b) * C + c];
    }
    case kPadReplicate: return p.in[((t < 0 ? 0 : T - 1) * B + b) * C + c];
    default: return 0.0f;
  }
}

// Element (r, k) of group g's patch rows: r = t*B + b, k = ci*kernel + kk.
FERRY_HD float conv_patch(const ConvParams& p, int32_t g, int64_t r, int32_t k) {
  const int64_t t = r / p.batch, b = r % p.batch;
  const int32_t in_g = p.channels / p.groups, ci = k / p.kernel, kk = k % p.kernel;
  const int64_t ti = t * p.stride + static_cast<int64_t>(kk) * p.dilation - p.pad;
  return conv_input(p, ti, b, g * in_g + ci);
}

// The causal state after the call, for sample b and channel c: the last
// `history` valid inputs (a sample past its length keeps what it had, as a
// recurrent layer does). One thread per (b, c): entry h is written after
// entry h + end was read, in ascending h, so the shift needs no copy.
FERRY_HD void conv_state_column(const ConvParams& p, int64_t b, int32_t c) {
  const int64_t T = p.steps, B = p.batch, C = p.channels, history = p.history;
  const int64_t end = p.lengths ? p.lengths[b] : T;
  float* st = p.state + b * history * C;
  for (int64_t h = 0; h < history; ++h) {
    const int64_t src = end - history + h;  // input step, or (negative) an older entry of the state
    st[h * C + c] = src >= 0 ? p.in[(src * B + b) * C + c] : st[(h + end) * C + c];
  }
}

// ------------------------------------------------------------ pooling --

// Mean or max over each sample's valid steps, continuing its running state
// (per sample: [F] sum or maximum, then the count) as the CPU's pool().
struct PoolParams {
  const float* in;   // [T][B][F]
  float* out;        // [B][F]
  float* state;      // [max_batch][F + 1]
  const int32_t* lengths;
  int64_t steps, batch;
  int32_t features;
  int32_t mean;      // 1 mean, 0 max
};

// The count sample b had before this call (read by every feature's thread
// before any writes it: pool_store_count).
FERRY_HD float pool_count(const PoolParams& p, int64_t b) {
  return p.state[b * (p.features + 1) + p.features];
}

// Feature f of sample b, from the count before the call.
FERRY_HD void pool_feature(const PoolParams& p, int64_t b, int32_t f, float count0) {
  const int64_t F = p.features, B = p.batch;
  float* st = p.state + b * (F + 1);
  float acc = st[f], count = count0;
  const int64_t end = p.lengths ? p.lengths[b] : p.steps;
  for (int64_t t = 0; t < end; ++t) {
    const float x = p.in[(t * B + b) * F + f];
    if (p.mean) {
      acc += x;
    } else if (count == 0.0f) {
      acc = x;
    } else {
      acc = (x > acc || x != x) ? x : acc;  // NaN wins
    }
    count += 1.0f;
  }
  st[f] = acc;
  p.out[b * F + f] = p.mean ? acc / count : acc;
}

// The count after the call (what pool_feature counted to).
FERRY_HD void pool_store_count(const PoolParams& p, int64_t b, float count0) {
  float count = count0;
  const int64_t end = p.lengths ? p.lengths[b] : p.steps;
  for (int64_t t = 0; t < end; ++t) count += 1.0f;
  p.state[b * (p.features + 1) + p.features] = count;
}

}  // namespace cuda
}  // namespace ferry
