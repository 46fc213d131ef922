// torch.export archives (.pt2): the reader (checkpoint/pt2.cpp: the three
// layouts, raw storages shared by several FQNs, the signature binding), the
// graph JSON as hostile input (checkpoint/pt2_json.cpp) and the chain read
// from the graph (mapping/export_chain.cpp). Archives and graphs are built
// here (support/pt2_builder.h); the real torch 2.11 files are converted and
// compared with PyTorch's output in tests/e2e/test_pt2.cpp.
#ifdef FERRY_HAVE_CONVERTER

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "checkpoint/export_graph.h"
#include "checkpoint/pt2_json.h"
#include "checkpoint_loading.h"
#include "error.h"
#include "mapping/export_chain.h"
#include "mapping/graph.h"
#include "pt2_builder.h"

namespace ferry::conv {
namespace {

using test::arg_bool;
using test::arg_float;
using test::arg_int;
using test::arg_ints;
using test::arg_none;
using test::arg_string;
using test::arg_tensor;
using test::arg_tensors;
using test::Bytes;
using test::contains;
using test::GraphWriter;
using test::load;
using test::load_error;
using test::Loaded;
using test::RawTensor;

const char* kLabel = "m.pt2: record 'm/models/model.json'";

// ------------------------------------------------------------ graphs --

// fc: Linear(3, 2) on x [2, 3].
GraphWriter linear_graph() {
  GraphWriter g;
  g.parameter("p_fc_weight", "fc.weight").parameter("p_fc_bias", "fc.bias").input("x", {2, 3});
  g.node("aten.linear.default", {"linear"},
         {{"input", arg_tensor("x")}, {"weight", arg_tensor("p_fc_weight")}, {"bias", arg_tensor("p_fc_bias")}}, "fc",
         "torch.nn.modules.linear.Linear");
  g.output("linear");
  return g;
}

// An RNN op's params for a one-layer module `m`.
std::vector<std::string> rnn_params(const std::string& m, bool reverse = false) {
  std::vector<std::string> v;
  for (const char* leaf : {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}) {
    v.push_back("p_" + m + "_" + leaf);
    if (reverse) v.push_back("p_" + m + "_" + leaf + "_reverse");
  }
  return v;
}

void add_rnn_parameters(GraphWriter& g, const std::string& m, bool bidirectional = false) {
  for (const char* leaf : {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"})
    g.parameter("p_" + m + "_" + leaf, m + "." + leaf);
  if (bidirectional)
    for (const char* leaf : {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"})
      g.parameter("p_" + m + "_" + leaf + "_reverse", m + "." + leaf + "_reverse");
}

std::vector<std::pair<std::string, test::ojson>> rnn_args(const std::string& x, test::ojson hx,
                                                          std::vector<std::string> params, bool batch_first,
                                                          bool bidirectional = false) {
  return {{"input", arg_tensor(x)}, {"hx", std::move(hx)},          {"params", arg_tensors(params)},
          {"has_biases", arg_bool(true)}, {"num_layers", arg_int(1)}, {"dropout", arg_float(0.0)},
          {"train", arg_bool(false)},     {"bidirectional", arg_bool(bidirectional)},
          {"batch_first", arg_bool(batch_first)}};
}

void zeros(GraphWriter& g, const std::string& name, const std::string& module) {
  g.node("aten.zeros.default", {name}, {{"size", arg_ints({1, 2, 4})}}, module, "torch.nn.modules.rnn.LSTM");
}

// lstm: LSTM(3, 4) on x, then fc: Linear(4, 2) on the last step.
GraphWriter lstm_classifier(bool batch_first) {
  GraphWriter g;
  add_rnn_parameters(g, "lstm");
  g.parameter("p_fc_weight", "fc.weight").parameter("p_fc_bias", "fc.bias");
  g.input("x", batch_first ? std::vector<int64_t>{2, 5, 3} : std::vector<int64_t>{5, 2, 3});
  zeros(g, "zeros", "lstm");
  zeros(g, "zeros_1", "lstm");
  g.node("aten.lstm.input", {"lstm", "h_n", "c_n"},
         rnn_args("x", arg_tensors({"zeros", "zeros_1"}), rnn_params("lstm"), batch_first), "lstm",
         "torch.nn.modules.rnn.LSTM");
  g.node("aten.select.int", {"select"}, {{"self", arg_tensor("lstm")}, {"dim", arg_int(batch_first ? 1 : 0)},
                                         {"index", arg_int(-1)}});
  g.node("aten.linear.default", {"linear"},
         {{"input", arg_tensor("select")}, {"weight", arg_tensor("p_fc_weight")}, {"bias", arg_tensor("p_fc_bias")}},
         "fc", "torch.nn.modules.linear.Linear");
  g.output("linear");
  return g;
}

using Shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

Shapes lstm_classifier_tensors() {
  return {{"lstm.weight_ih_l0", {16, 3}}, {"lstm.weight_hh_l0", {16, 4}}, {"lstm.bias_ih_l0", {16}},
          {"lstm.bias_hh_l0", {16}},      {"fc.weight", {2, 4}},          {"fc.bias", {2}}};
}

// A Checkpoint holding the graph and tensors of these names and shapes (no
// storage: the chain reads names and shapes only).
Checkpoint graph_checkpoint(const std::string& graph_text, const Shapes& tensors) {
  Checkpoint c;
  for (const auto& [name, shape] : tensors) {
    TensorRef t;
    t.name = name;
    t.dtype = DType::F32;
    t.shape = shape;
    c.tensors.push_back(t);
  }
  c.export_graph = std::make_shared<ExportGraph>(
      parse_export_graph(reinterpret_cast<const uint8_t*>(graph_text.data()), graph_text.size(), kLabel));
  return c;
}

ExportChain chain_of(const GraphWriter& g, const Shapes& tensors) {
  return export_chain(graph_checkpoint(g.text(), tensors));
}

std::string chain_error(const GraphWriter& g, const Shapes& tensors) {
  try {
    chain_of(g, tensors);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string graph_error(const std::string& text) {
  try {
    parse_export_graph(reinterpret_cast<const uint8_t*>(text.data()), text.size(), kLabel);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ------------------------------------------------------------ mapping --

TEST(Pt2Chain, LstmClassifierBothLayouts) {
  const ExportChain bf = chain_of(lstm_classifier(true), lstm_classifier_tensors());
  EXPECT_EQ(bf.graph, "lstm > last > fc");
  EXPECT_EQ(bf.layout, ExportInputLayout::kBatchFirst);
  EXPECT_TRUE(bf.notes.empty());
  const ExportChain tm = chain_of(lstm_classifier(false), lstm_classifier_tensors());
  EXPECT_EQ(tm.graph, "lstm > last > fc");
  EXPECT_EQ(tm.layout, ExportInputLayout::kTimeMajor);
}

TEST(Pt2Chain, ReaderFillsOmittedDefaults) {
  // linear's bias left out: the reader fills in None (its schema default).
  GraphWriter g;
  g.parameter("p_fc_weight", "fc.weight").input("x", {2, 3});
  g.node("aten.linear.default", {"linear"}, {{"input", arg_tensor("x")}, {"weight", arg_tensor("p_fc_weight")}}, "fc",
         "torch.nn.modules.linear.Linear");
  g.output("linear");
  const Checkpoint c = graph_checkpoint(g.text(), {{"fc.weight", {2, 3}}});
  const ExportNode& n = c.export_graph->nodes[0];
  ASSERT_NE(n.arg("bias"), nullptr);
  EXPECT_EQ(n.arg("bias")->kind, ExportArg::Kind::None);
  EXPECT_EQ(export_chain(c).graph, "fc");
  EXPECT_EQ(export_chain(c).layout, ExportInputLayout::kNone);
  // A state dict that holds fc.bias while the graph runs fc without it does
  // not describe the same model.
  const std::string msg = chain_error(g, {{"fc.weight", {2, 3}}, {"fc.bias", {2}}});
  EXPECT_TRUE(contains(msg, "node 'linear' (aten.linear.default, module 'fc'): it runs 'fc' without the bias")) << msg;

  // conv1d's stride, padding, dilation and groups filled from the schema.
  GraphWriter cg;
  cg.parameter("p_w", "conv.weight").input("x", {1, 4, 9});
  cg.node("aten.conv1d.default", {"conv1d"}, {{"input", arg_tensor("x")}, {"weight", arg_tensor("p_w")}}, "conv",
          "torch.nn.modules.conv.Conv1d");
  cg.output("conv1d");
  const Checkpoint cc = graph_checkpoint(cg.text(), {{"conv.weight", {8, 4, 3}}});
  const ExportNode& conv = cc.export_graph->nodes[0];
  std::vector<int64_t> v;
  ASSERT_TRUE(conv.arg("stride")->integers(&v));
  EXPECT_EQ(v, (std::vector<int64_t>{1}));
  ASSERT_TRUE(conv.arg("padding")->integers(&v));
  EXPECT_EQ(v, (std::vector<int64_t>{0}));
  int64_t groups = 0;
  ASSERT_TRUE(conv.arg("groups")->integer(&groups));
  EXPECT_EQ(groups, 1);
  EXPECT_EQ(export_chain(cc).layout, ExportInputLayout::kChannelsFirst);
}

TEST(Pt2Chain, ResidualSkipAndPoolingOverTime) {
  GraphWriter g;
  g.parameter("p1", "fc1.weight").parameter("p2", "fc2.weight").input("x", {2, 7, 4});
  g.node("aten.linear.default", {"linear"}, {{"input", arg_tensor("x")}, {"weight", arg_tensor("p1")}}, "fc1",
         "torch.nn.modules.linear.Linear");
  g.node("aten.relu.default", {"relu"}, {{"self", arg_tensor("linear")}});
  g.node("aten.add.Tensor", {"add"}, {{"self", arg_tensor("relu")}, {"other", arg_tensor("x")}});
  g.node("aten.mean.dim", {"mean"}, {{"self", arg_tensor("add")}, {"dim", arg_ints({1})}});
  g.node("aten.linear.default", {"out"}, {{"input", arg_tensor("mean")}, {"weight", arg_tensor("p2")}}, "fc2",
         "torch.nn.modules.linear.Linear");
  g.output("out");
  const ExportChain c = chain_of(g, {{"fc1.weight", {4, 4}}, {"fc2.weight", {3, 4}}});
  EXPECT_EQ(c.graph, "(fc1 > relu) + input > mean > fc2");
  EXPECT_EQ(c.layout, ExportInputLayout::kBatchFirst);  // the mean says dim 1 is time
  // The chain parses as --graph does.
  EXPECT_EQ(format_graph(parse_graph(c.graph)), c.graph);
}

TEST(Pt2Chain, TwoBranchesAreRefused) {
  GraphWriter g;
  g.parameter("p1", "a.weight").parameter("p2", "b.weight").input("x", {2, 4});
  g.node("aten.linear.default", {"l1"}, {{"input", arg_tensor("x")}, {"weight", arg_tensor("p1")}}, "a", "Linear");
  g.node("aten.linear.default", {"l2"}, {{"input", arg_tensor("x")}, {"weight", arg_tensor("p2")}}, "b", "Linear");
  g.node("aten.add.Tensor", {"add"}, {{"self", arg_tensor("l1")}, {"other", arg_tensor("l2")}});
  g.output("add");
  const std::string msg = chain_error(g, {{"a.weight", {4, 4}}, {"b.weight", {4, 4}}});
  EXPECT_TRUE(contains(msg, "m.pt2: record 'm/models/model.json': node 'add' (aten.add.Tensor, in the top-level module): "
                            "it adds two values that do not lie on one path")) << msg;
  EXPECT_TRUE(contains(msg, "pass --graph (and --layout) to convert the weights alone (the graph's modules: a (Linear), b (Linear))"))
      << msg;
}

TEST(Pt2Chain, FinalHiddenStateOfOneDirectionIsLast) {
  GraphWriter g;
  add_rnn_parameters(g, "gru");
  g.parameter("p_fc_weight", "fc.weight").input("x", {2, 5, 3});
  g.node("aten.zeros.default", {"zeros"}, {{"size", arg_ints({1, 2, 4})}}, "gru", "torch.nn.modules.rnn.GRU");
  g.node("aten.gru.input", {"gru", "h_n"}, rnn_args("x", arg_tensor("zeros"), rnn_params("gru"), true), "gru",
         "torch.nn.modules.rnn.GRU");
  g.node("aten.select.int", {"h_last"}, {{"self", arg_tensor("h_n")}, {"dim", arg_int(0)}, {"index", arg_int(-1)}});
  g.node("aten.linear.default", {"linear"}, {{"input", arg_tensor("h_last")}, {"weight", arg_tensor("p_fc_weight")}},
         "fc", "Linear");
  g.output("linear");
  const Shapes t = {{"gru.weight_ih_l0", {12, 3}}, {"gru.weight_hh_l0", {12, 4}}, {"gru.bias_ih_l0", {12}},
                    {"gru.bias_hh_l0", {12}},      {"fc.weight", {2, 4}}};
  EXPECT_EQ(chain_of(g, t).graph, "gru > last > fc");
}

TEST(Pt2Chain, BidirectionalFinalHiddenStateIsRefused) {
  GraphWriter g;
  add_rnn_parameters(g, "gru", true);
  g.input("x", {2, 5, 3});
  g.node("aten.zeros.default", {"zeros"}, {{"size", arg_ints({2, 2, 4})}}, "gru", "torch.nn.modules.rnn.GRU");
  g.node("aten.gru.input", {"gru", "h_n"}, rnn_args("x", arg_tensor("zeros"), rnn_params("gru", true), true, true),
         "gru", "torch.nn.modules.rnn.GRU");
  g.node("aten.select.int", {"h_last"}, {{"self", arg_tensor("h_n")}, {"dim", arg_int(0)}, {"index", arg_int(-1)}});
  g.output("h_last");
  Shapes t;
  for (const char* sfx : {"", "_reverse"})
    for (auto [leaf, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"weight_ih_l0", {12, 3}}, {"weight_hh_l0", {12, 4}}, {"bias_ih_l0", {12}}, {"bias_hh_l0", {12}}})
      t.push_back({"gru." + leaf + sfx, shape});
  // rnn_params(…, true) interleaves the directions: PyTorch's order is
  // l0 then l0_reverse, each w_ih, w_hh, b_ih, b_hh.
  std::string msg = chain_error(g, t);
  EXPECT_TRUE(contains(msg, "params[1] is 'gru.weight_ih_l0_reverse', where PyTorch's order has 'gru.weight_hh_l0'")) << msg;
  // In PyTorch's order the graph reads up to h_n[-1], which is refused.
  std::vector<std::string> ordered;
  for (const char* sfx : {"", "_reverse"})
    for (const char* leaf : {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"})
      ordered.push_back(std::string("p_gru_") + leaf + sfx);
  GraphWriter h;
  add_rnn_parameters(h, "gru", true);
  h.input("x", {2, 5, 3});
  h.node("aten.zeros.default", {"zeros"}, {{"size", arg_ints({2, 2, 4})}}, "gru", "torch.nn.modules.rnn.GRU");
  h.node("aten.gru.input", {"gru", "h_n"}, rnn_args("x", arg_tensor("zeros"), ordered, true, true), "gru",
         "torch.nn.modules.rnn.GRU");
  h.node("aten.select.int", {"h_last"}, {{"self", arg_tensor("h_n")}, {"dim", arg_int(0)}, {"index", arg_int(-1)}});
  h.output("h_last");
  msg = chain_error(h, t);
  EXPECT_TRUE(contains(msg, "node 'h_last' (aten.select.int, in the top-level module): h_n[-1] of the bidirectional 'gru'"))
      << msg;
}

TEST(Pt2Chain, ActivationsCarryTheirOptions) {
  GraphWriter g;
  g.parameter("p", "fc.weight").input("x", {2, 4});
  g.node("aten.linear.default", {"l"}, {{"input", arg_tensor("x")}, {"weight", arg_tensor("p")}}, "fc", "Linear");
  g.node("aten.leaky_relu.default", {"a1"}, {{"self", arg_tensor("l")}, {"negative_slope", arg_float(0.2)}});
  g.node("aten.hardtanh_.default", {"a2"}, {{"self", arg_tensor("a1")}, {"min_val", arg_float(0.0)}, {"max_val", arg_float(6.0)}});
  g.node("aten.hardtanh.default", {"a3"}, {{"self", arg_tensor("a2")}, {"min_val", arg_float(-2.5)}, {"max_val", arg_int(2)}});
  g.node("aten.gelu.default", {"a4"}, {{"self", arg_tensor("a3")}, {"approximate", arg_string("tanh")}});
  g.node("aten.elu.default", {"a5"}, {{"self", arg_tensor("a4")}, {"alpha", arg_float(0.5)}});
  g.node("aten.leaky_relu.default", {"a6"}, {{"self", arg_tensor("a5")}});  // default slope 0.01
  g.node("aten.dropout.default", {"a7"}, {{"input", arg_tensor("a6")}, {"p", arg_float(0.1)}, {"train", arg_bool(false)}});
  g.node("aten.log_softmax.int", {"a8"}, {{"self", arg_tensor("a7")}, {"dim", arg_int(-1)}});
  g.output("a8");
  EXPECT_EQ(chain_of(g, {{"fc.weight", {4, 4}}}).graph,
            "fc > leaky_relu(slope=0.2) > relu6 > hardtanh(max=2,min=-2.5) > gelu(tanh) > elu(alpha=0.5) > "
            "leaky_relu(slope=0.01) > dropout > logsoftmax");
}

TEST(Pt2Chain, EmbeddingTakesTokenIds) {
  GraphWriter g;
  g.parameter("p_emb", "emb.weight");
  add_rnn_parameters(g, "lstm");
  g.parameter("p_fc_weight", "fc.weight");
  g.input("ids", {2, 6});
  g.node("aten.embedding.default", {"embedding"}, {{"weight", arg_tensor("p_emb")}, {"indices", arg_tensor("ids")}},
         "emb", "torch.nn.modules.sparse.Embedding");
  zeros(g, "zeros", "lstm");
  zeros(g, "zeros_1", "lstm");
  g.node("aten.lstm.input", {"lstm", "h_n", "c_n"},
         rnn_args("embedding", arg_tensors({"zeros", "zeros_1"}), rnn_params("lstm"), true), "lstm",
         "torch.nn.modules.rnn.LSTM");
  g.node("aten.select.int", {"select"}, {{"self", arg_tensor("lstm")}, {"dim", arg_int(1)}, {"index", arg_int(-1)}});
  g.node("aten.linear.default", {"linear"}, {{"input", arg_tensor("select")}, {"weight", arg_tensor("p_fc_weight")}},
         "fc", "Linear");
  g.output("linear");
  Shapes t = lstm_classifier_tensors();
  t.erase(t.end() - 1);
  t.insert(t.begin(), {"emb.weight", {10, 3}});
  const ExportChain c = chain_of(g, t);
  EXPECT_EQ(c.graph, "emb > lstm > last > fc");
  EXPECT_EQ(c.layout, ExportInputLayout::kBatchFirst);
}

// conv1d on [B, C, T], transpose to [B, T, C], a batch-first GRU: the input
// is channels-first. Without the transpose the GRU would run over channels.
GraphWriter crnn(bool transpose) {
  GraphWriter g;
  g.parameter("p_conv", "conv.weight");
  add_rnn_parameters(g, "gru");
  g.input("x", {2, 4, 9});
  g.node("aten.conv1d.default", {"conv1d"},
         {{"input", arg_tensor("x")}, {"weight", arg_tensor("p_conv")}, {"padding", arg_ints({1})}}, "conv",
         "torch.nn.modules.conv.Conv1d");
  std::string y = "conv1d";
  if (transpose) {
    g.node("aten.transpose.int", {"transpose"}, {{"self", arg_tensor("conv1d")}, {"dim0", arg_int(1)}, {"dim1", arg_int(2)}});
    y = "transpose";
  }
  g.node("aten.zeros.default", {"zeros"}, {{"size", arg_ints({1, 2, 4})}}, "gru", "torch.nn.modules.rnn.GRU");
  g.node("aten.gru.input", {"gru", "h_n"}, rnn_args(y, arg_tensor("zeros"), rnn_params("gru"), true), "gru",
         "torch.nn.modules.rnn.GRU");
  g.node("aten.select.int", {"select"}, {{"self", arg_tensor("gru")}, {"dim", arg_int(1)}, {"index", arg_int(-1)}});
  g.output("select");
  return g;
}

Shapes crnn_tensors() {
  return {{"conv.weight", {3, 4, 3}}, {"gru.weight_ih_l0", {12, 3}}, {"gru.weight_hh_l0", {12, 4}},
          {"gru.bias_ih_l0", {12}},   {"gru.bias_hh_l0", {12}}};
}

TEST(Pt2Chain, ConvFrontEndGivesChannelsFirst) {
  const ExportChain c = chain_of(crnn(true), crnn_tensors());
  EXPECT_EQ(c.graph, "conv > gru > last");
  EXPECT_EQ(c.layout, ExportInputLayout::kChannelsFirst);
  const std::string msg = chain_error(crnn(false), crnn_tensors());
  EXPECT_TRUE(contains(msg, "node 'gru' (aten.gru.input, module 'gru'): it takes dimension 1 of its input [B, F, T] as "
                            "the time axis, but it is the feature axis")) << msg;
}

TEST(Pt2Chain, SequenceOutputLayoutIsReadFromTheGraph) {
  // conv -> transpose / permute -> return: PyTorch returns [B, T, C] (or
  // [T, B, C]) for a [B, C, T] input; ferry's output is in that layout too
  // (ExportChain::output_layout), not silently in the input's.
  const auto graph = [](const char* op, const std::vector<int64_t>& dims) {
    GraphWriter g;
    g.parameter("p_conv", "conv.weight").input("x", {2, 4, 9});
    g.node("aten.conv1d.default", {"conv1d"}, {{"input", arg_tensor("x")}, {"weight", arg_tensor("p_conv")}}, "conv",
           "torch.nn.modules.conv.Conv1d");
    if (std::string(op) == "transpose") {
      g.node("aten.transpose.int", {"t"},
             {{"self", arg_tensor("conv1d")}, {"dim0", arg_int(dims[0])}, {"dim1", arg_int(dims[1])}});
    } else {
      g.node("aten.permute.default", {"t"}, {{"self", arg_tensor("conv1d")}, {"dims", arg_ints(dims)}});
    }
    g.output("t");
    return g;
  };
  const Shapes tensors = {{"conv.weight", {3, 4, 3}}};
  ExportChain c = chain_of(graph("transpose", {1, 2}), tensors);
  EXPECT_EQ(c.graph, "conv");
  EXPECT_EQ(c.layout, ExportInputLayout::kChannelsFirst);
  ASSERT_TRUE(c.output_layout.has_value());
  EXPECT_EQ(*c.output_layout, ExportInputLayout::kBatchFirst);
  c = chain_of(graph("permute", {2, 0, 1}), tensors);
  ASSERT_TRUE(c.output_layout.has_value());
  EXPECT_EQ(*c.output_layout, ExportInputLayout::kTimeMajor);
  // The identity permute: the input's layout, nothing recorded.
  c = chain_of(graph("permute", {0, 1, 2}), tensors);
  EXPECT_FALSE(c.output_layout.has_value());
  // Axes in no layout ferry writes: refused.
  const std::string msg = chain_error(graph("permute", {2, 1, 0}), tensors);
  EXPECT_TRUE(contains(msg, "the graph returns [time, feature, batch]; ferry's output is [batch, feature], or a "
                            "sequence [batch, time, feature], [time, batch, feature] or [batch, feature, time]"))
      << msg;
}

TEST(Pt2Chain, OpsFerryDoesNotRunAreRefusedOnTheChainOnly) {
  GraphWriter g = linear_graph();
  // An op on parameters alone, whose result nothing uses: not on the chain.
  g.node("aten.mul.Tensor", {"scaled"}, {{"self", arg_tensor("p_fc_weight")}, {"other", arg_float(2.0)}});
  EXPECT_EQ(chain_of(g, {{"fc.weight", {2, 3}}, {"fc.bias", {2}}}).graph, "fc");
  // On the chain: refused naming the node, the op and what to do.
  GraphWriter h;
  h.parameter("p_fc_weight", "fc.weight").parameter("p_fc_bias", "fc.bias").input("x", {2, 3});
  h.node("aten.linear.default", {"linear"},
         {{"input", arg_tensor("x")}, {"weight", arg_tensor("p_fc_weight")}, {"bias", arg_tensor("p_fc_bias")}}, "fc",
         "torch.nn.modules.linear.Linear");
  h.node("aten.cumsum.default", {"cumsum"}, {{"self", arg_tensor("linear")}, {"dim", arg_int(1)}});
  h.output("cumsum");
  std::string msg = chain_error(h, {{"fc.weight", {2, 3}}, {"fc.bias", {2}}});
  EXPECT_TRUE(contains(msg, "m.pt2: record 'm/models/model.json': node 'cumsum' (aten.cumsum.default, in the top-level "
                            "module): ferry does not run aten.cumsum.default (its 'self' is on the chain); the layer "
                            "chain cannot be read from this graph: pass --graph (and --layout) to convert the weights alone"))
      << msg;
  // A weight computed in the graph is not a state-dict tensor.
  GraphWriter w;
  w.parameter("p_fc_weight", "fc.weight").input("x", {2, 3});
  w.node("aten.mul.Tensor", {"scaled"}, {{"self", arg_tensor("p_fc_weight")}, {"other", arg_float(2.0)}});
  w.node("aten.linear.default", {"linear"}, {{"input", arg_tensor("x")}, {"weight", arg_tensor("scaled")}}, "fc", "Linear");
  w.output("linear");
  msg = chain_error(w, {{"fc.weight", {2, 3}}});
  EXPECT_TRUE(contains(msg, "its 'weight' is the output of node 'scaled' (aten.mul.Tensor, in the top-level module), "
                            "not a parameter or buffer of the state dict")) << msg;
}

TEST(Pt2Chain, TimeAxisOps) {
  // y[:, -1:] then squeeze(1): last; mean with keepdim keeps a length-1 axis.
  GraphWriter g;
  add_rnn_parameters(g, "lstm");
  g.input("x", {2, 5, 3});
  zeros(g, "zeros", "lstm");
  zeros(g, "zeros_1", "lstm");
  g.node("aten.lstm.input", {"lstm", "h_n", "c_n"},
         rnn_args("x", arg_tensors({"zeros", "zeros_1"}), rnn_params("lstm"), true), "lstm", "torch.nn.modules.rnn.LSTM");
  g.node("aten.slice.Tensor", {"all"}, {{"self", arg_tensor("lstm")}, {"dim", arg_int(0)}, {"start", arg_int(0)},
                                        {"end", arg_int(9223372036854775807LL)}});
  g.node("aten.slice.Tensor", {"tail"}, {{"self", arg_tensor("all")}, {"dim", arg_int(1)}, {"start", arg_int(-1)}});
  g.node("aten.squeeze.dim", {"sq"}, {{"self", arg_tensor("tail")}, {"dim", arg_int(1)}});
  g.output("sq");
  Shapes t = lstm_classifier_tensors();
  t.resize(4);
  EXPECT_EQ(chain_of(g, t).graph, "lstm > last");

  GraphWriter k;
  add_rnn_parameters(k, "lstm");
  k.input("x", {5, 2, 3});
  zeros(k, "zeros", "lstm");
  zeros(k, "zeros_1", "lstm");
  k.node("aten.lstm.input", {"lstm", "h_n", "c_n"},
         rnn_args("x", arg_tensors({"zeros", "zeros_1"}), rnn_params("lstm"), false), "lstm", "torch.nn.modules.rnn.LSTM");
  k.node("aten.amax.default", {"m"}, {{"self", arg_tensor("lstm")}, {"dim", arg_ints({0})}, {"keepdim", arg_bool(true)}});
  k.output("m");
  const ExportChain c = chain_of(k, t);
  EXPECT_EQ(c.graph, "lstm > max");
  EXPECT_EQ(c.layout, ExportInputLayout::kTimeMajor);
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_TRUE(contains(c.notes[0], "keeps a time axis of length 1")) << c.notes[0];

  // Any step but the last, pooling over features, softmax over time: refused.
  GraphWriter s = lstm_classifier(true);
  std::string text = s.text();
  const size_t at = text.find("\"index\",\"arg\":{\"as_int\":-1}");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, std::string("\"index\",\"arg\":{\"as_int\":-1}").size(), "\"index\",\"arg\":{\"as_int\":0}");
  std::string msg;
  try {
    export_chain(graph_checkpoint(text, lstm_classifier_tensors()));
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_TRUE(contains(msg, "it selects step 0 of the time axis; ferry reads the last step (index -1)")) << msg;

  GraphWriter seq;
  seq.parameter("p", "fc.weight").input("x", {2, 5, 3});
  seq.node("aten.linear.default", {"l"}, {{"input", arg_tensor("x")}, {"weight", arg_tensor("p")}}, "fc", "Linear");
  seq.node("aten.mean.dim", {"m"}, {{"self", arg_tensor("l")}, {"dim", arg_ints({1})}});
  seq.node("aten.softmax.int", {"s"}, {{"self", arg_tensor("m")}, {"dim", arg_int(0)}});
  seq.output("s");
  msg = chain_error(seq, {{"fc.weight", {4, 3}}});
  EXPECT_TRUE(contains(msg, "node 's' (aten.softmax.int, in the top-level module): it takes dimension 0 of its input "
                            "[?, F] as the feature axis, which the model's input already has at dimension 2")) << msg;
}

TEST(Pt2Chain, RecurrentOpChecks) {
  // params in another order than PyTorch's; a learned (non-zero) initial
  // state; training mode with dropout.
  GraphWriter g = lstm_classifier(true);
  std::string text = g.text();
  auto swap_first = [](std::string t, const std::string& a, const std::string& b) {
    const size_t i = t.find(a);
    if (i != std::string::npos) t.replace(i, a.size(), b);
    return t;
  };
  const std::string swapped = swap_first(text, "{\"name\":\"p_lstm_weight_ih_l0\"},{\"name\":\"p_lstm_weight_hh_l0\"}",
                                         "{\"name\":\"p_lstm_weight_hh_l0\"},{\"name\":\"p_lstm_weight_ih_l0\"}");
  std::string msg;
  try {
    export_chain(graph_checkpoint(swapped, lstm_classifier_tensors()));
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_TRUE(contains(msg, "params[0] is 'lstm.weight_hh_l0', where PyTorch's order has 'lstm.weight_ih_l0'")) << msg;

  GraphWriter h;
  add_rnn_parameters(h, "gru");
  h.buffer("b_h0", "h0").input("x", {2, 5, 3});
  h.node("aten.gru.input", {"gru", "h_n"}, rnn_args("x", arg_tensor("b_h0"), rnn_params("gru"), true), "gru",
         "torch.nn.modules.rnn.GRU");
  h.output("gru");
  msg = chain_error(h, {{"gru.weight_ih_l0", {12, 3}}, {"gru.weight_hh_l0", {12, 4}}, {"gru.bias_ih_l0", {12}},
                        {"gru.bias_hh_l0", {12}}, {"h0", {1, 2, 4}}});
  EXPECT_TRUE(contains(msg, "its initial state is the state-dict tensor 'h0': ferry's recurrent layers start from zeros"))
      << msg;

  GraphWriter t;
  add_rnn_parameters(t, "gru");
  t.input("x", {2, 5, 3});
  t.node("aten.zeros.default", {"zeros"}, {{"size", arg_ints({1, 2, 4})}}, "gru", "torch.nn.modules.rnn.GRU");
  auto args = rnn_args("x", arg_tensor("zeros"), rnn_params("gru"), true);
  for (auto& [name, value] : args) {
    if (name == "train") value = arg_bool(true);
    if (name == "dropout") value = arg_float(0.3);
  }
  t.node("aten.gru.input", {"gru", "h_n"}, args, "gru", "torch.nn.modules.rnn.GRU");
  t.output("gru");
  msg = chain_error(t, {{"gru.weight_ih_l0", {12, 3}}, {"gru.weight_hh_l0", {12, 4}}, {"gru.bias_ih_l0", {12}},
                        {"gru.bias_hh_l0", {12}}});
  EXPECT_TRUE(contains(msg, "exported in training mode (train=True with dropout 0.3)")) << msg;
}

TEST(Pt2Chain, CoreAtenGraphIsRefusedSayingSo) {
  // What run_decompositions() leaves of an LSTM: per-step matmuls and gates.
  GraphWriter g;
  add_rnn_parameters(g, "lstm");
  g.input("x", {2, 5, 3});
  g.node("aten.full.default", {"full"}, {{"size", arg_ints({1, 2, 4})}, {"fill_value", arg_int(0)}}, "lstm",
         "torch.nn.modules.rnn.LSTM");
  g.node("aten.permute.default", {"permute"}, {{"self", arg_tensor("x")}, {"dims", arg_ints({1, 0, 2})}}, "lstm",
         "torch.nn.modules.rnn.LSTM");
  g.node("aten.addmm.default", {"addmm"}, {{"self", arg_tensor("p_lstm_bias_ih_l0")}, {"mat1", arg_tensor("permute")},
                                            {"mat2", arg_tensor("p_lstm_weight_ih_l0")}}, "lstm", "torch.nn.modules.rnn.LSTM");
  g.output("addmm");
  Shapes t = lstm_classifier_tensors();
  t.resize(4);
  const std::string msg = chain_error(g, t);
  EXPECT_TRUE(contains(msg, "node 'permute' (aten.permute.default, module 'lstm'): core-ATen graph: the LSTM is unrolled "
                            "into per-step cells")) << msg;
  EXPECT_TRUE(contains(msg, "pass --graph (and --layout) to convert the weights alone")) << msg;
}

TEST(Pt2Chain, ProgramShapeChecks) {
  GraphWriter two;
  two.parameter("p", "fc.weight").input("x", {2, 3}).input("y", {2, 3});
  two.node("aten.linear.default", {"l"}, {{"input", arg_tensor("x")}, {"weight", arg_tensor("p")}}, "fc", "Linear");
  two.output("l");
  std::string msg = chain_error(two, {{"fc.weight", {2, 3}}});
  EXPECT_TRUE(contains(msg, "the program takes 2 tensor inputs ('x', 'y'); ferry runs a chain from one input")) << msg;

  GraphWriter train = linear_graph();
  test::ojson doc = train.doc();
  doc["graph_module"]["graph"]["outputs"].push_back(arg_tensor("linear"));
  doc["graph_module"]["signature"]["output_specs"].push_back(
      {{"buffer_mutation", {{"arg", {{"name", "linear"}}}, {"buffer_name", "bn.running_mean"}}}});
  const std::string text = doc.dump();
  try {
    export_chain(graph_checkpoint(text, {{"fc.weight", {2, 3}}, {"fc.bias", {2}}}));
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_TRUE(contains(msg, "the program updates the buffer 'bn.running_mean' (exported in training mode)")) << msg;
}

TEST(Pt2Chain, NormsAndRnnRelu) {
  // rnn_relu (time-major) > layer_norm > prelu(one slope) > BatchNorm (eval,
  // the decomposed form's op) on [B, F] after the last step.
  GraphWriter g;
  add_rnn_parameters(g, "rnn");
  g.parameter("p_ln_w", "ln.weight").parameter("p_ln_b", "ln.bias").parameter("p_act", "act.weight");
  g.parameter("p_bn_w", "bn.weight").parameter("p_bn_b", "bn.bias");
  g.buffer("b_mean", "bn.running_mean").buffer("b_var", "bn.running_var");
  g.input("x", {5, 2, 3});
  g.node("aten.zeros.default", {"zeros"}, {{"size", arg_ints({1, 2, 4})}}, "rnn", "torch.nn.modules.rnn.RNN");
  g.node("aten.rnn_relu.input", {"rnn", "h_n"}, rnn_args("x", arg_tensor("zeros"), rnn_params("rnn"), false), "rnn",
         "torch.nn.modules.rnn.RNN");
  g.node("aten.layer_norm.default", {"ln"}, {{"input", arg_tensor("rnn")}, {"normalized_shape", arg_ints({4})},
                                            {"weight", arg_tensor("p_ln_w")}, {"bias", arg_tensor("p_ln_b")}},
         "ln", "torch.nn.modules.normalization.LayerNorm");
  g.node("aten.prelu.default", {"act"}, {{"self", arg_tensor("ln")}, {"weight", arg_tensor("p_act")}}, "act",
         "torch.nn.modules.activation.PReLU");
  g.node("aten.select.int", {"last"}, {{"self", arg_tensor("act")}, {"dim", arg_int(0)}, {"index", arg_int(-1)}});
  g.node("aten._native_batch_norm_legit_no_training.default", {"bn", "mean", "invstd"},
         {{"input", arg_tensor("last")}, {"weight", arg_tensor("p_bn_w")}, {"bias", arg_tensor("p_bn_b")},
          {"running_mean", arg_tensor("b_mean")}, {"running_var", arg_tensor("b_var")}, {"momentum", arg_float(0.1)},
          {"eps", arg_float(1e-3)}},
         "bn", "torch.nn.modules.batchnorm.BatchNorm1d");
  g.output("bn");
  Shapes t = {{"rnn.weight_ih_l0", {4, 3}}, {"rnn.weight_hh_l0", {4, 4}}, {"rnn.bias_ih_l0", {4}},
              {"rnn.bias_hh_l0", {4}},      {"ln.weight", {4}},          {"ln.bias", {4}},
              {"act.weight", {1}},          {"bn.weight", {4}},          {"bn.bias", {4}},
              {"bn.running_mean", {4}},     {"bn.running_var", {4}}};
  const ExportChain c = chain_of(g, t);
  EXPECT_EQ(c.graph, "rnn(relu) > ln > act > last > bn");
  EXPECT_EQ(c.layout, ExportInputLayout::kTimeMajor);
  // A PReLU with one slope per channel works on dimension 1: on [T, B, F]
  // that is the batch axis, which ferry does not run.
  t[6].second = {4};
  const std::string msg = chain_error(g, t);
  EXPECT_TRUE(contains(msg, "node 'act' (aten.prelu.default, module 'act'): it takes dimension 1 of its input [T, B, F] "
                            "as the feature axis, but it is the batch axis")) << msg;
}

// What the graph leaves open, and the axes of a 2-dimensional input
// (mapping/chain_axes.h tracks them for all three readers).
TEST(Pt2Chain, AxesTheGraphLeavesOpen) {
  // A PReLU with one slope per channel names dimension 1 alone: [B, F, T]
  // is the one layout left, taken with a note that nothing told batch from
  // time; a Conv1d names all three axes: no note.
  GraphWriter p;
  p.parameter("p_act", "act.weight").input("x", {2, 4, 9});
  p.node("aten.prelu.default", {"act"}, {{"self", arg_tensor("x")}, {"weight", arg_tensor("p_act")}}, "act", "PReLU");
  p.output("act");
  ExportChain c = chain_of(p, {{"act.weight", {4}}});
  EXPECT_EQ(c.layout, ExportInputLayout::kChannelsFirst);
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_TRUE(contains(c.notes[0], "taking the input as [batch, feature, time]")) << c.notes[0];
  EXPECT_TRUE(chain_of(crnn(true), crnn_tensors()).notes.empty());

  // A residual add of a value and its own transpose: the axes differ under
  // every input layout, whatever the sizes let PyTorch broadcast.
  GraphWriter r;
  r.input("x", {2, 4, 4});
  r.node("aten.transpose.int", {"t"}, {{"self", arg_tensor("x")}, {"dim0", arg_int(0)}, {"dim1", arg_int(1)}});
  r.node("aten.relu.default", {"relu"}, {{"self", arg_tensor("t")}});
  r.node("aten.add.Tensor", {"add"}, {{"self", arg_tensor("relu")}, {"other", arg_tensor("x")}});
  r.output("add");
  std::string msg = chain_error(r, {});
  EXPECT_TRUE(contains(msg, "node 'add' (aten.add.Tensor, in the top-level module): it adds values whose axes differ, "
                            "[?, ?, ?] and [?, ?, ?] ([T, B, F] and [B, T, F] of an input [B, T, F])")) << msg;

  // squeeze naming one dimension twice (torch refuses it too).
  GraphWriter q;
  q.input("x", {2, 5, 3});
  q.node("aten.slice.Tensor", {"tail"}, {{"self", arg_tensor("x")}, {"dim", arg_int(1)}, {"start", arg_int(-1)}});
  q.node("aten.squeeze.dims", {"sq"}, {{"self", arg_tensor("tail")}, {"dim", arg_ints({1, -2})}});
  q.output("sq");
  msg = chain_error(q, {});
  EXPECT_TRUE(contains(msg, "node 'sq' (aten.squeeze.dims, in the top-level module): dims ints [1, -2] name a "
                            "dimension twice")) << msg;

  // A 2-dimensional input is [B, F], or token ids where an Embedding reads
  // them: x[:, -1] without an Embedding takes it as [batch, time].
  GraphWriter s;
  s.input("x", {2, 5});
  s.node("aten.select.int", {"last"}, {{"self", arg_tensor("x")}, {"dim", arg_int(1)}, {"index", arg_int(-1)}});
  s.node("aten.relu.default", {"relu"}, {{"self", arg_tensor("last")}});
  s.output("relu");
  msg = chain_error(s, {});
  EXPECT_TRUE(contains(msg, "the graph takes its input's axes as [batch, time]; ferry takes [B, F]")) << msg;
  // Token ids transposed before the Embedding: the input is [T, B].
  GraphWriter e;
  e.parameter("p_emb", "emb.weight").input("ids", {6, 2});
  e.node("aten.transpose.int", {"t"}, {{"self", arg_tensor("ids")}, {"dim0", arg_int(0)}, {"dim1", arg_int(1)}});
  e.node("aten.embedding.default", {"emb"}, {{"weight", arg_tensor("p_emb")}, {"indices", arg_tensor("t")}}, "emb",
         "Embedding");
  e.node("aten.select.int", {"last"}, {{"self", arg_tensor("emb")}, {"dim", arg_int(1)}, {"index", arg_int(-1)}});
  e.output("last");
  c = chain_of(e, {{"emb.weight", {10, 3}}});
  EXPECT_EQ(c.graph, "emb > last");
  EXPECT_EQ(c.layout, ExportInputLayout::kTimeMajor);
  // An input a Linear reads as [B, F] is no token ids.
  GraphWriter b;
  b.parameter("p_emb", "emb.weight").parameter("p_fc", "fc.weight").input("ids", {2, 6});
  b.node("aten.linear.default", {"fc"}, {{"input", arg_tensor("ids")}, {"weight", arg_tensor("p_fc")}}, "fc", "Linear");
  b.node("aten.embedding.default", {"emb"}, {{"weight", arg_tensor("p_emb")}, {"indices", arg_tensor("ids")}}, "emb",
         "Embedding");
  b.output("emb");
  msg = chain_error(b, {{"emb.weight", {10, 3}}, {"fc.weight", {4, 6}}});
  EXPECT_TRUE(contains(msg, "node 'emb' (aten.embedding.default, module 'emb'): it takes the model's input as "
                            "token ids [B, T] or [T, B], where the graph takes it as [B, F]")) << msg;
}

TEST(Pt2Chain, WalkIsBoundedOnLongGraphs) {
  // Six thousand transposes in a row: every one copies the chain value it
  // follows; the walk stops with a refusal instead of going quadratic.
  GraphWriter g;
  g.input("x", {2, 3, 4});
  std::string last = "x";
  for (int i = 0; i < 6000; ++i) {
    const std::string out = "t" + std::to_string(i);
    g.node("aten.transpose.int", {out}, {{"self", arg_tensor(last)}, {"dim0", arg_int(0)}, {"dim1", arg_int(1)}});
    last = out;
  }
  g.output(last);
  const std::string msg = chain_error(g, {});
  EXPECT_TRUE(contains(msg, "the graph is too large to read a chain from")) << msg;
}

// --------------------------------------------------------- graph JSON --

TEST(Pt2Json, SchemaVersionIsChecked) {
  const std::string msg = graph_error(linear_graph().text(7, 3));
  EXPECT_EQ(msg, "m.pt2: record 'm/models/model.json': schema_version: schema version 7.3: ferry reads the torch.export "
                 "graph schema 8.x (torch 2.6 to 2.11)");
  EXPECT_TRUE(contains(graph_error(linear_graph().text(9, 0)), "schema version 9.0")) << graph_error(linear_graph().text(9, 0));
  EXPECT_EQ(graph_error(linear_graph().text(8, 3)), "");
}

TEST(Pt2Json, WrongTypesAndRangesNameTheField) {
  test::ojson doc = linear_graph().doc();
  doc["schema_version"]["major"] = "8";
  EXPECT_TRUE(contains(graph_error(doc.dump()), "schema_version.major: expected an integer, found a string"));
  doc = linear_graph().doc();
  doc["schema_version"]["major"] = 1e30;
  EXPECT_TRUE(contains(graph_error(doc.dump()), "schema_version.major: expected an integer, found the number 1e+30"));
  doc = linear_graph().doc();
  doc["schema_version"]["major"] = 18446744073709551615ULL;
  EXPECT_TRUE(contains(graph_error(doc.dump()), "schema_version.major: integer 18446744073709551615 out of range"));
  doc = linear_graph().doc();
  doc["graph_module"]["graph"]["nodes"][0]["inputs"][0]["arg"] = {{"as_tensor", {{"name", 7}}}};
  std::string msg = graph_error(doc.dump());
  EXPECT_TRUE(contains(msg, "graph_module.graph.nodes[0].inputs[0].arg.as_tensor.name: expected a string, found an integer"))
      << msg;
  doc = linear_graph().doc();
  doc["graph_module"]["graph"]["nodes"][0]["inputs"][0]["arg"] = {{"as_int", 1}, {"as_float", 2.0}};
  msg = graph_error(doc.dump());
  EXPECT_TRUE(contains(msg, "expected a one-member union object, found 2 members")) << msg;
  doc = linear_graph().doc();
  doc["graph_module"]["graph"]["nodes"] = "none";
  EXPECT_TRUE(contains(graph_error(doc.dump()), "graph_module.graph.nodes: expected an array, found a string"));
  doc = linear_graph().doc();
  doc["graph_module"]["graph"].erase("nodes");
  EXPECT_TRUE(contains(graph_error(doc.dump()), "graph_module.graph: no 'nodes' field"));
  doc = linear_graph().doc();
  doc["graph_module"]["graph"]["nodes"][0]["name"] = "line\nbreak";
  msg = graph_error(doc.dump());
  EXPECT_TRUE(contains(msg, "a name with a control character ('line?break')")) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

TEST(Pt2Json, MalformedAndDeepDocuments) {
  EXPECT_TRUE(contains(graph_error("{\"schema_version\": "), "m.pt2: record 'm/models/model.json': not valid JSON ("));
  EXPECT_TRUE(contains(graph_error("[1, 2"), "not valid JSON"));
  EXPECT_TRUE(contains(graph_error("{\"a\": \"\xff\"}"), "not valid JSON"));
  const std::string deep(200000, '[');
  EXPECT_EQ(graph_error(deep), "m.pt2: record 'm/models/model.json': JSON nested deeper than 128 levels at byte 128");
  // Brackets inside strings do not count.
  std::string text = linear_graph().text();
  text.insert(text.size() - 1, ",\"junk\":\"" + std::string(500, '[') + "\"");
  EXPECT_EQ(graph_error(text), "");
  EXPECT_TRUE(contains(graph_error("[]"), "the document: expected an object, found an array"));
}

TEST(Pt2Json, NodesMustUseValuesMadeBefore) {
  // A cycle: a uses b, b uses a.
  GraphWriter g;
  g.parameter("p", "fc.weight").input("x", {2, 3});
  g.node("aten.relu.default", {"a"}, {{"self", arg_tensor("b")}});
  g.node("aten.relu.default", {"b"}, {{"self", arg_tensor("a")}});
  g.output("b");
  std::string msg = graph_error(g.text());
  EXPECT_EQ(msg, "m.pt2: record 'm/models/model.json': graph_module.graph.nodes: node 'a' (aten.relu.default, in the "
                 "top-level module) uses 'b' before node 'b' (aten.relu.default, in the top-level module) makes it: the "
                 "graph has a cycle or is not in topological order");
  GraphWriter self;
  self.input("x", {2, 3});
  self.node("aten.relu.default", {"a"}, {{"self", arg_tensor("a")}});
  self.output("a");
  EXPECT_TRUE(contains(graph_error(self.text()), "uses 'a' before it is made (by the node itself)"));
  GraphWriter unknown = linear_graph();
  unknown.node("aten.relu.default", {"r"}, {{"self", arg_tensor("ghost")}});
  EXPECT_TRUE(contains(graph_error(unknown.text()), "node 'r' (aten.relu.default, in the top-level module) names an "
                                                    "unknown input 'ghost'"));
  GraphWriter twice = linear_graph();
  twice.node("aten.relu.default", {"linear"}, {{"self", arg_tensor("x")}});
  EXPECT_TRUE(contains(graph_error(twice.text()), "value 'linear' is made twice"));
  test::ojson doc = linear_graph().doc();
  doc["graph_module"]["graph"]["outputs"][0] = arg_tensor("nowhere");
  doc["graph_module"]["signature"]["output_specs"][0] = {{"user_output", {{"arg", arg_tensor("nowhere")}}}};
  EXPECT_TRUE(contains(graph_error(doc.dump()), "graph output 'nowhere' is not made by any node or input"));
}

TEST(Pt2Json, SignatureAndArguments) {
  test::ojson doc = linear_graph().doc();
  doc["graph_module"]["signature"]["input_specs"][0]["parameter"]["arg"]["name"] = "p_other";
  EXPECT_TRUE(contains(graph_error(doc.dump()), "input_specs[0]: names the value 'p_other', but graph input 0 is 'p_fc_weight'"));
  doc = linear_graph().doc();
  doc["graph_module"]["signature"]["input_specs"].erase(0);
  EXPECT_TRUE(contains(graph_error(doc.dump()), "2 input specs for 3 graph inputs"));
  doc = linear_graph().doc();
  doc["graph_module"]["signature"]["input_specs"][0] = {{"custom_obj", {{"arg", {{"name", "p_fc_weight"}}}}}};
  EXPECT_TRUE(contains(graph_error(doc.dump()), "input_specs[0]: a custom-object (TorchBind) input: ferry reads no script objects"));
  doc = linear_graph().doc();
  doc["graph_module"]["graph"]["nodes"][0]["inputs"][0]["arg"] = {{"as_custom_obj", {{"name", "obj"}}}};
  EXPECT_TRUE(contains(graph_error(doc.dump()), "a custom-object (TorchBind) argument"));
  // A known op: required arguments must be there, unknown ones are refused.
  GraphWriter g;
  add_rnn_parameters(g, "gru");
  g.input("x", {2, 5, 3});
  g.node("aten.zeros.default", {"zeros"}, {{"size", arg_ints({1, 2, 4})}});
  auto args = rnn_args("x", arg_tensor("zeros"), rnn_params("gru"), true);
  args.pop_back();
  g.node("aten.gru.input", {"gru", "h_n"}, args, "gru", "torch.nn.modules.rnn.GRU");
  g.output("gru");
  EXPECT_TRUE(contains(graph_error(g.text()), "node 'gru' (aten.gru.input): argument 'batch_first' is missing and has no default"));
  GraphWriter u = linear_graph();
  u.last_node()["inputs"].push_back({{"name", "scale"}, {"arg", arg_float(2)}, {"kind", 2}});
  EXPECT_TRUE(contains(graph_error(u.text()), "argument 'scale' is not in the op's schema"));
  GraphWriter d = linear_graph();
  d.last_node()["inputs"].push_back({{"name", "bias"}, {"arg", arg_none()}});
  EXPECT_TRUE(contains(graph_error(d.text()), "argument 'bias' given twice"));
}

// Every node's target must be an operator torch.export.load accepts: it
// resolves a target by walking its dotted path (so a module path reaches
// os.system), and its verifier admits only op overloads, higher-order ops
// and a few symbolic-shape builtins. Checked by the reader itself, so a
// conversion with --graph, which reads no chain, refuses the file too.
TEST(Pt2Json, NodeTargetsMustBeOperatorsTorchAccepts) {
  for (const char* target :
       {"torch.serialization.os.system", "builtins.eval", "torch.ops.aten.lstm.input.__globals__",
        "torch.ops.aten.relu", "torch.ops.aten.nonexistent.default", "torch.relu", "os.system",
        "_operator.getitem.__self__", "torch.ops.prims.abs.default", "torch.ops.higher_order.no_such_hop",
        "#mylib:op", "aten.relu.default", ""}) {
    GraphWriter g = linear_graph();
    g.node("aten.relu.default", {"system"}, {{"self", arg_tensor("linear")}});
    g.last_node()["target"] = target;
    const std::string msg = graph_error(g.text());
    EXPECT_EQ(msg, std::string("m.pt2: record 'm/models/model.json': graph_module.graph.nodes[1]: node 1 'system': "
                               "target '") + target + "' is not an ATen operator ferry knows");
  }
  // Through the reader: loading the archive refuses it, whatever reads it next.
  GraphWriter g = linear_graph();
  g.node("aten.relu.default", {"system"}, {{"self", arg_tensor("linear")}});
  g.last_node()["target"] = "torch.serialization.os.system";
  const std::vector<RawTensor> tensors = {{"fc.weight", "weight_0", {2, 3}}, {"fc.bias", "weight_1", {2}}};
  const std::string msg = load_error(test::pt2_raw(g.text(), test::weights_config(tensors),
                                                   {{"weight_0", test::raw_bytes(std::vector<float>(6, 1.0f))},
                                                    {"weight_1", test::raw_bytes(std::vector<float>(2, 1.0f))}}));
  EXPECT_TRUE(contains(msg, ": record 'model/models/model.json': graph_module.graph.nodes[1]: node 1 'system': target "
                            "'torch.serialization.os.system' is not an ATen operator ferry knows")) << msg;

  // Accepted: ATen overloads ferry does not run, symbolic-shape ops.
  GraphWriter ok = linear_graph();
  ok.node("aten.cumsum.default", {"cumsum"}, {{"self", arg_tensor("p_fc_weight")}, {"dim", arg_int(1)}});
  ok.node("aten.sym_size.int", {"s0"}, {{"self", arg_tensor("x")}, {"dim", arg_int(0)}});
  ok.last_node()["outputs"] = test::ojson::array({{{"as_sym_int", {{"as_name", "s0"}}}}});
  ok.node("aten.relu.default", {"mul"}, {{"a", {{"as_sym_int", {{"as_name", "s0"}}}}}, {"b", {{"as_sym_int", {{"as_int", 2}}}}}});
  ok.last_node()["target"] = "_operator.mul";
  ok.last_node()["outputs"] = test::ojson::array({{{"as_sym_int", {{"as_name", "mul"}}}}});
  for (const char* sym : {"_operator.floordiv", "math.trunc", "torch.sym_max", "torch._sym_sqrt"}) {
    GraphWriter h = ok;
    h.last_node()["target"] = sym;
    EXPECT_EQ(graph_error(h.text()), "") << sym;
  }
  EXPECT_EQ(graph_error(ok.text()), "");
  EXPECT_EQ(chain_of(ok, {{"fc.weight", {2, 3}}, {"fc.bias", {2}}}).graph, "fc");
}

// A higher-order op (torch.cond, a no_grad block) holds subgraphs: its
// arguments are positional (no names), and every target inside, at any
// depth, is checked as the top level's; so is an operator passed as a value.
TEST(Pt2Json, HigherOrderOpsHaveTheirSubgraphsChecked) {
  auto subgraph = [](const std::string& target, const test::ojson& inner_arg) {
    test::ojson node = {{"target", target},
                        {"name", "y"},
                        {"inputs", test::ojson::array({{{"name", "self"}, {"arg", inner_arg}, {"kind", 1}}})},
                        {"outputs", test::ojson::array({arg_tensor("y")})},
                        {"metadata", test::ojson::object()}};
    return test::ojson{{"as_graph",
                        {{"name", "submod_1"},
                         {"graph", {{"inputs", test::ojson::array({arg_tensor("a")})},
                                    {"outputs", test::ojson::array({arg_tensor("y")})},
                                    {"nodes", test::ojson::array({node})}}}}}};
  };
  auto hop = [&](const test::ojson& graph_arg) {
    GraphWriter g = linear_graph();
    g.node("higher_order.wrap_with_set_grad_enabled", {"wrapped"},
           {{"", arg_bool(false)}, {"", graph_arg}, {"", arg_tensor("linear")}});
    return g;
  };
  EXPECT_EQ(graph_error(hop(subgraph("torch.ops.aten.relu.default", arg_tensor("a"))).text()), "");
  std::string msg = graph_error(hop(subgraph("builtins.eval", arg_tensor("a"))).text());
  EXPECT_EQ(msg, "m.pt2: record 'm/models/model.json': graph_module.graph.nodes[1].inputs[1].arg.as_graph.graph.nodes[0]: "
                 "node 0 'y': target 'builtins.eval' is not an ATen operator ferry knows");
  // Nested: a subgraph whose node is itself a higher-order op.
  msg = graph_error(hop(subgraph("torch.ops.higher_order.wrap_with_set_grad_enabled",
                                 subgraph("torch.serialization.os.system", arg_tensor("a")))).text());
  EXPECT_TRUE(contains(msg, "as_graph.graph.nodes[0].inputs[0].arg.as_graph.graph.nodes[0]: node 0 'y': target "
                            "'torch.serialization.os.system' is not an ATen operator ferry knows")) << msg;
  msg = graph_error(hop({{"as_operator", "torch.serialization.os.system"}}).text());
  EXPECT_EQ(msg, "m.pt2: record 'm/models/model.json': graph_module.graph.nodes[1].inputs[1].arg.as_operator: "
                 "operator 'torch.serialization.os.system' is not an ATen operator ferry knows");
  EXPECT_EQ(graph_error(hop({{"as_operator", "torch.ops.aten.relu.default"}}).text()), "");
  // Off the chain a higher-order op is opaque; on it, refused naming it.
  msg = chain_error(hop(subgraph("torch.ops.aten.relu.default", arg_tensor("a"))),
                    {{"fc.weight", {2, 3}}, {"fc.bias", {2}}});
  EXPECT_TRUE(contains(msg, "ferry does not run higher_order.wrap_with_set_grad_enabled (its argument 2 is on the chain)"))
      << msg;
}

TEST(Pt2Json, ModuleStackPathsAreNormalised) {
  GraphWriter g = linear_graph();
  g.last_node()["metadata"]["nn_module_stack"] =
      "L__self__,,__main__.Net;L__self___layers_0,L['self']._modules['layers']._modules['0'],torch.nn.modules.linear.Linear";
  const std::string text = g.text();
  ExportGraph eg = parse_export_graph(reinterpret_cast<const uint8_t*>(text.data()), text.size(), kLabel);
  EXPECT_EQ(eg.nodes[0].module_path, "layers.0");
  EXPECT_EQ(eg.nodes[0].module_class, "torch.nn.modules.linear.Linear");
  g.last_node()["metadata"]["nn_module_stack"] =
      "L__self__,,__main__.Net;x,getattr(L['self'].layers, '1'),torch.nn.modules.rnn.GRU";
  const std::string t2 = g.text();
  eg = parse_export_graph(reinterpret_cast<const uint8_t*>(t2.data()), t2.size(), kLabel);
  EXPECT_EQ(eg.nodes[0].module_path, "layers.1");
}

TEST(Pt2Json, PayloadConfig) {
  auto parse = [](const std::string& s) {
    return parse_payload_config(reinterpret_cast<const uint8_t*>(s.data()), s.size(), "c.json");
  };
  const auto ok = parse(test::weights_config({{"fc.weight", "weight_0", {2, 3}, {}, 4}}));
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].sizes, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ok[0].strides, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(ok[0].storage_offset, 4);
  EXPECT_EQ(ok[0].device, "cuda:0");
  auto error = [&](const std::string& s) {
    try {
      parse(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  test::ojson c = test::ojson::parse(test::weights_config({{"fc.weight", "weight_0", {2, 3}}}));
  c["config"]["fc.weight"]["tensor_meta"]["sizes"][0] = "2";
  EXPECT_EQ(error(c.dump()), "c.json: config['fc.weight'].tensor_meta.sizes[0]: expected an object, found a string");
  c["config"]["fc.weight"]["tensor_meta"]["sizes"][0] = {{"as_expr", {{"expr_str", "s0"}}}};
  EXPECT_TRUE(contains(error(c.dump()), "a symbolic value where a stored tensor needs a known size"));
  c["config"]["fc.weight"]["tensor_meta"]["sizes"][0] = {{"as_int", 1e300}};
  EXPECT_TRUE(contains(error(c.dump()), "sizes[0].as_int: expected an integer, found the number 1e+300"));
  c = test::ojson::parse(test::weights_config({{"fc.weight", "weight_0", {2, 3}}}));
  c["config"]["fc.weight"]["path_name"] = test::ojson::array();
  EXPECT_TRUE(contains(error(c.dump()), "config['fc.weight'].path_name: expected a string, found an array"));
  EXPECT_TRUE(contains(error("{\"config\": []}"), "config: expected an object, found an array"));
  EXPECT_TRUE(contains(error("{}"), "the document: no 'config' field"));
}

// ------------------------------------------------------------- reader --

// Linear(3, 2): W = [[1, 2, 3], [4, 5, 6]], b = [0.5, -0.5].
const std::vector<float> kW = {1, 2, 3, 4, 5, 6};
const std::vector<float> kB = {0.5f, -0.5f};

TEST(Pt2Reader, RawLayoutSharedStorageAndStridedViews) {
  // One storage for both tensors, as cuDNN lays out an RNN's: the weight
  // stored transposed (a [2, 3] view with strides [1, 2]), the bias after it.
  const std::vector<float> storage = {1, 4, 2, 5, 3, 6, 0.5f, -0.5f};
  const Bytes file = test::pt2_raw(linear_graph().text(),
                                   test::weights_config({{"fc.weight", "weight_0", {2, 3}, {1, 2}, 0},
                                                         {"fc.bias", "weight_0", {2}, {1}, 6}}),
                                   {{"weight_0", test::raw_bytes(storage)}});
  Loaded l = load(file);
  ASSERT_EQ(l.ck.tensors.size(), 2u);
  EXPECT_EQ(l.ck.tensors[0].name, "fc.weight");
  EXPECT_EQ(l.ck.tensors[0].storage, l.ck.tensors[1].storage);
  EXPECT_EQ(l.ck.tensors[0].storage->location, "cuda:0");
  EXPECT_EQ(to_float32(l.ck.tensors[0]), kW);
  EXPECT_EQ(to_float32(l.ck.tensors[1]), kB);
  EXPECT_TRUE(contains(l.ck.form, "torch.export archive (.pt2, torch 2.9+ layout: raw weight files")) << l.ck.form;
  ASSERT_TRUE(l.ck.export_graph);
  EXPECT_EQ(l.ck.export_graph->schema_minor, 17);
  EXPECT_EQ(l.ck.attributes.at("fc.__class__"), "Linear");
  EXPECT_EQ(export_chain(l.ck).graph, "fc");

  // Big-endian storages, as byteorder says.
  const Bytes big = test::pt2_raw(linear_graph().text(),
                                  test::weights_config({{"fc.weight", "weight_0", {2, 3}}, {"fc.bias", "weight_1", {2}}}),
                                  {{"weight_0", test::raw_bytes(kW, true)}, {"weight_1", test::raw_bytes(kB, true)}},
                                  "model", "big");
  Loaded b = load(big);
  EXPECT_EQ(to_float32(b.ck.tensors[0]), kW);
  EXPECT_EQ(to_float32(b.ck.tensors[1]), kB);
}

TEST(Pt2Reader, SameWeightsInAllThreeLayouts) {
  const std::vector<RawTensor> tensors = {{"fc.weight", "weight_0", {2, 3}}, {"fc.bias", "weight_1", {2}}};
  const std::vector<std::pair<std::string, Bytes>> storages = {{"weight_0", test::raw_bytes(kW)},
                                                               {"weight_1", test::raw_bytes(kB)}};
  const std::string graph = linear_graph().text();
  const Bytes c = test::pt2_raw(graph, test::weights_config(tensors), storages);
  const Bytes b = test::pt2_torch_save(graph, test::state_dict_zip(tensors, storages));
  const Bytes a = test::pt2_legacy(graph, test::state_dict_zip(tensors, storages));
  for (const Bytes* file : {&a, &b, &c}) {
    Loaded l = load(*file);
    ASSERT_EQ(l.ck.tensors.size(), 2u);
    EXPECT_EQ(l.ck.tensors[0].name, "fc.weight");
    EXPECT_EQ(to_float32(l.ck.tensors[0]), kW);
    EXPECT_EQ(to_float32(l.ck.tensors[1]), kB);
    EXPECT_EQ(export_chain(l.ck).graph, "fc");
  }
  EXPECT_TRUE(contains(load(a).ck.form, "torch <= 2.7 layout")) << load(a).ck.form;
  EXPECT_TRUE(contains(load(b).ck.form, "torch 2.8 layout")) << load(b).ck.form;
}

TEST(Pt2Reader, NestedTorchSaveGoesThroughTheRestrictedUnpickler) {
  // A state dict whose tensor is rebuilt by a function outside the
  // allowlist (what torch.export writes for a fake tensor) is refused naming it.
  test::PickleBuilder p;
  p.proto(2).global("collections", "OrderedDict").empty_tuple().reduce().mark();
  p.str("fc.weight").global("torch._export.serde.serialize", "_reconstruct_fake_tensor").mark().str("meta").tuple().reduce();
  p.setitems().stop();
  const Bytes sd = test::checkpoint_zip(p.bytes, {}, "archive", "little");
  const std::string msg = load_error(test::pt2_torch_save(linear_graph().text(), sd));
  EXPECT_TRUE(contains(msg, "record 'model/data/weights/model.pt': record 'archive/data.pkl'")) << msg;
  EXPECT_TRUE(contains(msg, "torch._export.serde.serialize._reconstruct_fake_tensor")) << msg;
}

// torch 2.15 torch.saves a tensor subclass (use_pickle) instead of writing
// its raw bytes: read as a torch.save is read, checked against tensor_meta.
TEST(Pt2Reader, PickledPayloadIsReadAsTorchSave) {
  const std::string graph = linear_graph().text();
  test::ojson config = test::ojson::parse(test::weights_config({{"fc.weight", "weight_0", {2, 3}},
                                                                {"fc.bias", "weight_1", {2}}}));
  config["config"]["fc.weight"]["use_pickle"] = true;
  auto payload = [](std::vector<int64_t> size) {
    test::PickleBuilder p;
    p.proto(2);
    test::TensorSpec w;
    w.key = "0";
    w.storage_numel = 6;
    w.size = std::move(size);
    test::emit_tensor(p, w);
    p.stop();
    return test::checkpoint_zip(p.bytes, {{"0", test::raw_bytes(kW)}}, "archive", "little");
  };
  const Bytes b = test::raw_bytes(kB);
  const Loaded l = load(test::pt2_raw(graph, config.dump(), {{"weight_0", payload({2, 3})}, {"weight_1", b}}));
  ASSERT_EQ(l.ck.tensors.size(), 2u);
  EXPECT_EQ(l.ck.tensors[0].name, "fc.weight");
  EXPECT_EQ(to_float32(l.ck.tensors[0]), kW);
  EXPECT_EQ(l.ck.tensors[0].storage->location, "cuda:0");
  EXPECT_EQ(to_float32(l.ck.tensors[1]), kB);
  const std::string msg = load_error(test::pt2_raw(graph, config.dump(), {{"weight_0", payload({3, 2})}, {"weight_1", b}}));
  EXPECT_TRUE(contains(msg, "config['fc.weight'].tensor_meta: says a [2, 3] float32 tensor; the pickled payload "
                            "'model/data/weights/weight_0' holds a [3, 2] float32 one")) << msg;
}

TEST(Pt2Reader, RawWeightsRefusals) {
  const std::string graph = linear_graph().text();
  auto raw = [&](std::vector<RawTensor> tensors, std::vector<std::pair<std::string, Bytes>> records) {
    return load_error(test::pt2_raw(graph, test::weights_config(tensors), records));
  };
  const auto ok = std::vector<std::pair<std::string, Bytes>>{{"weight_0", test::raw_bytes(kW)},
                                                             {"weight_1", test::raw_bytes(kB)}};
  const RawTensor bias{"fc.bias", "weight_1", {2}};
  std::string msg = raw({{"fc.weight", "weight_0", {2, 3}, {}, 1}, bias}, ok);
  EXPECT_TRUE(contains(msg, ".pt: record 'model/data/weights/model_weights_config.json': config['fc.weight'].tensor_meta: "
                            "view (offset 1, size [2, 3], stride [3, 1]) reaches past the end of its storage of 6 elements"))
      << msg;
  msg = raw({{"fc.weight", "weight_0", {2, -3}}, bias}, ok);
  EXPECT_TRUE(contains(msg, "config['fc.weight'].tensor_meta: negative size or stride")) << msg;
  msg = raw({{"fc.weight", "weight_0", {int64_t{1} << 40, int64_t{1} << 40}}, bias}, ok);
  EXPECT_TRUE(contains(msg, "config['fc.weight'].tensor_meta: too many elements")) << msg;
  msg = raw({{"fc.weight", "../weight_0", {2, 3}}, bias}, ok);
  EXPECT_TRUE(contains(msg, "config['fc.weight'].path_name: '../weight_0' is not a record name below data/weights/")) << msg;
  msg = raw({{"fc.weight", "weight_7", {2, 3}}, bias}, ok);
  EXPECT_TRUE(contains(msg, "config['fc.weight'].path_name: record 'model/data/weights/weight_7' not found")) << msg;
  msg = raw({{"fc.weight", "weight_0", {2, 3}, {}, 0, 99}, bias}, ok);
  EXPECT_TRUE(contains(msg, "config['fc.weight'].tensor_meta.dtype: unknown dtype code 99")) << msg;
  // Partly overlapping views of one storage.
  const std::vector<float> eight = {1, 2, 3, 4, 5, 6, 7, 8};
  msg = raw({{"fc.weight", "weight_0", {2, 3}}, {"fc.bias", "weight_0", {2}, {}, 5}},
            {{"weight_0", test::raw_bytes(eight)}});
  EXPECT_TRUE(contains(msg, "config['fc.bias'] and config['fc.weight'] overlap in storage 'weight_0' (bytes [0, 24) and "
                            "[20, 28)) without being the same view")) << msg;
  // A record that is no whole number of elements.
  msg = raw({{"fc.weight", "weight_0", {2, 3}}, bias}, {{"weight_0", Bytes(25)}, {"weight_1", test::raw_bytes(kB)}});
  EXPECT_TRUE(contains(msg, "record 'weight_0' has 25 bytes, not a whole number of float32 elements")) << msg;

  // A pickled payload must be a torch.save archive; script objects are refused by name.
  test::ojson config = test::ojson::parse(test::weights_config({{"fc.weight", "weight_0", {2, 3}}, bias}));
  config["config"]["fc.weight"]["use_pickle"] = true;
  msg = load_error(test::pt2_raw(graph, config.dump(), ok));
  EXPECT_TRUE(contains(msg, "config['fc.weight'].use_pickle: record 'model/data/weights/weight_0' is not a torch.save "
                            "archive")) << msg;
  const Bytes custom = test::pt2_raw(graph, test::weights_config({{"fc.weight", "weight_0", {2, 3}}, bias}), ok, "model",
                                     "little", R"({"config": {"obj": {"path_name": "custom_obj_0", "is_param": false, "use_pickle": true}}})");
  msg = load_error(custom);
  EXPECT_TRUE(contains(msg, "record 'model/data/constants/model_constants_config.json': config['obj']: a custom object "
                            "(TorchBind script object, 'custom_obj_0')")) << msg;
}

TEST(Pt2Reader, SignatureBindsTheWeights) {
  // The graph's parameter must be among the weights.
  const std::string msg = load_error(test::pt2_raw(linear_graph().text(),
                                                   test::weights_config({{"fc.weight", "weight_0", {2, 3}}}),
                                                   {{"weight_0", test::raw_bytes(kW)}}));
  EXPECT_TRUE(contains(msg, ".pt: record 'model/models/model.json': graph_module.signature.input_specs[1]: parameter "
                            "'fc.bias' (graph input 'p_fc_bias') is not among the archive's weights or constants"))
      << msg;
  // Buffers and non-float weights: listed, in signature order.
  GraphWriter g;
  g.parameter("p_w", "bn.weight").buffer("b_n", "bn.num_batches_tracked").input("x", {2, 3});
  g.node("aten.relu.default", {"r"}, {{"self", arg_tensor("x")}});
  g.output("r");
  Loaded l = load(test::pt2_raw(g.text(),
                                test::weights_config({{"bn.num_batches_tracked", "weight_1", {}, {}, 0, 5, false},
                                                      {"bn.weight", "weight_0", {3}}}),
                                {{"weight_0", test::raw_bytes(std::vector<float>{1, 2, 3})},
                                 {"weight_1", test::raw_bytes(std::vector<int64_t>{7})}}));
  ASSERT_EQ(l.ck.tensors.size(), 1u);
  ASSERT_EQ(l.ck.ignored.size(), 1u);
  EXPECT_EQ(l.ck.ignored[0].second, "not a floating-point tensor (int64)");
}

TEST(Pt2Reader, ArchivesAndPrograms) {
  const std::vector<RawTensor> tensors = {{"fc.weight", "weight_0", {2, 3}}, {"fc.bias", "weight_1", {2}}};
  const std::vector<std::pair<std::string, Bytes>> storages = {{"weight_0", test::raw_bytes(kW)},
                                                               {"weight_1", test::raw_bytes(kB)}};
  // Two programs: --key picks one.
  test::ZipBuilder z;
  for (const char* m : {"model", "other"}) {
    z.add(std::string("pkg/models/") + m + ".json", test::bytes_of(linear_graph().text()));
    z.add(std::string("pkg/data/weights/") + m + "_weights_config.json", test::bytes_of(test::weights_config(tensors)));
  }
  for (const auto& [name, bytes] : storages) z.add("pkg/data/weights/" + name, bytes);
  z.add("pkg/archive_format", test::bytes_of("pt2"));
  const Bytes two = z.finish();
  EXPECT_TRUE(contains(load_error(two), ".pt: the archive holds 2 programs ('model', 'other'): choose one with --key"));
  LoadOptions other;
  other.key = "other";
  EXPECT_TRUE(contains(load(two, other).ck.form, "program 'other'"));
  other.key = "third";
  EXPECT_TRUE(contains(load_error(two, other), "--key 'third': no such program; the archive holds 'model', 'other'"));

  test::ZipBuilder fmt;
  fmt.add("pkg/archive_format", test::bytes_of("zip"));
  EXPECT_TRUE(contains(load_error(fmt.finish()), "record 'pkg/archive_format': archive format 'zip', not 'pt2'"));
  test::ZipBuilder aoti;
  aoti.add("pkg/archive_format", test::bytes_of("pt2"));
  aoti.add("pkg/data/aotinductor/model/model.so", test::bytes_of("ELF"));
  EXPECT_TRUE(contains(load_error(aoti.finish()), "a PT2 archive without a models/<name>.json graph"));
  // A zip with root records that is no export archive keeps its old refusal.
  test::ZipBuilder plain;
  plain.add("data.pkl", test::bytes_of("x"));
  EXPECT_TRUE(contains(load_error(plain.finish()), "zip archive: entry 'data.pkl' is not inside a top-level folder"));
}

// The Linear program in the 2.9+ layout under model/, with `extra` records
// (below model/) beside its own.
Bytes pt2_with(const std::vector<std::pair<std::string, Bytes>>& extra) {
  const std::vector<RawTensor> tensors = {{"fc.weight", "weight_0", {2, 3}}, {"fc.bias", "weight_1", {2}}};
  test::ZipBuilder z;
  z.add("model/data/weights/weight_0", test::raw_bytes(kW));
  z.add("model/data/weights/weight_1", test::raw_bytes(kB));
  z.add("model/data/weights/model_weights_config.json", test::bytes_of(test::weights_config(tensors)));
  z.add("model/models/model.json", test::bytes_of(linear_graph().text()));
  z.add("model/archive_format", test::bytes_of("pt2"));
  z.add("model/archive_version", test::bytes_of("0"));
  z.add("model/.data/version", test::bytes_of("6\n"));
  z.add("model/byteorder", test::bytes_of("little"));
  for (const auto& [name, bytes] : extra) z.add("model/" + name, bytes);
  return z.finish();
}

// A zip that torch.load and torch.export.load would both read, as two
// different models, is refused naming both readings, whatever its name;
// records only one of them reads are not a second reading.
TEST(Pt2Reader, PolyglotArchivesAreRefusedAsAmbiguous) {
  test::TensorSpec w{"fc.weight", "FloatStorage", "0", "cpu", 6, 0, {2, 3}};
  test::TensorSpec b{"fc.bias", "FloatStorage", "1", "cpu", 2, 0, {2}};
  const Bytes pkl = test::state_dict_pickle({w, b});
  const std::vector<std::pair<std::string, Bytes>> state_dict = {
      {"data.pkl", pkl}, {"data/0", test::raw_bytes(std::vector<float>(6, 9.0f))},
      {"data/1", test::raw_bytes(std::vector<float>(2, 9.0f))}, {"version", test::bytes_of("3\n")}};
  std::string msg = load_error(pt2_with(state_dict));
  EXPECT_TRUE(contains(msg, ": ambiguous: a torch.export archive (model/models/model.json) and a torch.save checkpoint "
                            "(model/data.pkl) in one zip; torch.load and torch.export.load would read different models"))
      << msg;
  // TorchScript: torch.load hands an archive with constants.pkl to torch.jit.load.
  std::vector<std::pair<std::string, Bytes>> script = state_dict;
  script.emplace_back("constants.pkl", test::bytes_of("\x80\x02)."));
  script.emplace_back("code/__torch__/model.py", test::bytes_of("class Net(Module):\n  pass\n"));
  msg = load_error(pt2_with(script));
  EXPECT_TRUE(contains(msg, ": ambiguous: a torch.export archive (model/models/model.json) and a TorchScript archive "
                            "(model/constants.pkl, model/data.pkl) in one zip; torch.load (which hands it to "
                            "torch.jit.load) and torch.export.load would read different models")) << msg;
  // code/ without constants.pkl: torch.load still unpickles data.pkl.
  msg = load_error(pt2_with({{"data.pkl", pkl}, {"code/__torch__/model.py", test::bytes_of("")}}));
  EXPECT_TRUE(contains(msg, "ambiguous: a torch.export archive (model/models/model.json) and a torch.save checkpoint "
                            "(model/data.pkl)")) << msg;
  // A graph-less PT2 archive is still named by its archive_format record.
  test::ZipBuilder bare;
  bare.add("m/archive_format", test::bytes_of("pt2"));
  bare.add("m/data.pkl", pkl);
  msg = load_error(bare.finish());
  EXPECT_TRUE(contains(msg, "ambiguous: a torch.export archive (m/archive_format) and a torch.save checkpoint (m/data.pkl)"))
      << msg;

  // One reading each: read as the .pt2 they are.
  for (const auto& extra : std::vector<std::vector<std::pair<std::string, Bytes>>>{
           {},                                                         // the plain archive
           {{"constants.pkl", test::bytes_of("\x80\x02).")}},           // torch.jit.load would find no data.pkl
           {{"extra/data.pkl", pkl}},                                  // not the folder's data.pkl
           {{"data/weights/data.pkl", pkl}}}) {
    Loaded l = load(pt2_with(extra));
    EXPECT_TRUE(contains(l.ck.form, "torch.export archive")) << l.ck.form;
    EXPECT_EQ(to_float32(l.ck.tensors[0]), kW);
  }
  // The 2.8 layout's weights are a torch.save zip nested in data/weights/.
  const std::vector<RawTensor> tensors = {{"fc.weight", "weight_0", {2, 3}}, {"fc.bias", "weight_1", {2}}};
  const std::vector<std::pair<std::string, Bytes>> storages = {{"weight_0", test::raw_bytes(kW)},
                                                               {"weight_1", test::raw_bytes(kB)}};
  EXPECT_EQ(to_float32(load(test::pt2_torch_save(linear_graph().text(), test::state_dict_zip(tensors, storages)))
                           .ck.tensors[0]),
            kW);
  // The <= 2.7 layout keeps its records at the root: torch.load, which takes
  // the folder of the first entry, cannot read it, whatever a folder holds.
  test::ZipBuilder root;
  root.add("serialized_exported_program.json", test::bytes_of(linear_graph().text()), false);
  root.add("serialized_state_dict.pt", test::state_dict_zip(tensors, storages), false);
  root.add("archive/data.pkl", pkl, false);
  root.add("version", test::bytes_of("8.17"), false);
  EXPECT_EQ(to_float32(load(root.finish()).ck.tensors[0]), kW);
}

TEST(Pt2Reader, CorruptedArchivesAreRefusedOrRead) {
  const std::vector<RawTensor> tensors = {{"fc.weight", "weight_0", {2, 3}}, {"fc.bias", "weight_1", {2}}};
  const Bytes good = test::pt2_raw(linear_graph().text(), test::weights_config(tensors),
                                   {{"weight_0", test::raw_bytes(kW)}, {"weight_1", test::raw_bytes(kB)}});
  test::load_every_corruption(good, 7, {0x01, 0x80, 0xff});
}

}  // namespace
}  // namespace ferry::conv

#endif  // FERRY_HAVE_CONVERTER
