#include "layout.h"

#include "error.h"

namespace ferry::conv {

uint32_t gate_count(RecurrentKind kind) {
  switch (kind) {
    case RecurrentKind::LSTM: return 4;
    case RecurrentKind::GRU: return 3;
    case RecurrentKind::RNN: return 1;
  }
  return 0;
}

const char* recurrent_kind_name(RecurrentKind kind) {
  switch (kind) {
    case RecurrentKind::LSTM: return "LSTM";
    case RecurrentKind::GRU: return "GRU";
    case RecurrentKind::RNN: return "RNN";
  }
  return "?";
}

RecurrentKind kind_from_gates(int64_t gates, const std::string& module) {
  if (gates == 4) return RecurrentKind::LSTM;
  if (gates == 3) return RecurrentKind::GRU;
  if (gates == 1) return RecurrentKind::RNN;
  throw Error("module '" + module + "': weight_ih has " + std::to_string(gates) +
              " x hidden_size rows; LSTM has 4, GRU 3, RNN 1");
}

std::vector<float> fold_bias(const std::vector<float>& b_ih, const std::vector<float>& b_hh) {
  if (b_ih.size() != b_hh.size()) throw Error("bias_ih and bias_hh differ in length");
  std::vector<float> out(b_ih.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = b_ih[i] + b_hh[i];
  return out;
}

GruBias fold_gru_bias(const std::vector<float>& b_ih, const std::vector<float>& b_hh,
                      uint32_t hidden) {
  const size_t rows = 3 * static_cast<size_t>(hidden);
  if (b_ih.size() != rows || b_hh.size() != rows) throw Error("GRU biases must have 3*hidden rows");
  GruBias out;
  out.folded.assign(b_ih.begin(), b_ih.end());
  for (size_t i = 0; i < 2 * static_cast<size_t>(hidden); ++i) out.folded[i] += b_hh[i];
  out.b_hn.assign(b_hh.begin() + 2 * hidden, b_hh.end());
  return out;
}

std::string strip_wrapper_prefixes(const std::string& key) {
  static const std::string kModule = "module.";
  static const std::string kCompiled = "_orig_mod.";
  std::string out = key;
  for (bool changed = true; changed;) {
    changed = false;
    if (out.compare(0, kModule.size(), kModule) == 0) {
      out.erase(0, kModule.size());
      changed = true;
    }
    // `_orig_mod.` at the start or after any '.'.
    for (size_t pos = out.find(kCompiled); pos != std::string::npos; pos = out.find(kCompiled, pos)) {
      if (pos == 0 || out[pos - 1] == '.') {
        out.erase(pos, kCompiled.size());
        changed = true;
      } else {
        pos += kCompiled.size();
      }
    }
  }
  return out;
}

}  // namespace ferry::conv
