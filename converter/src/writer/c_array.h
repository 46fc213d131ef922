// `ferry convert ... --c-array model_data.h`: the model file as a C/C++
// header for firmware, a `const` byte array placed in flash and used in place
// by ferry_model_load (no copy), 64-byte aligned because the weight blob
// inside the file is aligned to 64 bytes from its start. The writer
// (model_writer.h) writes it from the finished model bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry::conv {

// The C identifier made from a header path: "out/model_data.h" -> "model_data";
// characters outside [A-Za-z0-9_] become '_', a leading digit gets '_'.
std::string c_array_name(const std::string& header_path);

// The header text: `static const uint8_t NAME[]` (aligned to 64 bytes, in C
// and C++, GCC/Clang/MSVC) and `static const size_t NAME_len`. `source` is
// named in the comment at the top.
std::string c_array_text(const uint8_t* data, size_t size, const std::string& name,
                         const std::string& source);

}  // namespace ferry::conv
