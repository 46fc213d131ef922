// Fuzz target: the layer chain a file records (mapping/script_syntax.h,
// mapping/script_chain.h, mapping/sequential_chain.h), on the code itself
// rather than through zip and Deflate.
//
// Input: byte 0 picks a real archive (kBases: TorchScript files torch wrote,
// traced and scripted, some whose forward branches, and a whole pickled
// nn.Sequential); the rest is text:
// the root module's forward, then for any other module "\n#--- PATH\n" and
// its forward (tests/fuzz/make_seeds.py writes each base's own code this
// way). A part left empty keeps the file's own code. The checkpoint's
// tensors, modules and attributes stay those of the real file.
// Every line is also parsed alone, and the chain is read (script_chain, or
// sequential_chain where the root has no forward) and its text parsed back as
// a --graph. An Error is a refusal, the expected outcome for most inputs; a
// crash, a hang past the step cap or an unbounded allocation is a bug.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "error.h"
#include "fixture_base.h"
#include "fuzz_support.h"
#include "io/mapped_file.h"
#include "mapping/graph.h"
#include "mapping/modules.h"
#include "mapping/script_chain.h"
#include "mapping/script_syntax.h"
#include "mapping/sequential_chain.h"

namespace {

using namespace ferry::conv;

const char* const kBases[] = {
    "torch2_forms/traced_ts.pt",        "torch2_forms/scripted_ts.pt",     "ops/ts_traced_crnn.pt",
    "ops/ts_traced_inplace_residual.pt", "ops/ts_scripted_transposed_time_major.pt", "torch2_forms/seq_whole.pt",
    // forwards that branch (if / else blocks) on attributes, ranks, sizes and a None default
    "script_branches/branch_attributes.pt", "script_branches/branch_optional.pt",
    "script_branches/branch_input_features.pt",
};
constexpr size_t kBaseCount = sizeof kBases / sizeof kBases[0];

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    // As torchscript.cpp keeps them: cut one past kMaxScriptLine.
    out.push_back(text.substr(start, std::min(end - start, kMaxScriptLine + 1)));
    start = end + 1;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const ferry::fuzz::FixtureBase& b = ferry::fuzz::fixture_base(kBases, data[0] % kBaseCount);
  Checkpoint ck = b.checkpoint;  // tensors view b.file, which outlives this call
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  const std::string separator = "\n#--- ";
  size_t start = 0;
  std::string path;  // "" for the root
  while (start <= text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(start, end - start);
    for (ModuleObject& o : ck.module_objects)
      if (o.path == path && !part.empty()) o.forward = lines_of(part);
    if (end == text.size()) break;
    start = end + separator.size();
    const size_t eol = text.find('\n', start);
    path = text.substr(start, eol == std::string::npos ? std::string::npos : eol - start);
    start = eol == std::string::npos ? text.size() + 1 : eol + 1;
  }
  for (const ModuleObject& o : ck.module_objects)
    for (const std::string& line : o.forward) (void)script::parse_statement(line);
  try {
    const RecordedChain r = has_script_forward(ck) ? script_chain(ck, b.modules) : sequential_chain(ck, b.modules);
    if (r.graph.empty()) ferry::fuzz::invariant_failed("an empty chain read without an error");
    (void)parse_graph(r.graph);
  } catch (const Error&) {
  }
  return 0;
}
