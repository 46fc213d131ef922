#include "mapping/pytorch_rules.h"

#include <algorithm>
#include <cmath>

#include "error.h"

namespace ferry::conv {

const char* pytorch_class_name(CellKind kind) {
  switch (kind) {
    case CellKind::kLstm: return "LSTM";
    case CellKind::kGru: return "GRU";
    case CellKind::kRnn: return "RNN";
  }
  return "?";
}

CellKind kind_from_gates(int64_t gates, const std::string& module) {
  for (CellKind kind : {CellKind::kLstm, CellKind::kGru, CellKind::kRnn})
    if (gates == layout::gate_count(kind)) return kind;
  throw Error("module '" + module + "': weight_ih has " + std::to_string(gates) +
              " x hidden_size rows; LSTM has 4, GRU 3, RNN 1");
}

std::vector<float> fold_bias(const std::vector<float>& b_ih, const std::vector<float>& b_hh) {
  if (b_ih.size() != b_hh.size()) throw Error("bias_ih and bias_hh differ in length");
  std::vector<float> out(b_ih.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = b_ih[i] + b_hh[i];
  return out;
}

GruBias fold_gru_bias(const std::vector<float>& b_ih, const std::vector<float>& b_hh, uint32_t hidden) {
  const size_t rows = layout::gate_count(CellKind::kGru) * static_cast<size_t>(hidden);
  if (b_ih.size() != rows || b_hh.size() != rows) throw Error("GRU biases must have 3*hidden rows");
  const size_t n_rows = gate_row(GruGate::kNew, 0, hidden);  // r and z come before n
  GruBias out;
  out.folded.assign(b_ih.begin(), b_ih.end());
  for (size_t i = 0; i < n_rows; ++i) out.folded[i] += b_hh[i];
  out.b_hn.assign(b_hh.begin() + static_cast<std::ptrdiff_t>(n_rows), b_hh.end());
  return out;
}

HiddenSizes hidden_sizes(uint32_t w_hh_columns, const uint32_t* w_hr) {
  if (w_hr) return HiddenSizes{w_hr[1], w_hr[0]};
  return HiddenSizes{w_hh_columns, 0};
}

bool parse_recurrent_param(const std::string& name, RecurrentParamName* out) {
  static const char* kBases[] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"};
  for (const char* base : kBases) {
    const std::string prefix = std::string(base) + "_l";
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = name.substr(prefix.size());
    bool reverse = false;
    const std::string kRev = "_reverse";
    if (rest.size() > kRev.size() && rest.compare(rest.size() - kRev.size(), kRev.size(), kRev) == 0) {
      reverse = true;
      rest.resize(rest.size() - kRev.size());
    }
    if (rest.empty() || rest.size() > 4 ||
        !std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
    out->base = base;
    out->layer = static_cast<uint32_t>(std::stoul(rest));
    out->reverse = reverse;
    return true;
  }
  return false;
}

std::string recurrent_param_suffix(bool is_cell, uint32_t layer, bool reverse) {
  return is_cell ? "" : "_l" + std::to_string(layer) + (reverse ? "_reverse" : "");
}

std::vector<int64_t> recurrent_param_shape(CellKind kind, const std::string& base, uint32_t input_size,
                                           const HiddenSizes& sizes, uint32_t layer, bool bidirectional) {
  const int64_t rows = int64_t{layout::gate_count(kind)} * sizes.hidden;
  const int64_t h_out = sizes.output();
  if (base == "weight_ih") return {rows, layer == 0 ? int64_t{input_size} : (bidirectional ? 2 : 1) * h_out};
  if (base == "weight_hh") return {rows, h_out};
  if (base == "bias_ih" || base == "bias_hh") return {rows};
  if (base == "weight_hr") return {int64_t{sizes.proj}, int64_t{sizes.hidden}};
  throw Error("internal: '" + base + "' is not a recurrent parameter");
}

std::optional<int> weight_norm_dim(const std::vector<int64_t>& v_shape, const std::vector<int64_t>& g_shape) {
  if (g_shape.empty()) return kWholeTensorNorm;
  if (g_shape.size() != v_shape.size()) return std::nullopt;
  std::optional<int> fit;
  for (size_t d = 0; d < v_shape.size(); ++d) {
    bool ok = g_shape[d] == v_shape[d];
    for (size_t e = 0; e < g_shape.size() && ok; ++e) ok = e == d || g_shape[e] == 1;
    // Prefer a dimension along which v has more than one index: where v is 1
    // along every fitting dimension, the norm is the whole tensor's.
    if (ok && (!fit || v_shape[d] != 1)) fit = static_cast<int>(d);
  }
  if (fit && v_shape[static_cast<size_t>(*fit)] == 1) return kWholeTensorNorm;
  return fit;
}

std::vector<float> fold_weight_norm(const std::vector<float>& v, const std::vector<int64_t>& v_shape,
                                    const std::vector<float>& g, int dim, const std::string& what) {
  // v's elements in C order as [outer, n, inner] around `dim`.
  uint64_t outer = 1, n = 1, inner = 1;
  if (dim != kWholeTensorNorm) {
    for (size_t d = 0; d < v_shape.size(); ++d) {
      const uint64_t s = static_cast<uint64_t>(v_shape[d]);
      if (static_cast<int>(d) < dim) outer *= s;
      else if (static_cast<int>(d) == dim) n = s;
      else inner *= s;
    }
  } else {
    inner = v.size();
  }
  if (outer * n * inner != v.size() || g.size() != n) throw Error(what + ": internal: weight norm shapes");
  std::vector<double> sq(n, 0.0);
  for (uint64_t o = 0; o < outer; ++o)
    for (uint64_t i = 0; i < n; ++i)
      for (uint64_t k = 0; k < inner; ++k) {
        const double x = v[(o * n + i) * inner + k];
        sq[i] += x * x;
      }
  std::vector<float> scale(n);
  for (uint64_t i = 0; i < n; ++i) {
    const double norm = std::sqrt(sq[i]);
    if (!(norm > 0) || !std::isfinite(norm)) {
      throw Error(what + ": v has " + (norm > 0 ? "a non-finite" : "a zero") + " norm" +
                  (dim == kWholeTensorNorm ? std::string() : " at index " + std::to_string(i) + " of dim " + std::to_string(dim)) +
                  ": g / ||v|| is undefined");
    }
    // As torch._weight_norm computes it: v * (g / ||v||).
    scale[i] = static_cast<float>(g[i] / static_cast<float>(norm));
  }
  std::vector<float> w(v.size());
  for (uint64_t o = 0; o < outer; ++o)
    for (uint64_t i = 0; i < n; ++i)
      for (uint64_t k = 0; k < inner; ++k) {
        const uint64_t at = (o * n + i) * inner + k;
        w[at] = v[at] * scale[i];
      }
  return w;
}

std::vector<float> fold_spectral_norm(const std::vector<float>& orig, const std::vector<int64_t>& shape,
                                      const std::vector<float>& u, const std::vector<float>& v,
                                      const std::string& what, double* sigma) {
  if (shape.empty() || shape[0] <= 0) throw Error(what + ": the weight has shape " + dims_text(shape) + ", no rows");
  const uint64_t h = static_cast<uint64_t>(shape[0]);
  const uint64_t w = orig.size() / h;
  if (u.size() != h || v.size() != w) {
    throw Error(what + ": u has " + std::to_string(u.size()) + " and v " + std::to_string(v.size()) +
                " elements, but the weight " + dims_text(shape) + " as a matrix is " + std::to_string(h) + " x " +
                std::to_string(w) + " (u needs " + std::to_string(h) + ", v " + std::to_string(w) + ")");
  }
  double s = 0;
  for (uint64_t i = 0; i < h; ++i) {
    double row = 0;
    for (uint64_t j = 0; j < w; ++j) row += double{orig[i * w + j]} * double{v[j]};
    s += double{u[i]} * row;
  }
  if (!(s != 0) || !std::isfinite(s)) {
    throw Error(what + ": sigma = u^T W v is " + std::to_string(s) + ": the weight / sigma is undefined");
  }
  *sigma = s;
  const float sf = static_cast<float>(s);
  std::vector<float> out(orig.size());
  for (size_t i = 0; i < orig.size(); ++i) out[i] = orig[i] / sf;
  return out;
}

std::optional<uint64_t> float32_view_file_offset(const TensorRef& t, const MappedFile& file) {
  const bool plain_f32 = t.dtype == DType::F32 && t.storage && !t.storage->big_endian && is_contiguous(t);
  if (!plain_f32 || t.storage->data < file.data() ||
      t.storage->data + t.storage->nbytes > file.data() + file.size())
    return std::nullopt;
  return static_cast<uint64_t>(t.storage->data - file.data()) + static_cast<uint64_t>(t.offset) * 4;
}

}  // namespace ferry::conv
