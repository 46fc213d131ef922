// NumPy .npy files (format 1.0/2.0/3.0), C order: what `ferry run` reads and
// writes. float32, and for models taking token ids int32 / int64 (ids must
// fit int32). Anything else is refused with a message that says what the
// file holds and how to convert it (`x.astype(np.float32)`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::conv {

struct NpyArray {
  std::vector<size_t> shape;
  std::vector<float> data;   // float32 arrays
  std::vector<int32_t> ids;  // integer arrays (only when read with allow_ids)
  std::vector<double> numbers;  // read_npy_numbers: any of the four dtypes
  bool is_ids = false;
};

// `allow_ids`: also accept int32 / int64 arrays (token ids) into `ids`.
NpyArray read_npy(const std::string& path, bool allow_ids = false);
// float32, float64, int32 or int64 (within 2^53) as doubles, into `numbers`:
// `ferry convert --meta KEY=@FILE.npy`.
NpyArray read_npy_numbers(const std::string& path);
// Parses an in-memory .npy image; `what` names it in errors.
NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& what, bool allow_ids = false);
// Writes atomically (temporary name + rename).
void write_npy(const std::string& path, const NpyArray& array);

}  // namespace ferry::conv
