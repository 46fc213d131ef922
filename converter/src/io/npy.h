// NumPy .npy files (format 1.0/2.0/3.0), float32 C order only: what
// `ferry run` reads and writes. Anything else is refused with a message that
// says what the file holds and how to convert it (`x.astype(np.float32)`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::conv {

struct NpyArray {
  std::vector<size_t> shape;
  std::vector<float> data;
};

NpyArray read_npy(const std::string& path);
// Parses an in-memory .npy image; `what` names it in errors.
NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& what);
// Writes atomically (temporary name + rename).
void write_npy(const std::string& path, const NpyArray& array);

}  // namespace ferry::conv
