// The chain executor, shared by ferry_run and ferry_step (a step is a run of
// one time step: [B,1,I] and [1,B,I] are the same bytes). The input is
// brought to time-major [T][B][F] in the first activation buffer; each layer
// reads one buffer and writes the other (or works in place); the result goes
// out in the output's layout (the input's, or Model.output_layout), with
// zeros past each sample's length.
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include <string.h>

#include "backend/cpu/cpu_backend.h"

namespace ferry {
namespace cpu {
namespace {

// Layers that read their input buffer and write only the other one (a
// recurrent module of one layer: more ping-pong through their input).
bool reads_input_only(const Layer& l) {
  return l.op == Op::kLinear || l.op == Op::kConv1d || (op_is_recurrent(l.op) && l.num_layers == 1);
}

// Layers that write exactly [rows][out] floats, time-major, into the other
// buffer and read nothing of it but what they wrote (a recurrent module of
// one layer reads its own previous step's rows): as the chain's last layer
// it may write the caller's output itself.
bool writes_rows_only(const Layer& l) {
  return l.op == Op::kLinear || (op_is_recurrent(l.op) && l.num_layers == 1);
}

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

void swap(float** a, float** b) {
  float* t = *a;
  *a = *b;
  *b = t;
}

// Brackets one layer's work with the profiler's calls when kProfile; with
// it false, nothing (the template's plain instantiation is the executor as
// it was before profiling).
template <bool kProfile>
struct LayerScope {
  LayerScope(const ferry_session* s, uint32_t layer) : s(s), layer(layer) {
    if (kProfile) profile_layer(s, layer, 0);
  }
  ~LayerScope() {
    if (kProfile) profile_layer(s, layer, 1);
  }
  const ferry_session* s;
  uint32_t layer;
};

template <bool kProfile>
ferry_status execute_chain(ferry_session* s, const RunCall& call) {
  const ferry_model* m = s->model;
  CpuSession* cpu = cpu_of(s);
  const size_t B = call.batch, T = call.seq;
  const int32_t* lengths = call.lengths;

  // Input to time-major [T][B][I] (token ids: the embedding rows).
  const size_t I = m->input_size;
  float* cur = cpu->act[0];
  float* other = cpu->act[1];
  uint32_t first = 0;
  if (call.tokens) {
    const LayerScope<kProfile> scope(s, 0);
    embed(s, call.tokens, T, B, cur);
    first = 1;
  } else if (m->channels_first && T > 1) {
    for (size_t b = 0; b < B; ++b)
      for (size_t f = 0; f < I; ++f)
        for (size_t t = 0; t < T; ++t) cur[(t * B + b) * I + f] = call.input[(b * I + f) * T + t];
  } else if (m->batch_first && T > 1) {
    for (size_t b = 0; b < B; ++b)
      for (size_t t = 0; t < T; ++t) memcpy(cur + (t * B + b) * I, call.input + (b * T + t) * I, I * sizeof(float));
  } else if ((T == 1 || (!m->batch_first && !m->channels_first)) && reads_input_only(m->layers[0])) {
    // Time-major already (one step always is), and the first layer only
    // reads it: it reads the caller's input where it lies (never written:
    // `other` never becomes this pointer, see below). For W3 (T 128, B 64)
    // that is 2 MiB not copied a run.
    cur = const_cast<float*>(call.input);
    other = cpu->act[0];
  } else {
    memcpy(cur, call.input, T * B * I * sizeof(float));
  }
  // Where the output is time-major (or one step) and the chain's last layer
  // writes whole rows (writes_rows_only), that layer writes the caller's
  // output and nothing is copied at the end: for W3, 8 MiB a run that went
  // through L3 twice (written, then read back for the copy), the part of a
  // run most exposed to what the other cores do with the shared cache. Not
  // where the caller's output overlaps the input that layer reads.
  const uint32_t last = m->num_layers - 1;
  const bool time_major_out = !m->output_is_sequence || m->output_layout == FERRY_LAYOUT_TIME_MAJOR;

  size_t steps = T;  // time steps in `cur`; 1 after `last` / pooling
  const float* input = call.input;
  for (uint32_t li = first; li < m->num_layers; ++li) {
    if (other == input) other = cur == cpu->act[0] ? cpu->act[1] : cpu->act[0];
    const Layer& layer = m->layers[li];
    if (li == last && writes_rows_only(layer) &&
        (time_major_out || steps <= 1) &&
        !overlap(cur, steps * B * layer.in * sizeof(float), call.output, steps * B * layer.out * sizeof(float))) {
      other = call.output;  // the layer keeps `steps`: the copy at the end would be a plain memcpy
    }
    const kernels::KernelSet* k = cpu->kernels.layer(li);
    const size_t rows = steps * B;
    const LayerScope<kProfile> scope(s, li);
    switch (layer.op) {
      case Op::kLstm: case Op::kGru: case Op::kRnnTanh: case Op::kRnnRelu: {
        float* result = run_recurrent(s, li, cur, other, steps, B, lengths);
        other = result == other ? cur : other;
        cur = result;
        break;
      }
      case Op::kLast:
        for (size_t b = 0; b < B; ++b) {
          const size_t t = lengths ? static_cast<size_t>(lengths[b]) - 1 : steps - 1;
          memcpy(other + b * layer.in, cur + (t * B + b) * layer.in, layer.in * sizeof(float));
        }
        steps = 1;
        lengths = nullptr;
        swap(&cur, &other);
        break;
      case Op::kLinear: {
        const ferry_status st = linear(s, li, cur, other, rows);
        if (st != FERRY_OK) return st;
        swap(&cur, &other);
        break;
      }
      case Op::kRelu: k->relu(cur, rows * layer.in); break;
      case Op::kTanh: k->tanh(cur, rows * layer.in); break;
      case Op::kSigmoid: k->sigmoid(cur, rows * layer.in); break;
      case Op::kSoftmax:
        for (size_t r = 0; r < rows; ++r) k->softmax(cur + r * layer.in, layer.in);
        break;
      case Op::kIdentity: case Op::kEmbedding: break;
      case Op::kConv1d:
        conv1d(s, li, cur, other, steps, B, lengths);
        steps = conv_output_steps(layer, steps);
        swap(&cur, &other);
        break;
      case Op::kMeanPool: case Op::kMaxPool:
        pool(s, li, cur, other, steps, B, lengths);
        steps = 1;
        lengths = nullptr;
        swap(&cur, &other);
        break;
      case Op::kSave:
        memcpy(cpu->slots + layer.slot * cpu->slot_floats, cur, rows * layer.in * sizeof(float));
        break;
      case Op::kAdd: {
        const float* saved = cpu->slots + layer.slot * cpu->slot_floats;
        for (size_t i = 0; i < rows * layer.in; ++i) cur[i] += saved[i];
        break;
      }
      case Op::kBatchNorm: case Op::kLayerNorm: case Op::kPRelu: case Op::kLeakyRelu: case Op::kElu:
      case Op::kGelu: case Op::kSilu: case Op::kHardtanh: case Op::kLogSoftmax:
        activation(s, li, cur, rows);
        break;
    }
  }

  // Zero every output position past a sample's length (sequence output).
  const size_t F = m->output_size;
  if (lengths && m->output_is_sequence) {
    for (size_t b = 0; b < B; ++b)
      for (size_t t = static_cast<size_t>(lengths[b]); t < steps; ++t) memset(cur + (t * B + b) * F, 0, F * sizeof(float));
  }
  // Time-major [T][B][F] out in the output's layout.
  if (!time_major_out && m->output_layout == FERRY_LAYOUT_CHANNELS_FIRST && steps > 1) {
    for (size_t b = 0; b < B; ++b)
      for (size_t f = 0; f < F; ++f)
        for (size_t t = 0; t < steps; ++t) call.output[(b * F + f) * steps + t] = cur[(t * B + b) * F + f];
  } else if (!time_major_out && m->output_layout == FERRY_LAYOUT_BATCH_FIRST && steps > 1) {
    for (size_t b = 0; b < B; ++b)
      for (size_t t = 0; t < steps; ++t) memcpy(call.output + (b * steps + t) * F, cur + (t * B + b) * F, F * sizeof(float));
  } else if (cur != call.output) {
    memcpy(call.output, cur, steps * B * F * sizeof(float));
  }
  return FERRY_OK;
}

}  // namespace

ferry_status execute(ferry_session* s, const RunCall& call) { return execute_chain<false>(s, call); }
#if FERRY_PROFILER
ferry_status execute_profiled(ferry_session* s, const RunCall& call) { return execute_chain<true>(s, call); }
#endif

}  // namespace cpu
}  // namespace ferry
