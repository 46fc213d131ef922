#include "pack/tensor_packing.h"

#include <algorithm>
#include <string>

#include "error.h"
#include "weight_layout.h"

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
  for (size_t i = 0; i < out.size(); ++i) {
    const TensorPlan& t = plan.tensors[i];
    out[i].elements = t.numel();
    if (!out[i].panel8) continue;
    if (t.shape.empty() || t.shape.size() > 3 || out[i].blocks == 0 || t.shape[0] % (out[i].gates * out[i].blocks) != 0) {
      throw Error("internal: tensor '" + t.name + "' does not split into " + std::to_string(out[i].gates) +
                  " gates of " + std::to_string(out[i].blocks) + " blocks");
    }
    const uint32_t units = t.shape[0] / out[i].gates / out[i].blocks;
    uint64_t cols = 1;
    for (size_t d = 1; d < t.shape.size(); ++d) cols *= t.shape[d];
    out[i].elements = layout::panel8_elements(out[i].gates, units, cols) * out[i].blocks;
  }
  return out;
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
