// Fuzz target: the safetensors reader (header JSON, dtypes, shapes, the
// data layout). The input is the JSON header, a NUL byte, then the data
// section; the target prepends the u64 header length, so every input is a
// well-framed safetensors file and the fuzzer spends its time on the header
// and the offsets, not on the framing. Tensors the reader accepts are
// materialized as float32 (bounded, as a conversion would).
#include <cstdint>
#include <cstring>
#include <vector>

#include "checkpoint.h"
#include "error.h"
#include "fuzz_support.h"
#include "modules.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t header = nul ? static_cast<size_t>(nul - data) : size;
  std::vector<uint8_t> bytes(8);
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(uint64_t{header} >> (8 * i));
  bytes.insert(bytes.end(), data, data + header);
  if (nul) bytes.insert(bytes.end(), nul + 1, data + size);
  static ferry::fuzz::MemoryFile memory;
  const auto file = memory.map(bytes.data(), bytes.size());
  try {
    const ferry::conv::Checkpoint c = ferry::conv::load_checkpoint(*file);
    for (const ferry::conv::TensorRef& t : c.tensors)
      if (t.numel() <= (int64_t{1} << 20)) (void)ferry::conv::to_float32(t);
    (void)ferry::conv::group_modules(c);
  } catch (const ferry::conv::Error&) {
  }
  return 0;
}
