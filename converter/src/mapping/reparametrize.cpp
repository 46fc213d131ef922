#include "mapping/reparametrize.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "error.h"
#include "mapping/pytorch_rules.h"

namespace ferry::conv {
namespace {

constexpr const char* kParametrizations = "parametrizations.";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string sigma_text(double sigma) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", sigma);
  return buf;
}

// One reparametrized weight: its parts by role, found by name.
struct Group {
  enum Kind { kWeightNorm, kSpectralNorm } kind = kWeightNorm;
  std::string target;      // the weight's own key: "fc.weight"
  bool parametrization = false;  // the parametrizations API (else the legacy one)
  // weight norm: g, v; spectral norm: orig, u, v (checkpoint.tensors indices)
  std::vector<size_t> parts;
};

class Folder {
 public:
  explicit Folder(const Checkpoint& c) : c_(c) {
    for (size_t i = 0; i < c.tensors.size(); ++i) by_name_.emplace(c.tensors[i].name, i);
  }

  Reparametrized run() {
    find_parametrizations();
    find_legacy();
    // In state-dict order of their first parts.
    auto first_part = [](const Group& g) { return *std::min_element(g.parts.begin(), g.parts.end()); };
    std::sort(groups_.begin(), groups_.end(),
              [&](const Group& a, const Group& b) { return first_part(a) < first_part(b); });
    Reparametrized out;
    std::map<size_t, const TensorRef*> at;  // first part's index -> folded tensor
    for (const Group& g : groups_) {
      out.folded.push_back(fold(g));
      size_t first = g.parts[0];
      for (size_t p : g.parts) first = std::min(first, p);
      at[first] = out.folded.back().get();
    }
    for (size_t i = 0; i < c_.tensors.size(); ++i) {
      auto f = at.find(i);
      if (f != at.end()) out.tensors.push_back(f->second);
      else if (!used_.count(i)) out.tensors.push_back(&c_.tensors[i]);
    }
    return out;
  }

 private:
  const TensorRef& t(size_t i) const { return c_.tensors[i]; }

  std::optional<size_t> find(const std::string& name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return std::nullopt;
    return it->second;
  }

  void claim(Group g) {
    if (auto clash = find(g.target)) {
      throw Error("tensor '" + t(*clash).name + "' and the reparametrized parts of the same weight (" +
                  t(g.parts[0]).name + ", ...) are both in the file: which one is the weight is ambiguous");
    }
    for (size_t p : g.parts) {
      if (!used_.insert(p).second) {
        throw Error("tensor '" + t(p).name + "' is a part of two reparametrizations of '" + g.target +
                    "' (weight norm's _g/_v and spectral norm's _orig/_u/_v)");
      }
    }
    groups_.push_back(std::move(g));
  }

  // <prefix>parametrizations.<name>.<part>, grouped by (prefix, name).
  void find_parametrizations() {
    std::map<std::string, std::map<std::string, size_t>> found;  // target -> part -> index
    std::map<std::string, std::string> module_of;                // target -> "<prefix>parametrizations.<name>"
    for (size_t i = 0; i < c_.tensors.size(); ++i) {
      const std::string& n = t(i).name;
      size_t at = n.compare(0, std::strlen(kParametrizations), kParametrizations) == 0 ? 0 : std::string::npos;
      if (at == std::string::npos) {
        const size_t dot = n.find(std::string(".") + kParametrizations);
        if (dot == std::string::npos) continue;
        at = dot + 1;
      }
      const size_t name_at = at + std::strlen(kParametrizations);
      const size_t dot = n.find('.', name_at);
      if (dot == std::string::npos || dot == name_at) continue;
      const std::string prefix = n.substr(0, at);
      const std::string name = n.substr(name_at, dot - name_at);
      found[prefix + name][n.substr(dot + 1)] = i;
      module_of[prefix + name] = n.substr(0, dot);
    }
    for (const auto& [target, parts] : found) {
      const std::string& module = module_of[target];
      std::set<std::string> names;
      for (const auto& kv : parts) names.insert(kv.first);
      // The class of the parametrization module, where a whole module records it.
      std::string cls;
      auto a = c_.attributes.find(attribute_key(module + ".0", kClassAttribute));
      if (a != c_.attributes.end()) cls = a->second;
      Group g;
      g.target = target;
      g.parametrization = true;
      if (names == std::set<std::string>{"original0", "original1"} && (cls.empty() || cls == "_WeightNorm")) {
        g.kind = Group::kWeightNorm;
        g.parts = {parts.at("original0"), parts.at("original1")};
      } else if (names == std::set<std::string>{"original", "0._u", "0._v"} && (cls.empty() || cls == "_SpectralNorm")) {
        g.kind = Group::kSpectralNorm;
        g.parts = {parts.at("original"), parts.at("0._u"), parts.at("0._v")};
      } else {
        std::string list;
        for (const std::string& p : names) list += (list.empty() ? "" : ", ") + p;
        throw Error("tensors '" + module + ".{" + list + "}': the parametrization of '" + target + "'" +
                    (cls.empty() ? std::string() : " (class " + cls + ")") +
                    " is not weight_norm (original0, original1) or spectral_norm (original, 0._u, 0._v), the two "
                    "ferry folds; bake it into the weight before saving "
                    "(torch.nn.utils.parametrize.remove_parametrizations(module, '" +
                    target.substr(target.rfind('.') + 1) + "'))");
      }
      claim(std::move(g));
    }
  }

  // <name>_g + <name>_v (weight norm); <name>_orig + <name>_u + <name>_v
  // (spectral norm).
  void find_legacy() {
    for (size_t i = 0; i < c_.tensors.size(); ++i) {
      const std::string& n = t(i).name;
      if (used_.count(i)) continue;
      if (ends_with(n, "_orig")) {
        const std::string base = n.substr(0, n.size() - 5);
        auto u = find(base + "_u");
        auto v = find(base + "_v");
        if (u && v) {
          Group g;
          g.kind = Group::kSpectralNorm;
          g.target = base;
          g.parts = {i, *u, *v};
          claim(std::move(g));
        }
      }
    }
    for (size_t i = 0; i < c_.tensors.size(); ++i) {
      const std::string& n = t(i).name;
      if (used_.count(i) || !ends_with(n, "_g")) continue;
      const std::string base = n.substr(0, n.size() - 2);
      auto v = find(base + "_v");
      if (!v) continue;
      Group g;
      g.kind = Group::kWeightNorm;
      g.target = base;
      g.parts = {i, *v};
      claim(std::move(g));
    }
  }

  std::shared_ptr<const TensorRef> fold(const Group& g) const {
    auto out = std::make_shared<TensorRef>();
    std::vector<float> w;
    const TensorRef& first = t(g.parts[0]);
    // The parts after the first, named relative to the parametrization module.
    auto part_name = [&](size_t k) {
      const std::string& n = t(g.parts[k]).name;
      if (!g.parametrization || k == 0) return n;
      const std::string& head = first.name;
      const size_t dot = head.rfind('.');
      return n.substr(dot);  // ".original1", ".0._u"
    };
    for (size_t p : g.parts) out->sources.push_back(t(p).name);
    if (g.kind == Group::kWeightNorm) {
      const TensorRef& gt = t(g.parts[0]);
      const TensorRef& vt = t(g.parts[1]);
      const std::string what = "weight norm of '" + g.target + "' (g '" + gt.name + "' " + dims_text(gt.shape) +
                               ", v '" + vt.name + "' " + dims_text(vt.shape) + ")";
      if (vt.shape.empty()) throw Error(what + ": v is a scalar, not a weight");
      const std::optional<int> dim = weight_norm_dim(vt.shape, gt.shape);
      if (!dim) {
        throw Error(what + ": g must match v along one dimension and be 1 along the others (or be a scalar): "
                    "it fits no dimension of v");
      }
      w = fold_weight_norm(to_float32(vt), vt.shape, to_float32(gt), *dim, what);
      out->shape = vt.shape;
      out->derivation = "weight_norm(" + part_name(0) + ", " + part_name(1) + ", " +
                        (*dim == kWholeTensorNorm ? std::string("dim None: whole tensor") : "dim " + std::to_string(*dim)) +
                        ")";
    } else {
      const TensorRef& ot = t(g.parts[0]);
      const TensorRef& ut = t(g.parts[1]);
      const TensorRef& vt = t(g.parts[2]);
      const std::string what = "spectral norm of '" + g.target + "' (weight '" + ot.name + "' " + dims_text(ot.shape) +
                               ", u '" + ut.name + "' " + dims_text(ut.shape) + ", v '" + vt.name + "' " +
                               dims_text(vt.shape) + ")";
      if (ot.shape.size() < 2) throw Error(what + ": the weight must have at least 2 dimensions");
      if (ut.shape.size() != 1 || vt.shape.size() != 1) throw Error(what + ": u and v must be 1-D vectors");
      double sigma = 0;
      w = fold_spectral_norm(to_float32(ot), ot.shape, to_float32(ut), to_float32(vt), what, &sigma);
      out->shape = ot.shape;
      out->derivation = "spectral_norm(" + part_name(0) + ", " + part_name(1) + ", " + part_name(2) +
                        ", dim 0): sigma " + sigma_text(sigma);
    }
    auto bytes = std::make_shared<std::string>(w.size() * sizeof(float), '\0');
    if (!w.empty()) std::memcpy(bytes->data(), w.data(), bytes->size());
    auto storage = std::make_shared<Storage>();
    storage->key = "folded " + g.target;
    storage->location = first.storage ? first.storage->location : "cpu";
    storage->dtype = DType::F32;
    storage->numel = w.size();
    storage->data = reinterpret_cast<const uint8_t*>(bytes->data());
    storage->nbytes = bytes->size();
    storage->owned = std::move(bytes);
    out->name = g.target;
    out->dtype = DType::F32;
    out->stride.assign(out->shape.size(), 1);
    for (size_t d = out->shape.size(); d-- > 1;) out->stride[d - 1] = out->stride[d] * out->shape[d];
    out->offset = 0;
    out->storage = std::move(storage);
    return out;
  }

  const Checkpoint& c_;
  std::map<std::string, size_t> by_name_;
  std::set<size_t> used_;
  std::vector<Group> groups_;
};

}  // namespace

Reparametrized fold_reparametrizations(const Checkpoint& checkpoint) {
  try {
    return Folder(checkpoint).run();
  } catch (const Error& e) {
    if (checkpoint.path.empty()) throw;
    throw Error(checkpoint.path + ": " + e.what());
  }
}

}  // namespace ferry::conv
