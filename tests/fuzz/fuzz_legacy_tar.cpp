// Fuzz target: the pre-0.3 tar checkpoint reader (converter/src/checkpoint/
// legacy_tar.h). The input is a tar archive; the target stamps the ustar
// magic at byte 257 (where format detection looks for it) so that every
// input of 262 bytes or more reaches the tar reader through
// load_checkpoint(): tar headers and pax records, then the storages,
// views, tensors and main pickle of the members. Seeds: the torch 0.2
// fixture (tests/fixtures/old_torch/module_v02_tar.pt) and the catalogue's
// tar files.
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  if (bytes.size() >= 262) std::memcpy(bytes.data() + 257, "ustar", 5);
  static ferry::fuzz::MemoryFile memory;
  ferry::fuzz::exercise_checkpoint(memory, bytes.data(), bytes.size());
  return 0;
}
