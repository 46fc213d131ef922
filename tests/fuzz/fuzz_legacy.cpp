// Fuzz target: the legacy (pre-1.6, non-zip) checkpoint reader. The input is
// the stream after the magic number: the target puts PROTO 2 + LONG1 of the
// 10-byte magic in front, so every input reaches the legacy reader through
// load_checkpoint()'s format detection (inputs that already start with it
// are used as they are: the fixtures as seeds).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const uint8_t kPrologue[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                      0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
  std::vector<uint8_t> bytes;
  if (size < sizeof kPrologue || std::memcmp(data, kPrologue, sizeof kPrologue) != 0)
    bytes.assign(kPrologue, kPrologue + sizeof kPrologue);
  bytes.insert(bytes.end(), data, data + size);
  static ferry::fuzz::MemoryFile memory;
  ferry::fuzz::exercise_checkpoint(memory, bytes.data(), bytes.size());
  return 0;
}
