// Fuzz target: the .npy reader `ferry run` uses for its input
// (converter/src/npy.*).
#include <cstdint>
#include <string>

#include "error.h"
#include "fuzz_support.h"
#include "io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ferry::conv::NpyArray a = ferry::conv::parse_npy(data, size, "fuzz.npy");
    size_t n = 1;
    for (size_t d : a.shape) {
      if (__builtin_mul_overflow(n, d, &n)) ferry::fuzz::invariant_failed("accepted a shape that overflows");
    }
    if (n != a.data.size()) ferry::fuzz::invariant_failed("data size differs from the shape");
  } catch (const ferry::conv::Error&) {
  }
  return 0;
}
