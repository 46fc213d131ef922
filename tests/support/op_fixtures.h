// The PyTorch op fixtures (tests/fixtures/ops, made by make_op_fixtures.py:
// every op of the graph syntax, with PyTorch's output for an input),
// converted in process the way `ferry convert` converts them (their --graph
// or the chain TorchScript records, their --layout and --key), optionally
// quantized (--quantize f16|int8|int4: the weighted layers the converter
// quantizes). For the shared backend tests (test_backends.cpp) and the CPU
// emulation of the CUDA kernels (test_cuda_host.cpp). Entries without a
// chain (a loop or branch the converter refuses) are left out.
#pragma once

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "convert.h"
#include "error.h"
#include "io/npy.h"

namespace ferry::test {

struct OpFixtureCase {
  std::string name;
  ferry::conv::ModelBytes bytes;
  std::vector<float> input;     // the model's layout, or empty when it takes tokens
  std::vector<int32_t> tokens;  // token ids ([B][T] batch-first, else [T][B])
  size_t batch = 1, seq = 1;
  std::vector<int32_t> lengths;
  std::vector<float> pytorch;   // PyTorch's output (of the fp32 model)
  double tolerance = 1e-5;      // against PyTorch, fp32
  bool causal = false;          // streams: ferry_step must equal ferry_run
};

// The op fixtures, converted (dtype: what --quantize asks; F32 for none).
// Conversion errors are returned in `errors` ("name: message").
inline std::vector<OpFixtureCase> op_fixture_cases(ferry::conv::DType dtype, std::vector<std::string>* errors) {
  using namespace ferry::conv;
  const std::string dir = std::string(FERRY_FIXTURES_DIR) + "/ops/";
  std::vector<OpFixtureCase> out;
  std::ifstream f(dir + "manifest.json");
  if (!f) return out;
  // A state dict does not record the groups of a first-layer conv: the user
  // writes groups= in --graph (as tests/e2e/test_op_fixtures.cpp does).
  const std::map<std::string, std::string> groups_given = {
      {"conv_groups2", "conv(padding=1,groups=2)"},
      {"conv_depthwise_nobias", "conv(padding=2,groups=8)"},
      {"conv_depthwise_mult2", "conv(padding=1,groups=4)"},
  };
  const nlohmann::json manifest = nlohmann::json::parse(f);
  for (const auto& e : manifest) {
    const bool has_graph = e.at("graph").is_string();
    const bool has_chain = e.contains("expect_chain") && e.at("expect_chain").is_string();
    if (!has_graph && !has_chain) continue;
    OpFixtureCase c;
    c.name = e.at("name");
    const std::string layout = e.at("layout");
    ConvertRequest request;
    request.input = dir + std::string(e.at("pt"));
    const auto given = groups_given.find(c.name);
    if (given != groups_given.end()) request.graph = given->second;
    else if (has_graph) request.graph = e.at("graph").get<std::string>();
    request.layout = layout == "batch_first" ? Layout::kBatchFirst
                   : layout == "channels_first" ? Layout::kChannelsFirst : Layout::kTimeMajor;
    // A state dict's sequence output in another layout: --output-layout (a
    // TorchScript form's code says it).
    const std::string out_layout = e.value("output_layout", std::string());
    if (has_graph && !out_layout.empty()) {
      request.output_layout = out_layout == "batch_first" ? Layout::kBatchFirst
                            : out_layout == "channels_first" ? Layout::kChannelsFirst : Layout::kTimeMajor;
    }
    if (e.contains("key") && e.at("key").is_string()) request.key = e.at("key").get<std::string>();
    request.selftest = SelfTestPolicy::Never;
    request.quantize.dtype = dtype;
    try {
      c.bytes = convert(request).bytes;
    } catch (const Error& err) {
      if (errors) errors->push_back(c.name + ": " + err.what());
      continue;
    }
    const NpyArray x = read_npy(dir + std::string(e.at("input")), true);
    const NpyArray y = read_npy(dir + std::string(e.at("output")));
    const std::vector<size_t>& s = x.shape;
    if (x.is_ids) {
      c.tokens = x.ids;
      c.batch = layout == "time_major" ? s[1] : s[0];
      c.seq = layout == "time_major" ? s[0] : s[1];
    } else {
      c.input = x.data;
      if (s.size() == 2) {
        c.batch = s[0];
      } else if (layout == "time_major") {
        c.seq = s[0], c.batch = s[1];
      } else {
        c.batch = s[0];
        c.seq = layout == "channels_first" ? s[2] : s[1];
      }
    }
    if (e.contains("lengths")) c.lengths = e.at("lengths").get<std::vector<int32_t>>();
    c.pytorch = y.data;
    c.tolerance = e.at("tolerance").get<double>();
    c.causal = e.value("causal", false);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace ferry::test
