// Fuzz target: the legacy (pre-1.6, non-zip) checkpoint reader. The input is
// the stream after the magic number: the target puts PROTO 2 + LONG1 of the
// 10-byte magic in front, so every input reaches the legacy reader through
// load_checkpoint()'s format detection (inputs that already start with it
// are used as they are: the fixtures as seeds).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "error.h"
#include "fuzz_support.h"
#include "modules.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const uint8_t kPrologue[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                      0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
  std::vector<uint8_t> bytes;
  if (size < sizeof kPrologue || std::memcmp(data, kPrologue, sizeof kPrologue) != 0)
    bytes.assign(kPrologue, kPrologue + sizeof kPrologue);
  bytes.insert(bytes.end(), data, data + size);
  static ferry::fuzz::MemoryFile memory;
  const auto file = memory.map(bytes.data(), bytes.size());
  try {
    const ferry::conv::Checkpoint c = ferry::conv::load_checkpoint(*file);
    // Materialize what a conversion would (a zero-stride view may declare
    // 2^40 elements backed by one: the converter's 2 GiB output cap refuses
    // those before materializing, so the harness skips them too).
    for (const ferry::conv::TensorRef& t : c.tensors)
      if (t.numel() <= (int64_t{1} << 20)) (void)ferry::conv::to_float32(t);
    (void)ferry::conv::group_modules(c);
  } catch (const ferry::conv::Error&) {
  }
  return 0;
}
