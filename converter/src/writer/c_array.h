// `ferry convert ... --c-array model_data.h`: the model file as a C/C++
// header for firmware, a `const` byte array placed in flash and used in place
// by ferry_model_load (no copy), 64-byte aligned because the weight blob
// inside the file is aligned to 64 bytes from its start. The writer
// (model_writer.h) writes it from the finished model bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry::conv {

// The memory figures a header defines as macros (runtime_pass.h makes them).
struct CArrayArena {
  size_t batch = 1, seq = 1;
  size_t total = 0;         // on this (the converting) machine, for the comment
  size_t portable = 0;      // FERRY_ARENA_BYTES_CPU's arguments (ferry/ferry_sizes.h)
  uint32_t lone_cells = 0;
  size_t program_ops = 0;
  std::string refused;      // the runtime's message where it has no such session
};
struct CArrayMemory {
  uint32_t chain = 0, cells = 0;  // the capacities the model needs
  std::vector<CArrayArena> arenas;  // the first: streaming at batch 1
  // ferry_selftest's arena on the reference kernels: its session at the
  // vectors' (batch, seq), then selftest_output_bytes; when has_selftest.
  bool has_selftest = false;
  CArrayArena selftest;
  size_t selftest_output_bytes = 0;
};

// The C identifier made from a header path: "out/model_data.h" -> "model_data";
// characters outside [A-Za-z0-9_] become '_', a leading digit gets '_'.
std::string c_array_name(const std::string& header_path);

// The header text: `static const uint8_t NAME[]` (aligned to 64 bytes, in C
// and C++, GCC/Clang/MSVC) and `static const size_t NAME_len`. `source` is
// named in the comment at the top.
// With `memory`, also the memory macros: NAME_ARENA_BYTES (streaming at
// batch 1), NAME_ARENA_BYTES_B<b>_T<t>, NAME_HANDLE_BYTES, NAME_MAX_CHAIN and
// NAME_MAX_CELLS (NAME: the array's name in capitals), exact for the target
// that compiles the header (ferry/ferry_sizes.h), and an #error where that
// target's capacities cannot load the model.
std::string c_array_text(const uint8_t* data, size_t size, const std::string& name, const std::string& source,
                         const CArrayMemory* memory = nullptr);

}  // namespace ferry::conv
