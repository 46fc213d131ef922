// The resident kernel's step program (resident_program.h): recorded through
// a table of device operations that appends instead of launching.
#include "backend/cuda/resident_program.h"

#include <string.h>

#include "common/status.h"

namespace ferry {
namespace cuda {
namespace {

struct Recorder {
  ExecState* x;
  ProgramOp* out;
  size_t capacity, count;
  int64_t batch;                // the recorded call's (max_batch)
  ferry_status refused;         // the first reason the chain cannot be a program
};

Recorder* rec(void* ctx) { return static_cast<Recorder*>(ctx); }

ferry_status refuse(Recorder* r, ferry_status status) {
  if (r->refused == FERRY_OK) r->refused = status;
  return status;
}

ProgramOp* append(Recorder* r, int32_t kind) {
  if (r->count == r->capacity) {
    refuse(r, fail(FERRY_UNSUPPORTED, "cuda resident program: more than %zu operations", r->capacity));
    return nullptr;
  }
  ProgramOp* op = &r->out[r->count++];
  memset(op, 0, sizeof(*op));
  op->kind = kind;
  return op;
}

// A size of the recorded call as a count per sample.
bool per_sample(Recorder* r, int64_t size, const char* what, int64_t* out) {
  if (size % r->batch != 0) {
    refuse(r, fail(FERRY_UNSUPPORTED, "cuda resident program: %s of %lld is not a whole count per sample of %lld",
                   what, static_cast<long long>(size), static_cast<long long>(r->batch)));
    return false;
  }
  *out = size / r->batch;
  return true;
}

ferry_status no_copy(void* ctx, void*, const void*, size_t) {
  return refuse(rec(ctx), fail(FERRY_UNSUPPORTED, "cuda resident program: a host transfer in a step (the resident "
                                                  "kernel reads and writes mapped memory: zero copy only)"));
}
ferry_status r_copy(void* ctx, void* dst, const void* src, size_t bytes) {
  ProgramOp* op = append(rec(ctx), kProgCopy);
  if (!op || !per_sample(rec(ctx), static_cast<int64_t>(bytes), "a copy's bytes", &op->per_sample)) {
    return rec(ctx)->refused;
  }
  op->x = static_cast<float*>(dst);
  op->y = static_cast<const float*>(src);
  return FERRY_OK;
}
ferry_status r_zero(void* ctx, void*, size_t) {
  return refuse(rec(ctx), fail(FERRY_UNSUPPORTED, "cuda resident program: a zeroing in a step"));
}
ferry_status r_gemm(void* ctx, const GemmParams& g) {
  ProgramOp* op = append(rec(ctx), kProgGemm);
  if (!op || !per_sample(rec(ctx), g.m, "a product's rows", &op->per_sample)) return rec(ctx)->refused;
  op->gemm = g;
  return FERRY_OK;
}
ferry_status r_quantize(void* ctx, const QuantizeParams& q) {
  ProgramOp* op = append(rec(ctx), kProgQuantize);
  if (!op || !per_sample(rec(ctx), q.rows, "a quantization's rows", &op->per_sample)) return rec(ctx)->refused;
  op->quantize = q;
  return FERRY_OK;
}
ferry_status conv_entry(void* ctx, const ConvParams& p, int32_t kind) {
  ProgramOp* op = append(rec(ctx), kind);
  if (!op) return rec(ctx)->refused;
  if (p.batch != rec(ctx)->batch || p.lengths) {
    return refuse(rec(ctx), fail(FERRY_UNSUPPORTED, "cuda resident program: a Conv1d outside a one-step call"));
  }
  op->conv = p;
  return FERRY_OK;
}
ferry_status r_conv(void* ctx, const ConvParams& p) { return conv_entry(ctx, p, kProgConv); }
ferry_status r_conv_state(void* ctx, const ConvParams& p) { return conv_entry(ctx, p, kProgConvState); }
ferry_status r_recurrent(void* ctx, const CellRuntime& cell, StepLaunch how) {
  Recorder* r = rec(ctx);
  if (how != StepLaunch::kGraphOne) {
    return refuse(r, fail(FERRY_UNSUPPORTED, "cuda resident program: a recurrent cell runs more than one step"));
  }
  ProgramOp* op = append(r, kProgRecurrent);
  if (!op) return r->refused;
  op->cell = static_cast<int32_t>(&cell - r->x->cells);
  return FERRY_OK;
}
ferry_status row_entry(void* ctx, int32_t kind, const OpParams& p, float* x, size_t rows) {
  ProgramOp* op = append(rec(ctx), kind);
  if (!op || !per_sample(rec(ctx), static_cast<int64_t>(rows), "an op's rows", &op->per_sample)) {
    return rec(ctx)->refused;
  }
  op->op = p;
  op->x = x;
  return FERRY_OK;
}
ferry_status r_pointwise(void* ctx, const OpParams& p, float* x, size_t rows) {
  return row_entry(ctx, kProgPointwise, p, x, rows);
}
ferry_status r_rows(void* ctx, const OpParams& p, float* x, size_t rows) { return row_entry(ctx, kProgRows, p, x, rows); }
ferry_status r_add(void* ctx, float* x, const float* y, size_t n) {
  ProgramOp* op = append(rec(ctx), kProgAdd);
  if (!op || !per_sample(rec(ctx), static_cast<int64_t>(n), "an add's elements", &op->per_sample)) {
    return rec(ctx)->refused;
  }
  op->x = x;
  op->y = y;
  return FERRY_OK;
}
// An entry that keeps the call's parameters as they are (at_batch sets
// their batch).
template <class P, int32_t Kind, P ProgramOp::*Field>
ferry_status r_params(void* ctx, const P& p) {
  ProgramOp* op = append(rec(ctx), Kind);
  if (!op) return rec(ctx)->refused;
  op->*Field = p;
  return FERRY_OK;
}
ferry_status r_finish(void*) { return FERRY_OK; }

const DeviceOps kRecordingOps = {no_copy,
                                 no_copy,
                                 r_copy,
                                 r_zero,
                                 r_gemm,
                                 r_quantize,
                                 r_conv,
                                 r_conv_state,
                                 r_recurrent,
                                 r_pointwise,
                                 r_rows,
                                 r_add,
                                 r_params<LastParams, kProgLast, &ProgramOp::last>,
                                 r_params<PoolParams, kProgPool, &ProgramOp::pool>,
                                 r_params<EmbedParams, kProgEmbed, &ProgramOp::embed>,
                                 r_params<IngestParams, kProgIngest, &ProgramOp::ingest>,
                                 r_params<EmitParams, kProgEmit, &ProgramOp::emit>,
                                 r_finish};

}  // namespace

const char* program_kind_name(int32_t kind) {
  static const char* const names[kProgKinds] = {"gemm", "quantize", "conv", "conv state", "recurrent step",
                                                "pointwise", "rows", "add", "last", "pool", "embed", "ingest",
                                                "emit", "copy"};
  return kind >= 0 && kind < kProgKinds ? names[kind] : "unknown";
}

ferry_status record_step_program(ExecState& x, ProgramOp* out, size_t capacity, size_t* count) {
  *count = 0;
  const ferry_model* m = x.model;
  if (!x.zero_copy) {
    return fail(FERRY_UNSUPPORTED, "cuda resident program: the session copies its input and output (the resident "
                                   "kernel needs the zero-copy path: mapped staging memory)");
  }
  if (!m->streamable) {
    return fail(FERRY_UNSUPPORTED, "cuda resident program: layers[%u] cannot stream", m->unstreamable_layer);
  }
  Recorder r{&x, out, capacity, 0, static_cast<int64_t>(x.max_batch), FERRY_OK};
  // A one-step call of max_batch samples, no lengths (ferry_step has none).
  // Only its shape matters: nothing is staged, so the session's state and
  // staging block are untouched.
  static const int32_t kToken = 0;
  RunCall call{};
  call.tokens = m->input_is_tokens ? &kToken : nullptr;
  call.batch = x.max_batch;
  call.seq = 1;
  call.out_steps = 1;
  const ferry_status st = device_call(x, kRecordingOps, &r, call);
  if (r.refused != FERRY_OK) return r.refused;
  if (st != FERRY_OK) return st;
  *count = r.count;
  return FERRY_OK;
}

}  // namespace cuda
}  // namespace ferry
