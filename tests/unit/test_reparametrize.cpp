// Weight norm and spectral norm folded at convert time (converter/src/
// mapping/reparametrize.h, rules in mapping/pytorch_rules.h), one test per
// rule against PyTorch: tests/fixtures/norm (make_norm_fixtures.py, torch
// 1.13) stores each reparametrized state dict beside the state dict PyTorch
// itself folded (remove_weight_norm, remove_spectral_norm,
// remove_parametrizations), and every weight ferry folds must equal
// PyTorch's. Then the shape logic of weight norm's dim and the refusals that
// need a whole module's recorded class.
#ifdef FERRY_HAVE_CONVERTER

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "error.h"
#include "mapping/modules.h"
#include "mapping/pytorch_rules.h"
#include "mapping/reparametrize.h"

namespace ferry::conv {
namespace {

const std::string kNorm = std::string(FERRY_FIXTURES_DIR) + "/norm/";

struct Fold {
  std::string weight, rule, dim;
  std::vector<std::string> parts;
};

struct NormCase {
  std::string name, pt, folded;
  std::vector<Fold> folds;
};

void PrintTo(const NormCase& c, std::ostream* os) { *os << c.name; }

std::vector<NormCase> cases() {
  std::ifstream in(kNorm + "manifest.json");
  if (!in) return {};
  std::vector<NormCase> out;
  for (const auto& e : nlohmann::json::parse(in)) {
    if (!e.contains("folded")) continue;  // a refusal
    NormCase c;
    c.name = e.at("name");
    c.pt = kNorm + e.at("pt").get<std::string>();
    c.folded = kNorm + e.at("folded").get<std::string>();
    for (const auto& f : e.at("folds"))
      c.folds.push_back({f.at("weight"), f.at("rule"), f.at("dim"), f.at("parts").get<std::vector<std::string>>()});
    out.push_back(c);
  }
  return out;
}

class FoldedByPyTorch : public ::testing::TestWithParam<NormCase> {};

// Every weight ferry folds equals the one PyTorch folded, element by element
// (float32: within a few ulp, the order of the norm's sum differs).
TEST_P(FoldedByPyTorch, SameWeights) {
  const NormCase& c = GetParam();
  const CheckpointInput input = open_checkpoint(c.pt);
  const CheckpointInput reference = open_checkpoint(c.folded);
  const ModuleSet modules = group_modules(input.checkpoint);
  ASSERT_EQ(modules.folded.size(), c.folds.size());
  std::map<std::string, const TensorRef*> by_name;
  for (const TensorRef& t : reference.checkpoint.tensors) by_name[t.name] = &t;
  for (const Fold& f : c.folds) {
    SCOPED_TRACE(f.weight);
    const TensorRef* mine = nullptr;
    for (const auto& t : modules.folded)
      if (t->name == f.weight) mine = t.get();
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ(mine->sources, f.parts);
    EXPECT_EQ(mine->derivation.rfind(f.rule + "(", 0), 0u) << mine->derivation;
    EXPECT_NE(mine->derivation.find(f.dim), std::string::npos) << mine->derivation;
    ASSERT_TRUE(by_name.count(f.weight));
    const TensorRef& want = *by_name[f.weight];
    ASSERT_EQ(mine->shape, want.shape);
    const std::vector<float> a = to_float32(*mine), b = to_float32(want);
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 4e-7 * std::max(1.0f, std::fabs(b[i]))) << "element " << i;
  }
  // The modules hold the folded weights, and nothing of the parts is left over.
  for (const auto& [key, why] : modules.ignored) ADD_FAILURE() << "ignored " << key << ": " << why;
}

INSTANTIATE_TEST_SUITE_P(Torch113, FoldedByPyTorch, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<NormCase>& i) { return i.param.name; });

TEST(FoldedByPyTorch, FixturesPresent) { EXPECT_GE(cases().size(), 7u); }

// g's shape gives weight norm's dim: v's size along it, 1 elsewhere.
TEST(WeightNormDim, FromGShape) {
  EXPECT_EQ(weight_norm_dim({3, 32}, {3, 1}), 0);
  EXPECT_EQ(weight_norm_dim({4, 8}, {1, 8}), 1);
  EXPECT_EQ(weight_norm_dim({6, 4, 3}, {1, 1, 3}), 2);
  EXPECT_EQ(weight_norm_dim({6, 4, 3}, {}), kWholeTensorNorm);      // a 0-d g
  EXPECT_EQ(weight_norm_dim({1, 20}, {1, 1}), kWholeTensorNorm);    // dim 0 of one row: the whole norm
  EXPECT_EQ(weight_norm_dim({3, 32}, {3}), std::nullopt);           // not keepdim
  EXPECT_EQ(weight_norm_dim({3, 32}, {2, 1}), std::nullopt);
  EXPECT_EQ(weight_norm_dim({3, 32}, {3, 32}), std::nullopt);       // fits along two dims at once
}

// A checkpoint of float32 tensors made here, for refusals PyTorch cannot
// write (it refuses to pickle a parametrized module whole).
struct Made {
  Checkpoint c;
  void add(const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
    auto bytes = std::make_shared<std::string>(values.size() * 4, '\0');
    std::memcpy(bytes->data(), values.data(), bytes->size());
    auto s = std::make_shared<Storage>();
    s->key = name;
    s->location = "cpu";
    s->dtype = DType::F32;
    s->numel = values.size();
    s->data = reinterpret_cast<const uint8_t*>(bytes->data());
    s->nbytes = bytes->size();
    s->owned = bytes;
    TensorRef t;
    t.name = name;
    t.dtype = DType::F32;
    t.shape = shape;
    t.stride.assign(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;) t.stride[d - 1] = t.stride[d] * shape[d];
    t.storage = s;
    c.tensors.push_back(t);
  }
};

std::string fold_error(const Checkpoint& c) {
  try {
    fold_reparametrizations(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A whole module records the parametrization's class: a class that is not
// weight norm's or spectral norm's is refused by name, even with parts that
// look like theirs.
TEST(Reparametrize, RecordedClassDecides) {
  Made m;
  m.add("fc.parametrizations.weight.original0", {2, 1}, {1, 2});
  m.add("fc.parametrizations.weight.original1", {2, 3}, {1, 2, 3, 4, 5, 6});
  m.c.attributes["fc.parametrizations.weight.0.__class__"] = "_MyScale";
  EXPECT_NE(fold_error(m.c).find("the parametrization of 'fc.weight' (class _MyScale) is not weight_norm"),
            std::string::npos)
      << fold_error(m.c);
  m.c.attributes["fc.parametrizations.weight.0.__class__"] = "_WeightNorm";
  EXPECT_EQ(fold_error(m.c), "");
  // Wrapper prefixes: the class is recorded without them.
  Made w;
  w.add("module.fc.parametrizations.weight.original", {2, 3}, {1, 2, 3, 4, 5, 6});
  w.c.attributes["fc.parametrizations.weight.0.__class__"] = "_Orthogonal";
  EXPECT_NE(fold_error(w.c).find("(class _Orthogonal)"), std::string::npos) << fold_error(w.c);
}

// The folded weight takes its first part's place; names keep their prefix.
TEST(Reparametrize, FoldedTakesThePlaceOfItsFirstPart) {
  Made m;
  m.add("module.fc.bias", {2}, {0, 0});
  m.add("module.fc.weight_g", {2, 1}, {2, 3});
  m.add("other", {1}, {0});
  m.add("module.fc.weight_v", {2, 2}, {3, 4, 0, -5});
  const Reparametrized r = fold_reparametrizations(m.c);
  ASSERT_EQ(r.tensors.size(), 3u);
  EXPECT_EQ(r.tensors[0]->name, "module.fc.bias");
  EXPECT_EQ(r.tensors[1]->name, "module.fc.weight");
  EXPECT_EQ(r.tensors[2]->name, "other");
  // w = v * g / ||v|| per row: (3, 4) * 2 / 5, (0, -5) * 3 / 5.
  EXPECT_EQ(to_float32(*r.tensors[1]), (std::vector<float>{1.2f, 1.6f, 0.0f, -3.0f}));
  EXPECT_EQ(r.tensors[1]->derivation, "weight_norm(module.fc.weight_g, module.fc.weight_v, dim 0)");
}

}  // namespace
}  // namespace ferry::conv

#endif  // FERRY_HAVE_CONVERTER
