// PyTorch layout rules, in one place (PYTORCH_FORMAT.md §7). Every rule that
// turns PyTorch parameters into what ferry's kernels read lives here and has
// its own test in tests/unit/test_layout.cpp, checked against PyTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::conv {

enum class RecurrentKind { LSTM, GRU, RNN };

// Gates per hidden unit: 4 (i,f,g,o), 3 (r,z,n), 1.
uint32_t gate_count(RecurrentKind kind);
const char* recurrent_kind_name(RecurrentKind kind);  // "LSTM", "GRU", "RNN"

// Kind from the gate count (weight_ih_l0.shape[0] / H); throws for others.
RecurrentKind kind_from_gates(int64_t gates, const std::string& module);

// LSTM and RNN: b_ih + b_hh, added once at convert time.
std::vector<float> fold_bias(const std::vector<float>& b_ih, const std::vector<float>& b_hh);

// GRU: rows r and z get b_ih + b_hh; row n keeps b_in alone, because b_hn
// sits inside r * (W_hn h + b_hn). Returns {folded [3H], b_hn [H]}.
struct GruBias {
  std::vector<float> folded;
  std::vector<float> b_hn;
};
GruBias fold_gru_bias(const std::vector<float>& b_ih, const std::vector<float>& b_hh,
                      uint32_t hidden);

// Strips wrapper prefixes: leading `module.` (DataParallel / DDP) and every
// `_orig_mod.` (torch.compile), repeatedly, in any combination.
std::string strip_wrapper_prefixes(const std::string& key);

}  // namespace ferry::conv
