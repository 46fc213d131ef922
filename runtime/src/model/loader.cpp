// Model verification and the internal view (model/loader.h).
//
// Two layers of checks, both always on:
//  1. the FlatBuffers verifier (every offset and vector inside the buffer);
//  2. ferry's own checks: enum values known, every tensor index in range,
//     every tensor window inside the weight blob and 64-byte aligned, every
//     shape product overflow-checked and equal to what its layer needs, the
//     chain's feature widths consistent from input to output.
// Nothing is trusted that was not checked here; kernels index without checks.
#include <stdlib.h>
#include <string.h>

#include <new>

#include "common/status.h"
#include "ferry/ferry_generated.h"
#include "model/loader.h"
#include "model/model.h"

namespace ferry {
namespace {

namespace fb = ::ferry::fb;

// Element types some kernel set of this runtime reads.
bool dtype_loadable(DType dtype) { return dtype == DType::kF32; }

// The element size in bytes of `dtype`.
uint64_t dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kI8: return 1;
  }
  return 4;
}

struct Loader {
  const uint8_t* bytes;
  const fb::Model* m;
  ferry_model* out;

  // Resolves tensor `index` of `layer_index` as float32 with `rank` dims equal
  // to `dims`, rows grouped in `gates` gates (the G of the Panel8 layout).
  // `role` names the tensor in messages ("lstm cell 1 w_hh").
  // `blocks` > 1: the tensor is that many matrices stacked along dim 0 (a
  // grouped Conv1d), each [dims[0]/blocks, product of the other dims],
  // stored one after the other (Panel8: each padded on its own).
  ferry_status tensor(int64_t index, uint32_t layer_index, const char* role,
                      uint32_t rank, const uint32_t* dims, uint32_t gates, Weight* out_weight,
                      uint32_t blocks = 1, uint64_t* block_stride = nullptr) {
    const auto* tensors = m->tensors();
    const uint32_t count = tensors ? tensors->size() : 0;
    if (index < 0 || index >= static_cast<int64_t>(count)) {
      return fail(FERRY_INVALID_MODEL,
                  "layers[%u] %s: tensor index %lld out of range (model has %u tensors)",
                  layer_index, role, static_cast<long long>(index), count);
    }
    const fb::Tensor* t = tensors->Get(static_cast<uint32_t>(index));
    if (static_cast<unsigned>(t->dtype()) > static_cast<unsigned>(fb::DType::MAX)) {
      return fail(FERRY_INVALID_MODEL, "tensors[%lld].dtype: unknown value %u",
                  static_cast<long long>(index), static_cast<unsigned>(t->dtype()));
    }
    const DType dtype = static_cast<DType>(t->dtype());  // the enums share values (static_asserts below)
    if (!dtype_loadable(dtype)) {
      return fail(FERRY_UNSUPPORTED, "tensors[%lld] (%s): dtype %s is not supported by this runtime",
                  static_cast<long long>(index), role, fb::EnumNameDType(t->dtype()));
    }
    const bool panel8 = t->layout() == fb::TensorLayout::Panel8;
    if (!panel8 && t->layout() != fb::TensorLayout::RowMajor) {
      return fail(FERRY_UNSUPPORTED, "tensors[%lld] (%s): layout %u is not supported (a newer format?)",
                  static_cast<long long>(index), role, static_cast<unsigned>(t->layout()));
    }
    const auto* shape = t->shape();
    const uint32_t got_rank = shape ? shape->size() : 0;
    if (got_rank != rank) {
      return fail(FERRY_INVALID_MODEL, "tensors[%lld] (%s): rank %u, layer needs %u",
                  static_cast<long long>(index), role, got_rank, rank);
    }
    uint64_t elements = 1;
    for (uint32_t i = 0; i < rank; ++i) {
      if (shape->Get(i) != dims[i]) {
        return fail(FERRY_INVALID_MODEL, "tensors[%lld] (%s): shape[%u] is %u, layer needs %u",
                    static_cast<long long>(index), role, i, shape->Get(i), dims[i]);
      }
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dims[i]), &elements)) {
        return fail(FERRY_INVALID_MODEL, "tensors[%lld] (%s): shape product overflows",
                    static_cast<long long>(index), role);
      }
    }
    // Panel8 pads the units of each gate to whole panels of 8 (rank and the
    // gate grouping are the layer's, checked above and by the caller).
    const uint32_t units = dims[0] / gates / blocks;
    uint64_t cols64 = 1;
    for (uint32_t i = 1; i < rank; ++i) cols64 *= dims[i];  // bounded: elements did not overflow
    if (cols64 > UINT32_MAX) {
      return fail(FERRY_INVALID_MODEL, "tensors[%lld] (%s): a row of %llu elements is too wide",
                  static_cast<long long>(index), role, static_cast<unsigned long long>(cols64));
    }
    const uint32_t cols = static_cast<uint32_t>(cols64);
    uint64_t stride = uint64_t{units} * gates * cols;
    if (panel8) {
      stride = layout::panel8_elements(gates, units, 1);
      if (__builtin_mul_overflow(stride, uint64_t{cols}, &stride) ||
          __builtin_mul_overflow(stride, uint64_t{blocks}, &elements)) {
        return fail(FERRY_INVALID_MODEL, "tensors[%lld] (%s): Panel8 size overflows",
                    static_cast<long long>(index), role);
      }
    }
    if (block_stride) *block_stride = stride;
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(elements, dtype_bytes(dtype), &nbytes) || t->size() != nbytes) {
      return fail(FERRY_INVALID_MODEL, "tensors[%lld] (%s): size %llu bytes, shape needs %llu (%s)",
                  static_cast<long long>(index), role,
                  static_cast<unsigned long long>(t->size()),
                  static_cast<unsigned long long>(nbytes), fb::EnumNameTensorLayout(t->layout()));
    }
    const auto* blob = m->weights();
    const uint64_t blob_size = blob ? blob->size() : 0;
    uint64_t end = 0;
    if (__builtin_add_overflow(t->offset(), t->size(), &end) || end > blob_size) {
      return fail(FERRY_INVALID_MODEL,
                  "tensors[%lld] (%s): bytes [%llu, +%llu) lie outside the %llu-byte weight blob",
                  static_cast<long long>(index), role,
                  static_cast<unsigned long long>(t->offset()),
                  static_cast<unsigned long long>(t->size()),
                  static_cast<unsigned long long>(blob_size));
    }
    if (t->offset() % FERRY_ALIGNMENT != 0) {
      return fail(FERRY_INVALID_MODEL, "tensors[%lld] (%s): offset %llu is not %d-byte aligned",
                  static_cast<long long>(index), role,
                  static_cast<unsigned long long>(t->offset()), FERRY_ALIGNMENT);
    }
    out_weight->data = blob->data() + t->offset();
    out_weight->scales = nullptr;
    out_weight->gates = static_cast<uint8_t>(gates);
    out_weight->units = units;
    out_weight->cols = cols;
    out_weight->dtype = dtype;
    out_weight->layout = panel8 ? WeightLayout::kPanel8 : WeightLayout::kRowMajor;
    return FERRY_OK;
  }

  ferry_status optional_tensor(int64_t index, uint32_t layer_index, const char* role,
                               uint32_t rank, const uint32_t* dims, uint32_t gates,
                               Weight* out_weight) {
    *out_weight = Weight();
    if (index == -1) return FERRY_OK;
    return tensor(index, layer_index, role, rank, dims, gates, out_weight);
  }

  ferry_status recurrent(uint32_t li, const fb::Layer* l, Layer* layer, uint32_t width) {
    const char* name = fb::EnumNameLayerKind(l->kind());
    const uint32_t h = l->hidden_size();
    const uint32_t p = l->proj_size();
    if (h == 0 || h > kMaxFeatures) {
      return fail(FERRY_INVALID_MODEL, "layers[%u] (%s): hidden_size %u out of range", li, name, h);
    }
    if (p != 0 && (layer->op != Op::kLstm || p >= h)) {
      return fail(FERRY_INVALID_MODEL,
                  "layers[%u] (%s): proj_size %u invalid (LSTM only, < hidden_size %u)", li,
                  name, p, h);
    }
    if (l->num_layers() == 0 || l->num_layers() > kMaxCells) {
      return fail(FERRY_INVALID_MODEL, "layers[%u] (%s): num_layers %u out of range", li, name,
                  l->num_layers());
    }
    layer->hidden = h;
    layer->h_out = p ? p : h;
    layer->gates = layout::gate_count(cell_kind(layer->op));
    layer->num_layers = l->num_layers();
    layer->dirs = l->bidirectional() ? 2 : 1;
    layer->in = width;
    layer->out = layer->dirs * layer->h_out;
    const uint32_t ncells = layer->num_layers * layer->dirs;
    const auto* cells = l->cells();
    if (!cells || cells->size() != ncells) {
      return fail(FERRY_INVALID_MODEL, "layers[%u] (%s).cells: %u entries, num_layers x directions = %u",
                  li, name, cells ? cells->size() : 0u, ncells);
    }
    if (out->num_cells + ncells > kMaxCells) {
      return fail(FERRY_UNSUPPORTED, "layers[%u] (%s): more than %u recurrent cells in the model",
                  li, name, kMaxCells);
    }
    layer->first_cell = out->num_cells;
    const uint32_t rows = layer->gates * h;
    for (uint32_t c = 0; c < ncells; ++c) {
      const fb::RecurrentCell* fc = cells->Get(c);
      Cell& cell = out->cells[out->num_cells + c];
      cell.in = c < layer->dirs ? width : layer->dirs * layer->h_out;
      const uint32_t ih[2] = {rows, cell.in};
      const uint32_t hh[2] = {rows, layer->h_out};
      const uint32_t b[1] = {rows};
      const uint32_t bhn[1] = {h};
      const uint32_t hr[2] = {p, h};
      const layout::CellKind kind = cell_kind(layer->op);
      const uint32_t g = layer->gates;
      const uint32_t g_bhn = layout::gates_for_role(kind, layout::Role::kGruHiddenBias);
      const uint32_t g_hr = layout::gates_for_role(kind, layout::Role::kProjection);
      ferry_status s;
      if ((s = tensor(fc->w_ih(), li, "w_ih", 2, ih, g, &cell.w_ih)) != FERRY_OK) return s;
      if ((s = tensor(fc->w_hh(), li, "w_hh", 2, hh, g, &cell.w_hh)) != FERRY_OK) return s;
      if ((s = optional_tensor(fc->bias(), li, "bias", 1, b, g, &cell.bias)) != FERRY_OK) return s;
      if (layer->op == Op::kGru) {
        if ((s = optional_tensor(fc->b_hn(), li, "b_hn", 1, bhn, g_bhn, &cell.b_hn)) != FERRY_OK) return s;
      } else if (fc->b_hn() != -1) {
        return fail(FERRY_INVALID_MODEL, "layers[%u] (%s).cells[%u].b_hn: set on a non-GRU layer", li, name, c);
      }
      if (p) {
        if ((s = tensor(fc->w_hr(), li, "w_hr", 2, hr, g_hr, &cell.w_hr)) != FERRY_OK) return s;
      } else if (fc->w_hr() != -1) {
        return fail(FERRY_INVALID_MODEL, "layers[%u] (%s).cells[%u].w_hr: set without proj_size", li, name, c);
      }
      const bool packed = cell.w_ih.panel8() && cell.w_hh.panel8() && (!cell.bias || cell.bias.panel8()) &&
                          (!cell.b_hn || cell.b_hn.panel8()) && (!cell.w_hr || cell.w_hr.panel8());
      layer->panel8 = (c == 0 || layer->panel8) && packed;
      layer->dtype = cell.w_ih.dtype;
    }
    out->num_cells += ncells;
    layer->state_floats = ncells * layer->h_out + (layer->op == Op::kLstm ? ncells * h : 0);
    layer->state_offset = out->state_floats;
    if (__builtin_add_overflow(out->state_floats, layer->state_floats, &out->state_floats)) {
      return fail(FERRY_INVALID_MODEL, "layers[%u] (%s): state size overflows", li, name);
    }
    if (rows > out->max_gate_rows) out->max_gate_rows = rows;
    if (h > out->max_hidden) out->max_hidden = h;
    if (layer->h_out > out->max_h_out) out->max_h_out = layer->h_out;
    if (layer->dirs == 2) {
      if (out->streamable) out->unstreamable_layer = li;
      out->streamable = false;
    }
    return FERRY_OK;
  }

  // Adds `floats` of per-sample state to `layer` (after what the model has).
  ferry_status add_state(Layer* layer, uint32_t floats) {
    layer->state_floats = floats;
    layer->state_offset = out->state_floats;
    if (__builtin_add_overflow(out->state_floats, floats, &out->state_floats)) {
      return fail(FERRY_INVALID_MODEL, "state size overflows");
    }
    return FERRY_OK;
  }

  ferry_status conv(uint32_t li, const fb::Layer* l, Layer* layer, uint32_t width) {
    const uint32_t o = l->output_size(), k = l->kernel_size(), groups = l->groups();
    if (l->input_size() != width || o == 0 || o > kMaxFeatures) {
      return fail(FERRY_INVALID_MODEL, "layers[%u] (Conv1d): %u -> %u channels, the chain gives %u", li,
                  l->input_size(), o, width);
    }
    if (k == 0 || k > kMaxFeatures || l->stride() == 0 || l->stride() > kMaxFeatures || l->dilation() == 0 ||
        l->dilation() > kMaxFeatures) {
      return fail(FERRY_INVALID_MODEL, "layers[%u] (Conv1d): kernel_size %u, stride %u, dilation %u must be in 1..%u",
                  li, k, l->stride(), l->dilation(), kMaxFeatures);
    }
    if (groups == 0 || width % groups != 0 || o % groups != 0) {
      return fail(FERRY_INVALID_MODEL, "layers[%u] (Conv1d): groups %u must divide the %u input and %u output channels",
                  li, groups, width, o);
    }
    if (l->pad_left() > kMaxFeatures || l->pad_right() > kMaxFeatures) {
      return fail(FERRY_INVALID_MODEL, "layers[%u] (Conv1d): padding %u + %u out of range", li, l->pad_left(),
                  l->pad_right());
    }
    if (static_cast<unsigned>(l->padding_mode()) > static_cast<unsigned>(fb::PaddingMode::MAX)) {
      return fail(FERRY_UNSUPPORTED, "layers[%u] (Conv1d).padding_mode: unknown value %u (a newer format?)", li,
                  static_cast<unsigned>(l->padding_mode()));
    }
    layer->out = o;
    layer->kernel = k;
    layer->stride = l->stride();
    layer->dilation = l->dilation();
    layer->groups = groups;
    layer->pad_left = l->pad_left();
    layer->pad_right = l->pad_right();
    layer->pad_mode = static_cast<PaddingMode>(l->padding_mode());
    const uint32_t in_g = width / groups;
    const uint64_t patch = uint64_t{in_g} * k;
    if (patch > kMaxFeatures) {
      return fail(FERRY_INVALID_MODEL, "layers[%u] (Conv1d): (in/groups) x kernel = %llu, at most %u", li,
                  static_cast<unsigned long long>(patch), kMaxFeatures);
    }
    const uint32_t w[3] = {o, in_g, k};
    const uint32_t b[1] = {o};
    ferry_status s = tensor(l->weight(), li, "weight", 3, w, 1, &layer->weight, groups, &layer->group_stride);
    if (s != FERRY_OK) return s;
    layer->bias = Weight();
    if (l->bias() != -1) {
      s = tensor(l->bias(), li, "bias", 1, b, 1, &layer->bias, groups, &layer->bias_group_stride);
      if (s != FERRY_OK) return s;
    }
    layer->panel8 = layer->weight.panel8() && (!layer->bias || layer->bias.panel8());
    layer->dtype = layer->weight.dtype;
    if (patch > out->max_conv_patch) out->max_conv_patch = static_cast<uint32_t>(patch);
    const uint64_t history = uint64_t{layer->dilation} * (k - 1);
    layer->causal = layer->stride == 1 && layer->pad_right == 0 && layer->pad_left == history &&
                    layer->pad_mode == PaddingMode::kZeros;
    if (layer->causal) {
      if (history * width > kMaxFeatures) {
        return fail(FERRY_INVALID_MODEL, "layers[%u] (Conv1d): %llu steps of history, too long", li,
                    static_cast<unsigned long long>(history));
      }
      return add_state(layer, static_cast<uint32_t>(history * width));
    }
    if (out->streamable) out->unstreamable_layer = li;
    out->streamable = false;
    return FERRY_OK;
  }

  // BatchNorm (scale, shift), LayerNorm (weight, bias, both optional) and
  // PReLU (one weight or one per feature).
  ferry_status per_feature(uint32_t li, const fb::Layer* l, Layer* layer, uint32_t width) {
    const char* name = fb::EnumNameLayerKind(l->kind());
    const uint32_t f[1] = {width};
    ferry_status s = FERRY_OK;
    switch (layer->op) {
      case Op::kBatchNorm:
        if ((s = tensor(l->weight(), li, "weight", 1, f, 1, &layer->weight)) != FERRY_OK) return s;
        s = tensor(l->bias(), li, "bias", 1, f, 1, &layer->bias);
        break;
      case Op::kLayerNorm:
        layer->eps = l->eps();
        if (!(layer->eps >= 0.0f) || layer->eps - layer->eps != 0.0f) {
          return fail(FERRY_INVALID_MODEL, "layers[%u] (LayerNorm): eps must be finite and >= 0", li);
        }
        if ((s = optional_tensor(l->weight(), li, "weight", 1, f, 1, &layer->weight)) != FERRY_OK) return s;
        s = optional_tensor(l->bias(), li, "bias", 1, f, 1, &layer->bias);
        break;
      default: {  // PReLU
        const auto* tensors = m->tensors();
        const int64_t index = l->weight();
        const bool one = index >= 0 && tensors && index < static_cast<int64_t>(tensors->size()) &&
                         tensors->Get(static_cast<uint32_t>(index))->shape() &&
                         tensors->Get(static_cast<uint32_t>(index))->shape()->size() == 1 &&
                         tensors->Get(static_cast<uint32_t>(index))->shape()->Get(0) == 1;
        const uint32_t single[1] = {1};
        s = tensor(index, li, "weight", 1, one ? single : f, 1, &layer->weight);
        break;
      }
    }
    if (s != FERRY_OK) return s;
    if (layer->weight && layer->weight.dtype != DType::kF32) {
      return fail(FERRY_UNSUPPORTED, "layers[%u] (%s): parameters must be F32", li, name);
    }
    return FERRY_OK;
  }

  ferry_status embedding(uint32_t li, const fb::Layer* l, Layer* layer) {
    const uint32_t num = l->input_size(), dim = l->output_size();
    if (num == 0 || num > (1u << 24) || dim == 0 || dim > kMaxFeatures) {
      return fail(FERRY_INVALID_MODEL, "layers[%u] (Embedding): %u embeddings of %u features out of range", li, num,
                  dim);
    }
    const uint32_t w[2] = {num, dim};
    const ferry_status s = tensor(l->weight(), li, "weight", 2, w, 1, &layer->weight);
    if (s != FERRY_OK) return s;
    if (layer->weight.panel8() || layer->weight.dtype != DType::kF32) {
      return fail(FERRY_INVALID_MODEL, "layers[%u] (Embedding).weight: must be F32 RowMajor", li);
    }
    layer->in = 1;
    layer->out = dim;  // weight.units is the number of embeddings
    return FERRY_OK;
  }

  ferry_status build() {
    if (m->format_major() != FERRY_FORMAT_MAJOR) {
      return fail(FERRY_UNSUPPORTED, "format_major %u: this runtime reads format %d.x",
                  m->format_major(), FERRY_FORMAT_MAJOR);
    }
    const auto* blob = m->weights();
    if (blob && (blob->data() - bytes) % FERRY_ALIGNMENT != 0) {
      return fail(FERRY_INVALID_MODEL, "weights: blob at file offset %lld is not %d-byte aligned",
                  static_cast<long long>(blob->data() - bytes), FERRY_ALIGNMENT);
    }
    if (blob && reinterpret_cast<uintptr_t>(blob->data()) % alignof(float) != 0) {
      return fail(FERRY_INVALID_ARGUMENT, "model bytes must be at least 4-byte aligned in memory");
    }
    const auto* layers = m->layers();
    const uint32_t n = layers ? layers->size() : 0;
    if (n == 0) return fail(FERRY_INVALID_MODEL, "layers: the model has no layers");
    if (n > kMaxChain) return fail(FERRY_UNSUPPORTED, "layers: %u elements, at most %u", n, kMaxChain);
    const uint32_t input_size = m->input_size();
    if (input_size == 0 || input_size > kMaxFeatures) {
      return fail(FERRY_INVALID_MODEL, "input_size %u out of range", input_size);
    }
    out->batch_first = m->batch_first();
    out->channels_first = m->channels_first();
    out->input_is_tokens = m->input_is_tokens();
    if (out->batch_first && out->channels_first) {
      return fail(FERRY_INVALID_MODEL, "batch_first and channels_first are both set");
    }
    if (out->input_is_tokens && input_size != 1) {
      return fail(FERRY_INVALID_MODEL, "input_size %u: a model taking tokens takes one per step", input_size);
    }
    out->input_size = input_size;
    out->max_features = input_size;
    uint32_t width = input_size;
    bool time_axis = m->time_axis() || out->channels_first || out->input_is_tokens;
    bool collapsed = false;     // after Last / a pooling layer
    // Residual slots: the width and the time state each Save left, and
    // whether the steps between a Save and its Add stay the same.
    struct Slot {
      bool saved = false;
      uint32_t width = 0;
      bool collapsed = false;
      bool steps_kept = true;
    } slots[kMaxSlots];
    for (uint32_t i = 0; i < n; ++i) {
      const fb::Layer* l = layers->Get(i);
      Layer& layer = out->layers[i];
      const unsigned kind = static_cast<unsigned>(l->kind());
      if (kind > static_cast<unsigned>(fb::LayerKind::MAX)) {
        return fail(FERRY_UNSUPPORTED, "layers[%u].kind: unknown value %u (a newer format?)", i, kind);
      }
      layer.op = static_cast<Op>(kind);  // the enums share values (static_asserts below)
      layer.in = width;
      layer.out = width;
      ferry_status s = FERRY_OK;
      switch (layer.op) {
        case Op::kLstm: case Op::kGru: case Op::kRnnTanh: case Op::kRnnRelu:
          if (collapsed) {
            return fail(FERRY_INVALID_MODEL, "layers[%u]: a recurrent layer after `last`", i);
          }
          if (l->input_size() != width) {
            return fail(FERRY_INVALID_MODEL, "layers[%u].input_size: %u, the chain gives %u", i,
                        l->input_size(), width);
          }
          s = recurrent(i, l, &layer, width);
          time_axis = true;
          break;
        case Op::kLinear: {
          const uint32_t o = l->output_size();
          if (l->input_size() != width || o == 0 || o > kMaxFeatures) {
            return fail(FERRY_INVALID_MODEL, "layers[%u] (Linear): %u -> %u, the chain gives %u inputs",
                        i, l->input_size(), o, width);
          }
          const uint32_t w[2] = {o, width};
          const uint32_t b[1] = {o};
          layer.out = o;
          const uint32_t g_w = layout::gates_for_role(layout::CellKind::kRnn, layout::Role::kLinearWeight);
          const uint32_t g_b = layout::gates_for_role(layout::CellKind::kRnn, layout::Role::kLinearBias);
          if ((s = tensor(l->weight(), i, "weight", 2, w, g_w, &layer.weight)) != FERRY_OK) return s;
          s = optional_tensor(l->bias(), i, "bias", 1, b, g_b, &layer.bias);
          layer.panel8 = layer.weight.panel8() && (!layer.bias || layer.bias.panel8());
          layer.dtype = layer.weight.dtype;
          break;
        }
        case Op::kLast:
          if (!time_axis || collapsed) {
            return fail(FERRY_INVALID_MODEL, "layers[%u]: `last` needs a time axis (after a recurrent layer)", i);
          }
          collapsed = true;
          break;
        case Op::kMeanPool: case Op::kMaxPool:
          if (!time_axis || collapsed) {
            return fail(FERRY_INVALID_MODEL, "layers[%u]: pooling over time needs a time axis", i);
          }
          collapsed = true;
          s = add_state(&layer, width + 1);  // running sum or maximum, then the count
          break;
        case Op::kConv1d:
          if (collapsed) return fail(FERRY_INVALID_MODEL, "layers[%u] (Conv1d): no time axis left to run over", i);
          s = conv(i, l, &layer, width);
          time_axis = true;
          if (s == FERRY_OK &&
              (layer.stride != 1 || uint64_t{layer.pad_left} + layer.pad_right != uint64_t{layer.dilation} * (layer.kernel - 1))) {
            out->lengths_ok = false;  // the steps change (and with them what lengths mean)
            for (Slot& slot : slots) slot.steps_kept = false;
          }
          break;
        case Op::kBatchNorm: case Op::kLayerNorm: case Op::kPRelu:
          s = per_feature(i, l, &layer, width);
          break;
        case Op::kLeakyRelu: case Op::kElu: case Op::kHardtanh: {
          layer.alpha = l->alpha();
          layer.beta = l->beta();
          const bool finite = layer.alpha - layer.alpha == 0.0f && layer.beta - layer.beta == 0.0f;
          if (!finite || (layer.op == Op::kHardtanh && !(layer.alpha <= layer.beta))) {
            return fail(FERRY_INVALID_MODEL, "layers[%u] (%s): parameters must be finite (and min <= max)", i,
                        fb::EnumNameLayerKind(l->kind()));
          }
          break;
        }
        case Op::kGelu:
          layer.approximate_tanh = l->approximate_tanh();
          break;
        case Op::kEmbedding:
          if (i != 0 || !out->input_is_tokens) {
            return fail(FERRY_INVALID_MODEL, "layers[%u] (Embedding): only as the first layer of a model taking tokens", i);
          }
          s = embedding(i, l, &layer);
          break;
        case Op::kSave: case Op::kAdd: {
          const uint32_t k = l->slot();
          if (k >= kMaxSlots) {
            return fail(FERRY_INVALID_MODEL, "layers[%u]: residual slot %u, at most %u slots", i, k, kMaxSlots);
          }
          layer.slot = k;
          Slot& slot = slots[k];
          if (layer.op == Op::kSave) {
            slot = Slot{true, width, collapsed, true};
            if (k + 1 > out->num_slots) out->num_slots = k + 1;
          } else if (!slot.saved || slot.width != width || slot.collapsed != collapsed || !slot.steps_kept) {
            return fail(FERRY_INVALID_MODEL,
                        "layers[%u] (Add): slot %u must hold a saved input of the same shape (%u features, the "
                        "same steps), saved earlier in the chain", i, k, width);
          }
          break;
        }
        default:
          break;
      }
      if (op_collapses_time(layer.op)) {
        for (Slot& slot : slots) slot.steps_kept = slot.steps_kept && slot.collapsed;
      }
      if (s != FERRY_OK) return s;
      width = layer.out;
      if (width > out->max_features) out->max_features = width;
    }
    if (out->input_is_tokens && (n == 0 || out->layers[0].op != Op::kEmbedding)) {
      return fail(FERRY_INVALID_MODEL, "input_is_tokens: the first layer must be an Embedding");
    }
    if (m->output_size() != width) {
      return fail(FERRY_INVALID_MODEL, "output_size %u, the chain gives %u", m->output_size(), width);
    }
    const bool seq_out = time_axis && !collapsed;
    if (m->output_is_sequence() != seq_out) {
      return fail(FERRY_INVALID_MODEL, "output_is_sequence is %d, the chain gives %d",
                  m->output_is_sequence() ? 1 : 0, seq_out ? 1 : 0);
    }
    out->num_layers = n;
    out->output_size = width;
    out->has_time_axis = time_axis;
    out->output_is_sequence = seq_out;
    return FERRY_OK;
  }
};

static_assert(static_cast<int>(fb::DType::F32) == static_cast<int>(DType::kF32), "enum");
static_assert(static_cast<int>(fb::DType::F16) == static_cast<int>(DType::kF16), "enum");
static_assert(static_cast<int>(fb::DType::I8) == static_cast<int>(DType::kI8), "enum");
static_assert(static_cast<int>(fb::DType::MAX) + 1 == static_cast<int>(kDTypeCount), "enum");
static_assert(static_cast<int>(fb::LayerKind::LSTM) == static_cast<int>(Op::kLstm), "enum");
static_assert(static_cast<int>(fb::LayerKind::GRU) == static_cast<int>(Op::kGru), "enum");
static_assert(static_cast<int>(fb::LayerKind::RNN_TANH) == static_cast<int>(Op::kRnnTanh), "enum");
static_assert(static_cast<int>(fb::LayerKind::RNN_RELU) == static_cast<int>(Op::kRnnRelu), "enum");
static_assert(static_cast<int>(fb::LayerKind::Linear) == static_cast<int>(Op::kLinear), "enum");
static_assert(static_cast<int>(fb::LayerKind::Last) == static_cast<int>(Op::kLast), "enum");
static_assert(static_cast<int>(fb::LayerKind::Softmax) == static_cast<int>(Op::kSoftmax), "enum");
static_assert(static_cast<int>(fb::LayerKind::Identity) == static_cast<int>(Op::kIdentity), "enum");
static_assert(static_cast<int>(fb::LayerKind::Conv1d) == static_cast<int>(Op::kConv1d), "enum");
static_assert(static_cast<int>(fb::LayerKind::LogSoftmax) == static_cast<int>(Op::kLogSoftmax), "enum");
static_assert(static_cast<int>(fb::LayerKind::Embedding) == static_cast<int>(Op::kEmbedding), "enum");
static_assert(static_cast<int>(fb::LayerKind::Add) == static_cast<int>(Op::kAdd), "enum");
static_assert(static_cast<int>(fb::LayerKind::MAX) == static_cast<int>(Op::kAdd), "enum");
static_assert(static_cast<int>(fb::PaddingMode::Replicate) == static_cast<int>(PaddingMode::kReplicate), "enum");

}  // namespace

ferry_status verify_model_bytes(const uint8_t* bytes, size_t size) {
  if (!fb::ModelBufferHasIdentifier(bytes)) {
    return fail(FERRY_INVALID_MODEL, "file identifier is not \"%s\": not a ferry model file",
                fb::ModelIdentifier());
  }
  flatbuffers::Verifier verifier(bytes, size, /*max_depth=*/64, /*max_tables=*/1000000);
  if (!fb::VerifyModelBuffer(verifier)) {
    return fail(FERRY_INVALID_MODEL, "FlatBuffers verification failed: an offset, vector or table lies outside the file");
  }
  return FERRY_OK;
}

ferry_status build_model_view(ferry_model* model) {
  Loader loader{model->bytes, fb::GetModel(model->bytes), model};
  return loader.build();
}

}  // namespace ferry
