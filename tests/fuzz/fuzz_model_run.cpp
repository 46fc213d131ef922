// Fuzz target: a model file loaded and run: every runtime entry point on
// fixed inputs (tests/fuzz/exercise_model.h). Once a model has loaded, every
// call with valid arguments must return a status (FERRY_OK, or
// FERRY_UNSUPPORTED for an unavailable backend); anything else is a crash.
#include <cstdint>

#include "exercise_model.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ferry::fuzz::AlignedCopy copy(data, size);
  const ferry::test::ExerciseResult r = ferry::test::exercise_model(copy.data(), copy.size(), size_t{16} << 20);
  if (!r.failure.empty()) ferry::fuzz::invariant_failed(r.failure);
  return 0;
}
