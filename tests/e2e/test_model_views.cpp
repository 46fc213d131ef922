// Seeing inside a model from the CLI: `ferry bench --per-layer` (names equal
// `inspect --json`'s chain; the layers' medians add up to the profiled run's
// within 10 %), its Chrome trace (one event per layer per traced run),
// `inspect --dot` of a checkpoint, and user metadata from `convert --meta`
// through the file to `inspect` and the C API, with its refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "dot_check.h"
#include "ferry/ferry.h"

namespace {

using ferry::test::CommandResult;
using ferry::test::read_bytes;
using ferry::test::run_ferry;
using ferry::test::shell_quote;
using ferry::test::TempDir;

const std::string kSource = FERRY_SOURCE_DIR;
const std::string kOps = std::string(FERRY_FIXTURES_DIR) + "/ops/";

// Converted models: the README's example, a CRNN (convs, batch norms,
// activations, a GRU, `last`, a Linear; it does not stream) and a causal
// conv before an LSTM (it streams) from the op fixtures.
struct Converted {
  std::string name, convert;
};
const Converted kModels[] = {
    {"lstm_gpu", "convert " + shell_quote(kSource + "/examples/lstm_gpu.pt") + " {fb} --graph 'lstm > last > fc' --batch-first"},
    {"kws_crnn", "convert " + shell_quote(kOps + "kws_crnn.pt") +
                     " {fb} --layout bft --graph 'conv1(padding=1) > bn1 > relu > conv2(stride=2,padding=1) > bn2 > relu "
                     "> gru > last > fc'"},
    {"causal_conv_lstm", "convert " + shell_quote(kOps + "conv_causal_lstm_seq.pt") +
                             " {fb} --layout btf --graph 'conv(padding=causal) > lstm > fc'"},
};

std::string convert(const Converted& c, const TempDir& dir) {
  const std::string fb = dir / (c.name + ".fb");
  std::string cmd = c.convert;
  cmd.replace(cmd.find("{fb}"), 4, shell_quote(fb));
  const CommandResult r = run_ferry(cmd + " --quiet", dir);
  EXPECT_EQ(r.status, 0) << r.err;
  return fb;
}

nlohmann::json json_of(const std::string& args, const TempDir& dir) {
  const CommandResult r = run_ferry(args, dir);
  EXPECT_EQ(r.status, 0) << args << ": " << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(PerLayer, NamesAndSumsMatchTheChain) {
  TempDir dir;
  for (const Converted& c : kModels) {
    SCOPED_TRACE(c.name);
    const std::string fb = convert(c, dir);
    const nlohmann::json summary = json_of("inspect --json " + shell_quote(fb), dir);
    const nlohmann::json& chain = summary.at("layers");
    for (const char* mode : {"", " --stream"}) {
      SCOPED_TRACE(mode);
      if (!std::string(mode).empty() && !summary.at("streamable").get<bool>()) {
        const CommandResult r = run_ferry("bench " + shell_quote(fb) + " --per-layer --stream --repeat 5", dir);
        EXPECT_NE(r.status, 0);
        EXPECT_NE(r.err.find("only a causal conv streams"), std::string::npos) << r.err;
        continue;
      }
      const nlohmann::json b =
          json_of("bench " + shell_quote(fb) + " --per-layer --json --seq 48 --repeat 40 --backend auto" + mode, dir);
      const nlohmann::json& layers = b.at("per_layer").at("layers");
      ASSERT_EQ(layers.size(), chain.size());
      double sum = 0;
      for (size_t i = 0; i < chain.size(); ++i) {
        EXPECT_EQ(layers[i].at("index"), i);
        EXPECT_EQ(layers[i].at("name"), chain[i].at("name"));
        EXPECT_EQ(layers[i].at("kind"), chain[i].at("kind"));
        EXPECT_LE(layers[i].at("p10_us").get<double>(), layers[i].at("median_us").get<double>());
        EXPECT_LE(layers[i].at("median_us").get<double>(), layers[i].at("p90_us").get<double>());
        sum += layers[i].at("median_us").get<double>();
      }
      EXPECT_NEAR(sum, b.at("per_layer").at("layers_sum_us").get<double>(), 1e-3 * sum + 1e-3);
      const double whole = b.at("per_layer").at("profiled_median_us");
      EXPECT_GT(sum, 0);
      if (std::string(mode).empty()) {
        // What lies outside the layers (the input's layout, the output's
        // copy) is small beside them: the per-layer view accounts for the run.
        EXPECT_GE(sum, 0.9 * whole) << b.dump();
      }
      EXPECT_LE(sum, 1.1 * whole) << b.dump();
    }
  }
}

TEST(PerLayer, TraceHoldsOneEventPerLayerPerRun) {
  TempDir dir;
  const std::string fb = convert(kModels[1], dir);
  const size_t layers = json_of("inspect --json " + shell_quote(fb), dir).at("layers").size();
  const std::string trace = dir / "trace.json";
  const CommandResult r =
      run_ferry("bench " + shell_quote(fb) + " --trace " + shell_quote(trace) + " --trace-runs 5 --repeat 12 --seq 32", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("per layer"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("trace    "), std::string::npos) << r.out;
  std::ifstream in(trace);
  const nlohmann::json t = nlohmann::json::parse(in);  // throws (fails) unless JSON
  size_t layer_events = 0, calls = 0;
  std::vector<size_t> per_layer(layers);
  for (const auto& e : t.at("traceEvents")) {
    EXPECT_EQ(e.at("ph"), "X");
    EXPECT_GE(e.at("dur").get<double>(), 0);
    if (e.at("cat") == "call") {
      ++calls;
      EXPECT_EQ(e.at("name"), "ferry_run");
    } else {
      ASSERT_EQ(e.at("cat"), "layer");
      const size_t l = e.at("args").at("layer");
      ASSERT_LT(l, layers);
      ++per_layer[l];
      ++layer_events;
    }
  }
  EXPECT_EQ(calls, 5u);
  EXPECT_EQ(layer_events, 5 * layers);
  for (size_t l = 0; l < layers; ++l) EXPECT_EQ(per_layer[l], 5u) << "layer " << l;
}

TEST(PerLayer, RefusedOnCuda) {
  TempDir dir;
  const std::string fb = convert(kModels[0], dir);
  const CommandResult r = run_ferry("bench " + shell_quote(fb) + " --per-layer --backend cuda --repeat 5", dir);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("ferry: error:"), std::string::npos) << r.err;
}

TEST(Dot, ACheckpointAsConvertWouldMakeIt) {
  TempDir dir;
  const CommandResult r = run_ferry("inspect " + shell_quote(kSource + "/examples/lstm_gpu.pt") +
                                        " --graph 'lstm > last > fc' --batch-first --dot",
                                    dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("LSTM 16 -> 64"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("L1 -> L2"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("L3"), std::string::npos) << r.out;
  // And the converted file's, rendered.
  const std::string fb = convert(kModels[1], dir);
  ferry::test::expect_dot_renders(fb, dir);
  const CommandResult bad = run_ferry("inspect " + shell_quote(kSource + "/examples/lstm_gpu.pt") + " --dot", dir);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("--graph"), std::string::npos) << bad.err;
}

// A little-endian float64 .npy (what np.save writes for x.mean(0)).
void write_f64_npy(const std::string& path, const std::vector<double>& v, size_t rows, size_t cols) {
  std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  f.write(reinterpret_cast<const char*>(magic), 8);
  const unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff), static_cast<unsigned char>(header.size() >> 8)};
  f.write(reinterpret_cast<const char*>(len), 2);
  f << header;
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
}

TEST(Metadata, ConvertInspectAndTheCApi) {
  TempDir dir;
  const std::string labels = dir / "labels.txt", mean = dir / "mean.npy", fb = dir / "m.fb";
  std::ofstream(labels) << "silence\nunknown\nyes\nno\n";
  write_f64_npy(mean, {0.5, -1.5, 2.25, 1e-3, 7, 8}, 2, 3);
  const CommandResult c = run_ferry(
      "convert " + shell_quote(kSource + "/examples/lstm_gpu.pt") + " " + shell_quote(fb) +
          " --graph 'lstm > last > fc' --batch-first --meta labels=@" + shell_quote(labels) +
          " --meta sample_rate=16000 --meta feature_mean=@" + shell_quote(mean) + " --meta 'version=text:2.1'",
      dir);
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find("meta     sample_rate: number 16000"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("meta     feature_mean: numbers [2, 3]"), std::string::npos) << c.out;

  const nlohmann::json meta = json_of("inspect --json " + shell_quote(fb), dir).at("metadata");
  ASSERT_EQ(meta.size(), 4u);
  EXPECT_EQ(meta[0].at("key"), "labels");
  EXPECT_EQ(meta[0].at("text"), "silence\nunknown\nyes\nno\n");
  EXPECT_EQ(meta[1].at("values"), nlohmann::json::array({16000.0}));
  EXPECT_EQ(meta[1].at("shape"), nlohmann::json::array());
  EXPECT_EQ(meta[2].at("shape"), nlohmann::json::array({2, 3}));
  EXPECT_EQ(meta[2].at("values"), nlohmann::json::array({0.5, -1.5, 2.25, 1e-3, 7.0, 8.0}));
  EXPECT_EQ(meta[3].at("text"), "2.1");
  const CommandResult text = run_ferry("inspect " + shell_quote(fb), dir);
  EXPECT_NE(text.out.find("meta     labels           text, 23 bytes: \"silence\\nunknown\\nyes\\nno\\n\""),
            std::string::npos)
      << text.out;

  // The C API reads the same from the file's bytes.
  const std::vector<uint8_t> file = read_bytes(fb);
  const ferry::test::AlignedBytes bytes(file.data(), file.size());
  ferry_model* m = nullptr;
  ASSERT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &m), FERRY_OK) << ferry_last_error();
  ferry_metadata e{};
  e.struct_size = sizeof e;
  ASSERT_EQ(ferry_model_metadata(m, "feature_mean", &e), FERRY_OK);
  double v[6];
  ASSERT_EQ(ferry_model_metadata_numbers(m, "feature_mean", v, 6), FERRY_OK);
  EXPECT_EQ(v[2], 2.25);
  ASSERT_EQ(ferry_model_metadata(m, "labels", &e), FERRY_OK);
  EXPECT_STREQ(e.text, "silence\nunknown\nyes\nno\n");
  ferry_model_free(m);
  // And the model runs as without metadata.
  const CommandResult run = run_ferry("run " + shell_quote(fb) + " --input " + shell_quote(kSource + "/examples/input.npy") +
                                          " --output " + shell_quote(dir / "y.npy") + " --quiet",
                                      dir);
  EXPECT_EQ(run.status, 0) << run.err;
}

TEST(Metadata, RefusalsWriteNothing) {
  TempDir dir;
  const std::string bin = dir / "bin.txt";
  std::ofstream(bin) << "ok\xff\xfe";
  const std::string base = "convert " + shell_quote(kSource + "/examples/lstm_gpu.pt") + " " +
                           shell_quote(dir / "m.fb") + " --graph 'lstm > last > fc' --batch-first ";
  const struct {
    std::string args, words;
  } cases[] = {
      {"--meta a=1 --meta a=2", "--meta a: the key is given twice"},
      {"--meta 'bad key=1'", "the key must be 1 to 64 characters"},
      {"--meta novalue", "expected KEY=VALUE"},
      {"--meta x=@" + shell_quote(bin), "not UTF-8"},
      {"--meta x=@" + shell_quote(dir / "missing.npy"), "missing.npy"},
  };
  for (const auto& k : cases) {
    const CommandResult r = run_ferry(base + k.args, dir);
    EXPECT_NE(r.status, 0) << k.args;
    EXPECT_NE(r.err.find(k.words), std::string::npos) << k.args << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "m.fb")) << k.args;
  }
}

}  // namespace
