// PyTorch's layer layouts, in one place (PYTORCH_FORMAT.md §7): every rule
// that turns PyTorch parameters into what ferry's kernels read. Each rule has
// its own test in tests/unit/test_layout.cpp, which maps the weights of a
// committed fixture (tests/fixtures/models/, made by torch 1.13) with the
// rule, evaluates the layer with a small scalar loop and compares with the
// output PyTorch itself computed.
//
// How the weights are then stored in the model file (gate counts, Panel8
// panels) is ferry's own layout, defined once for the converter and the
// runtime in runtime/src/shared/weight_layout.h.
//
// Terms: I input size, H hidden size, P proj_size (0: none), H_out = P or H
// (the width of h), G gates (LSTM 4, GRU 3, RNN 1), D directions (2 when
// bidirectional), k the layer of a stacked module.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/tensor_ref.h"
#include "io/mapped_file.h"
#include "weight_layout.h"

namespace ferry::conv {

// The recurrent cell of a module: nn.LSTM / nn.GRU / nn.RNN and their Cell
// forms. Its gate count is the weight layout's, layout::gate_count().
using CellKind = layout::CellKind;

// "LSTM", "GRU", "RNN".
const char* pytorch_class_name(CellKind kind);

// The kind whose gate count is `gates` (weight_ih_l0.shape[0] / H); throws
// Error naming `module` for any other count.
CellKind kind_from_gates(int64_t gates, const std::string& module);

// ------------------------------------------------------------ gate order --
// PyTorch stacks the gates of a recurrent weight or bias along its rows,
// gate-major: rows [g*H, (g+1)*H) hold gate g, in the order i, f, g, o
// (LSTM) and r, z, n (GRU). ferry keeps that order (its kernels read the
// same), so no row moves at convert time: the order is written down here, for
// the rules below and their tests.
enum class LstmGate : uint32_t { kInput = 0, kForget = 1, kCell = 2, kOutput = 3 };
enum class GruGate : uint32_t { kReset = 0, kUpdate = 1, kNew = 2 };

// The row of gate `gate` of hidden unit `unit` (< hidden).
constexpr size_t gate_row(LstmGate gate, uint32_t unit, uint32_t hidden) {
  return static_cast<size_t>(gate) * hidden + unit;
}
constexpr size_t gate_row(GruGate gate, uint32_t unit, uint32_t hidden) {
  return static_cast<size_t>(gate) * hidden + unit;
}

// ---------------------------------------------------------------- biases --
// LSTM and RNN: gates = W_ih x + b_ih + W_hh h + b_hh, so the two biases are
// one, b_ih + b_hh, added once at convert time.
std::vector<float> fold_bias(const std::vector<float>& b_ih, const std::vector<float>& b_hh);

// GRU: gates r and z fold the same way, but gate n reads
//   n = tanh(W_in x + b_in + r * (W_hn h + b_hn)),
// so b_hn stays apart (inside the product with r) and the n rows keep b_in
// alone. Returns {folded [3H], b_hn [H]}.
struct GruBias {
  std::vector<float> folded;
  std::vector<float> b_hn;
};
GruBias fold_gru_bias(const std::vector<float>& b_ih, const std::vector<float>& b_hh, uint32_t hidden);

// ----------------------------------------------------- sizes: proj_size --
// An LSTM with proj_size P has weight_hr_l{k} [P, H], which projects the new
// hidden state, h' = W_hr (o * tanh(c')), before it is output and fed back;
// the cell state c stays H wide. So h is P wide: weight_hh (and weight_ih of
// layers k >= 1) have P columns, and H can only be read from weight_hr.
struct HiddenSizes {
  uint32_t hidden = 0;  // H
  uint32_t proj = 0;    // P, 0 without projection
  uint32_t output() const { return proj ? proj : hidden; }  // H_out
};
// From the layer-0 weights: `w_hr` is weight_hr_l0's shape {P, H} when the
// module has one; otherwise H is `w_hh_columns`, weight_hh_l0.shape[1].
HiddenSizes hidden_sizes(uint32_t w_hh_columns, const uint32_t* w_hr);

// ------------------------------------------------ parameter names, shapes --
// A stacked module names its parameters <base>_l<k>[_reverse], base one of
// weight_ih, weight_hh, bias_ih, bias_hh, weight_hr; a Cell names them
// <base> alone.
struct RecurrentParamName {
  std::string base;
  uint32_t layer = 0;
  bool reverse = false;
};
// Parses "weight_ih_l3_reverse" into {weight_ih, 3, true}; false for a name
// that is not a stacked module's parameter.
bool parse_recurrent_param(const std::string& name, RecurrentParamName* out);
// "_l<layer>[_reverse]", or "" for a Cell.
std::string recurrent_param_suffix(bool is_cell, uint32_t layer, bool reverse);

// The shape PyTorch gives parameter `base` of layer `layer`:
//   weight_ih [G*H, I] for layer 0, [G*H, D*H_out] above (layer k takes the
//             concatenated [forward | backward] output of layer k-1),
//   weight_hh [G*H, H_out],  bias_ih, bias_hh [G*H],  weight_hr [P, H].
std::vector<int64_t> recurrent_param_shape(CellKind kind, const std::string& base, uint32_t input_size,
                                           const HiddenSizes& sizes, uint32_t layer, bool bidirectional);

// ---------------------------------------- weight norm and spectral norm --
// A weight may be stored reparametrized (PYTORCH_FORMAT.md §10): ferry
// folds it back into the plain weight PyTorch computes in eval mode, once,
// at convert time (mapping/reparametrize.h finds the tensors by name).
//
// weight_norm (torch.nn.utils.weight_norm: <name>_g, <name>_v;
// parametrizations.weight_norm: original0 = g, original1 = v):
//   w = v * g / ||v||, no epsilon, the L2 norm taken over every dimension of
//   v except `dim` (one norm per index along `dim`; dim 0 by default: per
//   output row of a Linear or RNN weight, per output channel of a Conv1d,
//   over (in, k)); dim None: one norm of the whole tensor.
// `dim` is not saved; g's shape says it: g has v's rank, v's size along
// `dim` and 1 elsewhere (keepdim); a 0-d g is the whole-tensor norm. Where
// several dimensions fit (v is 1 along all but one), every choice gives the
// same w.
constexpr int kWholeTensorNorm = -1;
// The `dim` g's shape gives (kWholeTensorNorm for a 0-d g, or where v has
// size 1 along every dimension g fits), or nullopt when g fits none.
std::optional<int> weight_norm_dim(const std::vector<int64_t>& v_shape, const std::vector<int64_t>& g_shape);
// w = v * g / ||v|| over v's C-order elements (g holds one value per index
// along `dim`, or one for kWholeTensorNorm). The norms are summed in double.
// Throws Error, starting with `what`, where a norm is 0 (PyTorch would
// divide by it: the weight is undefined).
std::vector<float> fold_weight_norm(const std::vector<float>& v, const std::vector<int64_t>& v_shape,
                                    const std::vector<float>& g, int dim, const std::string& what);

// spectral_norm (torch.nn.utils.spectral_norm: <name>_orig, buffers
// <name>_u [h], <name>_v [w]; parametrizations.spectral_norm: original +
// 0._u, 0._v), in eval mode, where PyTorch runs no power iteration:
//   W = orig reshaped to a matrix (h = orig.shape[0], w = numel / h: dim 0,
//   PyTorch's default for every module but ConvTranspose, which ferry does
//   not run), sigma = u^T (W v), weight = orig / sigma.
// Returns the weight and sets *sigma; throws Error, starting with `what`,
// when u or v does not have h or w elements, or sigma is 0 or not finite.
std::vector<float> fold_spectral_norm(const std::vector<float>& orig, const std::vector<int64_t>& shape,
                                      const std::vector<float>& u, const std::vector<float>& v,
                                      const std::string& what, double* sigma);

// ------------------------------------------------ views: cuDNN flat weights --
// A parameter is a view: on a GPU, PyTorch keeps an RNN's parameters as views
// into one flat storage (cuDNN's layout: per layer w_ih, w_hh, b_ih, b_hh, each
// at its storage offset) and torch.save writes that storage once, so several
// tensors share one storage record; slices and transposes are views too. A
// tensor is therefore read through its own offset and strides, never as "its
// storage". For a C-contiguous little-endian float32 view inside `file` the
// stored bytes are the file's bytes from
//   (storage data - file start) + offset * 4,
// which this returns (the writer then copies them in the kernel); nothing for
// any other view, which is converted element by element (to_float32_range).
std::optional<uint64_t> float32_view_file_offset(const TensorRef& t, const MappedFile& file);

}  // namespace ferry::conv
