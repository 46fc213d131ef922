// Fuzz target: model verification (ferry_model_load) on arbitrary bytes, then
// what needs only the model: info, arena and output sizes, the self-test's
// arena. The fast target: no session runs (see fuzz_model_run).
#include <cstdint>

#include "ferry/ferry.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ferry::fuzz::AlignedCopy copy(data, size);
  alignas(64) static unsigned char handle[1 << 16];
  ferry_model_options options{sizeof(ferry_model_options), nullptr, 0};
  if (ferry_model_handle_size() <= sizeof handle && size % 2 == 0) {
    options.handle_memory = handle;  // the caller-memory path, half the time
    options.handle_memory_size = sizeof handle;
  }
  ferry_model* model = nullptr;
  const ferry_status st = ferry_model_load(copy.data(), copy.size(), &options, &model);
  if (st != FERRY_OK) {
    if (model) ferry::fuzz::invariant_failed("failed load returned a model");
    if (ferry_last_error()[0] == '\0') ferry::fuzz::invariant_failed("failed load without a message");
    return 0;
  }
  ferry_model_info info{};
  info.struct_size = sizeof info;
  if (ferry_model_get_info(model, &info) != FERRY_OK) ferry::fuzz::invariant_failed("get_info");
  size_t n = 0;
  for (size_t b : {size_t{1}, size_t{7}, size_t{1} << 40}) {
    for (size_t t : {size_t{1}, size_t{100}, size_t{1} << 40}) {
      (void)ferry_arena_size(model, b, t, &n);
      (void)ferry_output_floats(model, b, t, &n);
    }
  }
  (void)ferry_selftest_arena_size(model, &n);
  ferry_model_free(model);
  return 0;
}
