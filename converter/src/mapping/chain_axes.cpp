#include "mapping/chain_axes.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace ferry::conv {
namespace {

constexpr const char* kLayoutAxes[kInputLayouts] = {"BTF", "TBF", "BFT", "BF"};
constexpr const char* kLayoutText[kInputLayouts] = {"[B, T, F]", "[T, B, F]", "[B, F, T]", "[B, F]"};

// `dim` as an index into `axes`, or -1 when out of range.
long index_of(const std::string& axes, long dim) {
  const long rank = static_cast<long>(axes.size());
  if (dim < 0) dim += rank;
  return dim >= 0 && dim < rank ? dim : -1;
}

}  // namespace

std::string layouts_text(unsigned possible) {
  std::string s;
  for (unsigned c = 0; c < kInputLayouts; ++c)
    if (possible & (1u << c)) s += (s.empty() ? "" : " or ") + std::string(kLayoutText[c]);
  return s.empty() ? "none" : s;
}

Axes ChainAxes::input() const {
  Axes a;
  for (unsigned c = 0; c < kInputLayouts; ++c)
    if (possible_ & (1u << c)) a.under[c] = kLayoutAxes[c];
  return a;
}

bool ChainAxes::require_axis(const Axes& v, long dim, char axis) {
  name(axis);
  for (unsigned c = 0; c < kInputLayouts; ++c) {
    const std::string& s = v.under[c];
    const long i = index_of(s, dim);
    if (s.empty() || i < 0 || s[static_cast<size_t>(i)] != axis) possible_ &= ~(1u << c);
  }
  return possible_ != 0;
}

bool ChainAxes::require_exactly(const Axes& v, const char* axes, bool or_collapsed) {
  for (const char* a = axes; *a; ++a) name(*a);
  for (unsigned c = 0; c < kInputLayouts; ++c) {
    const std::string& s = v.under[c];
    if (s.empty() || (s != axes && !(or_collapsed && s == "BF"))) possible_ &= ~(1u << c);
  }
  return possible_ != 0;
}

bool ChainAxes::require_same(const Axes& a, const Axes& b) {
  for (unsigned c = 0; c < kInputLayouts; ++c)
    if (a.under[c].empty() || a.under[c] != b.under[c]) possible_ &= ~(1u << c);
  return possible_ != 0;
}

bool ChainAxes::require_output(const Axes& v) {
  for (unsigned c = 0; c < kInputLayouts; ++c) {
    const std::string& s = v.under[c];
    if (s.empty() || std::find(std::begin(kLayoutAxes), std::end(kLayoutAxes), s) == std::end(kLayoutAxes))
      possible_ &= ~(1u << c);
  }
  return possible_ != 0;
}

bool ChainAxes::output_layout(const Axes& v, std::optional<InputLayout>* result) const {
  // Under each layout still possible: the returned axes, unless the input's.
  std::optional<std::optional<InputLayout>> answer;
  bool differ = false;
  for (unsigned c = 0; c < kInputLayouts; ++c) {
    if (!(possible_ & (1u << c))) continue;
    const std::string& s = v.under[c];
    std::optional<InputLayout> out;
    if (s != kLayoutAxes[c] && s != "BF") {
      for (unsigned o = 0; o < kInputLayouts; ++o)
        if (s == kLayoutAxes[o]) out = static_cast<InputLayout>(o);
    }
    differ = differ || (answer && *answer != out);
    answer = out;
  }
  *result = answer ? *answer : std::nullopt;
  return !differ;
}

Axes ChainAxes::transpose(const Axes& v, long d0, long d1) {
  Axes out;
  for (unsigned c = 0; c < kInputLayouts; ++c) {
    std::string s = v.under[c];
    const long i = index_of(s, d0), j = index_of(s, d1);
    if (s.empty() || i < 0 || j < 0) {
      possible_ &= ~(1u << c);
      continue;
    }
    std::swap(s[static_cast<size_t>(i)], s[static_cast<size_t>(j)]);
    out.under[c] = s;
  }
  return out;
}

Axes ChainAxes::permute(const Axes& v, const std::vector<long>& dims) {
  Axes out;
  for (unsigned c = 0; c < kInputLayouts; ++c) {
    const std::string& s = v.under[c];
    std::string p;
    bool ok = !s.empty() && dims.size() == s.size();
    for (size_t i = 0; ok && i < dims.size(); ++i) {
      const long j = index_of(s, dims[i]);
      ok = j >= 0 && p.find(s[static_cast<size_t>(j)]) == std::string::npos;
      if (ok) p += s[static_cast<size_t>(j)];
    }
    if (!ok) {
      possible_ &= ~(1u << c);
      continue;
    }
    out.under[c] = p;
  }
  return out;
}

Axes ChainAxes::remove(const Axes& v, long dim) const {
  Axes out;
  for (unsigned c = 0; c < kInputLayouts; ++c) {
    std::string s = v.under[c];
    const long i = index_of(s, dim);
    if (s.empty() || i < 0) continue;
    s.erase(static_cast<size_t>(i), 1);
    out.under[c] = s;
  }
  return out;
}

std::optional<InputLayout> ChainAxes::decided() const {
  if (possible_ & (1u << static_cast<unsigned>(InputLayout::kBF))) return std::nullopt;
  std::optional<InputLayout> one;
  for (unsigned c = 0; c < static_cast<unsigned>(InputLayout::kBF); ++c) {
    if (!(possible_ & (1u << c))) continue;
    if (one) return std::nullopt;
    one = static_cast<InputLayout>(c);
  }
  return one;
}

Axes ChainAxes::input_of_rank(size_t rank) {
  constexpr unsigned kBF = 1u << static_cast<unsigned>(InputLayout::kBF);
  constexpr unsigned kBFT = 1u << static_cast<unsigned>(InputLayout::kBFT);
  possible_ &= rank == 3 ? ~kBF : rank == 2 ? ~kBFT : 0u;
  Axes a = input();
  if (rank == 2) {
    for (InputLayout tokens : {InputLayout::kBTF, InputLayout::kTBF}) {
      std::string& s = a.under[static_cast<unsigned>(tokens)];
      if (!s.empty()) s.pop_back();  // "BT", "TB": the ids have no feature axis
    }
  }
  return a;
}

std::optional<char> ChainAxes::axis_at(const Axes& v, long dim) const {
  std::optional<char> agreed;
  for (unsigned c = 0; c < kInputLayouts; ++c) {
    if (!(possible_ & (1u << c))) continue;
    const std::string& s = v.under[c];
    const long i = index_of(s, dim);
    if (s.empty() || i < 0) return std::nullopt;
    if (agreed && *agreed != s[static_cast<size_t>(i)]) return std::nullopt;
    agreed = s[static_cast<size_t>(i)];
  }
  return agreed;
}

Axes ChainAxes::append(const Axes& v, char axis) const {
  Axes out = v;
  for (std::string& s : out.under)
    if (!s.empty()) s += axis;
  return out;
}

Axes ChainAxes::replace(const Axes& v, long dim, char axis) const {
  Axes out;
  for (unsigned c = 0; c < kInputLayouts; ++c) {
    std::string s = v.under[c];
    const long i = index_of(s, dim);
    if (s.empty() || i < 0) continue;
    s[static_cast<size_t>(i)] = axis;
    out.under[c] = s;
  }
  return out;
}

}  // namespace ferry::conv
