// Model verification and the internal view (model/loader.h).
//
// Two layers of checks, both always on:
//  1. the FlatBuffers verifier (every offset and vector inside the buffer);
//  2. ferry's own checks: enum values known, every tensor index in range,
//     every tensor window inside the weight blob and 64-byte aligned, every
//     shape product overflow-checked and equal to what its layer needs, the
//     chain's feature widths consistent from input to output.
// Nothing is trusted that was not checked here; kernels index without checks.
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include <stdlib.h>
#include <string.h>

#include <new>

#include "common/status.h"
#include "ferry/ferry_generated.h"
#include "model/loader.h"
#include "model/model.h"
#include "shared/metadata_rules.h"

namespace ferry {
namespace {

namespace fb = ::ferry::fb;

static_assert(meta::kMaxRank == FERRY_METADATA_MAX_RANK, "FERRY_METADATA_MAX_RANK");

// Model.metadata against shared/metadata_rules.h: the user's entries,
// informational, but read through the C API (ferry_model_metadata*), which
// trusts what is checked here.
ferry_status check_metadata(const fb::Model* m) {
  const auto* entries = m->metadata();
  if (!entries) return FERRY_OK;
  const uint32_t n = entries->size();
  if (n > meta::kMaxEntries) {
    return fail(FERRY_INVALID_MODEL, "metadata: %u entries, at most %zu", n, meta::kMaxEntries);
  }
  size_t total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const fb::MetaEntry* e = entries->Get(i);
    const flatbuffers::String* key = e->key();
    if (!key || !meta::key_ok(key->c_str(), key->size())) {
      return fail(FERRY_INVALID_MODEL, "metadata[%u]: the key is absent or not 1 to %zu characters of [A-Za-z0-9_.-]",
                  i, meta::kMaxKeyBytes);
    }
    for (uint32_t j = 0; j < i; ++j) {
      if (strcmp(entries->Get(j)->key()->c_str(), key->c_str()) == 0) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): the key is also metadata[%u]'s", i, key->c_str(), j);
      }
    }
    total += key->size();
    if (e->type() == fb::MetaType::Text) {
      const flatbuffers::String* text = e->text();
      if (!text || e->numbers() || e->shape()) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): a text entry holds text and nothing else", i,
                    key->c_str());
      }
      if (text->size() > meta::kMaxTextBytes) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): %u bytes of text, at most %zu", i, key->c_str(),
                    text->size(), meta::kMaxTextBytes);
      }
      size_t bad = 0;
      if (!meta::utf8_ok(reinterpret_cast<const uint8_t*>(text->data()), text->size(), &bad)) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): the text is not UTF-8 (byte %zu)", i, key->c_str(),
                    bad);
      }
      total += text->size();
    } else if (e->type() == fb::MetaType::Numbers) {
      const auto* numbers = e->numbers();
      if (!numbers || e->text()) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): a numbers entry holds numbers and nothing else", i,
                    key->c_str());
      }
      if (numbers->size() == 0 || numbers->size() > meta::kMaxNumbers) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): %u numbers, 1 to %zu", i, key->c_str(),
                    numbers->size(), meta::kMaxNumbers);
      }
      const uint32_t rank = e->shape() ? e->shape()->size() : 0;
      if (rank > meta::kMaxRank) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): rank %u, at most %zu", i, key->c_str(), rank,
                    meta::kMaxRank);
      }
      uint64_t product = 1;
      for (uint32_t d = 0; d < rank; ++d) {
        product *= e->shape()->Get(d);  // each factor < 2^32, at most 4 of them, capped below
        if (product > meta::kMaxNumbers) break;
      }
      if (product != numbers->size()) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): the shape holds %llu numbers, the entry %u", i,
                    key->c_str(), static_cast<unsigned long long>(product), numbers->size());
      }
      total += size_t{numbers->size()} * sizeof(double);
    } else {
      return fail(FERRY_UNSUPPORTED, "metadata[%u] ('%s'): unknown type %u (a newer format?)", i, key->c_str(),
                  static_cast<unsigned>(e->type()));
    }
    if (total > meta::kMaxTotalBytes) {
      return fail(FERRY_INVALID_MODEL, "metadata: more than %zu bytes in all", meta::kMaxTotalBytes);
    }
  }
  return FERRY_OK;
}

// The element size in bytes of `dtype` in the element-wise layouts
// (RowMajor, Panel8); the int types exist only in their own layouts.
uint64_t dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kI8: case DType::kI4: return 1;
  }
  return 4;
}

// The layouts each dtype is stored in (schema/ferry.fbs).
bool layout_holds(WeightLayout layout, DType dtype) {
  switch (dtype) {
    case DType::kF32: case DType::kF16:
      return layout == WeightLayout::kRowMajor || layout == WeightLayout::kPanel8;
    case DType::kI8: return layout == WeightLayout::kPanel8x4;
    case DType::kI4: return layout == WeightLayout::kPanel8x8q4;
  }
  return false;
}

// Bit pattern checks of scales (the file's bytes, whatever the FP mode).
bool finite_positive(float x) { return x - x == 0.0f && x > 0.0f; }
bool half_finite_nonzero(uint16_t h) { return (h & 0x7c00u) != 0x7c00u && (h & 0x7fffu) != 0; }

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
  // `quantizable`: a weight matrix (w_ih, w_hh, w_hr, Linear weight), which
  // may be F16, I8 or I4 with its scales; every other tensor is F32.
  ferry_status tensor(int64_t index, uint32_t layer_index, const char* role,
                      uint32_t rank, const uint32_t* dims, uint32_t gates, Weight* out_weight,
                      uint32_t blocks = 1, uint64_t* block_stride = nullptr, bool quantizable = false) {
    const auto* tensors = m->tensors();
    const uint32_t count = tensors ? tensors->size() : 0;
    if (index < 0 || index >= static_cast<int64_t>(count)) {
      return fail(FERRY_INVALID_MODEL,
                  "layers[%u] %s: tensor index %lld out of range (model has %u tensors)",
                  layer_index, role, static_cast<long long>(index), count);
    }
    const fb::Tensor* t = tensors->Get(static_cast<uint32_t>(index));
    if (static_cast<unsigned>(t->dtype()) > static_cast<unsigned>(fb::DType::MAX)) {
      return fail(FERRY_UNSUPPORTED, "tensors[%lld].dtype: unknown value %u (a newer format?)",
                  static_cast<long long>(index), static_cast<unsigned>(t->dtype()));
    }
    const DType dtype = static_cast<DType>(t->dtype());  // the enums share values (static_asserts below)
    if (dtype != DType::kF32 && !quantizable) {
      return fail(FERRY_INVALID_MODEL,
                  "tensors[%lld] (layers[%u] %s): dtype %s is not allowed for this role (only weight matrices "
                  "are quantized; biases, norms, convs and embeddings are F32)",
                  static_cast<long long>(index), layer_index, role, fb::EnumNameDType(t->dtype()));
    }
    if (static_cast<unsigned>(t->layout()) > static_cast<unsigned>(fb::TensorLayout::MAX)) {
      return fail(FERRY_UNSUPPORTED, "tensors[%lld] (%s): layout %u is not supported (a newer format?)",
                  static_cast<long long>(index), role, static_cast<unsigned>(t->layout()));
    }
    const WeightLayout wlayout = static_cast<WeightLayout>(t->layout());
    if (!layout_holds(wlayout, dtype)) {
      return fail(FERRY_INVALID_MODEL,
                  "tensors[%lld] (layers[%u] %s): layout %s does not hold dtype %s (F32, F16: RowMajor or Panel8; "
                  "I8: Panel8x4; I4: Panel8x8q4)",
                  static_cast<long long>(index), layer_index, role, fb::EnumNameTensorLayout(t->layout()),
                  fb::EnumNameDType(t->dtype()));
    }
    const bool panel8 = wlayout == WeightLayout::kPanel8;
    const bool quantized = dtype == DType::kI8 || dtype == DType::kI4;
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
    if (quantized) {
      // Matrices only (blocks == 1), whose rows and columns the layer bounds
      // by kMaxFeatures: the layout's byte count cannot overflow.
      nbytes = dtype == DType::kI8 ? layout::panel8x4_bytes(gates, units, cols)
                                   : layout::panel8x8q4_bytes(gates, units, cols);
      elements = nbytes;
    }
    if (dtype == DType::kI8 && cols > layout::kMaxI8Cols) {
      return fail(FERRY_INVALID_MODEL,
                  "tensors[%lld] (layers[%u] %s): I8 with %u columns, at most %u (the int32 sums could overflow)",
                  static_cast<long long>(index), layer_index, role, cols, layout::kMaxI8Cols);
    }
    if (__builtin_mul_overflow(elements, quantized ? 1 : dtype_bytes(dtype), &nbytes) || t->size() != nbytes) {
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
    out_weight->layout = wlayout;
    if (!quantized) {
      if (t->scales() != -1) {
        return fail(FERRY_INVALID_MODEL, "tensors[%lld] (layers[%u] %s): scales set on a %s tensor",
                    static_cast<long long>(index), layer_index, role, fb::EnumNameDType(t->dtype()));
      }
      return FERRY_OK;
    }
    return scales(index, layer_index, role, t, out_weight);
  }

  // The scales of quantized tensor `index` (weight.h): I8 F32 row scales,
  // finite and > 0; I4 F16 group scales, finite and nonzero (signed).
  ferry_status scales(int64_t index, uint32_t layer_index, const char* role, const fb::Tensor* t, Weight* w) {
    const auto* tensors = m->tensors();
    const int64_t si = t->scales();
    const bool i8 = w->dtype == DType::kI8;
    if (si < 0 || si >= static_cast<int64_t>(tensors->size()) || si == index) {
      return fail(FERRY_INVALID_MODEL, "tensors[%lld] (layers[%u] %s): scales index %lld out of range (%s needs a "
                  "scale tensor)", static_cast<long long>(index), layer_index, role, static_cast<long long>(si),
                  fb::EnumNameDType(t->dtype()));
    }
    const fb::Tensor* st = tensors->Get(static_cast<uint32_t>(si));
    const fb::DType want = i8 ? fb::DType::F32 : fb::DType::F16;
    if (st->dtype() != want || st->scales() != -1) {
      return fail(FERRY_INVALID_MODEL, "tensors[%lld] (layers[%u] %s scales): dtype %u, an %s weight needs %s scales",
                  static_cast<long long>(si), layer_index, role, static_cast<unsigned>(st->dtype()),
                  fb::EnumNameDType(t->dtype()), fb::EnumNameDType(want));
    }
    const uint64_t count = i8 ? layout::row_scale_elements(w->gates, w->units)
                              : layout::group_scale_elements(w->gates, w->units, w->cols);
    const uint64_t bytes = count * (i8 ? 4 : 2);
    const auto* shape = st->shape();
    const bool shape_ok = shape && shape->size() == 1 && shape->Get(0) == count;
    if (!shape_ok || st->size() != bytes) {
      return fail(FERRY_INVALID_MODEL,
                  "tensors[%lld] (layers[%u] %s scales): %u elements in %llu bytes, the weight needs %llu scales "
                  "(%llu bytes)", static_cast<long long>(si), layer_index, role,
                  shape && shape->size() == 1 ? shape->Get(0) : 0u, static_cast<unsigned long long>(st->size()),
                  static_cast<unsigned long long>(count), static_cast<unsigned long long>(bytes));
    }
    const auto* blob = m->weights();
    uint64_t end = 0;
    if (__builtin_add_overflow(st->offset(), st->size(), &end) || end > blob->size() ||
        st->offset() % FERRY_ALIGNMENT != 0) {
      return fail(FERRY_INVALID_MODEL,
                  "tensors[%lld] (layers[%u] %s scales): bytes [%llu, +%llu) outside the weight blob or not %d-byte "
                  "aligned", static_cast<long long>(si), layer_index, role,
                  static_cast<unsigned long long>(st->offset()), static_cast<unsigned long long>(st->size()),
                  FERRY_ALIGNMENT);
    }
    const uint8_t* p = blob->data() + st->offset();
    for (uint64_t i = 0; i < count; ++i) {
      bool ok;
      if (i8) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        ok = finite_positive(v);
      } else {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        ok = half_finite_nonzero(h);
      }
      if (!ok) {
        return fail(FERRY_INVALID_MODEL,
                    "tensors[%lld] (layers[%u] %s scales): scale %llu is zero, negative, NaN or Inf (%s)",
                    static_cast<long long>(si), layer_index, role, static_cast<unsigned long long>(i),
                    i8 ? "I8 row scales must be finite and > 0" : "I4 group scales must be finite and nonzero");
      }
    }
    if (i8) w->scales = reinterpret_cast<const float*>(p);
    else w->group_scales = reinterpret_cast<const uint16_t*>(p);
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
      if ((s = tensor(fc->w_ih(), li, "w_ih", 2, ih, g, &cell.w_ih, 1, nullptr, true)) != FERRY_OK) return s;
      if ((s = tensor(fc->w_hh(), li, "w_hh", 2, hh, g, &cell.w_hh, 1, nullptr, true)) != FERRY_OK) return s;
      if ((s = optional_tensor(fc->bias(), li, "bias", 1, b, g, &cell.bias)) != FERRY_OK) return s;
      if (layer->op == Op::kGru) {
        if ((s = optional_tensor(fc->b_hn(), li, "b_hn", 1, bhn, g_bhn, &cell.b_hn)) != FERRY_OK) return s;
      } else if (fc->b_hn() != -1) {
        return fail(FERRY_INVALID_MODEL, "layers[%u] (%s).cells[%u].b_hn: set on a non-GRU layer", li, name, c);
      }
      if (p) {
        if ((s = tensor(fc->w_hr(), li, "w_hr", 2, hr, g_hr, &cell.w_hr, 1, nullptr, true)) != FERRY_OK) return s;
      } else if (fc->w_hr() != -1) {
        return fail(FERRY_INVALID_MODEL, "layers[%u] (%s).cells[%u].w_hr: set without proj_size", li, name, c);
      }
      const bool packed = cell.w_ih.packed() && cell.w_hh.packed() && (!cell.bias || cell.bias.panel8()) &&
                          (!cell.b_hn || cell.b_hn.panel8()) && (!cell.w_hr || cell.w_hr.packed());
      layer->panel8 = (c == 0 || layer->panel8) && packed;
      if (c == 0) layer->dtype = cell.w_ih.dtype;
      // One kernel set per layer: every matrix of every cell in one dtype.
      const Weight* matrices[3] = {&cell.w_ih, &cell.w_hh, &cell.w_hr};
      const char* names[3] = {"w_ih", "w_hh", "w_hr"};
      for (int i = 0; i < 3; ++i) {
        if (*matrices[i] && matrices[i]->dtype != layer->dtype) {
          return fail(FERRY_INVALID_MODEL, "layers[%u] (%s).cells[%u].%s: dtype %s, the layer's first w_ih is %s "
                      "(one dtype per layer)", li, name, c, names[i],
                      fb::EnumNameDType(static_cast<fb::DType>(matrices[i]->dtype)),
                      fb::EnumNameDType(static_cast<fb::DType>(layer->dtype)));
        }
      }
    }
    if (layer->dtype != DType::kF32 && !layer->panel8) {
      return fail(FERRY_INVALID_MODEL, "layers[%u] (%s): %s weights need every tensor of the layer in a panel layout "
                  "(biases Panel8), as the quantized kernels read them", li, name,
                  fb::EnumNameDType(static_cast<fb::DType>(layer->dtype)));
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
    if (m->format_major() < FERRY_FORMAT_MAJOR_OLDEST || m->format_major() > FERRY_FORMAT_MAJOR) {
      return fail(FERRY_UNSUPPORTED, "format_major %u: this runtime reads formats %d.x to %d.x",
                  m->format_major(), FERRY_FORMAT_MAJOR_OLDEST, FERRY_FORMAT_MAJOR);
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
          if ((s = tensor(l->weight(), i, "weight", 2, w, g_w, &layer.weight, 1, nullptr, true)) != FERRY_OK) return s;
          s = optional_tensor(l->bias(), i, "bias", 1, b, g_b, &layer.bias);
          layer.panel8 = layer.weight.packed() && (!layer.bias || layer.bias.panel8());
          layer.dtype = layer.weight.dtype;
          if (s == FERRY_OK && layer.dtype != DType::kF32 && !layer.panel8) {
            return fail(FERRY_INVALID_MODEL, "layers[%u] (Linear): %s weights need every tensor of the layer in a "
                        "panel layout (bias Panel8), as the quantized kernels read them", i,
                        fb::EnumNameDType(static_cast<fb::DType>(layer.dtype)));
          }
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
    const ferry_status layout_status = output_layout(seq_out);
    if (layout_status != FERRY_OK) return layout_status;
    const ferry_status metadata_status = check_metadata(m);
    if (metadata_status != FERRY_OK) return metadata_status;
    out->num_layers = n;
    out->output_size = width;
    out->has_time_axis = time_axis;
    out->output_is_sequence = seq_out;
    return FERRY_OK;
  }

  // Model.output_layout: a known value, set only on a sequence output and
  // only in a format 2 file (a 1.x reader would write the input's layout).
  ferry_status output_layout(bool seq_out) {
    const ferry_layout input = out->channels_first ? FERRY_LAYOUT_CHANNELS_FIRST
                               : out->batch_first  ? FERRY_LAYOUT_BATCH_FIRST
                                                   : FERRY_LAYOUT_TIME_MAJOR;
    out->output_layout = input;
    const fb::IoLayout v = m->output_layout();
    if (v == fb::IoLayout::AsInput) return FERRY_OK;
    if (v > fb::IoLayout::MAX) {
      return fail(FERRY_UNSUPPORTED, "output_layout: unknown value %u (a newer format?)", static_cast<unsigned>(v));
    }
    if (m->format_major() < 2) {
      return fail(FERRY_INVALID_MODEL, "output_layout %s in a format %u.x file: only format 2 records one",
                  fb::EnumNameIoLayout(v), m->format_major());
    }
    if (!seq_out) {
      return fail(FERRY_INVALID_MODEL, "output_layout %s: the output has no time axis ([B,F])",
                  fb::EnumNameIoLayout(v));
    }
    out->output_layout = static_cast<ferry_layout>(static_cast<int>(v) - 1);
    return FERRY_OK;
  }
};

static_assert(static_cast<int>(fb::DType::F32) == static_cast<int>(DType::kF32), "enum");
static_assert(static_cast<int>(fb::DType::F16) == static_cast<int>(DType::kF16), "enum");
static_assert(static_cast<int>(fb::DType::I8) == static_cast<int>(DType::kI8), "enum");
static_assert(static_cast<int>(fb::DType::I4) == static_cast<int>(DType::kI4), "enum");
static_assert(static_cast<int>(fb::TensorLayout::Panel8x4) == static_cast<int>(WeightLayout::kPanel8x4), "enum");
static_assert(static_cast<int>(fb::TensorLayout::Panel8x8q4) == static_cast<int>(WeightLayout::kPanel8x8q4), "enum");
static_assert(static_cast<int>(fb::TensorLayout::MAX) == static_cast<int>(WeightLayout::kPanel8x8q4), "enum");
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
static_assert(static_cast<int>(fb::IoLayout::TimeMajor) - 1 == FERRY_LAYOUT_TIME_MAJOR, "enum");
static_assert(static_cast<int>(fb::IoLayout::BatchFirst) - 1 == FERRY_LAYOUT_BATCH_FIRST, "enum");
static_assert(static_cast<int>(fb::IoLayout::ChannelsFirst) - 1 == FERRY_LAYOUT_CHANNELS_FIRST, "enum");
static_assert(fb::IoLayout::MAX == fb::IoLayout::ChannelsFirst, "enum");
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
