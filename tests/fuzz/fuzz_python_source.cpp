// Fuzz target: a --code source (mapping/python_source.h, python_model.h and
// the forward read by mapping/script_chain.h), as text, against a real
// checkpoint.
//
// Input: byte 0 picks a checkpoint of tests/fixtures/code (kBases: a state
// dict, a whole pickled module, a Lightning checkpoint, a token model, a
// conv front end); the rest is the source: a notebook's JSON where it starts
// with '{', else a .py file. It is tokenized, its model class matched to the
// checkpoint and its constructor read, the forward read into a chain, and
// the chain's text parsed back as a --graph. An Error is a refusal, the
// expected outcome for most inputs; a crash, a hang past the step caps or an
// unbounded allocation is a bug.
#include <cstdint>
#include <memory>
#include <string>

#include "checkpoint/checkpoint.h"
#include "error.h"
#include "fixture_base.h"
#include "fuzz_support.h"
#include "io/mapped_file.h"
#include "mapping/graph.h"
#include "mapping/modules.h"
#include "mapping/python_model.h"
#include "mapping/python_source.h"
#include "mapping/script_chain.h"

namespace {

using namespace ferry::conv;

const char* const kBases[] = {"code/lstm_init_hidden.pt", "code/gru_zeros_whole.pt", "code/lit_split.ckpt",
                              "code/char_gru.pt", "code/crnn_mel.pt", "code/lstm_hidden_arg.pt"};
constexpr size_t kBaseCount = sizeof kBases / sizeof kBases[0];

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const ferry::fuzz::FixtureBase& b = ferry::fuzz::fixture_base(kBases, data[0] % kBaseCount);
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    CodeModel code;
    python::read_source_text(!text.empty() && text[0] == '{' ? "fuzz.ipynb" : "fuzz.py", text, code.program);
    Checkpoint checkpoint = b.checkpoint;
    code = match_model(std::move(code), "", checkpoint, b.modules);
    const ModuleSet modules = group_modules(checkpoint);
    const RecordedChain chain = script_chain(checkpoint, modules, &code.program);
    (void)parse_graph(chain.graph);
  } catch (const Error&) {
  }
  return 0;
}
