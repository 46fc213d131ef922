// Fuzz target: a whole checkpoint to a model file, in memory: format
// detection and every reader behind load_checkpoint() (zip, legacy, whole
// module, TorchScript, safetensors as they exist), module grouping, the
// layer chain (inferred, else every module in order), the plan with its
// tensor conversions, build_model() (which verifies its own output with the
// runtime), and one run of the result.
//
// An Error is a refusal, the expected outcome for most inputs. An "internal:"
// Error means the converter wrote a model its own runtime refuses: a bug,
// reported as a crash.
#include <cstdint>
#include <string>

#include "../fuzz/exercise_model.h"
#include "checkpoint.h"
#include "convert.h"
#include "error.h"
#include "fuzz_support.h"
#include "model_writer.h"
#include "modules.h"

namespace {

using namespace ferry::conv;

void convert(const Checkpoint& checkpoint, const ModuleSet& modules, const ConvertOptions& options) {
  ConvertResult result = plan_conversion(checkpoint, modules, options);
  ModelPlan& plan = result.plan;
  plan.source_file = "fuzz.pt";
  plan.source_sha256 = std::string(64, '0');
  plan.source_format = checkpoint.form;
  plan.converter_version = "fuzz";
  // A few bytes of zero-stride views can declare gigabytes of weights, which
  // the converter then writes (up to its 2 GiB cap). Real, but not what
  // this harness looks for: it stops at 64 MiB of output.
  uint64_t floats = 0;
  for (const TensorPlan& t : plan.tensors) floats += t.numel();
  if (floats > (uint64_t{16} << 20)) return;
  const ModelBytes bytes = build_model(plan);
  const ferry::fuzz::AlignedCopy copy(bytes.data(), bytes.size());
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
      convert(checkpoint, modules, {});
    } catch (const Error& e) {
      if (std::string(e.what()).rfind("internal", 0) == 0) throw;
      // No inferable chain: every module in state-dict order.
      std::string graph;
      for (const Module& m : modules.modules) graph += (graph.empty() ? "" : " > ") + m.path;
      if (graph.empty()) return 0;
      ConvertOptions options;
      options.graph = graph;
      options.batch_first = size % 2 == 1;
      convert(checkpoint, modules, options);
    }
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("internal", 0) == 0) ferry::fuzz::invariant_failed(e.what());
  }
  return 0;
}
