// Which axis is which, along a chain read from a file (mapping/script_chain.h,
// mapping/sequential_chain.h, mapping/export_chain.h), so that the model's
// input layout is read from the file rather than guessed.
//
// The model input is one of four layouts: [B, T, F], [T, B, F], [B, F, T]
// (ferry's --layout btf / tbf / bft) or [B, F] (no time axis). Until
// something pins it down, all four are possible. Every value derived from
// the input carries its own axes under each layout still possible ("BTF",
// "BF" after the last step is taken, "" where that input layout cannot
// reach it), and each op rules out the layouts under which it would not
// act as ferry's layer does: a Conv1d needs [B, C, T], an LSTM with
// batch_first=True [B, T, F], a Linear the features last, a BatchNorm1d the
// features at dim 1, `x[:, -1]` the time axis at dim 1. A transpose swaps
// axes under every layout. When no layout is left, the chain means
// something ferry does not run (a Linear over the time axis): refused.
//
// ferry keeps one layout inside a model, so the transposes themselves are
// not layers: they only decide which input layout the chain needs, and in
// which layout the returned sequence comes out.
//
// A reader may give an axis that is none of the input's its own letter: the
// TorchScript reader's 'L' (the layers of h_n), the export reader's '1' (a
// time axis kept at length 1, y[:, -1:]). Requirements never ask for them.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ferry::conv {

// The input layouts, as bits of ChainAxes::possible().
enum class InputLayout : unsigned { kBTF = 0, kTBF = 1, kBFT = 2, kBF = 3 };
constexpr unsigned kInputLayouts = 4;

// A value's axes under each input layout ("" where it is ruled out).
struct Axes {
  std::array<std::string, kInputLayouts> under;
};

class ChainAxes {
 public:
  // The model input: each layout's own axes.
  Axes input() const;

  unsigned possible() const { return possible_; }

  // Each rules out the layouts under which `v` does not fit, and returns
  // false when that leaves none (the caller says why).
  // The axis at `dim` (negative counts from the end) is `axis` ('B', 'T', 'F').
  bool require_axis(const Axes& v, long dim, char axis);
  // `v` is exactly `axes` ("BFT"), or "BF" too when `or_collapsed`.
  bool require_exactly(const Axes& v, const char* axes, bool or_collapsed);
  // The features are last (a Linear, LayerNorm, softmax(dim=-1)).
  bool require_features_last(const Axes& v) { return require_axis(v, -1, 'F'); }
  // `a` and `b` have the same axes (an elementwise add).
  bool require_same(const Axes& a, const Axes& b);
  // A returned value: a sequence in one of the layouts ([B, T, F], [T, B, F],
  // [B, F, T]; the input's or, after a transpose, another), or it has no
  // time axis left.
  bool require_output(const Axes& v);
  // The layout of a returned sequence `v` (require_output holds) where it is
  // not the input's, into `out`: nullopt where it is, or where `v` has no
  // time axis. False where the layouts still possible give different answers
  // (the code transposes its output but does not say its input's layout).
  bool output_layout(const Axes& v, std::optional<InputLayout>* out) const;
  // Keeps only the layouts in `mask` (bits of possible(): a branch taken
  // under those layouts only).
  bool restrict_to(unsigned mask) {
    possible_ &= mask;
    return possible_ != 0;
  }

  // Ops on axes. transpose() rules out the layouts where a dim is out of range.
  Axes transpose(const Axes& v, long d0, long d1);
  Axes permute(const Axes& v, const std::vector<long>& dims);  // torch.permute: axis i of the result is dims[i]
  Axes remove(const Axes& v, long dim) const;  // the axis at `dim` reduced away (last step, mean)

  // The one layout with a time axis left possible, when [B, F] is ruled out;
  // nullopt when the chain fits several (it does not care) or none.
  std::optional<InputLayout> decided() const;

  // The model input where its rank is known (a torch.export graph records
  // it). Rank 3 rules out [B, F]. Rank 2 rules out [B, F, T] and reads the
  // input as [B, F], or as token ids that an Embedding turns into the
  // sequence: [B, T] under the [B, T, F] layout, [T, B] under [T, B, F]
  // (the caller rules those two out when nothing embeds the input). Any
  // other rank rules out every layout.
  Axes input_of_rank(size_t rank);
  // Whether a requirement has named `axis`: the chain says where the input
  // keeps it, rather than leaving it where it is because no other layout is
  // left (messages and notes that say what the chain told).
  bool named(char axis) const { return named_.find(axis) != std::string::npos; }
  // The axis at `dim` of `v` where every layout still possible agrees on it.
  std::optional<char> axis_at(const Axes& v, long dim) const;
  Axes append(const Axes& v, char axis) const;  // `axis` added last (an Embedding's features)
  // The axis at `dim` becomes `axis` ('1': the last step kept with keepdim).
  Axes replace(const Axes& v, long dim, char axis) const;

 private:
  void name(char axis) {
    if (!named(axis)) named_ += axis;
  }

  unsigned possible_ = (1u << kInputLayouts) - 1;
  std::string named_;  // the axes requirements have named
};

// "[B, C, T]"-style text of the layouts still possible, for messages.
std::string layouts_text(unsigned possible);

}  // namespace ferry::conv
