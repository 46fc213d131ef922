// Fuzz target: the safetensors reader (header JSON, dtypes, shapes, the
// data layout). The input is the JSON header, a NUL byte, then the data
// section; the target prepends the u64 header length, so every input is a
// well-framed safetensors file and the fuzzer spends its time on the header
// and the offsets, not on the framing. Tensors the reader accepts are
// materialized as float32 (bounded, as a conversion would).
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t header = nul ? static_cast<size_t>(nul - data) : size;
  std::vector<uint8_t> bytes(8);
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(uint64_t{header} >> (8 * i));
  bytes.insert(bytes.end(), data, data + header);
  if (nul) bytes.insert(bytes.end(), nul + 1, data + size);
  static ferry::fuzz::MemoryFile memory;
  ferry::fuzz::exercise_checkpoint(memory, bytes.data(), bytes.size());
  return 0;
}
