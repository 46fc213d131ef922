// The step program (cpu_backend.h): what ferry_step of one sample does,
// decided once at session init instead of at every call.
//
// A firmware loop calls ferry_step millions of times a second on a small
// model, where the general executor's work per call (the layout pass over
// the input, the per-layer dispatch, the chunk and strategy decisions of the
// recurrent loop, copying the result out) costs as much as the kernels. The
// program is the list of kernel calls that remain for a lone step, with
// their buffers fixed: the first layer reads the caller's input where it
// lies, the last layer that produces values writes the caller's output, and
// layers in between ping-pong between the two activation buffers. Each op
// calls the same kernels with the same arguments as the general path, so a
// program step is bit-identical to ferry_run.
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include <string.h>

#include "backend/cpu/cpu_backend.h"

namespace ferry {
namespace cpu {
namespace {

enum Buffer : uint8_t { kInput = 0, kAct0 = 1, kAct1 = 2, kOutput = 3 };

bool produces(Op op) {
  return op_is_recurrent(op) || op == Op::kLinear || op == Op::kConv1d || op == Op::kMeanPool || op == Op::kMaxPool;
}

bool in_place(Op op) {
  switch (op) {
    case Op::kRelu: case Op::kTanh: case Op::kSigmoid: case Op::kSoftmax: case Op::kBatchNorm:
    case Op::kLayerNorm: case Op::kPRelu: case Op::kLeakyRelu: case Op::kElu: case Op::kGelu: case Op::kSilu:
    case Op::kHardtanh: case Op::kLogSoftmax: case Op::kAdd:
      return true;
    default:
      return false;
  }
}

float* buffer(CpuSession* cpu, uint8_t id, const float* input, float* output) {
  switch (id) {
    case kInput: return const_cast<float*>(input);  // read only: never a destination
    case kAct0: return cpu->act[0];
    case kAct1: return cpu->act[1];
    default: return output;
  }
}

}  // namespace

size_t step_program_ops(const ferry_model* m) {
  // One op per layer or cell, plus one copy.
  return m->num_layers + m->num_cells + 1;
}

bool build_step_program(ferry_session* s, const KernelChoice& choice, StepProgram* program) {
  const ferry_model* m = s->model;
  const CpuSession* cpu = cpu_of(s);
  // The last op that produces new values writes the output.
  uint32_t last_producer = m->num_layers;
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& l = m->layers[li];
    if (l.op == Op::kEmbedding) return false;  // ferry_step_tokens: the general path
    if (l.op == Op::kLinear && choice.xnn_linear[li] && choice.xnn_always) return false;
    if (op_is_recurrent(l.op) && (!cpu->lone || !cpu->lone[l.first_cell].k)) return false;
    if (produces(l.op)) last_producer = li;
  }
  uint32_t n = 0;
  uint8_t cur = kInput;
  StepOp* ops = program->ops;
  const auto other_act = [&cur] { return cur == kAct0 ? uint8_t{kAct1} : uint8_t{kAct0}; };
  if (last_producer == m->num_layers) {  // only in-place ops: work on the output
    ops[n++] = StepOp{StepOp::kCopy, kInput, kOutput, 0, 0};
    cur = kOutput;
  }
  for (uint32_t li = 0; li < m->num_layers; ++li) {
    const Layer& l = m->layers[li];
    if (op_is_recurrent(l.op)) {
      for (uint32_t kl = 0; kl < l.num_layers; ++kl) {
        const uint8_t dst = li == last_producer && kl + 1 == l.num_layers ? uint8_t{kOutput} : other_act();
        ops[n++] = StepOp{StepOp::kCell, cur, dst, li, l.first_cell + kl};
        cur = dst;
      }
    } else if (produces(l.op)) {
      const uint8_t dst = li == last_producer ? uint8_t{kOutput} : other_act();
      ops[n++] = StepOp{StepOp::kProduce, cur, dst, li, 0};
      cur = dst;
    } else if (in_place(l.op)) {
      if (cur == kInput) {  // never write the caller's input
        ops[n++] = StepOp{StepOp::kCopy, kInput, kAct0, li, 0};
        cur = kAct0;
      }
      ops[n++] = StepOp{StepOp::kInPlace, cur, cur, li, 0};
    } else if (l.op == Op::kSave) {
      ops[n++] = StepOp{StepOp::kSave, cur, cur, li, 0};
    }
    // Identity, `last` and Embedding's tokens: nothing to do for one step.
  }
  program->count = n;
  program->direct = nullptr;
  if (n == 1 && ops[0].kind == StepOp::kCell && ops[0].src == kInput && ops[0].dst == kOutput && cpu->threads == 1) {
    LoneStep& ls = cpu->lone[ops[0].cell];
    if (!ls.k->quantize_rows && !m->cells[ops[0].cell].w_hr) program->direct = &ls;
  }
  return cur == kOutput;
}

namespace {

template <bool kProfile>
void run_program(ferry_session* s, const float* input, float* output) {
  const ferry_model* m = s->model;
  CpuSession* cpu = cpu_of(s);
  const StepProgram* p = cpu->program;
  for (uint32_t i = 0; i < p->count; ++i) {
    const StepOp& op = p->ops[i];
    const Layer& l = m->layers[op.layer];
    if (kProfile && (i == 0 || p->ops[i - 1].layer != op.layer)) profile_layer(s, op.layer, 0);
    const float* src = buffer(cpu, op.src, input, output);
    float* dst = buffer(cpu, op.dst, input, output);
    switch (op.kind) {
      case StepOp::kCell:
        lone_cell_step(s, l, op.cell, src, dst);
        break;
      case StepOp::kProduce:
        if (l.op == Op::kLinear) {
          linear(s, op.layer, src, dst, 1);  // one row: never XNNPACK (checked at build)
        } else if (l.op == Op::kConv1d) {
          conv1d(s, op.layer, src, dst, 1, 1, nullptr);
        } else {
          pool(s, op.layer, src, dst, 1, 1, nullptr);
        }
        break;
      case StepOp::kInPlace: {
        const kernels::KernelSet* k = cpu->kernels.layer(op.layer);
        switch (l.op) {
          case Op::kRelu: k->relu(dst, l.in); break;
          case Op::kTanh: k->tanh(dst, l.in); break;
          case Op::kSigmoid: k->sigmoid(dst, l.in); break;
          case Op::kSoftmax: k->softmax(dst, l.in); break;
          case Op::kAdd: {
            const float* saved = cpu->slots + l.slot * cpu->slot_floats;
            for (uint32_t f = 0; f < l.in; ++f) dst[f] += saved[f];
            break;
          }
          default: activation(s, op.layer, dst, 1); break;
        }
        break;
      }
      case StepOp::kSave:
        memcpy(cpu->slots + l.slot * cpu->slot_floats, src, l.in * sizeof(float));
        break;
      case StepOp::kCopy:
        memcpy(dst, src, m->layers[op.layer].in * sizeof(float));
        break;
    }
    if (kProfile && (i + 1 == p->count || p->ops[i + 1].layer != op.layer)) profile_layer(s, op.layer, 1);
  }
}

}  // namespace

void run_step_program(ferry_session* s, const float* input, float* output) { run_program<false>(s, input, output); }
#if FERRY_PROFILER
void run_step_program_profiled(ferry_session* s, const float* input, float* output) {
  run_program<true>(s, input, output);
}
#endif

}  // namespace cpu
}  // namespace ferry
