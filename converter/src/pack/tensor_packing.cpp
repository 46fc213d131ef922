#include "pack/tensor_packing.h"

#include <algorithm>
#include <string>

#include "error.h"
#include "weight_layout.h"
#include "weight_quant.h"

namespace ferry::conv {
namespace {

using layout::CellKind;
using layout::Role;

// The weight layout's cell kind of a layer; RNN for layers without cells,
// whose roles (Linear weight and bias) have one gate whatever the kind.
CellKind cell_kind(LayerOp op) {
  return op == LayerOp::LSTM ? CellKind::kLstm : op == LayerOp::GRU ? CellKind::kGru : CellKind::kRnn;
}

}  // namespace

std::vector<StoredForm> stored_forms(const ModelPlan& plan) {
  std::vector<StoredForm> out(plan.tensors.size());
  std::vector<bool> seen(plan.tensors.size(), false);
  const auto use = [&](int index, uint32_t gates, uint32_t blocks = 1) {
    if (index < 0) return;
    const size_t i = static_cast<size_t>(index);
    if (i >= out.size()) throw Error("internal: tensor index " + std::to_string(index) + " out of range");
    if (seen[i] && out[i].gates != gates) {
      throw Error("internal: tensor '" + plan.tensors[i].name + "' is used with " + std::to_string(out[i].gates) +
                  " and " + std::to_string(gates) + " gates");
    }
    seen[i] = true;
    out[i].panel8 = true;
    out[i].gates = gates;
    out[i].blocks = blocks;
  };
  for (const LayerPlan& l : plan.layers) {
    const CellKind kind = cell_kind(l.op);
    const auto gates = [kind](Role role) { return layout::gates_for_role(kind, role); };
    for (const CellPlan& c : l.cells) {
      use(c.w_ih, gates(Role::kCellInput));
      use(c.w_hh, gates(Role::kCellRecurrent));
      use(c.bias, gates(Role::kCellBias));
      use(c.b_hn, gates(Role::kGruHiddenBias));
      use(c.w_hr, gates(Role::kProjection));
    }
    if (l.op == LayerOp::Linear) {
      use(l.weight, gates(Role::kLinearWeight));
      use(l.bias, gates(Role::kLinearBias));
    } else if (l.op == LayerOp::Conv1d) {
      use(l.weight, gates(Role::kLinearWeight), l.groups);
      use(l.bias, gates(Role::kLinearBias), l.groups);
    }
  }
  const size_t n = out.size();
  for (size_t i = 0; i < n; ++i) {
    const TensorPlan& t = plan.tensors[i];
    StoredForm& f = out[i];
    f.elements = t.numel();
    f.bytes = f.elements * sizeof(float);
    f.dtype = t.dtype;
    if (t.dtype != DType::F32 && (!f.panel8 || t.shape.size() != 2 || f.blocks != 1)) {
      throw Error("internal: tensor '" + t.name + "' is " + dtype_name(t.dtype) + " but not a weight matrix");
    }
    if (!f.panel8) continue;
    f.layout = StoredForm::Layout::Panel8;
    if (t.shape.empty() || t.shape.size() > 3 || f.blocks == 0 || t.shape[0] % (f.gates * f.blocks) != 0) {
      throw Error("internal: tensor '" + t.name + "' does not split into " + std::to_string(f.gates) + " gates of " +
                  std::to_string(f.blocks) + " blocks");
    }
    const uint32_t units = t.shape[0] / f.gates / f.blocks;
    uint64_t cols = 1;
    for (size_t d = 1; d < t.shape.size(); ++d) cols *= t.shape[d];
    f.units = units;
    f.cols = cols;
    f.elements = layout::panel8_elements(f.gates, units, cols) * f.blocks;
    f.bytes = f.elements * sizeof(float);
    StoredForm scales;
    scales.gates = f.gates;
    scales.units = units;
    scales.cols = cols;
    scales.scales_of = static_cast<int>(i);
    switch (t.dtype) {
      case DType::F32: continue;
      case DType::F16:
        f.bytes = f.elements * 2;
        continue;
      case DType::I8:
        f.panel8 = false;
        f.layout = StoredForm::Layout::Panel8x4;
        f.bytes = f.elements = layout::panel8x4_bytes(f.gates, units, cols);
        scales.dtype = DType::F32;
        scales.elements = layout::row_scale_elements(f.gates, units);
        scales.bytes = scales.elements * 4;
        break;
      case DType::I4:
        f.panel8 = false;
        f.layout = StoredForm::Layout::Panel8x8q4;
        f.bytes = f.elements = layout::panel8x8q4_bytes(f.gates, units, cols);
        scales.dtype = DType::F16;
        scales.elements = layout::group_scale_elements(f.gates, units, cols);
        scales.bytes = scales.elements * 2;
        break;
      default:
        throw Error(std::string("internal: tensor '") + t.name + "': target dtype " + dtype_name(t.dtype));
    }
    f.scales = static_cast<int>(out.size());
    out.push_back(scales);
  }
  return out;
}

namespace {

// A matrix the quantize stage already rounded (TensorPlan::rounded), stored
// as it is.
QuantizedTensor store_rounded(const TensorPlan& t, const StoredForm& form) {
  const RoundedMatrix& m = *t.rounded;
  const uint32_t G = form.gates, units = static_cast<uint32_t>(form.units), cols = static_cast<uint32_t>(form.cols);
  if (m.dtype != form.dtype || m.rows != uint64_t{G} * units || m.cols != cols ||
      m.q.size() != uint64_t{m.rows} * cols) {
    throw Error("internal: tensor '" + t.name + "': its rounded integers do not fit its stored form");
  }
  QuantizedTensor q;
  q.bytes.resize(static_cast<size_t>(form.bytes));
  bool ok = false;
  if (form.dtype == DType::I8 && m.row_scales.size() == m.rows) {
    q.scales.resize(static_cast<size_t>(layout::row_scale_elements(G, units) * 4));
    ok = quant::store_i8_panel8x4(m.q.data(), m.row_scales.data(), G, units, cols,
                                  reinterpret_cast<int8_t*>(q.bytes.data()), reinterpret_cast<float*>(q.scales.data()));
  } else if (form.dtype == DType::I4 && m.group_scales.size() == m.rows * layout::group_count(cols)) {
    q.scales.resize(static_cast<size_t>(layout::group_scale_elements(G, units, cols) * 2));
    ok = quant::store_i4_panel8x8q4(m.q.data(), m.group_scales.data(), G, units, cols, q.bytes.data(),
                                    reinterpret_cast<uint16_t*>(q.scales.data()));
  }
  if (!ok) throw Error("internal: tensor '" + t.name + "': its rounded integers or scales are off the grid");
  return q;
}

}  // namespace

QuantizedTensor quantize_tensor(const TensorPlan& t, const StoredForm& form) {
  if (t.rounded) return store_rounded(t, form);
  const uint32_t G = form.gates, units = static_cast<uint32_t>(form.units), cols = static_cast<uint32_t>(form.cols);
  std::vector<float> w(static_cast<size_t>(t.numel()));
  t.fill(w.data(), 0, w.size());
  QuantizedTensor q;
  q.bytes.resize(static_cast<size_t>(form.bytes));
  bool ok = false;
  const char* what = "";
  switch (form.dtype) {
    case DType::F16:
      ok = quant::pack_f16_panel8(w.data(), G, units, cols, reinterpret_cast<uint16_t*>(q.bytes.data()));
      what = "f16 holds finite weights of magnitude below 65520";
      break;
    case DType::I8:
      q.scales.resize(static_cast<size_t>(layout::row_scale_elements(G, units) * 4));
      ok = quant::quantize_i8_panel8x4(w.data(), G, units, cols, reinterpret_cast<int8_t*>(q.bytes.data()),
                                       reinterpret_cast<float*>(q.scales.data()));
      what = "int8 needs finite weights";
      break;
    case DType::I4:
      q.scales.resize(static_cast<size_t>(layout::group_scale_elements(G, units, cols) * 2));
      ok = quant::quantize_i4_panel8x8q4(w.data(), G, units, cols, q.bytes.data(),
                                         reinterpret_cast<uint16_t*>(q.scales.data()));
      what = "int4 needs finite weights of magnitude below 524032";
      break;
    default:
      throw Error("internal: tensor '" + t.name + "' is not quantized");
  }
  if (!ok) throw Error("tensor '" + t.name + "' cannot be stored as " + dtype_name(form.dtype) + ": " + what);
  return q;
}

// Panel8 is packed in slabs of whole panels (~4 MiB of output at a time): for
// each gate one contiguous range of source rows, read with one `fill` call,
// then scattered into the panels. The output is written in stored order; the
// reads gather from the slab's 8G rows of each panel.
void pack_tensor(const TensorPlan& t, const StoredForm& form, std::vector<float>& scratch, const PackSink& sink) {
  constexpr uint64_t kChunk = uint64_t{1} << 20;  // floats (4 MiB)
  if (!form.panel8) {
    const uint64_t n = form.elements;
    scratch.resize(static_cast<size_t>(std::min(n, kChunk)));
    for (uint64_t begin = 0; begin < n; begin += kChunk) {
      const uint64_t count = std::min(kChunk, n - begin);
      t.fill(scratch.data(), begin, count);
      sink(scratch.data(), count);
    }
    return;
  }
  if (form.blocks > 1) {
    // Each block a matrix of its own: rows [b*rows, (b+1)*rows) of the tensor.
    const uint64_t rows = t.shape[0] / form.blocks, cols = t.numel() / t.shape[0];
    for (uint32_t b = 0; b < form.blocks; ++b) {
      TensorPlan block;
      block.name = t.name;
      block.shape = {static_cast<uint32_t>(rows), static_cast<uint32_t>(cols)};
      const uint64_t first = b * rows * cols;
      block.fill = [&t, first](float* dst, uint64_t begin, uint64_t count) { t.fill(dst, first + begin, count); };
      StoredForm one = form;
      one.blocks = 1;
      pack_tensor(block, one, scratch, sink);
    }
    return;
  }
  constexpr uint32_t kPanel = layout::kPanel;
  const uint32_t G = form.gates, H = t.shape[0] / G;
  uint64_t K = 1;
  for (size_t d = 1; d < t.shape.size(); ++d) K *= t.shape[d];
  if (G > layout::kMaxGates) throw Error("internal: tensor '" + t.name + "': more than 4 gates");
  const uint64_t panels = layout::panels_of(H), panel_floats = layout::panel8_panel_elements(G, K);
  const uint64_t per_slab = std::max<uint64_t>(1, kChunk / panel_floats);
  std::vector<float> packed;
  for (uint64_t p0 = 0; p0 < panels; p0 += per_slab) {
    const uint64_t p1 = std::min(panels, p0 + per_slab);
    const uint64_t u0 = kPanel * p0, u1 = std::min<uint64_t>(H, kPanel * p1);  // source units of the slab
    scratch.resize(static_cast<size_t>(G * (u1 - u0) * K));
    for (uint64_t g = 0; g < G; ++g) {
      t.fill(scratch.data() + g * (u1 - u0) * K, (g * H + u0) * K, (u1 - u0) * K);
    }
    packed.resize(static_cast<size_t>((p1 - p0) * panel_floats));
    const uint64_t slab_start = layout::panel8_index(G, K, 0, static_cast<uint32_t>(u0), 0);
    for (uint64_t p = p0; p < p1; ++p) {
      const float* rows[layout::kMaxGates * kPanel];  // source row of gate g, lane j; null past H
      for (uint64_t g = 0; g < G; ++g) {
        for (uint64_t j = 0; j < kPanel; ++j) {
          const uint64_t u = kPanel * p + j;
          rows[g * kPanel + j] = u < H ? scratch.data() + (g * (u1 - u0) + (u - u0)) * K : nullptr;
        }
      }
      const uint32_t first_unit = static_cast<uint32_t>(kPanel * p);
      for (uint64_t k = 0; k < K; ++k) {
        for (uint32_t g = 0; g < G; ++g) {
          float* dst = packed.data() + (layout::panel8_index(G, K, g, first_unit, k) - slab_start);
          const float* const* lanes = rows + g * kPanel;
          for (uint32_t j = 0; j < kPanel; ++j) dst[j] = lanes[j] ? lanes[j][k] : 0.0f;
        }
      }
    }
    sink(packed.data(), packed.size());
  }
}

}  // namespace ferry::conv
