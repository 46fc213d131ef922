// Fuzz target: a whole checkpoint to a model file, in memory, through the
// converter's one entry point, convert(): format detection and every reader
// behind load_checkpoint() (zip, legacy, whole module, TorchScript,
// safetensors as they exist), module grouping, the layer chain (inferred,
// else every module in order), the plan with its tensor conversions, the
// writer (whose runtime pass verifies its own output), and one run of the
// result.
//
// An Error is a refusal, the expected outcome for most inputs. An "internal:"
// Error means the converter wrote a model its own runtime refuses: a bug,
// reported as a crash.
#include <cstdint>
#include <optional>
#include <string>

#include "../fuzz/exercise_model.h"
#include "checkpoint/checkpoint.h"
#include "convert.h"
#include "error.h"
#include "fuzz_support.h"
#include "mapping/modules.h"

namespace {

using namespace ferry::conv;

// Thrown from the plan callback to skip a conversion too large to be useful.
struct TooLarge {};

void convert_file(const std::string& path, const std::optional<std::string>& graph,
                  const std::optional<bool>& batch_first) {
  ConvertRequest request;
  request.input = path;
  request.graph = graph;
  request.batch_first = batch_first;
  request.selftest = SelfTestPolicy::Never;
  // A few bytes of zero-stride views can declare gigabytes of weights, which
  // the converter then writes (up to its 2 GiB cap). Real, but not what
  // this harness looks for: it stops at 64 MiB of output.
  request.on_plan = [](const ConvertReport& report) {
    if (report.weight_bytes > (uint64_t{64} << 20)) throw TooLarge{};
  };
  ConvertResult result;
  try {
    result = convert(request);
  } catch (const TooLarge&) {
    return;
  }
  const ferry::fuzz::AlignedCopy copy(result.bytes.data(), result.bytes.size());
  const ferry::test::ExerciseResult r = ferry::test::exercise_model(copy.data(), copy.size(), size_t{16} << 20);
  if (r.load != FERRY_OK) ferry::fuzz::invariant_failed(std::string("converted model refused: ") + ferry_last_error());
  if (!r.failure.empty()) ferry::fuzz::invariant_failed("converted model: " + r.failure);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ferry::fuzz::MemoryFile memory;
  const auto file = memory.map(data, size);
  try {
    const Checkpoint checkpoint = load_checkpoint(*file);
    const ModuleSet modules = group_modules(checkpoint);
    try {
      convert_file(memory.path(), std::nullopt, std::nullopt);
    } catch (const Error& e) {
      if (std::string(e.what()).rfind("internal", 0) == 0) throw;
      // No inferable chain: every module in state-dict order.
      std::string graph;
      for (const Module& m : modules.modules) graph += (graph.empty() ? "" : " > ") + m.path;
      if (graph.empty()) return 0;
      convert_file(memory.path(), graph, size % 2 == 1);
    }
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("internal", 0) == 0) ferry::fuzz::invariant_failed(e.what());
  }
  return 0;
}
