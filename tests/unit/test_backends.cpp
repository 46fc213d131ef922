// Every backend against `reference`, by one shared test body (the way
// ggml's test-backend-ops runs every op of every backend against the CPU
// reference): each case is run on the reference backend and on the backend
// under test with the same model, input and lengths, and compared with one
// error measure. The cases are every PyTorch fixture of the manifest, every
// op fixture (tests/fixtures/ops: every op of the graph syntax, token and
// channels-first input) and a sweep of generated shapes (odd hidden sizes,
// projections, bidirectional, stacks, variable lengths, batches up to 37,
// sequences long enough to reach XNNPACK in auto).
//
// Per backend, besides: ferry_step equals ferry_run bit for bit, results do
// not depend on the number of threads, ferry_session_arena_size is exact, and
// non-finite inputs are survived. Backends this machine or build cannot run
// are skipped with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "convert.h"
#include "compare.h"
#include "op_fixtures.h"
#include "random_models.h"
#include "session.h"
#include "error.h"
#include "ferry/ferry.h"
#include "ferry/ferry_generated.h"
#include "platform/fp_env.h"
#include "io/npy.h"
#include "writer/model_writer.h"

namespace {

using ferry::test::bit_equal;
using ferry::test::max_abs_diff;
using ferry::test::session_options;
using namespace ferry::conv;

const std::string kModels = std::string(FERRY_FIXTURES_DIR) + "/models/";

// ------------------------------------------------------------- plumbing --

struct AlignedBuffer {
  explicit AlignedBuffer(size_t n)
      : size(n), data(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64 + 64))) {}
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  size_t size;
  uint8_t* data;
};

// A loaded model; the bytes copied to a 64-byte-aligned buffer as a mapped
// file would be.
struct Model {
  std::unique_ptr<AlignedBuffer> bytes;
  ferry_model* model = nullptr;
  ferry_model_info info{};
  explicit Model(const ModelBytes& b) : bytes(new AlignedBuffer(b.size())) {
    std::memcpy(bytes->data, b.data(), b.size());
    EXPECT_EQ(ferry_model_load(bytes->data, b.size(), nullptr, &model), FERRY_OK) << ferry_last_error();
    info.struct_size = sizeof(info);
    if (model) EXPECT_EQ(ferry_model_get_info(model, &info), FERRY_OK);
  }
  ~Model() { ferry_model_free(model); }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
};

// A session in its own arena. `status` is FERRY_UNSUPPORTED when the backend
// cannot run here (`error` says why).
struct Session : ferry::test::ArenaSession {
  Session(const Model& m, const ferry_session_options& o) : ArenaSession(m.model, o) {}
};

// A case: model bytes, input in the model's layout, optional lengths.
struct Case {
  std::string name;
  ModelBytes bytes;
  std::vector<float> input;
  std::vector<int32_t> tokens;         // token ids instead (a model taking tokens)
  size_t batch = 1, seq = 1;
  std::vector<int32_t> lengths;
  double tolerance = 1e-5;             // against the reference backend
  std::vector<float> pytorch;          // PyTorch's output, when known
  double pytorch_tolerance = 1e-5;
};

std::vector<float> run(Session& s, const Model& m, const Case& c) {
  size_t n = 0;
  EXPECT_EQ(ferry_output_floats(m.model, c.batch, c.seq, &n), FERRY_OK);
  std::vector<float> y(n, -7.0f);
  const int32_t* lengths = c.lengths.empty() ? nullptr : c.lengths.data();
  EXPECT_EQ(c.tokens.empty() ? ferry_run(s.s, c.input.data(), c.batch, c.seq, lengths, y.data(), y.size())
                             : ferry_run_tokens(s.s, c.tokens.data(), c.batch, c.seq, lengths, y.data(), y.size()),
            FERRY_OK)
      << ferry_last_error();
  return y;
}

// The step-by-step output of a case (no lengths), in the model's layout.
std::vector<float> run_steps(Session& s, const Model& m, const Case& c) {
  return ferry::test::step_through(s.s, m.info, c.input.data(), c.batch, c.seq,
                                   c.tokens.empty() ? nullptr : c.tokens.data());
}

// ---------------------------------------------------------------- cases --

// The PyTorch fixtures, converted in process. Forms whose reader is still
// being written are left out (the e2e suite lists them as skipped).
std::vector<Case> fixture_cases() {
  std::vector<Case> out;
  std::ifstream f(kModels + "manifest.json");
  if (!f) return out;
  const nlohmann::json manifest = nlohmann::json::parse(f);
  for (const auto& e : manifest) {
    const std::string form = e.value("form", "state_dict");
    std::string graph = e.at("graph");
    if (e.value("nonlinearity", "") == "relu") {
      const size_t pos = graph.find("rnn");
      if (pos != std::string::npos) graph.replace(pos, 3, "rnn(relu)");
    }
    Case c;
    c.name = e.at("name");
    try {
      ConvertRequest request;
      request.input = kModels + std::string(e.at("pt"));
      request.graph = graph;
      request.batch_first = e.at("batch_first").get<bool>();
      request.selftest = SelfTestPolicy::Never;
      c.bytes = convert(request).bytes;
    } catch (const Error& err) {
      if (form == "legacy" || form == "whole_module" || form == "torchscript" || form == "safetensors") continue;
      ADD_FAILURE() << c.name << ": " << err.what();
      continue;
    }
    const NpyArray x = read_npy(kModels + std::string(e.at("input")));
    const NpyArray y = read_npy(kModels + std::string(e.at("output")));
    c.input = x.data;
    if (x.shape.size() == 3) {
      const bool bf = e.at("batch_first").get<bool>();
      c.batch = bf ? x.shape[0] : x.shape[1];
      c.seq = bf ? x.shape[1] : x.shape[0];
    } else {
      c.batch = x.shape[0];
    }
    if (e.contains("lengths")) c.lengths = e.at("lengths").get<std::vector<int32_t>>();
    c.pytorch = y.data;
    c.pytorch_tolerance = e.at("tolerance").get<double>();
    out.push_back(std::move(c));
  }
  return out;
}

// Generated models: a recurrent module (or none) and a tail, random weights
// as PyTorch initialises them (U(-1/sqrt(H), 1/sqrt(H))).
struct Shape {
  LayerOp op;
  uint32_t in, hidden, proj, layers;
  bool bidirectional, bias, batch_first;
  std::string tail;  // "", "last", "last>fc", "fc", "fc>tanh", "last>fc>sigmoid", "last>fc>relu>fc>softmax"
  uint32_t fc_out;
  size_t batch, seq;
  bool varlen;
};

std::string describe(const Shape& s) {
  const char* op = s.op == LayerOp::LSTM ? "lstm" : s.op == LayerOp::GRU ? "gru"
                 : s.op == LayerOp::RNN_TANH ? "rnn_tanh" : s.op == LayerOp::RNN_RELU ? "rnn_relu" : "linear";
  return std::string(op) + " in" + std::to_string(s.in) + " h" + std::to_string(s.hidden) +
         (s.proj ? " p" + std::to_string(s.proj) : "") + " L" + std::to_string(s.layers) +
         (s.bidirectional ? " bi" : "") + (s.bias ? "" : " nobias") + (s.batch_first ? " bf" : " tm") + " [" +
         s.tail + "] B" + std::to_string(s.batch) + " T" + std::to_string(s.seq) + (s.varlen ? " varlen" : "");
}

Case generated_case(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  ModelPlan plan;
  const auto tensor = [&plan, &rng](const std::string& name, std::vector<uint32_t> shape, float bound) {
    TensorPlan t;
    t.name = name;
    t.shape = std::move(shape);
    std::vector<float> values(static_cast<size_t>(t.numel()));
    std::uniform_real_distribution<float> u(-bound, bound);
    for (float& v : values) v = u(rng);
    t.fill = [values](float* dst, uint64_t begin, uint64_t count) {
      std::memcpy(dst, values.data() + begin, count * sizeof(float));
    };
    plan.tensors.push_back(std::move(t));
    return static_cast<int>(plan.tensors.size() - 1);
  };
  uint32_t width = s.in;
  bool time_axis = false, collapsed = false;
  if (s.op != LayerOp::Linear) {
    LayerPlan l;
    l.op = s.op;
    l.name = "rnn";
    l.input_size = s.in;
    l.hidden_size = s.hidden;
    l.proj_size = s.proj;
    l.num_layers = s.layers;
    l.bidirectional = s.bidirectional;
    const uint32_t dirs = s.bidirectional ? 2 : 1;
    const uint32_t gates = s.op == LayerOp::LSTM ? 4 : s.op == LayerOp::GRU ? 3 : 1;
    const uint32_t h_out = s.proj ? s.proj : s.hidden;
    const float bound = 1.0f / std::sqrt(static_cast<float>(s.hidden));
    for (uint32_t k = 0; k < s.layers; ++k) {
      for (uint32_t d = 0; d < dirs; ++d) {
        const std::string tag = "rnn.l" + std::to_string(k) + (d ? "r" : "");
        CellPlan c;
        c.w_ih = tensor(tag + ".w_ih", {gates * s.hidden, k == 0 ? s.in : dirs * h_out}, bound);
        c.w_hh = tensor(tag + ".w_hh", {gates * s.hidden, h_out}, bound);
        if (s.bias) {
          c.bias = tensor(tag + ".bias", {gates * s.hidden}, 2 * bound);
          if (s.op == LayerOp::GRU) c.b_hn = tensor(tag + ".b_hn", {s.hidden}, bound);
        }
        if (s.proj) c.w_hr = tensor(tag + ".w_hr", {s.proj, s.hidden}, bound);
        l.cells.push_back(c);
      }
    }
    width = l.output_size = dirs * h_out;
    plan.layers.push_back(l);
    time_axis = true;
  }
  std::string tail = s.tail;
  int fcs = 0;
  while (!tail.empty()) {
    const size_t gt = tail.find('>');
    const std::string item = tail.substr(0, gt);
    tail = gt == std::string::npos ? "" : tail.substr(gt + 1);
    LayerPlan l;
    l.name = item;
    l.input_size = width;
    if (item == "last") {
      l.op = LayerOp::Last;
      collapsed = true;
    } else if (item == "fc") {
      l.op = LayerOp::Linear;
      const uint32_t out = fcs++ == 0 ? s.fc_out : 3;
      const float bound = 1.0f / std::sqrt(static_cast<float>(width));
      l.weight = tensor("fc" + std::to_string(fcs) + ".weight", {out, width}, bound);
      if (s.bias) l.bias = tensor("fc" + std::to_string(fcs) + ".bias", {out}, bound);
      width = out;
    } else {
      l.op = item == "relu" ? LayerOp::ReLU : item == "tanh" ? LayerOp::Tanh
           : item == "sigmoid" ? LayerOp::Sigmoid : LayerOp::Softmax;
    }
    l.output_size = width;
    plan.layers.push_back(l);
  }
  plan.batch_first = time_axis && s.batch_first;
  plan.input_size = s.in;
  plan.output_size = width;
  plan.output_is_sequence = time_axis && !collapsed;

  Case c;
  c.name = describe(s);
  c.bytes = build_model(plan);
  c.batch = s.batch;
  c.seq = time_axis ? s.seq : 1;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  c.input.resize(c.batch * c.seq * s.in);
  for (float& v : c.input) v = u(rng);
  if (s.varlen) {
    std::uniform_int_distribution<int32_t> len(1, static_cast<int32_t>(c.seq));
    for (size_t b = 0; b < c.batch; ++b) c.lengths.push_back(len(rng));
    c.lengths[0] = static_cast<int32_t>(c.seq);  // one sample always spans the whole sequence
  }
  return c;
}

std::vector<Shape> generated_shapes() {
  using L = LayerOp;
  return {
      // op, in, hidden, proj, layers, bi, bias, bf, tail, fc_out, batch, seq, varlen
      {L::LSTM, 3, 1, 0, 1, false, true, false, "", 0, 1, 5, false},
      {L::LSTM, 5, 8, 0, 1, false, true, true, "last>fc", 3, 1, 9, false},
      {L::LSTM, 7, 13, 0, 2, false, true, false, "last>fc", 2, 3, 6, false},
      {L::LSTM, 16, 16, 0, 1, false, true, false, "", 0, 1, 4, false},
      {L::LSTM, 9, 37, 0, 1, false, false, true, "fc>tanh", 5, 2, 7, false},
      {L::LSTM, 12, 24, 5, 2, false, true, true, "last>fc", 4, 3, 5, false},
      {L::LSTM, 6, 20, 11, 1, true, true, false, "last>fc>sigmoid", 1, 4, 6, true},
      {L::LSTM, 10, 29, 0, 2, true, true, true, "", 0, 5, 7, true},
      {L::LSTM, 64, 64, 0, 1, false, true, false, "", 0, 1, 3, false},
      {L::LSTM, 33, 72, 0, 1, false, true, true, "last>fc>relu>fc>softmax", 6, 37, 3, true},
      {L::LSTM, 24, 40, 0, 1, false, true, false, "last>fc", 2, 4, 40, false},  // 160 rows: XNNPACK in auto
      {L::GRU, 4, 3, 0, 1, false, true, false, "last>fc", 2, 1, 8, false},
      {L::GRU, 11, 24, 0, 2, false, true, true, "", 0, 2, 6, false},
      {L::GRU, 7, 19, 0, 1, true, false, false, "last>fc", 3, 3, 5, true},
      {L::GRU, 48, 50, 0, 1, false, true, true, "fc", 7, 6, 9, true},
      {L::GRU, 20, 33, 0, 1, false, true, false, "last>fc", 2, 1, 70, false},
      {L::RNN_TANH, 5, 9, 0, 1, false, true, true, "last>fc", 2, 1, 6, false},
      {L::RNN_TANH, 8, 67, 0, 2, true, true, false, "", 0, 3, 5, true},
      {L::RNN_RELU, 6, 15, 0, 1, false, true, false, "last>fc", 3, 2, 7, false},
      {L::RNN_RELU, 17, 130, 0, 1, false, false, true, "fc>sigmoid", 9, 1, 4, false},
      // A lone GRU / RNN of one sample: ferry_step's direct path (the LSTM's are above).
      {L::GRU, 16, 16, 0, 1, false, true, false, "", 0, 1, 4, false},
      {L::GRU, 5, 11, 0, 1, false, false, true, "", 0, 1, 5, false},
      {L::RNN_TANH, 16, 21, 0, 1, false, true, false, "", 0, 1, 4, false},
      {L::RNN_RELU, 3, 8, 0, 1, false, true, false, "", 0, 1, 3, false},
      // One sample, weights above kAlternateMinBytes: the fused steps run their
      // panels last to first on odd steps (25 panels: the GRU's groups of 3
      // leave a group of 1).
      {L::GRU, 8, 200, 0, 1, false, true, false, "last>fc", 2, 1, 6, false},
      // Batches whose chunks are one step (ferry_step of B 9; a run of B 70 >=
      // kChunkRows): the whole step in batch_step where the set has one, with
      // a row remainder, a projection, both directions and lengths.
      {L::LSTM, 12, 20, 0, 1, false, true, false, "", 0, 9, 4, false},
      {L::LSTM, 7, 19, 6, 2, true, true, true, "last>fc", 3, 70, 3, true},
      {L::LSTM, 9, 16, 0, 1, true, true, false, "", 0, 66, 3, false},  // direct: h straight to the output rows
      // The same for the GRU (batch_step with b_hn, or without any bias), and
      // a step's K = in + h_in across f32_avx2's k passes (160: 2 passes, the
      // boundary inside W_ih for the GRU, inside W_hh for the LSTM).
      {L::GRU, 12, 20, 0, 1, false, true, false, "", 0, 9, 4, false},
      {L::GRU, 7, 19, 0, 2, true, true, true, "last>fc", 3, 70, 3, true},
      {L::GRU, 9, 16, 0, 1, true, false, false, "", 0, 66, 3, false},
      {L::GRU, 150, 60, 0, 1, false, true, false, "", 0, 64, 3, false},
      {L::LSTM, 30, 140, 0, 1, false, true, false, "", 0, 64, 2, false},
      // One sample over W_hh of 256 KiB and more, several chunks: each chunk's
      // steps compute the next chunk's projection (step_project, where the set
      // has it). T 129 ends in a chunk of one step (its input part fused in
      // the step: nothing to project); layer 2's K (256) exceeds the step's
      // (128), layer 1's is below it; 17 panels leave a group of 1.
      {L::LSTM, 20, 128, 0, 2, true, true, false, "", 0, 1, 129, false},
      // Three stacked layers, T 100 (chunks of 64 and 36): each layer's last
      // chunk computes the first chunk's projection of the layer above; in
      // one chunk (T 40) there is none before the last to read from.
      {L::LSTM, 20, 128, 0, 3, false, true, false, "", 0, 1, 100, false},
      {L::LSTM, 20, 128, 0, 2, false, true, false, "", 0, 1, 40, false},
      // The same for the GRU (W_hh of 300 KiB), with b_hn.
      {L::GRU, 20, 160, 0, 2, false, true, false, "", 0, 1, 100, false},
      {L::LSTM, 150, 136, 0, 1, false, false, true, "last>fc", 3, 1, 100, false},
      {L::Linear, 10, 0, 0, 0, false, true, false, "fc>relu>fc>softmax", 6, 5, 1, false},
      {L::Linear, 35, 0, 0, 0, false, false, false, "fc", 17, 40, 1, false},
      {L::Linear, 8, 0, 0, 0, false, true, false, "fc>tanh", 9, 1, 1, false},
  };
}

// The op fixtures (tests/fixtures/ops: every op of the graph syntax, with
// PyTorch's output), converted in process.
std::vector<Case> op_cases() {
  std::vector<Case> out;
  std::vector<std::string> errors;
  for (ferry::test::OpFixtureCase& f : ferry::test::op_fixture_cases(DType::F32, &errors)) {
    Case c;
    c.name = "ops/" + f.name;
    c.bytes = std::move(f.bytes);
    c.input = std::move(f.input);
    c.tokens = std::move(f.tokens);
    c.batch = f.batch;
    c.seq = f.seq;
    c.lengths = std::move(f.lengths);
    c.pytorch = std::move(f.pytorch);
    c.pytorch_tolerance = f.tolerance;
    out.push_back(std::move(c));
  }
  for (const std::string& e : errors) ADD_FAILURE() << e;
  return out;
}

std::vector<Case>& all_cases() {
  static std::vector<Case> cases = [] {
    std::vector<Case> out = fixture_cases();
    for (Case& c : op_cases()) out.push_back(std::move(c));
    uint32_t seed = 1;
    for (const Shape& s : generated_shapes()) out.push_back(generated_case(s, seed++));
    return out;
  }();
  return cases;
}

// ----------------------------------------------------------- the tests --

class BackendTest : public ::testing::TestWithParam<ferry_backend> {
 protected:
  // Skips the test (with the reason) when this backend cannot run here.
  bool available() {
    const Case& c = all_cases().back();
    Model m(c.bytes);
    Session s(m, session_options(GetParam(), 1, 1));
    if (s.status == FERRY_UNSUPPORTED) {
      skip_reason_ = s.error;
      return false;
    }
    EXPECT_EQ(s.status, FERRY_OK) << s.error;
    return true;
  }
  std::string skip_reason_;
};

#define REQUIRE_BACKEND()                                                                   \
  do {                                                                                      \
    if (!available()) GTEST_SKIP() << ferry_backend_name(GetParam()) << ": " << skip_reason_; \
  } while (0)

// The shared body: the backend's output equals the reference backend's
// within the case's tolerance (and PyTorch's, when known).
void check_against_reference(ferry_backend backend, const Case& c) {
  SCOPED_TRACE(c.name);
  Model m(c.bytes);
  ASSERT_NE(m.model, nullptr);
  Session ref(m, session_options(FERRY_BACKEND_REFERENCE, c.batch, c.seq));
  Session got(m, session_options(backend, c.batch, c.seq));
  ASSERT_EQ(ref.status, FERRY_OK) << ref.error;
  ASSERT_EQ(got.status, FERRY_OK) << got.error;
  const std::vector<float> want = run(ref, m, c);
  const std::vector<float> have = run(got, m, c);
  EXPECT_LE(max_abs_diff(have, want), c.tolerance) << ferry_backend_name(backend) << " vs reference";
  if (!c.pytorch.empty()) EXPECT_LE(max_abs_diff(have, c.pytorch), c.pytorch_tolerance) << "vs PyTorch";
}

TEST_P(BackendTest, MatchesReferenceOnEveryCase) {
  REQUIRE_BACKEND();
  ASSERT_GE(all_cases().size(), 40u);  // a suite that silently runs nothing
  for (const Case& c : all_cases()) check_against_reference(GetParam(), c);
}

// ferry_step, one time step at a time, gives exactly ferry_run's output and
// final state, for every unidirectional case without lengths.
TEST_P(BackendTest, StepByStepIsBitIdenticalToRun) {
  REQUIRE_BACKEND();
  int checked = 0;
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.name);
    Model m(c.bytes);
    if (!m.info.streamable || !c.lengths.empty() || !m.info.has_time_axis) continue;
    Session whole(m, session_options(GetParam(), c.batch, c.seq));
    Session stream(m, session_options(GetParam(), c.batch, 1));  // a streaming session: max_seq 1
    ASSERT_EQ(whole.status, FERRY_OK) << whole.error;
    ASSERT_EQ(stream.status, FERRY_OK) << stream.error;
    EXPECT_TRUE(bit_equal(run(whole, m, c), run_steps(stream, m, c)));
    ++checked;
    if (!m.info.state_floats) continue;  // a stateless chain (a kernel-1 conv, per-step layers)
    std::vector<float> s1(c.batch * m.info.state_floats), s2(s1.size());
    ASSERT_EQ(ferry_state_get(whole.s, c.batch, s1.data(), s1.size()), FERRY_OK);
    ASSERT_EQ(ferry_state_get(stream.s, c.batch, s2.data(), s2.size()), FERRY_OK);
    EXPECT_TRUE(bit_equal(s1, s2)) << "final state";
  }
  EXPECT_GE(checked, 20);
}

// A run shorter than the session's max_seq (whose chunks are then longer
// than the run, or end early) gives ferry_step's bits: one sample through
// stacked LSTM and GRU layers whose last chunk computes the first
// projection of the layer above (T 100: chunks of 64 and 36), which a run
// of one chunk (T 40) must not do, and a run ending in a chunk of one step
// (T 65) does in that step; the session is reused for every T, longest
// first, so no row of an earlier run can stand in.
TEST_P(BackendTest, RunsShorterThanTheSessionsLongestAreStepByStep) {
  REQUIRE_BACKEND();
  for (const LayerOp op : {LayerOp::LSTM, LayerOp::GRU}) {
    for (uint32_t layers : {2u, 3u}) {
      // W_hh of 256 KiB or more (step_project): LSTM H 128, GRU H 160.
      const uint32_t hidden = op == LayerOp::LSTM ? 128 : 160;
      const Shape longest{op, 20, hidden, 0, layers, false, true, false, "", 0, 1, 100, false};
      const Case c100 = generated_case(longest, 300 + layers);
      Model m(c100.bytes);
      Session whole(m, session_options(GetParam(), 1, 100));
      ASSERT_EQ(whole.status, FERRY_OK) << whole.error;
      for (size_t T : {100u, 65u, 40u}) {
        SCOPED_TRACE(describe(longest) + ", run T " + std::to_string(T));
        Case c = c100;
        c.seq = T;
        c.input.assign(c100.input.end() - static_cast<std::ptrdiff_t>(T * longest.in), c100.input.end());
        Session stream(m, session_options(GetParam(), 1, 1));
        ASSERT_EQ(stream.status, FERRY_OK) << stream.error;
        ASSERT_EQ(ferry_state_reset(whole.s), FERRY_OK);
        EXPECT_TRUE(bit_equal(run(whole, m, c), run_steps(stream, m, c)));
      }
    }
  }
}

// Any number of threads gives the same bits as none.
TEST_P(BackendTest, ResultsDoNotDependOnThreadCount) {
  REQUIRE_BACKEND();
  void* probe = ferry_threadpool_create(2);
  if (!probe) GTEST_SKIP() << "built without pthreadpool";
  ferry_threadpool_destroy(probe);
  // Few calls each: a pool's workers spin between calls, which a loaded
  // 2-core CI machine pays for dearly. Each shape is large enough to be split.
  // On one thread the batch-1 shapes (weights above 64 KiB) run their fused
  // steps in alternating panel order, which two and three threads do not:
  // the comparison covers the order too.
  const std::vector<Shape> shapes = {
      {LayerOp::LSTM, 40, 192, 0, 1, false, true, false, "", 0, 1, 3, false},
      // Several chunks: one thread computes projections inside the steps
      // (step_project), two and three threads before them.
      {LayerOp::LSTM, 24, 128, 0, 1, false, true, false, "", 0, 1, 70, false},
      {LayerOp::LSTM, 40, 128, 32, 2, true, true, true, "last>fc", 9, 16, 3, true},
      // One sample through stacked layers, several chunks: on two threads or
      // more a wavefront over the layers (one runner per layer, chunk by
      // chunk). Three layers on two threads (one runner takes the first and
      // the third), with step_project on one thread and in the wavefront
      // (W_hh of 256 KiB: a layer then waits for two chunks of the one
      // below), ending in a chunk of one step (in place: not fused); a GRU with lengths (no step_project); an RNN too small to
      // wake the pool (one runner takes every layer).
      {LayerOp::LSTM, 24, 128, 0, 3, false, true, false, "", 0, 1, 129, false},
      {LayerOp::GRU, 20, 48, 0, 2, false, true, true, "last>fc", 3, 1, 130, true},
      {LayerOp::RNN_TANH, 6, 10, 0, 2, false, true, false, "", 0, 1, 70, false},
      // One sample through two directions: on two threads or more each
      // direction on its own runner (a layer's two once both of the layer
      // below have finished). Two layers with step_project, ending in a
      // chunk of one step; a GRU with lengths; an RNN too small to wake the
      // pool.
      {LayerOp::LSTM, 24, 128, 0, 2, true, true, false, "", 0, 1, 129, false},
      {LayerOp::GRU, 20, 48, 0, 1, true, true, true, "last>fc", 3, 1, 130, true},
      {LayerOp::RNN_TANH, 6, 10, 0, 2, true, true, false, "", 0, 1, 70, false},
      // ... and in one chunk (T 40: a session of max_seq 40 has chunks of 40).
      {LayerOp::GRU, 24, 128, 0, 2, true, true, false, "", 0, 1, 40, false},
      {LayerOp::GRU, 30, 96, 0, 1, false, true, false, "fc", 20, 8, 3, false},
      {LayerOp::GRU, 30, 200, 0, 1, false, true, false, "", 0, 1, 4, false},  // one thread: alternating order
      {LayerOp::RNN_TANH, 64, 400, 0, 1, false, true, false, "", 0, 1, 3, false},
      {LayerOp::Linear, 300, 0, 0, 0, false, true, false, "fc>relu>fc", 200, 64, 1, false},
  };
  uint32_t seed = 100;
  for (const Shape& shape : shapes) {
    const Case c = generated_case(shape, seed++);
    SCOPED_TRACE(c.name);
    Model m(c.bytes);
    Session single(m, session_options(GetParam(), c.batch, c.seq));
    ASSERT_EQ(single.status, FERRY_OK) << single.error;
    const std::vector<float> want = run(single, m, c);
    for (size_t threads : {1, 2, 3}) {
      void* pool = ferry_threadpool_create(threads);
      ASSERT_NE(pool, nullptr);
      {
        Session s(m, session_options(GetParam(), c.batch, c.seq, pool));
        ASSERT_EQ(s.status, FERRY_OK) << s.error;
        EXPECT_TRUE(bit_equal(run(s, m, c), want)) << threads << " threads, ferry_run";
        if (m.info.streamable && c.lengths.empty()) {
          Session s1(m, session_options(GetParam(), c.batch, 1, pool));
          EXPECT_TRUE(bit_equal(run_steps(s1, m, c), want)) << threads << " threads, ferry_step";
        }
      }
      ferry_threadpool_destroy(pool);
    }
  }
}

// ferry_session_arena_size is exact for this backend: grown from 0 in
// alignment steps, every smaller arena is refused with
// FERRY_ARENA_TOO_SMALL, the reported size works and runs.
TEST_P(BackendTest, ArenaSizeIsExact) {
  REQUIRE_BACKEND();
  const std::vector<Shape> shapes = {
      {LayerOp::LSTM, 6, 20, 11, 2, true, true, false, "last>fc", 3, 3, 9, false},
      {LayerOp::GRU, 11, 24, 0, 2, false, true, true, "fc", 4, 2, 40, false},  // 80 rows: XNNPACK in auto
      {LayerOp::LSTM, 8, 128, 0, 1, false, true, false, "", 0, 1, 65, false},  // a second gate buffer (step_project)
      // On two threads: a wavefront's buffers (two runners' gate rows, twice
      // for step_project), over two layers and over two directions.
      {LayerOp::LSTM, 8, 128, 0, 2, false, true, false, "", 0, 1, 65, false},
      {LayerOp::LSTM, 8, 128, 0, 1, true, true, false, "", 0, 1, 65, false},
      {LayerOp::GRU, 8, 64, 0, 2, true, true, false, "", 0, 1, 40, false},  // one chunk
  };
  void* pool = ferry_threadpool_create(2);
  uint32_t seed = 200;
  for (const Shape& shape : shapes) {
    const Case c = generated_case(shape, seed++);
    SCOPED_TRACE(c.name);
    Model m(c.bytes);
    const bool threaded = shape.batch == 1 && (shape.layers == 2 || shape.bidirectional);
    if (threaded && !pool) continue;  // built without pthreadpool
    const ferry_session_options o = session_options(GetParam(), c.batch, c.seq, threaded ? pool : nullptr);
    size_t need = 0;
    ASSERT_EQ(ferry_session_arena_size(m.model, &o, &need), FERRY_OK) << ferry_last_error();
    AlignedBuffer arena(need);
    for (size_t size = 0; size < need; size += FERRY_ALIGNMENT) {
      ferry_session* s = nullptr;
      ASSERT_EQ(ferry_session_init(m.model, &o, arena.data, size, &s), FERRY_ARENA_TOO_SMALL) << size;
      EXPECT_EQ(s, nullptr);
    }
    ferry_session* s = nullptr;
    ASSERT_EQ(ferry_session_init(m.model, &o, arena.data, need, &s), FERRY_OK) << ferry_last_error();
    size_t n = 0;
    ASSERT_EQ(ferry_output_floats(m.model, c.batch, c.seq, &n), FERRY_OK);
    std::vector<float> y(n);
    EXPECT_EQ(ferry_run(s, c.input.data(), c.batch, c.seq, nullptr, y.data(), y.size()), FERRY_OK);
    ferry_session_release(s);
  }
  if (pool) ferry_threadpool_destroy(pool);
}

// NaN and infinities in the input: no crash, no error, no hang; the state
// can be reset and the session runs on.
TEST_P(BackendTest, NonFiniteInputsAreSurvived) {
  REQUIRE_BACKEND();
  const Case c = generated_case({LayerOp::LSTM, 12, 24, 5, 2, true, true, true, "last>fc", 4, 3, 40, false}, 300);
  Model m(c.bytes);
  Session s(m, session_options(GetParam(), c.batch, c.seq));
  ASSERT_EQ(s.status, FERRY_OK) << s.error;
  std::vector<float> x = c.input;
  for (size_t i = 0; i < x.size(); i += 7) x[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
  size_t n = 0;
  ASSERT_EQ(ferry_output_floats(m.model, c.batch, c.seq, &n), FERRY_OK);
  std::vector<float> y(n);
  EXPECT_EQ(ferry_run(s.s, x.data(), c.batch, c.seq, nullptr, y.data(), y.size()), FERRY_OK);
  ASSERT_EQ(ferry_state_reset(s.s), FERRY_OK);
  EXPECT_EQ(ferry_run(s.s, c.input.data(), c.batch, c.seq, nullptr, y.data(), y.size()), FERRY_OK);
}

// The fast nonlinearities through the public API: a Linear with identity
// weights (exact on every backend) followed by tanh or sigmoid, on a dense
// sweep of [-20, 20] and the special values; ~1e-6 absolute, as promised.
TEST_P(BackendTest, NonlinearitiesAreAccurate) {
  REQUIRE_BACKEND();
  constexpr uint32_t kWidth = 64;
  for (const char* act : {"tanh", "sigmoid"}) {
    SCOPED_TRACE(act);
    ModelPlan plan;
    TensorPlan w;
    w.name = "eye";
    w.shape = {kWidth, kWidth};
    w.fill = [](float* dst, uint64_t begin, uint64_t count) {
      for (uint64_t i = 0; i < count; ++i) dst[i] = (begin + i) % (kWidth + 1) == 0 ? 1.0f : 0.0f;
    };
    plan.tensors.push_back(w);
    LayerPlan fc;
    fc.op = LayerOp::Linear;
    fc.name = "fc";
    fc.input_size = fc.output_size = kWidth;
    fc.weight = 0;
    LayerPlan a;
    a.op = std::string(act) == "tanh" ? LayerOp::Tanh : LayerOp::Sigmoid;
    a.name = act;
    a.input_size = a.output_size = kWidth;
    plan.layers = {fc, a};
    plan.input_size = plan.output_size = kWidth;
    Model m(build_model(plan));
    const size_t rows = 4096;
    Session s(m, session_options(GetParam(), rows, 1));
    ASSERT_EQ(s.status, FERRY_OK) << s.error;
    std::vector<float> x(rows * kWidth), y(x.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = -20.0f + 40.0f * static_cast<float>(i) / static_cast<float>(x.size());
    // (No infinities: through the identity Linear they meet 0 * inf = NaN,
    // on every backend.)
    const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, 88.0f, -88.0f, 1e30f, -1e30f, 3e38f, -3e38f};
    for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); ++i) x[i] = special[i];
    ASSERT_EQ(ferry_run(s.s, x.data(), rows, 1, nullptr, y.data(), y.size()), FERRY_OK);
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::string(act) == "tanh" ? std::tanh(double{x[i]}) : 1.0 / (1.0 + std::exp(-double{x[i]}));
      worst = std::max(worst, std::fabs(double{y[i]} - want));
    }
    EXPECT_LE(worst, 1e-6);
    x[0] = NAN;
    ASSERT_EQ(ferry_run(s.s, x.data(), rows, 1, nullptr, y.data(), y.size()), FERRY_OK);
    // NaN in, NaN out, as on the reference backend; XNNPACK's output clamp
    // (max with -inf) turns the NaNs of its products into -inf instead, so
    // backends that use it make no promise here (ferry.h).
    if (GetParam() == FERRY_BACKEND_SIMD) EXPECT_TRUE(std::isnan(y[0])) << "NaN in, NaN out";
  }
}

// CUDA: skipped, with the reason, where it is not built or no GPU is visible.
INSTANTIATE_TEST_SUITE_P(Backends, BackendTest,
                         ::testing::Values(FERRY_BACKEND_SIMD, FERRY_BACKEND_XNNPACK, FERRY_BACKEND_AUTO,
                                           FERRY_BACKEND_CUDA),
                         [](const ::testing::TestParamInfo<ferry_backend>& info) {
                           return std::string(ferry_backend_name(info.param));
                         });

// ------------------------------------------------- backend-independent --

TEST(Backends, UnknownAndUnbuiltBackendsAreRefusedCleanly) {
  const Case c = generated_case({LayerOp::GRU, 4, 3, 0, 1, false, true, false, "last>fc", 2, 1, 8, false}, 7);
  Model m(c.bytes);
  ferry_session_options o = session_options(FERRY_BACKEND_CUDA, 1, 1);
  size_t need = 0;
  // Unbuilt, or built without a GPU here: refused with the reason. (With a
  // GPU, BackendTest/cuda runs it.)
  const ferry_status cuda = ferry_session_arena_size(m.model, &o, &need);
#if defined(FERRY_TEST_HAVE_CUDA)
  if (cuda != FERRY_OK) EXPECT_EQ(cuda, FERRY_UNSUPPORTED) << ferry_last_error();
#else
  EXPECT_EQ(cuda, FERRY_UNSUPPORTED);
#endif
  if (cuda != FERRY_OK) EXPECT_STRNE(ferry_last_error(), "");
  o.backend = static_cast<ferry_backend>(42);
  EXPECT_EQ(ferry_session_arena_size(m.model, &o, &need), FERRY_INVALID_ARGUMENT);
}

// A caller compiled against the 0.1 header (no threadpool field) is still
// served: struct_size tells which fields exist.
TEST(Backends, OlderOptionsStructIsAccepted) {
  const Case c = generated_case({LayerOp::LSTM, 5, 8, 0, 1, false, true, true, "last>fc", 3, 1, 9, false}, 8);
  Model m(c.bytes);
  ferry_session_options o = session_options(FERRY_BACKEND_AUTO, 1, 9);
  o.threadpool = reinterpret_cast<void*>(0x1);  // must not be read
  o.struct_size = offsetof(ferry_session_options, threadpool);
  size_t need = 0;
  ASSERT_EQ(ferry_session_arena_size(m.model, &o, &need), FERRY_OK) << ferry_last_error();
  AlignedBuffer arena(need);
  ferry_session* s = nullptr;
  ASSERT_EQ(ferry_session_init(m.model, &o, arena.data, need, &s), FERRY_OK) << ferry_last_error();
  std::vector<float> y(3);
  EXPECT_EQ(ferry_run(s, c.input.data(), 1, 9, nullptr, y.data(), y.size()), FERRY_OK);
}

// The converter stores every weight Panel8, once, padded to whole panels of
// 8 units: [52, 5] LSTM w_ih (H = 13) takes 2 panels * 8 units * 4 gates * 5.
TEST(Backends, ConverterWritesEveryWeightOncePanel8) {
  const Case c = generated_case({LayerOp::LSTM, 5, 13, 0, 1, false, true, true, "last>fc", 3, 1, 9, false}, 9);
  const auto* model = ferry::fb::GetModel(c.bytes.data());
  // An fp32 model is a format 1.2 file (1.3 adds only quantized weights), so
  // that it stays byte-identical and readable by 1.2 runtimes.
  ASSERT_EQ(model->format_minor(), 2);
  const uint64_t want[] = {2 * 8 * 4 * 5, 2 * 8 * 4 * 13, 2 * 8 * 4, 8 * 13, 8};  // w_ih w_hh bias fc.w fc.b
  ASSERT_EQ(model->tensors()->size(), 5u);
  uint64_t blob = 0;
  for (uint32_t i = 0; i < 5; ++i) {
    const auto* t = model->tensors()->Get(i);
    EXPECT_EQ(t->layout(), ferry::fb::TensorLayout::Panel8) << i;
    EXPECT_EQ(t->size(), want[i] * 4) << i;
    EXPECT_EQ(t->offset(), blob) << i;
    blob += (want[i] * 4 + 63) / 64 * 64;
  }
  EXPECT_EQ(model->weights()->size(), blob);
}

// Panel8 element order, as the schema defines it: logical (g*H + u, k) at
// ((p*K + k)*G + g)*8 + j. Checked on a model whose weights encode their own
// (row, column): w_ih[r][k] = r + k/100.
TEST(Backends, Panel8ElementOrder) {
  ModelPlan plan;
  const uint32_t H = 11, I = 3, G = 3;  // GRU
  const auto add = [&plan](const std::string& name, std::vector<uint32_t> shape, uint32_t cols) {
    TensorPlan t;
    t.name = name;
    t.shape = std::move(shape);
    t.fill = [cols](float* dst, uint64_t begin, uint64_t count) {
      for (uint64_t i = 0; i < count; ++i) {
        const uint64_t e = begin + i;
        dst[i] = static_cast<float>(e / cols) + static_cast<float>(e % cols) / 100.0f;
      }
    };
    plan.tensors.push_back(t);
    return static_cast<int>(plan.tensors.size() - 1);
  };
  LayerPlan l;
  l.op = LayerOp::GRU;
  l.name = "gru";
  l.input_size = I;
  l.hidden_size = H;
  l.num_layers = 1;
  l.output_size = H;
  CellPlan cell;
  cell.w_ih = add("w_ih", {G * H, I}, I);
  cell.w_hh = add("w_hh", {G * H, H}, H);
  l.cells.push_back(cell);
  plan.layers.push_back(l);
  plan.input_size = I;
  plan.output_size = H;
  plan.output_is_sequence = true;
  const ModelBytes bytes = build_model(plan);
  const auto* model = ferry::fb::GetModel(bytes.data());
  const auto* t = model->tensors()->Get(0);
  const float* w = reinterpret_cast<const float*>(model->weights()->data() + t->offset());
  for (uint32_t g = 0; g < G; ++g)
    for (uint32_t u = 0; u < 16; ++u)
      for (uint32_t k = 0; k < I; ++k) {
        const float got = w[((u / 8 * I + k) * G + g) * 8 + u % 8];
        const float want = u < H ? static_cast<float>(g * H + u) + static_cast<float>(k) / 100.0f : 0.0f;
        EXPECT_EQ(got, want) << "g " << g << " u " << u << " k " << k;
      }
}

#if defined(__x86_64__)
// Denormals are flushed for the duration of a call only: the caller's
// MXCSR (flush modes, rounding, exception masks and flags) comes back as it
// was, whether or not the caller flushes itself.
// FERRY_FP_RESTORE (the 0.1 behaviour, kept behind the option): every call
// restores the caller's mode.
TEST(Backends, CallersFloatingPointModeIsRestored) {
  const Case c = generated_case({LayerOp::LSTM, 12, 24, 5, 2, true, true, true, "last>fc", 4, 3, 40, false}, 301);
  Model m(c.bytes);
  const unsigned saved = _mm_getcsr();
  for (ferry_backend b : {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_AUTO}) {
    ferry_session_options o = session_options(b, c.batch, c.seq);
    o.fp_mode = FERRY_FP_RESTORE;
    Session s(m, o);
    ASSERT_EQ(s.status, FERRY_OK) << s.error;
    size_t n = 0;
    ASSERT_EQ(ferry_output_floats(m.model, c.batch, c.seq, &n), FERRY_OK);
    std::vector<float> y(n);
    for (unsigned mode : {0x1F80u, 0x9FC0u, 0x3F80u}) {  // default; FTZ+DAZ; round down
      _mm_setcsr(mode);
      EXPECT_EQ(ferry_run(s.s, c.input.data(), c.batch, c.seq, nullptr, y.data(), y.size()), FERRY_OK);
      EXPECT_EQ(_mm_getcsr() & ~0x3Fu, mode & ~0x3Fu) << std::hex << mode;
    }
  }
  _mm_setcsr(saved);
}

// FERRY_FP_FLUSH (the default) turns flushing on and leaves it, touching
// nothing else of the mode; FERRY_FP_CALLER touches nothing. FLUSH and
// RESTORE give the same bits.
TEST(Backends, DefaultFloatingPointModeFlushesOnceAndKeepsIt) {
  const Case c = generated_case({LayerOp::GRU, 12, 24, 0, 1, false, true, true, "last>fc", 4, 3, 40, false}, 302);
  Model m(c.bytes);
  const unsigned saved = _mm_getcsr();
  size_t n = 0;
  ASSERT_EQ(ferry_output_floats(m.model, c.batch, c.seq, &n), FERRY_OK);
  std::vector<float> restored(n), flushed(n);
  {
    ferry_session_options o = session_options(FERRY_BACKEND_AUTO, c.batch, c.seq);
    o.fp_mode = FERRY_FP_RESTORE;
    Session s(m, o);
    ASSERT_EQ(s.status, FERRY_OK) << s.error;
    ASSERT_EQ(ferry_run(s.s, c.input.data(), c.batch, c.seq, nullptr, restored.data(), n), FERRY_OK);
  }
  Session s(m, session_options(FERRY_BACKEND_AUTO, c.batch, c.seq));  // default: FERRY_FP_FLUSH
  ASSERT_EQ(s.status, FERRY_OK) << s.error;
  // default; round down; FTZ alone; DAZ alone (a call finds FTZ and DAZ
  // both on with a multiply, not a read of MXCSR: either missing is seen)
  for (unsigned mode : {0x1F80u, 0x3F80u, 0x9F80u, 0x1FC0u}) {
    _mm_setcsr(mode);
    ASSERT_EQ(ferry_state_reset(s.s), FERRY_OK);
    ASSERT_EQ(ferry_run(s.s, c.input.data(), c.batch, c.seq, nullptr, flushed.data(), n), FERRY_OK);
    EXPECT_EQ(_mm_getcsr() & ~0x3Fu, (mode | 0x8040u) & ~0x3Fu) << std::hex << mode << ": FTZ and DAZ on, the rest kept";
  }
  _mm_setcsr(0x1F80u);
  ASSERT_EQ(ferry_state_reset(s.s), FERRY_OK);
  ASSERT_EQ(ferry_run(s.s, c.input.data(), c.batch, c.seq, nullptr, flushed.data(), n), FERRY_OK);
  EXPECT_TRUE(bit_equal(flushed, restored)) << "FLUSH and RESTORE must give the same bits";
  ferry_session_options o = session_options(FERRY_BACKEND_AUTO, c.batch, c.seq);
  o.fp_mode = FERRY_FP_CALLER;
  Session caller(m, o);
  ASSERT_EQ(caller.status, FERRY_OK) << caller.error;
  _mm_setcsr(0x1F80u);
  ASSERT_EQ(ferry_run(caller.s, c.input.data(), c.batch, c.seq, nullptr, flushed.data(), n), FERRY_OK);
  EXPECT_EQ(_mm_getcsr() & ~0x3Fu, 0x1F80u) << "FERRY_FP_CALLER leaves the mode alone";
  o.fp_mode = static_cast<ferry_fp_mode>(7);
  size_t bytes = 0;
  EXPECT_EQ(ferry_session_arena_size(m.model, &o, &bytes), FERRY_INVALID_ARGUMENT);
  _mm_setcsr(saved);
}
// The default mode's check (fp_env.h, flushing_denormals): true only with
// FTZ and DAZ both on, whatever the rounding mode.
TEST(Backends, FlushCheckSeesEachModeBit) {
  const unsigned saved = _mm_getcsr();
  const struct {
    unsigned csr;
    bool flushing;
  } cases[] = {{0x1F80u, false}, {0x9F80u, false}, {0x1FC0u, false}, {0x9FC0u, true},
               {0xDFC0u, true},  {0xBFC0u, true},  {0xFFC0u, true},  {0x3F80u, false}};
  for (const auto& c : cases) {
    _mm_setcsr(c.csr);
    EXPECT_EQ(ferry::flushing_denormals(), c.flushing) << std::hex << c.csr;
  }
  _mm_setcsr(saved);
}
#endif

// A format 1.0 file of the same model: every tensor RowMajor, unpacked from
// the converter's Panel8 output (the inverse of the schema's formula), the
// rest of the model copied field by field.
std::vector<uint8_t> to_row_major(const ModelBytes& panel8, uint16_t minor = 0) {
  namespace fb = ferry::fb;
  const fb::Model* m = fb::GetModel(panel8.data());
  std::vector<uint32_t> gates(m->tensors()->size(), 1);
  for (const fb::Layer* l : *m->layers()) {
    const uint32_t g = l->kind() == fb::LayerKind::LSTM ? 4 : l->kind() == fb::LayerKind::GRU ? 3 : 1;
    if (!l->cells()) continue;
    for (const fb::RecurrentCell* c : *l->cells()) {
      for (int32_t t : {c->w_ih(), c->w_hh(), c->bias()})
        if (t >= 0) gates[static_cast<size_t>(t)] = g;
    }
  }
  flatbuffers::FlatBufferBuilder fbb;
  fbb.ForceDefaults(true);  // every field stored, so that tests can mutate it
  std::vector<float> blob;
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (uint32_t i = 0; i < m->tensors()->size(); ++i) {
    const fb::Tensor* t = m->tensors()->Get(i);
    const uint32_t G = gates[i], rows = t->shape()->Get(0), H = rows / G;
    const uint32_t K = t->shape()->size() == 2 ? t->shape()->Get(1) : 1;
    const float* src = reinterpret_cast<const float*>(m->weights()->data() + t->offset());
    const size_t offset = blob.size();
    for (uint32_t r = 0; r < rows; ++r) {
      const uint32_t g = r / H, u = r % H;
      for (uint32_t k = 0; k < K; ++k) blob.push_back(src[((size_t{u / 8} * K + k) * G + g) * 8 + u % 8]);
    }
    while (blob.size() % 16) blob.push_back(0.0f);  // 64-byte aligned offsets
    std::vector<uint32_t> shape(t->shape()->begin(), t->shape()->end());
    tensors.push_back(fb::CreateTensor(fbb, fbb.CreateString(t->name()->str()), fb::DType::F32,
                                       fb::TensorLayout::RowMajor, fbb.CreateVector(shape), offset * 4,
                                       size_t{rows} * K * 4));
  }
  std::vector<flatbuffers::Offset<fb::Layer>> layers;
  for (const fb::Layer* l : *m->layers()) {
    std::vector<flatbuffers::Offset<fb::RecurrentCell>> cells;
    if (l->cells()) {
      for (const fb::RecurrentCell* c : *l->cells())
        cells.push_back(fb::CreateRecurrentCell(fbb, c->w_ih(), c->w_hh(), c->bias(), c->b_hn(), c->w_hr()));
    }
    layers.push_back(fb::CreateLayer(fbb, l->kind(), fbb.CreateString(l->name()->str()), l->input_size(),
                                     l->output_size(), l->hidden_size(), l->proj_size(), l->num_layers(),
                                     l->bidirectional(), cells.empty() ? 0 : fbb.CreateVector(cells), l->weight(),
                                     l->bias()));
  }
  fbb.ForceVectorAlignment(blob.size() * 4, 1, 64);
  const auto weights = fbb.CreateVector(reinterpret_cast<const uint8_t*>(blob.data()), blob.size() * 4);
  const auto layers_v = fbb.CreateVector(layers);
  const auto tensors_v = fbb.CreateVector(tensors);
  fb::ModelBuilder mb(fbb);
  mb.add_format_major(1);
  mb.add_format_minor(minor);
  mb.add_layers(layers_v);
  mb.add_tensors(tensors_v);
  mb.add_weights(weights);
  mb.add_batch_first(m->batch_first());
  mb.add_input_size(m->input_size());
  mb.add_output_size(m->output_size());
  mb.add_output_is_sequence(m->output_is_sequence());
  fbb.Finish(mb.Finish(), fb::ModelIdentifier());
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

// Format 1.0 files (RowMajor) still load and run: on the reference backend
// with exactly the results of the same model stored Panel8 (the reference
// reads both layouts in the same order), on auto by falling back to the
// reference; simd and xnnpack refuse them with a message.
TEST(Backends, RowMajorFilesOfFormat10StillRun) {
  for (const Shape& shape : {Shape{LayerOp::LSTM, 6, 20, 11, 2, true, true, false, "last>fc", 3, 3, 9, true},
                             Shape{LayerOp::GRU, 11, 13, 0, 1, false, true, true, "fc>tanh", 4, 2, 5, false}}) {
    const Case c = generated_case(shape, 400);
    SCOPED_TRACE(c.name);
    const std::vector<uint8_t> old = to_row_major(c.bytes);
    ferry_model* rm = nullptr;
    ASSERT_EQ(ferry_model_load(old.data(), old.size(), nullptr, &rm), FERRY_OK) << ferry_last_error();
    Model packed(c.bytes);
    size_t n = 0;
    ASSERT_EQ(ferry_output_floats(rm, c.batch, c.seq, &n), FERRY_OK);
    std::vector<float> want(n), got(n);
    Session ref_packed(packed, session_options(FERRY_BACKEND_REFERENCE, c.batch, c.seq));
    ASSERT_EQ(ref_packed.status, FERRY_OK);
    const int32_t* lengths = c.lengths.empty() ? nullptr : c.lengths.data();
    ASSERT_EQ(ferry_run(ref_packed.s, c.input.data(), c.batch, c.seq, lengths, want.data(), n), FERRY_OK);
    for (ferry_backend b : {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_AUTO}) {
      const ferry_session_options o = session_options(b, c.batch, c.seq);
      size_t need = 0;
      ASSERT_EQ(ferry_session_arena_size(rm, &o, &need), FERRY_OK) << ferry_last_error();
      AlignedBuffer arena(need);
      ferry_session* s = nullptr;
      ASSERT_EQ(ferry_session_init(rm, &o, arena.data, need, &s), FERRY_OK) << ferry_last_error();
      ASSERT_EQ(ferry_run(s, c.input.data(), c.batch, c.seq, lengths, got.data(), n), FERRY_OK);
      if (b == FERRY_BACKEND_REFERENCE) {
        EXPECT_TRUE(bit_equal(got, want)) << "reference: RowMajor and Panel8 differ";
      } else {
        EXPECT_LE(max_abs_diff(got, want), 1e-5) << "auto";
      }
    }
    for (ferry_backend b : {FERRY_BACKEND_SIMD, FERRY_BACKEND_XNNPACK}) {
      const bool runs_here = Session(packed, session_options(b, c.batch, c.seq)).status == FERRY_OK;
      const ferry_session_options o = session_options(b, c.batch, c.seq);
      size_t need = 0;
      EXPECT_EQ(ferry_session_arena_size(rm, &o, &need), FERRY_UNSUPPORTED);
      if (runs_here) EXPECT_NE(std::string(ferry_last_error()).find("RowMajor"), std::string::npos) << ferry_last_error();
    }
    ferry_model_free(rm);
  }
}

// The verifier holds Panel8 to its size as strictly as RowMajor: a Panel8
// tensor must have its padded size, no more and no less.
TEST(Backends, Panel8SizeIsVerified) {
  const Case c = generated_case({LayerOp::LSTM, 5, 13, 0, 1, false, true, true, "last>fc", 3, 1, 9, false}, 9);
  // A RowMajor-sized tensor declared Panel8 (H = 13 is not a whole panel).
  std::vector<uint8_t> bytes = to_row_major(c.bytes, 1);
  auto* m = ferry::fb::GetMutableModel(bytes.data());
  auto* w_ih = m->mutable_tensors()->GetMutableObject(0);
  ASSERT_TRUE(w_ih->mutate_layout(ferry::fb::TensorLayout::Panel8));
  ferry_model* model = nullptr;
  EXPECT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &model), FERRY_INVALID_MODEL);
  EXPECT_NE(std::string(ferry_last_error()).find("Panel8"), std::string::npos) << ferry_last_error();
  // A layout this runtime does not know: refused, not guessed.
  ASSERT_TRUE(w_ih->mutate_layout(static_cast<ferry::fb::TensorLayout>(7)));
  EXPECT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &model), FERRY_UNSUPPORTED);
  EXPECT_EQ(model, nullptr);
}

// A sequence output in another layout than the input's (Model.output_layout,
// format 2): every CPU backend writes ferry_run's output in it, element for
// element the reference's run of the same model without it (the input's
// layout) re-indexed, with zeros past each sample's length in the output's
// layout; ferry_step's [B,F] is unaffected, and steps put together in the
// output's layout give the run's bits.
TEST(Backends, OutputLayoutOnEveryCpuBackend) {
  using ferry::test::LayerSpec;
  using ferry::test::ModelSpec;
  using ferry::test::Runner;
  const Layout layouts[] = {Layout::kTimeMajor, Layout::kBatchFirst, Layout::kChannelsFirst};
  const auto code = [](Layout l) {
    return l == Layout::kChannelsFirst ? FERRY_LAYOUT_CHANNELS_FIRST
           : l == Layout::kBatchFirst  ? FERRY_LAYOUT_BATCH_FIRST
                                       : FERRY_LAYOUT_TIME_MAJOR;
  };
  const auto index = [](int layout, size_t t, size_t b, size_t f, size_t T, size_t B, size_t F) {
    return layout == FERRY_LAYOUT_CHANNELS_FIRST ? (b * F + f) * T + t
           : layout == FERRY_LAYOUT_BATCH_FIRST  ? (b * T + t) * F + f
                                                 : (t * B + b) * F + f;
  };
  std::vector<ModelSpec> specs(3);
  specs[0].input_size = 7;  // a one-layer GRU into a Linear: the last layer writes whole rows
  specs[0].layers = {LayerSpec{LayerOp::GRU, 12}, LayerSpec{LayerOp::Linear, 5}};
  specs[1].input_size = 9;  // two stacked LSTM layers last
  specs[1].layers = {LayerSpec{LayerOp::LSTM, 10, 2}};
  specs[2].input_size = 6;  // a GRU, then an activation in place
  specs[2].layers = {LayerSpec{LayerOp::GRU, 9}, LayerSpec{LayerOp::Tanh}};
  const size_t B = 3, T = 5;
  const std::vector<int32_t> lengths = {5, 2, 4};
  int runs = 0;
  for (size_t si = 0; si < specs.size(); ++si) {
    specs[si].seed = 700 + si;
    for (Layout in : layouts) {
      for (Layout out : layouts) {
        SCOPED_TRACE("model " + std::to_string(si) + ", input layout " + std::to_string(code(in)) +
                     ", output layout " + std::to_string(code(out)));
        ModelPlan plan = ferry::test::make_plan(specs[si]);
        plan.batch_first = in == Layout::kBatchFirst;
        plan.channels_first = in == Layout::kChannelsFirst;
        const std::vector<uint8_t> as_input = build_model(plan).to_vector();
        plan.output_layout = out;
        const std::vector<uint8_t> bytes = build_model(plan).to_vector();
        EXPECT_EQ(ferry::fb::GetModel(bytes.data())->format_major(), out == in ? 1 : 2);
        if (out == in) EXPECT_EQ(bytes, as_input) << "a file whose output keeps the input's layout is as before";
        Runner ref(as_input, B, T);
        ASSERT_EQ(ref.status(), FERRY_OK) << ref.last_error();
        const size_t I = specs[si].input_size, F = ref.info().output_size;
        std::vector<float> x(B * T * I);
        for (size_t i = 0; i < x.size(); ++i) x[i] = ferry::test::uniform_pm1(31 + si, 0, i);
        for (const bool padded : {false, true}) {
          std::vector<float> base;
          ASSERT_EQ(ferry_state_reset(ref.session()), FERRY_OK);  // every run below starts from zeros
          ASSERT_EQ(ref.run(x, B, T, &base, padded ? lengths.data() : nullptr), FERRY_OK) << ferry_last_error();
          std::vector<float> want(base.size());
          for (size_t t = 0; t < T; ++t)
            for (size_t b = 0; b < B; ++b)
              for (size_t f = 0; f < F; ++f)
                want[index(code(out), t, b, f, T, B, F)] = base[index(code(in), t, b, f, T, B, F)];
          for (const ferry_backend backend :
               {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_SIMD, FERRY_BACKEND_XNNPACK, FERRY_BACKEND_AUTO}) {
            Runner r(bytes, B, T, backend);
            if (r.status() == FERRY_UNSUPPORTED) continue;  // not built, or not this CPU
            ASSERT_EQ(r.status(), FERRY_OK) << r.last_error();
            EXPECT_EQ(r.info().output_layout, code(out));
            std::vector<float> got;
            ASSERT_EQ(r.run(x, B, T, &got, padded ? lengths.data() : nullptr), FERRY_OK) << ferry_last_error();
            if (backend == FERRY_BACKEND_REFERENCE) {
              EXPECT_TRUE(bit_equal(got, want)) << "reference";
            } else {
              EXPECT_LE(max_abs_diff(got, want), 1e-5) << ferry_backend_name(backend);
            }
            if (!padded && backend != FERRY_BACKEND_XNNPACK) {
              Runner stream(bytes, B, 1, backend);
              ASSERT_EQ(stream.status(), FERRY_OK) << stream.last_error();
              EXPECT_TRUE(bit_equal(ferry::test::step_through(stream.session(), stream.info(), x.data(), B, T), got))
                  << ferry_backend_name(backend) << ": steps in the output's layout vs run";
            }
            ++runs;
          }
        }
      }
    }
  }
  EXPECT_GE(runs, 2 * 3 * 9 * 2);
}

// ferry_model_info grows by appending: a caller compiled before
// output_layout passes a smaller struct, which is filled up to its size and
// not a byte past it.
TEST(Backends, ModelInfoBeforeOutputLayoutIsFilledToItsSize) {
  ModelPlan plan = ferry::test::make_plan([] {
    ferry::test::ModelSpec s;
    s.layers = {ferry::test::LayerSpec{LayerOp::GRU, 8}};
    return s;
  }());
  plan.output_layout = Layout::kBatchFirst;
  const std::vector<uint8_t> bytes = build_model(plan).to_vector();
  ferry_model* model = nullptr;
  ASSERT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &model), FERRY_OK) << ferry_last_error();
  ferry_model_info info;
  std::memset(&info, 0x5a, sizeof info);
  info.struct_size = offsetof(ferry_model_info, output_layout);
  ASSERT_EQ(ferry_model_get_info(model, &info), FERRY_OK);
  EXPECT_EQ(info.min_seq, 1u);
  int untouched;
  std::memset(&untouched, 0x5a, sizeof untouched);
  EXPECT_EQ(info.output_layout, untouched);
  info.struct_size = sizeof info;
  ASSERT_EQ(ferry_model_get_info(model, &info), FERRY_OK);
  EXPECT_EQ(info.output_layout, FERRY_LAYOUT_BATCH_FIRST);
  EXPECT_EQ(info.batch_first, 0);
  ferry_model_free(model);
}

}  // namespace
