// torch.export archives end to end, as a user meets them: the real .pt2
// files torch 2.11 saved on an H200 (tests/fixtures/torch2_forms, layout
// 2.9+: raw weight files) are converted by `ferry convert` with no flag and
// run by `ferry run`, whole sequence and step by step where the model
// streams, and compared with PyTorch's own output. Archives written by
// make_pt2_fixtures.py cover the ops those files lack. The two older layouts
// (torch <= 2.7 and 2.8) have no real file here: they are rebuilt from the
// real files' own graph and storages (support/pt2_builder.h), so all three
// layouts are checked against the same PyTorch output. Exports by a newer
// torch (make_export_target_fixtures.py) add the node targets beyond plain
// ATen ops (symbolic-shape and higher-order ops) and zips that torch.load
// and torch.export.load each read as a model of their own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "io/mapped_file.h"
#include "io/npy.h"
#include "npy_compare.h"
#include "io/zip_reader.h"
#include "pt2_builder.h"

namespace {

using ferry::conv::NpyArray;
using ferry::conv::read_npy;
using ferry::test::max_abs_diff;
using ferry::test::Bytes;
using ferry::test::CommandResult;
using ferry::test::run_ferry;
using ferry::test::shell_quote;
using ferry::test::TempDir;

const std::string kForms = std::string(FERRY_FIXTURES_DIR) + "/torch2_forms/";

struct Export {
  std::string name;       // the fixture
  std::string chain;      // what ferry must read from the graph (the manifest's graph)
  std::string layout;     // what it must read of the input's axes
  bool streams = false;   // ferry_step runs it (no bidirectional layer, no look-ahead conv)
  std::string no_stream;  // else: what the refusal names
};

void PrintTo(const Export& e, std::ostream* os) { *os << e.name; }

const std::vector<Export> kExports = {
    {"export_gru", "gru > last > fc", "batch-first [B,T,F]", true, ""},
    {"export_bilstm_dyn", "lstm > mean > out > sigmoid", "batch-first [B,T,F]", false, "bidirectional"},
    {"export_crnn", "conv > bn > relu > gru > last > fc", "channels-first [B,F,T]", false, "looks at steps after"},
};

// Converts `pt2` with no flag and checks what ferry read and ran against
// PyTorch's output for the fixture.
void convert_and_compare(const std::string& pt2, const Export& e, const TempDir& dir, const std::string& form) {
  const std::string fb = dir / "model.fb";
  const CommandResult c = run_ferry("convert " + shell_quote(pt2) + " " + shell_quote(fb), dir);
  ASSERT_EQ(c.status, 0) << c.err << c.out;
  EXPECT_NE(c.out.find("torch.export archive (.pt2, " + form), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("graph    " + e.chain + "  (inferred)"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("layout   " + e.layout + " (recorded in the file"), std::string::npos) << c.out;
  const std::string x = kForms + e.name + ".x.npy", y = kForms + e.name + ".y.npy";
  const CommandResult r = run_ferry("run " + shell_quote(fb) + " --input " + shell_quote(x) + " --output " +
                                        shell_quote(dir / "y.npy") + " --quiet",
                                    dir);
  ASSERT_EQ(r.status, 0) << r.err;
  const NpyArray got = read_npy(dir / "y.npy"), want = read_npy(y);
  ASSERT_EQ(got.shape, want.shape);
  EXPECT_LE(max_abs_diff(got, want), 1e-5) << e.name;
}

class RealExport : public ::testing::TestWithParam<Export> {};

TEST_P(RealExport, ConvertsWithNoFlagsAndMatchesPyTorch) {
  TempDir dir;
  convert_and_compare(kForms + GetParam().name + ".pt2", GetParam(), dir, "torch 2.9+ layout: raw weight files");
}

// ferry_step over the same model: equal to the whole-sequence run, bit for
// bit, where it streams; a clear refusal where it cannot.
TEST_P(RealExport, StreamsWhereTheModelStreams) {
  const Export& e = GetParam();
  TempDir dir;
  const std::string fb = dir / "model.fb";
  ASSERT_EQ(run_ferry("convert " + shell_quote(kForms + e.name + ".pt2") + " " + shell_quote(fb), dir).status, 0);
  const std::string io = " --input " + shell_quote(kForms + e.name + ".x.npy") + " --quiet --output ";
  ASSERT_EQ(run_ferry("run " + shell_quote(fb) + io + shell_quote(dir / "whole.npy"), dir).status, 0);
  const CommandResult s = run_ferry("run " + shell_quote(fb) + io + shell_quote(dir / "stream.npy") + " --stream", dir);
  if (!e.streams) {
    EXPECT_EQ(s.status, 1);
    EXPECT_EQ(s.err.rfind("ferry: error: ", 0), 0u) << s.err;
    EXPECT_NE(s.err.find(e.no_stream), std::string::npos) << s.err;
    return;
  }
  ASSERT_EQ(s.status, 0) << s.err;
  const NpyArray whole = read_npy(dir / "whole.npy"), stream = read_npy(dir / "stream.npy");
  ASSERT_EQ(whole.shape, stream.shape);
  for (size_t i = 0; i < whole.data.size(); ++i) ASSERT_EQ(whole.data[i], stream.data[i]) << "element " << i;
  EXPECT_LE(max_abs_diff(stream, read_npy(kForms + e.name + ".y.npy")), 1e-5);
}

// The real file's graph, weights config and raw storages, rewritten as the
// torch <= 2.7 and the torch 2.8 layouts.
struct Parts {
  std::string graph;
  std::vector<ferry::test::RawTensor> tensors;
  std::vector<std::pair<std::string, Bytes>> storages;
};

Parts parts_of(const std::string& name) {
  const ferry::conv::MappedFile file(kForms + name + ".pt2");
  const ferry::conv::ZipReader zip(file.data(), file.size(), name);
  auto text = [&](const std::string& record) {
    const ferry::conv::ByteSpan s = zip.stored(record);
    return std::string(reinterpret_cast<const char*>(s.data), s.size);
  };
  Parts p;
  p.graph = text("models/model.json");
  const nlohmann::json config = nlohmann::json::parse(text("data/weights/model_weights_config.json"));
  // Tensors in signature order (parameters, then buffers), as state_dict() has them.
  const nlohmann::json graph = nlohmann::json::parse(p.graph);
  std::vector<std::string> order;
  for (const auto& spec : graph["graph_module"]["signature"]["input_specs"]) {
    if (spec.contains("parameter")) order.push_back(spec["parameter"]["parameter_name"]);
    if (spec.contains("buffer")) order.push_back(spec["buffer"]["buffer_name"]);
  }
  for (const std::string& fqn : order) {
    const nlohmann::json& e = config["config"].at(fqn);
    ferry::test::RawTensor t;
    t.fqn = fqn;
    t.path = e["path_name"];
    t.is_param = e["is_param"];
    const nlohmann::json& meta = e["tensor_meta"];
    t.dtype = meta["dtype"];
    for (const auto& s : meta["sizes"]) t.sizes.push_back(s["as_int"]);
    for (const auto& s : meta["strides"]) t.strides.push_back(s["as_int"]);
    t.offset = meta["storage_offset"]["as_int"];
    p.tensors.push_back(t);
    bool have = false;
    for (const auto& [path, bytes] : p.storages) have = have || path == t.path;
    if (!have) {
      const ferry::conv::ByteSpan s = zip.stored("data/weights/" + t.path);
      p.storages.emplace_back(t.path, Bytes(s.data, s.data + s.size));
    }
  }
  return p;
}

TEST_P(RealExport, OlderLayoutsOfTheSameProgramMatchPyTorch) {
  const Export& e = GetParam();
  const Parts p = parts_of(e.name);
  // The GPU-trained recurrent layer's parameters share one cuDNN storage:
  // the rebuilt torch.save zips keep that sharing.
  size_t shared = 0;
  for (const auto& s : p.storages) {
    size_t views = 0;
    for (const auto& t : p.tensors) views += t.path == s.first;
    shared = std::max(shared, views);
  }
  EXPECT_GE(shared, 4u);
  const Bytes state_dict = ferry::test::state_dict_zip(p.tensors, p.storages);
  TempDir dir;
  {
    SCOPED_TRACE("torch 2.8 layout: data/weights/model.pt");
    const std::string path = dir / (e.name + "_28.pt2");
    const Bytes b = ferry::test::pt2_torch_save(p.graph, state_dict, e.name);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
    convert_and_compare(path, e, dir, "torch 2.8 layout: torch.save weights");
  }
  {
    SCOPED_TRACE("torch <= 2.7 layout: root-level serialized_*.pt");
    const std::string path = dir / (e.name + "_27.pt2");
    const Bytes a = ferry::test::pt2_legacy(p.graph, state_dict);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(a.data()), std::streamsize(a.size()));
    convert_and_compare(path, e, dir, "torch <= 2.7 layout: torch.save weights");
  }
}

INSTANTIATE_TEST_SUITE_P(Torch211, RealExport, ::testing::ValuesIn(kExports),
                         [](const ::testing::TestParamInfo<Export>& info) { return info.param.name; });

// Ops the real exports do not have (a time-major LSTM, a residual skip,
// LayerNorm, an Embedding on token ids, a 2-layer GRU's h_n[-1], leaky_relu,
// rnn_relu, PReLU, mean over time, softmax), in archives written the way
// torch 2.11 writes them by make_pt2_fixtures.py, with the output of the
// same modules in PyTorch: converted with no flag, run whole and streamed.
struct Synthesized {
  std::string name, chain, layout;
  double tol = 1e-5;
  std::string output_layout;  // where the graph returns its sequence in another layout
};

void PrintTo(const Synthesized& s, std::ostream* os) { *os << s.name; }

std::vector<Synthesized> synthesized() {
  std::ifstream in(std::string(FERRY_FIXTURES_DIR) + "/pt2/manifest.json");
  std::vector<Synthesized> out;
  if (!in) return out;
  for (const auto& e : nlohmann::json::parse(in))
    out.push_back({e.at("name"), e.at("chain"), e.at("layout"), e.at("tol"), e.value("output_layout", "")});
  return out;
}

class SynthesizedExport : public ::testing::TestWithParam<Synthesized> {};

TEST_P(SynthesizedExport, ConvertsWithNoFlagsAndMatchesPyTorch) {
  const Synthesized& s = GetParam();
  const std::string dir_path = std::string(FERRY_FIXTURES_DIR) + "/pt2/";
  TempDir dir;
  const std::string fb = dir / "model.fb";
  const CommandResult c = run_ferry("convert " + shell_quote(dir_path + s.name + ".pt2") + " " + shell_quote(fb), dir);
  ASSERT_EQ(c.status, 0) << c.err << c.out;
  EXPECT_NE(c.out.find("graph    " + s.chain + "  (inferred)"), std::string::npos) << c.out;
  const auto text = [](const std::string& l) {
    return l == "tbf" ? "time-major" : l == "bft" ? "channels-first" : "batch-first";
  };
  EXPECT_NE(c.out.find("layout   " + std::string(text(s.layout))), std::string::npos) << c.out;
  if (!s.output_layout.empty()) {
    EXPECT_NE(c.out.find("; output " + std::string(text(s.output_layout))), std::string::npos) << c.out;
    EXPECT_NE(c.out.find("(recorded in the file: the axes of its graph's output)"), std::string::npos) << c.out;
  }
  const std::string io = " --input " + shell_quote(dir_path + s.name + ".x.npy") + " --quiet --output ";
  ASSERT_EQ(run_ferry("run " + shell_quote(fb) + io + shell_quote(dir / "whole.npy"), dir).status, 0);
  const CommandResult st = run_ferry("run " + shell_quote(fb) + io + shell_quote(dir / "stream.npy") + " --stream", dir);
  ASSERT_EQ(st.status, 0) << st.err;
  const NpyArray whole = read_npy(dir / "whole.npy"), stream = read_npy(dir / "stream.npy");
  const NpyArray want = read_npy(dir_path + s.name + ".y.npy");
  ASSERT_EQ(whole.shape, want.shape);
  ASSERT_EQ(stream.shape, want.shape);
  for (size_t i = 0; i < whole.data.size(); ++i) ASSERT_EQ(whole.data[i], stream.data[i]) << "element " << i;
  EXPECT_LE(max_abs_diff(whole, want), s.tol) << s.name;
}

INSTANTIATE_TEST_SUITE_P(Torch113, SynthesizedExport, ::testing::ValuesIn(synthesized()),
                         [](const ::testing::TestParamInfo<Synthesized>& info) { return info.param.name; });

TEST(Pt2Export, FixturesArePresent) {
  // Guards against suites that silently run nothing.
  EXPECT_EQ(synthesized().size(), 4u);
  for (const Export& e : kExports) EXPECT_TRUE(std::filesystem::exists(kForms + e.name + ".pt2")) << e.name;
}

// run_decompositions() left the LSTM as per-step cells: no chain to read,
// refused saying so; the weights still convert with --graph.
TEST(Pt2Export, DecomposedGraphIsRefusedButItsWeightsConvert) {
  TempDir dir;
  const std::string pt2 = kForms + "export_decomposed.pt2";
  const CommandResult c = run_ferry("convert " + shell_quote(pt2) + " " + shell_quote(dir / "m.fb"), dir);
  EXPECT_EQ(c.status, 1);
  EXPECT_EQ(c.err.rfind("ferry: error: ", 0), 0u) << c.err;
  EXPECT_EQ(std::count(c.err.begin(), c.err.end(), '\n'), 1) << c.err;
  EXPECT_NE(c.err.find("export_decomposed.pt2: record 'export_decomposed/models/model.json': node "), std::string::npos)
      << c.err;
  EXPECT_NE(c.err.find("core-ATen graph: the LSTM is unrolled into per-step cells"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("pass --graph"), std::string::npos) << c.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "m.fb"));

  const CommandResult g = run_ferry("convert " + shell_quote(pt2) + " " + shell_quote(dir / "m.fb") +
                                        " --graph 'lstm > last > head' --layout btf",
                                    dir);
  ASSERT_EQ(g.status, 0) << g.err;
  const CommandResult r = run_ferry("run " + shell_quote(dir / "m.fb") + " --input " +
                                        shell_quote(kForms + "export_decomposed.x.npy") + " --output " +
                                        shell_quote(dir / "y.npy") + " --quiet",
                                    dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_LE(max_abs_diff(read_npy(dir / "y.npy"), read_npy(kForms + "export_decomposed.y.npy")), 1e-5);
}

const std::string kTargets = std::string(FERRY_FIXTURES_DIR) + "/export_targets/";

// Real torch exports whose graphs hold more than plain ATen ops
// (make_export_target_fixtures.py): a dynamic export's sym_size.int and
// _operator.mul, a no_grad block's wrap_with_set_grad_enabled, torch.cond.
// The reader accepts them; ferry runs no such node, so the chain comes from
// --graph, and the result matches PyTorch.
TEST(Pt2Export, SymbolicAndHigherOrderNodesOfRealExportsAreRead) {
  TempDir dir;
  struct Case {
    const char* name;
    const char* args;
  };
  for (const Case& c : {Case{"sym_reshape", " --graph fc --layout btf"}, Case{"no_grad", " --graph 'fc > relu'"}}) {
    SCOPED_TRACE(c.name);
    const std::string fb = dir / (std::string(c.name) + ".fb");
    const CommandResult r = run_ferry("convert " + shell_quote(kTargets + c.name + ".pt2") + " " + shell_quote(fb) + c.args, dir);
    ASSERT_EQ(r.status, 0) << r.err;
    const CommandResult run = run_ferry("run " + shell_quote(fb) + " --input " + shell_quote(kTargets + c.name + ".x.npy") +
                                            " --output " + shell_quote(dir / "y.npy") + " --quiet",
                                        dir);
    ASSERT_EQ(run.status, 0) << run.err;
    const NpyArray got = read_npy(dir / "y.npy"), want = read_npy(kTargets + c.name + ".y.npy");
    ASSERT_EQ(got.shape, want.shape);
    EXPECT_LE(max_abs_diff(got, want), 1e-5);
  }
  const CommandResult i = run_ferry("inspect " + shell_quote(kTargets + "cond.pt2"), dir);
  ASSERT_EQ(i.status, 0) << i.err;
  EXPECT_NE(i.out.find("torch.export archive (.pt2"), std::string::npos) << i.out;
}

// A node naming a callable torch.export.load refuses, in a real export: the
// reader refuses the file even when --graph gives the chain (and no chain is
// read from the graph).
TEST(Pt2Export, HostileTargetIsRefusedEvenWithGraph) {
  Parts p = parts_of("export_gru");
  const std::string select = "\"torch.ops.aten.select.int\"";
  const size_t at = p.graph.find(select);
  ASSERT_NE(at, std::string::npos);
  p.graph.replace(at, select.size(), "\"torch.serialization.os.system\"");
  const Bytes file = ferry::test::pt2_raw(p.graph, ferry::test::weights_config(p.tensors), p.storages, "export_gru");
  TempDir dir;
  const std::string path = dir / "export_gru.pt2";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(file.data()), std::streamsize(file.size()));
  for (const char* args : {"", " --graph 'gru > last > fc' --layout btf"}) {
    const CommandResult c = run_ferry("convert " + shell_quote(path) + " " + shell_quote(dir / "m.fb") + args, dir);
    EXPECT_EQ(c.status, 1) << args;
    EXPECT_EQ(c.err.rfind("ferry: error: ", 0), 0u) << c.err;
    EXPECT_NE(c.err.find("export_gru.pt2: record 'export_gru/models/model.json': graph_module.graph.nodes[2]: node 2 'select': "),
              std::string::npos)
        << c.err;
    EXPECT_NE(c.err.find("target 'torch.serialization.os.system' is not an ATen operator ferry knows"), std::string::npos)
        << c.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "m.fb"));
  }
}

// Zips torch reads twice (make_export_target_fixtures.py checks that
// torch.load and torch.export.load each read a model from them): refused as
// ambiguous, whatever the file is called and whatever --graph says.
TEST(Pt2Export, PolyglotArchivesAreRefusedAsAmbiguous) {
  TempDir dir;
  const struct {
    const char* name;
    const char* other;
  } cases[] = {{"polyglot_save", "a torch.save checkpoint (no_grad/data.pkl) in one zip; torch.load and"},
               {"polyglot_script", "a TorchScript archive (no_grad/constants.pkl, no_grad/data.pkl) in one zip; "
                                   "torch.load (which hands it to torch.jit.load) and"}};
  for (const auto& c : cases) {
    const std::string renamed = dir / (std::string(c.name) + ".pt");
    std::filesystem::copy_file(kTargets + c.name + ".pt2", renamed);
    for (const std::string& path : {kTargets + c.name + ".pt2", renamed}) {
      for (const char* args : {"", " --graph 'fc > relu'"}) {
        const CommandResult r = run_ferry("convert " + shell_quote(path) + " " + shell_quote(dir / "m.fb") + args, dir);
        EXPECT_EQ(r.status, 1) << path << args;
        EXPECT_NE(r.err.find(path + ": ambiguous: a torch.export archive (no_grad/models/model.json) and " + c.other +
                             " torch.export.load would read different models"),
                  std::string::npos)
            << r.err;
        EXPECT_FALSE(std::filesystem::exists(dir / "m.fb"));
      }
    }
  }
}

TEST(Pt2Export, InspectShowsTheFormTensorsAndChain) {
  TempDir dir;
  const CommandResult r = run_ferry("inspect " + shell_quote(kForms + "export_crnn.pt2"), dir);
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* want :
       {"torch.export archive (.pt2, torch 2.9+ layout: raw weight files, program 'model'; graph schema 8.17, saved by "
        "torch 2.11.0+cu130)",
        "gru.weight_hh_l0", "weight_4 +4608", "attr     conv.padding = (1,)", "attr     gru.batch_first = true",
        "chain    conv > bn > relu > gru > last > fc  (read from the exported graph; input [B, F, T])"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  const CommandResult d = run_ferry("inspect " + shell_quote(kForms + "export_decomposed.pt2"), dir);
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_NE(d.out.find("chain    not read from the exported graph: "), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("core-ATen graph"), std::string::npos) << d.out;
}

}  // namespace
