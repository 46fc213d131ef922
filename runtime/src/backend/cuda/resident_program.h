// The step program of a resident streaming kernel: what one ferry_step of
// the whole chain does on the device, as a list of operations the kernel
// runs in order with a grid-wide sync between them. It is recorded once at
// init by running the executor's own device part (executor.h,
// device_call) for a one-step call of max_batch samples against a
// recording table of device operations, so the kernel does exactly what the
// launched kernels do, in the same order, on the same buffers: the input
// read from the mapped staging block, each layer's products (quantizing
// their input first for int8 / int4), each recurrent cell's step, the
// element-wise and row ops, residual saves and adds, pooling and Conv1d
// history, the output written to the staging block.
//
// A step of `batch` <= max_batch samples runs the same program with every
// batch-dependent size scaled (at_batch): in a one-step call each size is a
// fixed count per sample (rows of a product, elements of an add, bytes of
// a save), recorded as that count. The recurrent steps read the batch, the
// parity of their state and their step count from the call descriptor in
// the staging block, which the host writes before ringing (stage_call), as
// it does for the launched kernels on the zero-copy path.
//
// Plain C++ with FERRY_HD parts: the host records the program; the
// resident kernel (resident.cu) interprets it with program_elements and
// its own block-level phases, and so does the CPU emulation of the tests
// (tests/unit/test_cuda_host.cpp) with the same functions.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/device_ops.h"
#include "backend/cuda/executor.h"

namespace ferry {
namespace cuda {

enum ProgramKind : int32_t {
  kProgGemm = 0,
  kProgQuantize,
  kProgConv,
  kProgConvState,
  kProgRecurrent,
  kProgPointwise,
  kProgRows,
  kProgAdd,
  kProgLast,
  kProgPool,
  kProgEmbed,
  kProgIngest,
  kProgEmit,
  kProgCopy,
  kProgKinds,
};

// The most entries a program holds: per layer at most a quantization, a
// product and a recurrent step per cell, or a Conv1d's two, plus the
// ingest and the emit.
constexpr size_t kMaxProgram = 3 * kMaxCells + 2 * kMaxChain + 2;

struct ProgramOp {
  int32_t kind;          // ProgramKind
  int32_t cell;          // kProgRecurrent: the cell's index
  int64_t per_sample;    // the batch-dependent size per sample (see at_batch)
  float* x;              // pointwise / rows / add: the buffer; copy: destination
  const float* y;        // add: the addend; copy: source
  union {
    GemmParams gemm;
    QuantizeParams quantize;
    ConvParams conv;      // kProgConv, kProgConvState
    OpParams op;          // kProgPointwise, kProgRows
    LastParams last;
    PoolParams pool;
    EmbedParams embed;
    IngestParams ingest;
    EmitParams emit;
  };
};

// The most entries the step program of `m` can have (record_step_program's
// capacity): per recurrent cell a quantization, a product and a step; per
// Linear a quantization and a product; per Conv1d its products and its
// history; one per other layer; the ingest and the emit.
inline size_t program_capacity(const ferry_model* m) {
  size_t n = 2;
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& l = m->layers[li];
    n += op_is_recurrent(l.op) ? 3u * l.num_layers * l.dirs : l.op == Op::kLinear || l.op == Op::kConv1d ? 2u : 1u;
  }
  return n;
}

// The entry for a step of `batch` samples. The sizes a one-step call
// scales with the batch: rows of a product or a quantization, rows of an
// element-wise or row op (per_sample each), elements of an add and bytes of
// a copy (per_sample each), and the batch of everything else that has one.
FERRY_HD ProgramOp at_batch(const ProgramOp& in, int64_t batch) {
  ProgramOp op = in;
  switch (op.kind) {
    case kProgGemm: op.gemm.m = op.per_sample * batch; break;
    case kProgQuantize: op.quantize.rows = op.per_sample * batch; break;
    case kProgConv: case kProgConvState: op.conv.batch = batch; break;
    case kProgLast: op.last.batch = batch; break;
    case kProgPool: op.pool.batch = batch; break;
    case kProgEmbed: op.embed.batch = batch; break;
    case kProgIngest: op.ingest.batch = batch; break;
    case kProgEmit: op.emit.batch = batch; break;
    default: break;  // rows / elements / bytes: per_sample * batch where they are used
  }
  return op;
}

// Records the step program of session `x` (zero copy: the kernel reads and
// writes the mapped staging block) into out[0, *count). FERRY_UNSUPPORTED
// with the reason when the chain cannot be a step program: not zero copy, a
// model that cannot stream, more entries than `capacity`, or a size that is
// not a whole count per sample.
ferry_status record_step_program(ExecState& x, ProgramOp* out, size_t capacity, size_t* count);

// ------------------------------------------------------ interpreting --
// How the resident kernel runs an entry (already at_batch'ed): the kinds
// whose outputs are independent elements run here, element i of n on lane
// i % lanes (the kernel: every thread of the grid; the emulation: one lane);
// a quantization (a block per row), pooling (a block per sample) and a
// recurrent step (its phases, with a grid-wide sync between them) are the
// kernel's own, and program_elements returns false for them.

// A's rows, or a Conv1d's patch rows (group g).
struct ProgramRows {
  const float* a;
  int64_t lda;
  FERRY_HD float operator()(int64_t row, int32_t k) const { return a[row * lda + k]; }
};
struct ProgramPatches {
  const ConvParams* p;
  int32_t group;
  FERRY_HD float operator()(int64_t row, int32_t k) const { return conv_patch(*p, group, row, k); }
};

// Output (r, c) of an f32 product: the f32 GEMMs' chain (kernels.cu), one
// fmaf over k from 0 upwards, the bias added last.
template <class LoadA>
FERRY_HD float gemm_f32_element(const float* w, uint32_t G, int32_t K, const float* bias, const LoadA& a, int64_t r,
                                int32_t c) {
  float acc = 0.0f;
  for (int32_t k = 0; k < K; ++k) {
    acc = fmaf(a(r, k), w[gemm_weight_index(G, static_cast<uint32_t>(K), static_cast<uint32_t>(c),
                                            static_cast<uint32_t>(k))], acc);
  }
  return (bias ? bias[c] : 0.0f) + acc;
}

// Output (r, c) of a product of any weight type.
FERRY_HD float gemm_element(const GemmParams& g, int64_t r, int32_t c) {
  switch (g.w.type) {
    case kWeightF16: return gemm_output<Reader<kWeightF16>>(g, r, c);
    case kWeightI8: return gemm_output<Reader<kWeightI8>>(g, r, c);
    case kWeightI4: return gemm_output<Reader<kWeightI4>>(g, r, c);
    default:
      return gemm_f32_element(static_cast<const float*>(g.w.data), static_cast<uint32_t>(g.w.gates), g.w.cols,
                              g.bias, ProgramRows{g.a, g.lda}, r, c);
  }
}

FERRY_HD bool program_elements(const ProgramOp& op, int64_t batch, size_t lane, size_t lanes) {
  switch (op.kind) {
    case kProgGemm: {
      const GemmParams& g = op.gemm;
      const size_t n = static_cast<size_t>(g.m) * static_cast<size_t>(g.n);
      for (size_t i = lane; i < n; i += lanes) {
        const int64_t r = static_cast<int64_t>(i / static_cast<size_t>(g.n));
        const int32_t c = static_cast<int32_t>(i % static_cast<size_t>(g.n));
        g.c[r * g.ldc + c] = gemm_element(g, r, c);
      }
      return true;
    }
    case kProgConv: {
      const ConvParams& p = op.conv;
      const int32_t out_g = p.out_channels / p.groups, cols = (p.channels / p.groups) * p.kernel;
      const size_t rows = static_cast<size_t>(p.steps_out * p.batch), per_group = rows * static_cast<size_t>(out_g);
      for (size_t i = lane; i < per_group * static_cast<size_t>(p.groups); i += lanes) {
        const int32_t g = static_cast<int32_t>(i / per_group);
        const size_t e = i % per_group;
        const int64_t r = static_cast<int64_t>(e / static_cast<size_t>(out_g));
        const int32_t c = static_cast<int32_t>(e % static_cast<size_t>(out_g));
        const float* bias = p.bias ? p.bias + g * p.bias_group_stride : nullptr;
        p.out[r * p.out_channels + g * out_g + c] =
            gemm_f32_element(p.weight + g * p.group_stride, 1u, cols, bias, ProgramPatches{&p, g}, r, c);
      }
      return true;
    }
    case kProgConvState: {
      const size_t n = static_cast<size_t>(op.conv.batch) * static_cast<size_t>(op.conv.channels);
      for (size_t i = lane; i < n; i += lanes) {
        conv_state_column(op.conv, static_cast<int64_t>(i / static_cast<size_t>(op.conv.channels)),
                          static_cast<int32_t>(i % static_cast<size_t>(op.conv.channels)));
      }
      return true;
    }
    case kProgPointwise: pointwise_tile(op.op, op.x, static_cast<size_t>(op.per_sample * batch), lane, lanes); return true;
    case kProgRows: rows_tile(op.op, op.x, static_cast<size_t>(op.per_sample * batch), lane, lanes); return true;
    case kProgAdd: add_tile(op.x, op.y, static_cast<size_t>(op.per_sample * batch), lane, lanes); return true;
    case kProgLast:
      for (size_t i = lane; i < static_cast<size_t>(op.last.batch * op.last.features); i += lanes) last_element(op.last, i);
      return true;
    case kProgEmbed:
      for (size_t i = lane; i < static_cast<size_t>(op.embed.steps * op.embed.batch) * static_cast<size_t>(op.embed.dim);
           i += lanes) {
        embed_element(op.embed, i);
      }
      return true;
    case kProgIngest:
      for (size_t i = lane; i < static_cast<size_t>(op.ingest.steps * op.ingest.batch * op.ingest.features);
           i += lanes) {
        ingest_element(op.ingest, i);
      }
      return true;
    case kProgEmit:
      for (size_t i = lane; i < static_cast<size_t>(op.emit.steps * op.emit.batch * op.emit.features); i += lanes) {
        emit_element(op.emit, i);
      }
      return true;
    case kProgCopy:
      for (size_t i = lane; i < static_cast<size_t>(op.per_sample * batch) / sizeof(float); i += lanes) op.x[i] = op.y[i];
      return true;
    default: return false;  // quantize, pool, recurrent
  }
}

const char* program_kind_name(int32_t kind);

}  // namespace cuda
}  // namespace ferry
