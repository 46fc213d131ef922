// Weight layouts and PyTorch's layout rules, each checked against an
// independent source:
//
//  - runtime/src/shared/weight_layout.h (the layouts of the model file,
//    shared by the runtime and the converter's packer): every function
//    against a direct transcription of the Panel8 definition in
//    schema/ferry.fbs (the `Schema` helpers below), and the converter's
//    packer (pack/tensor_packing.h) against the same transcription;
//  - converter/src/mapping/pytorch_rules.h (every PyTorch layout rule): one
//    test per rule, which maps the weights of a committed PyTorch fixture
//    (tests/fixtures/models/, made by tests/fixtures/make_fixtures.py with
//    torch 1.13) with the rule, evaluates the layer with a small scalar loop
//    here, and compares with the output PyTorch itself stored in the
//    fixture. Never against numbers ferry computed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "weight_layout.h"

namespace {

namespace layout = ferry::layout;
using layout::CellKind;
using layout::Role;

// ---------------------------------------------------------------------------
// schema/ferry.fbs, TensorLayout.Panel8, transcribed as literally as possible:
//   "The logical tensor is a matrix [G*H, K] ... G given by the tensor's role:
//    G = 4 (LSTM) / 3 (GRU) / 1 (RNN) for w_ih, w_hh and bias; G = 1 for
//    b_hn, w_hr and Linear weight and bias. Units are grouped in panels of 8,
//    the last one zero-padded ... logical element (g*H + u, k), u = 8p + j,
//    sits at float ((p*K + k)*G + g)*8 + j, p = u / 8, j = u % 8.
//    `size` is ceil(H/8) * 8 * G * K * sizeof(dtype)."
namespace schema {

uint64_t gates(CellKind kind, Role role) {
  const bool cell_tensor = role == Role::kCellInput || role == Role::kCellRecurrent || role == Role::kCellBias;
  if (!cell_tensor) return 1;
  return kind == CellKind::kLstm ? 4 : kind == CellKind::kGru ? 3 : 1;
}

uint64_t float_index(uint64_t G, uint64_t K, uint64_t g, uint64_t u, uint64_t k) {
  const uint64_t p = u / 8, j = u % 8;
  return ((p * K + k) * G + g) * 8 + j;
}

uint64_t floats(uint64_t G, uint64_t H, uint64_t K) { return (H + 7) / 8 * 8 * G * K; }

}  // namespace schema

const CellKind kKinds[] = {CellKind::kLstm, CellKind::kGru, CellKind::kRnn};
const Role kRoles[] = {Role::kCellInput,      Role::kCellRecurrent, Role::kCellBias,    Role::kGruHiddenBias,
                       Role::kProjection,     Role::kLinearWeight,  Role::kLinearBias};
const uint32_t kGates[] = {1, 3, 4};
const uint32_t kUnits[] = {1, 2, 7, 8, 9, 15, 16, 17, 33, 64};
const uint64_t kCols[] = {1, 2, 5, 8};

TEST(WeightLayout, GateCountsFollowTheSchema) {
  EXPECT_EQ(layout::gate_count(CellKind::kLstm), 4u);
  EXPECT_EQ(layout::gate_count(CellKind::kGru), 3u);
  EXPECT_EQ(layout::gate_count(CellKind::kRnn), 1u);
  uint32_t most = 0;
  for (CellKind kind : kKinds) {
    most = std::max(most, layout::gate_count(kind));
    for (Role role : kRoles) EXPECT_EQ(layout::gates_for_role(kind, role), schema::gates(kind, role));
  }
  EXPECT_EQ(layout::kMaxGates, most);
}

TEST(WeightLayout, Panel8PaddingFollowsTheSchema) {
  EXPECT_EQ(layout::kPanel, 8u);
  for (uint32_t H = 1; H <= 100; ++H) {
    EXPECT_EQ(layout::panels_of(H), (H + 7) / 8) << H;
    EXPECT_EQ(layout::padded_units(H), (H + 7) / 8 * 8) << H;
    for (uint32_t G : kGates) {
      for (uint64_t K : kCols) {
        EXPECT_EQ(layout::panel8_elements(G, H, K), schema::floats(G, H, K)) << G << " " << H << " " << K;
        EXPECT_EQ(layout::panel8_panel_elements(G, K), schema::floats(G, 8, K));
      }
    }
  }
}

TEST(WeightLayout, Panel8IndexFollowsTheSchema) {
  for (uint32_t G : kGates) {
    for (uint32_t H : kUnits) {
      for (uint64_t K : kCols) {
        SCOPED_TRACE("G " + std::to_string(G) + ", H " + std::to_string(H) + ", K " + std::to_string(K));
        // Every element of the padded matrix lands on its own float, inside
        // the stored size: the layout is a permutation of the padded matrix.
        std::vector<int> hits(static_cast<size_t>(schema::floats(G, H, K)), 0);
        for (uint32_t g = 0; g < G; ++g) {
          for (uint32_t u = 0; u < layout::padded_units(H); ++u) {
            for (uint64_t k = 0; k < K; ++k) {
              const uint64_t at = layout::panel8_index(G, K, g, u, k);
              ASSERT_EQ(at, schema::float_index(G, K, g, u, k)) << "g " << g << " u " << u << " k " << k;
              ASSERT_LT(at, hits.size());
              ++hits[at];
              if (k + 1 < K) EXPECT_EQ(layout::panel8_index(G, K, g, u, k + 1) - at, layout::panel8_column_stride(G));
            }
          }
        }
        for (int h : hits) ASSERT_EQ(h, 1);
      }
    }
  }
}

// Vector q of a Panel8 matrix is gate q % G of panel q / G: 8 lanes (units
// 8p .. 8p+7) of one gate at one column.
TEST(WeightLayout, Panel8VectorsFollowTheSchema) {
  for (uint32_t G : kGates) {
    for (uint32_t H : kUnits) {
      for (uint64_t K : kCols) {
        for (uint32_t q = 0; q < layout::panels_of(H) * G; ++q) {
          const uint32_t p = q / G, g = q % G;
          for (uint64_t k = 0; k < K; ++k) {
            EXPECT_EQ(layout::panel8_vector_index(G, K, q) + k * layout::panel8_column_stride(G),
                      schema::float_index(G, K, g, 8 * p, k));
          }
          for (uint32_t j = 0; j < 8; ++j) EXPECT_EQ(layout::panel8_row_of(G, H, q, j), g * H + 8 * p + j);
        }
      }
    }
  }
}

// Panel order: a kernel's gate row holds the column-0 vectors of a Panel8
// matrix end to end, i.e. gate g of unit u sits where a K = 1 Panel8 tensor
// stores its element (g*H + u, 0).
TEST(WeightLayout, PanelOrderIsPanel8OfOneColumn) {
  for (uint32_t G : kGates) {
    for (uint32_t H : kUnits) {
      EXPECT_EQ(layout::gate_row_floats(G, H), schema::floats(G, H, 1));
      for (uint32_t g = 0; g < G; ++g)
        for (uint32_t u = 0; u < layout::padded_units(H); ++u)
          EXPECT_EQ(layout::gate_column(G, g, u), schema::float_index(G, 1, g, u, 0));
    }
  }
}

}  // namespace

#ifdef FERRY_HAVE_CONVERTER  // the packer and the PyTorch rules are the converter's

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "error.h"
#include "io/mapped_file.h"
#include "io/npy.h"
#include "mapping/pytorch_rules.h"
#include "pack/tensor_packing.h"

namespace {

using namespace ferry::conv;

// ---------------------------------------------------------------- packer --

// A [G*H, K] tensor whose element (row, k) is row * 1000 + k + 1 (never 0,
// so padding is told apart), packed with the converter's packer.
std::vector<float> packed(uint32_t G, uint32_t H, uint64_t K) {
  TensorPlan t;
  t.name = "t";
  t.shape = K == 1 ? std::vector<uint32_t>{G * H} : std::vector<uint32_t>{G * H, static_cast<uint32_t>(K)};
  t.fill = [K](float* dst, uint64_t begin, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) dst[i] = static_cast<float>((begin + i) / K * 1000 + (begin + i) % K + 1);
  };
  StoredForm form;
  form.panel8 = true;
  form.gates = G;
  form.elements = layout::panel8_elements(G, H, K);
  std::vector<float> out, scratch;
  pack_tensor(t, form, scratch, [&out](const float* data, uint64_t count) { out.insert(out.end(), data, data + count); });
  return out;
}

TEST(Packer, Panel8FollowsTheSchema) {
  // The last case spans several ~4 MiB slabs of panels.
  const struct { uint32_t G, H; uint64_t K; } cases[] = {
      {1, 1, 1}, {1, 9, 3}, {3, 7, 5}, {3, 16, 1}, {4, 17, 8}, {4, 33, 2}, {4, 300, 1024}};
  for (const auto& c : cases) {
    SCOPED_TRACE("G " + std::to_string(c.G) + ", H " + std::to_string(c.H) + ", K " + std::to_string(c.K));
    const std::vector<float> out = packed(c.G, c.H, c.K);
    ASSERT_EQ(out.size(), schema::floats(c.G, c.H, c.K));
    std::vector<float> want(out.size(), 0.0f);  // padding units are zeros
    for (uint64_t g = 0; g < c.G; ++g)
      for (uint64_t u = 0; u < c.H; ++u)
        for (uint64_t k = 0; k < c.K; ++k)
          want[schema::float_index(c.G, c.K, g, u, k)] = static_cast<float>((g * c.H + u) * 1000 + k + 1);
    ASSERT_EQ(out, want);
  }
}

TEST(Packer, GatesFollowTheRole) {
  ModelPlan plan;
  const auto add = [&plan](std::vector<uint32_t> shape) {
    TensorPlan t;
    t.name = "t" + std::to_string(plan.tensors.size());
    t.shape = std::move(shape);
    plan.tensors.push_back(std::move(t));
    return static_cast<int>(plan.tensors.size() - 1);
  };
  LayerPlan gru;
  gru.op = LayerOp::GRU;
  CellPlan c;
  c.w_ih = add({30, 4});
  c.w_hh = add({30, 10});
  c.bias = add({30});
  c.b_hn = add({10});
  gru.cells.push_back(c);
  LayerPlan lstm;
  lstm.op = LayerOp::LSTM;
  CellPlan l;
  l.w_ih = add({24, 4});
  l.w_hh = add({24, 3});
  l.w_hr = add({3, 6});
  lstm.cells.push_back(l);
  LayerPlan fc;
  fc.op = LayerOp::Linear;
  fc.weight = add({5, 3});
  fc.bias = add({5});
  plan.layers = {gru, lstm, fc};
  const int unused = add({7});
  const std::vector<StoredForm> forms = stored_forms(plan);
  const auto gates = [&forms](int i) { return forms[static_cast<size_t>(i)].gates; };
  EXPECT_EQ(gates(c.w_ih), schema::gates(CellKind::kGru, Role::kCellInput));
  EXPECT_EQ(gates(c.w_hh), schema::gates(CellKind::kGru, Role::kCellRecurrent));
  EXPECT_EQ(gates(c.bias), schema::gates(CellKind::kGru, Role::kCellBias));
  EXPECT_EQ(gates(c.b_hn), schema::gates(CellKind::kGru, Role::kGruHiddenBias));
  EXPECT_EQ(gates(l.w_ih), schema::gates(CellKind::kLstm, Role::kCellInput));
  EXPECT_EQ(gates(l.w_hr), schema::gates(CellKind::kLstm, Role::kProjection));
  EXPECT_EQ(gates(fc.weight), 1u);
  EXPECT_EQ(gates(fc.bias), 1u);
  EXPECT_EQ(forms[static_cast<size_t>(c.w_hh)].elements, schema::floats(3, 10, 10));
  EXPECT_EQ(forms[static_cast<size_t>(l.w_hr)].elements, schema::floats(1, 3, 6));
  EXPECT_FALSE(forms[static_cast<size_t>(unused)].panel8) << "a tensor no layer reads stays RowMajor";
  EXPECT_EQ(forms[static_cast<size_t>(unused)].elements, 7u);
}

// ------------------------------------------------------ PyTorch fixtures --

const std::string kModels = std::string(FERRY_FIXTURES_DIR) + "/models/";

// A fixture of tests/fixtures/models/manifest.json: the checkpoint, read by
// the converter's reader (only to get at the bytes), and the input and output
// PyTorch stored beside it.
struct Fixture {
  std::string name;
  bool batch_first = false;
  double tolerance = 0;
  std::unique_ptr<MappedFile> file;
  Checkpoint checkpoint;
  NpyArray input, output;

  explicit Fixture(const std::string& fixture) : name(fixture) {
    std::ifstream f(kModels + "manifest.json");
    const nlohmann::json manifest = nlohmann::json::parse(f);
    for (const auto& e : manifest) {
      if (e.at("name") != fixture) continue;
      batch_first = e.at("batch_first").get<bool>();
      tolerance = e.at("tolerance").get<double>();
      file = std::make_unique<MappedFile>(kModels + e.at("pt").get<std::string>());
      checkpoint = load_checkpoint(*file);
      input = read_npy(kModels + e.at("input").get<std::string>());
      output = read_npy(kModels + e.at("output").get<std::string>());
    }
    if (!file) ADD_FAILURE() << fixture << " is not in the manifest";
  }

  const TensorRef& tensor(const std::string& key) const {
    for (const TensorRef& t : checkpoint.tensors)
      if (t.name == key) return t;
    throw std::runtime_error(name + ": no tensor '" + key + "'");
  }
  std::vector<float> values(const std::string& key) const { return to_float32(tensor(key)); }
  std::vector<int64_t> shape(const std::string& key) const { return tensor(key).shape; }

  size_t batch() const { return batch_first ? input.shape[0] : input.shape[1]; }
  size_t steps() const { return batch_first ? input.shape[1] : input.shape[0]; }
  // Sample b's input sequence, [T][I].
  std::vector<std::vector<double>> sequence(size_t b) const {
    const size_t T = steps(), B = batch(), I = input.shape[2];
    std::vector<std::vector<double>> xs(T, std::vector<double>(I));
    for (size_t t = 0; t < T; ++t)
      for (size_t i = 0; i < I; ++i) xs[t][i] = input.data[(batch_first ? b * T + t : t * B + b) * I + i];
    return xs;
  }
};

using Seq = std::vector<std::vector<double>>;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// y = W x (+ bias), W [rows, x.size()] in C order.
std::vector<double> matvec(const std::vector<float>& w, const std::vector<double>& x, size_t rows) {
  std::vector<double> y(rows, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < x.size(); ++c) y[r] += double{w[r * x.size() + c]} * x[c];
  return y;
}

// One direction of one recurrent layer, with its weights as PyTorch stores
// them ([rows, columns], C order) and its biases as two vectors: bias_x is
// added to W_ih x, bias_h to W_hh h (for GRU's gate n: inside r * (...));
// an empty vector is zero.
struct Cell {
  CellKind kind = CellKind::kLstm;
  bool relu = false;  // RNN
  HiddenSizes sizes;
  std::vector<float> w_ih, w_hh, w_hr;
  std::vector<float> bias_x, bias_h;
};

// Runs `cell` over `xs` (in order, or reversed), returning h at every step.
// Every gate is found with gate_row (the gate-order rule).
Seq run_cell(const Cell& c, const Seq& xs, bool reverse) {
  const uint32_t H = c.sizes.hidden, G = layout::gate_count(c.kind);
  const size_t rows = size_t{G} * H;
  std::vector<double> h(c.sizes.output(), 0.0), cell_state(H, 0.0);
  Seq out(xs.size());
  for (size_t n = 0; n < xs.size(); ++n) {
    const size_t t = reverse ? xs.size() - 1 - n : n;
    std::vector<double> gx = matvec(c.w_ih, xs[t], rows), gh = matvec(c.w_hh, h, rows);
    for (size_t r = 0; r < rows; ++r) {
      if (!c.bias_x.empty()) gx[r] += c.bias_x[r];
      if (!c.bias_h.empty()) gh[r] += c.bias_h[r];
    }
    std::vector<double> next(H);
    for (uint32_t u = 0; u < H; ++u) {
      if (c.kind == CellKind::kLstm) {
        const auto gate = [&](LstmGate g) { return gx[gate_row(g, u, H)] + gh[gate_row(g, u, H)]; };
        const double i = sigmoid(gate(LstmGate::kInput)), f = sigmoid(gate(LstmGate::kForget));
        const double g = std::tanh(gate(LstmGate::kCell)), o = sigmoid(gate(LstmGate::kOutput));
        cell_state[u] = f * cell_state[u] + i * g;
        next[u] = o * std::tanh(cell_state[u]);
      } else if (c.kind == CellKind::kGru) {
        const auto row = [&](GruGate g) { return gate_row(g, u, H); };
        const double r = sigmoid(gx[row(GruGate::kReset)] + gh[row(GruGate::kReset)]);
        const double z = sigmoid(gx[row(GruGate::kUpdate)] + gh[row(GruGate::kUpdate)]);
        const double cand = std::tanh(gx[row(GruGate::kNew)] + r * gh[row(GruGate::kNew)]);
        next[u] = (1 - z) * cand + z * h[u];
      } else {
        const double a = gx[u] + gh[u];
        next[u] = c.relu ? std::max(0.0, a) : std::tanh(a);
      }
    }
    h = c.sizes.proj ? matvec(c.w_hr, next, c.sizes.proj) : next;
    out[t] = h;
  }
  return out;
}

// How the two PyTorch biases reach the cell.
enum class Biases {
  kAsStored,  // bias_x = b_ih, bias_h = b_hh, exactly PyTorch's equations
  kFolded,    // by the rules: fold_bias (LSTM, RNN) or fold_gru_bias (GRU)
};

using Reader = std::function<std::vector<float>(const std::string& key)>;

// Cell (layer, direction) of the stacked module `module`, its tensors found
// by PyTorch's parameter names (recurrent_param_suffix) and read by `read`.
Cell stacked_cell(const std::string& module, CellKind kind, const HiddenSizes& sizes,
                  uint32_t layer, bool reverse, Biases biases, const Reader& read) {
  const auto key = [&](const char* base) { return module + "." + base + recurrent_param_suffix(false, layer, reverse); };
  Cell c;
  c.kind = kind;
  c.sizes = sizes;
  c.w_ih = read(key("weight_ih"));
  c.w_hh = read(key("weight_hh"));
  if (sizes.proj) c.w_hr = read(key("weight_hr"));
  const std::vector<float> b_ih = read(key("bias_ih")), b_hh = read(key("bias_hh"));
  if (biases == Biases::kAsStored) {
    c.bias_x = b_ih;
    c.bias_h = b_hh;
  } else if (kind == CellKind::kGru) {
    const GruBias folded = fold_gru_bias(b_ih, b_hh, sizes.hidden);
    c.bias_x = folded.folded;
    c.bias_h.assign(b_hh.size(), 0.0f);  // only gate n has a bias on the W_hh h side: b_hn
    for (uint32_t u = 0; u < sizes.hidden; ++u) c.bias_h[gate_row(GruGate::kNew, u, sizes.hidden)] = folded.b_hn[u];
  } else {
    c.bias_x = fold_bias(b_ih, b_hh);
  }
  return c;
}

// A stacked module over one sample: layer k >= 1 reads [forward | backward]
// of layer k - 1 at every step.
Seq run_stack(const std::vector<std::vector<Cell>>& layers, Seq xs) {
  for (const std::vector<Cell>& directions : layers) {
    Seq next(xs.size());
    for (size_t d = 0; d < directions.size(); ++d) {
      const Seq h = run_cell(directions[d], xs, d == 1);
      for (size_t t = 0; t < xs.size(); ++t) next[t].insert(next[t].end(), h[t].begin(), h[t].end());
    }
    xs = std::move(next);
  }
  return xs;
}

// The fixtures' `module > last > fc` head: fc of the last step's output.
std::vector<double> last_then_fc(const Fixture& f, const Seq& seq) {
  const std::vector<float> w = f.values("fc.weight"), b = f.values("fc.bias");
  std::vector<double> y = matvec(w, seq.back(), b.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] += b[i];
  return y;
}

// Largest |ours - PyTorch's| over the batch, for `module > last > fc`.
double max_error(const Fixture& f, const std::vector<std::vector<Cell>>& layers) {
  double worst = 0;
  const size_t outputs = f.output.shape.back();
  for (size_t b = 0; b < f.batch(); ++b) {
    const std::vector<double> y = last_then_fc(f, run_stack(layers, f.sequence(b)));
    EXPECT_EQ(y.size(), outputs);
    for (size_t i = 0; i < y.size() && i < outputs; ++i)
      worst = std::max(worst, std::fabs(y[i] - double{f.output.data[b * outputs + i]}));
  }
  return worst;
}

// The cells of a stacked module, by the rules, read with `read`.
std::vector<std::vector<Cell>> stacked_cells(const std::string& module, CellKind kind,
                                            const HiddenSizes& sizes, uint32_t layers, bool bidirectional,
                                            Biases biases, const Reader& read) {
  std::vector<std::vector<Cell>> out(layers);
  for (uint32_t k = 0; k < layers; ++k)
    for (int d = 0; d < (bidirectional ? 2 : 1); ++d)
      out[k].push_back(stacked_cell(module, kind, sizes, k, d == 1, biases, read));
  return out;
}

Reader values_of(const Fixture& f) {
  return [&f](const std::string& key) { return f.values(key); };
}

// Swaps the row blocks of gates a and b in every gate-stacked tensor.
void swap_gates(Cell& c, uint32_t a, uint32_t b) {
  const uint32_t H = c.sizes.hidden;
  for (std::vector<float>* v : {&c.w_ih, &c.w_hh, &c.bias_x, &c.bias_h}) {
    if (v->empty()) continue;
    const size_t cols = v->size() / (size_t{layout::gate_count(c.kind)} * H);
    std::swap_ranges(v->begin() + a * H * cols, v->begin() + (a + 1) * H * cols, v->begin() + b * H * cols);
  }
}

// Rule: gate order. PyTorch's equations with the biases as stored, every gate
// found by gate_row(), give PyTorch's output; with two gates swapped they do
// not (so the check can fail).
TEST(PyTorchRules, GateOrder) {
  {
    const Fixture f("lstm_1l_tm");
    const uint32_t H = static_cast<uint32_t>(f.shape("lstm.weight_hh_l0")[1]);
    std::vector<std::vector<Cell>> cells =
        stacked_cells("lstm", CellKind::kLstm, {H, 0}, 1, false, Biases::kAsStored, values_of(f));
    EXPECT_LE(max_error(f, cells), f.tolerance);
    swap_gates(cells[0][0], static_cast<uint32_t>(LstmGate::kInput), static_cast<uint32_t>(LstmGate::kForget));
    EXPECT_GT(max_error(f, cells), 10 * f.tolerance) << "i and f swapped";
  }
  {
    const Fixture f("gru_1l");
    const uint32_t H = static_cast<uint32_t>(f.shape("gru.weight_hh_l0")[1]);
    std::vector<std::vector<Cell>> cells =
        stacked_cells("gru", CellKind::kGru, {H, 0}, 1, false, Biases::kAsStored, values_of(f));
    EXPECT_LE(max_error(f, cells), f.tolerance);
    swap_gates(cells[0][0], static_cast<uint32_t>(GruGate::kReset), static_cast<uint32_t>(GruGate::kUpdate));
    EXPECT_GT(max_error(f, cells), 10 * f.tolerance) << "r and z swapped";
  }
  EXPECT_EQ(kind_from_gates(4, "m"), CellKind::kLstm);
  EXPECT_EQ(kind_from_gates(3, "m"), CellKind::kGru);
  EXPECT_EQ(kind_from_gates(1, "m"), CellKind::kRnn);
  EXPECT_THROW(kind_from_gates(2, "m"), ferry::conv::Error);
}

// Rule: LSTM (and RNN) bias folding. b_ih + b_hh as one bias gives PyTorch's
// output, for every layer of a stack.
TEST(PyTorchRules, LstmBiasFolding) {
  {
    const Fixture f("lstm_2l_tm");
    const uint32_t H = static_cast<uint32_t>(f.shape("lstm.weight_hh_l0")[1]);
    EXPECT_LE(max_error(f, stacked_cells("lstm", CellKind::kLstm, {H, 0}, 2, false, Biases::kFolded,
                                         values_of(f))),
              f.tolerance);
  }
  {
    const Fixture f("rnn_tanh");
    const uint32_t H = static_cast<uint32_t>(f.shape("rnn.weight_hh_l0")[1]);
    EXPECT_LE(max_error(f, stacked_cells("rnn", CellKind::kRnn, {H, 0}, 2, false, Biases::kFolded,
                                         values_of(f))),
              f.tolerance);
  }
}

// Rule: GRU keeps b_hn apart. fold_gru_bias's folded bias on the W_ih x side
// and b_hn inside r * (W_hn h + b_hn) give PyTorch's output; folding b_hn like
// the other gates does not.
TEST(PyTorchRules, GruBhnKeptApart) {
  const Fixture f("gru_2l");
  const uint32_t H = static_cast<uint32_t>(f.shape("gru.weight_hh_l0")[1]);
  std::vector<std::vector<Cell>> cells =
      stacked_cells("gru", CellKind::kGru, {H, 0}, 2, false, Biases::kFolded, values_of(f));
  EXPECT_LE(max_error(f, cells), f.tolerance);
  for (std::vector<Cell>& layer : cells) {
    Cell& c = layer[0];
    c.bias_x = fold_bias(c.bias_x, c.bias_h);  // b_hn moved out of the product with r
    c.bias_h.clear();
  }
  EXPECT_GT(max_error(f, cells), 10 * f.tolerance) << "b_hn folded like the other gates";
}

// Rule: proj_size. H and P come from weight_hr, every parameter has the shape
// recurrent_param_shape() says, and h projected by W_hr (c not) gives
// PyTorch's output through two layers.
TEST(PyTorchRules, ProjSize) {
  const Fixture f("lstm_proj_2l");
  const std::vector<int64_t> hr = f.shape("lstm.weight_hr_l0");
  const uint32_t hr_shape[2] = {static_cast<uint32_t>(hr[0]), static_cast<uint32_t>(hr[1])};
  const HiddenSizes sizes = hidden_sizes(static_cast<uint32_t>(f.shape("lstm.weight_hh_l0")[1]), hr_shape);
  EXPECT_EQ(sizes.hidden, 12u);  // the manifest: proj_size=4, weight_ih_l1 [48, 4]
  EXPECT_EQ(sizes.proj, 4u);
  EXPECT_EQ(sizes.output(), 4u);
  const uint32_t input = static_cast<uint32_t>(f.input.shape[2]);
  for (uint32_t k = 0; k < 2; ++k)
    for (const char* base : {"weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"})
      EXPECT_EQ(recurrent_param_shape(CellKind::kLstm, base, input, sizes, k, false),
                f.shape(std::string("lstm.") + base + recurrent_param_suffix(false, k, false)))
          << base << " layer " << k;
  EXPECT_EQ(hidden_sizes(7, nullptr).hidden, 7u);
  EXPECT_EQ(hidden_sizes(7, nullptr).output(), 7u);
  EXPECT_LE(max_error(f, stacked_cells("lstm", CellKind::kLstm, sizes, 2, false, Biases::kFolded, values_of(f))),
            f.tolerance);
}

// Rule: cuDNN flat weights are views into one storage. Every lstm.* tensor of
// the fixture views the same storage record at its own offset; read straight
// from the file at float32_view_file_offset(), they give PyTorch's output.
TEST(PyTorchRules, CudnnFlatViews) {
  const Fixture f("lstm_cudnn_flat");
  const Storage* shared = f.tensor("lstm.weight_ih_l0").storage.get();
  std::set<int64_t> offsets;
  for (const TensorRef& t : f.checkpoint.tensors) {
    if (t.name.rfind("lstm.", 0) != 0) continue;
    EXPECT_EQ(t.storage.get(), shared) << t.name << " has a storage of its own";
    offsets.insert(t.offset);
  }
  EXPECT_EQ(offsets.size(), 8u) << "two layers of w_ih, w_hh, b_ih, b_hh, each at its own offset";
  const Reader from_file = [&f](const std::string& key) {
    const TensorRef& t = f.tensor(key);
    const std::optional<uint64_t> at = float32_view_file_offset(t, *f.file);
    EXPECT_TRUE(at.has_value()) << key;
    std::vector<float> v(static_cast<size_t>(t.numel()));
    if (at) std::memcpy(v.data(), f.file->data() + *at, v.size() * sizeof(float));
    return v;
  };
  const uint32_t H = static_cast<uint32_t>(f.shape("lstm.weight_hh_l0")[1]);
  EXPECT_LE(max_error(f, stacked_cells("lstm", CellKind::kLstm, {H, 0}, 2, false, Biases::kFolded, from_file)),
            f.tolerance);
  // A view that is not plain float32 in C order is not read in place.
  const Fixture noncontig("lstm_noncontig");
  EXPECT_FALSE(float32_view_file_offset(noncontig.tensor("lstm.weight_hh_l0"), *noncontig.file).has_value());
}

// Rule: parameter names and shapes of a stacked bidirectional module. The
// names parse to (base, layer, direction), every shape is what
// recurrent_param_shape() says (layer 1 reads [forward | backward] of layer 0),
// and running it that way gives PyTorch's output.
TEST(PyTorchRules, StackedBidirectionalShapes) {
  const Fixture f("lstm_bi_2l");
  const uint32_t H = static_cast<uint32_t>(f.shape("lstm.weight_hh_l0")[1]);
  const uint32_t input = static_cast<uint32_t>(f.input.shape[2]);
  size_t parsed = 0;
  for (const TensorRef& t : f.checkpoint.tensors) {
    if (t.name.rfind("lstm.", 0) != 0) continue;
    RecurrentParamName p;
    ASSERT_TRUE(parse_recurrent_param(t.name.substr(5), &p)) << t.name;
    EXPECT_EQ(p.base + recurrent_param_suffix(false, p.layer, p.reverse), t.name.substr(5));
    EXPECT_EQ(recurrent_param_shape(CellKind::kLstm, p.base, input, {H, 0}, p.layer, true), t.shape) << t.name;
    ++parsed;
  }
  EXPECT_EQ(parsed, 16u);
  RecurrentParamName p;
  EXPECT_FALSE(parse_recurrent_param("weight_ih", &p));
  EXPECT_FALSE(parse_recurrent_param("weight_ih_lx", &p));
  EXPECT_LE(max_error(f, stacked_cells("lstm", CellKind::kLstm, {H, 0}, 2, true, Biases::kFolded, values_of(f))),
            f.tolerance);
}

}  // namespace

#endif  // FERRY_HAVE_CONVERTER
