// Loading a checkpoint built in memory (pt_builder.h) through the real file
// path: written to a temporary file, memory-mapped, read by load_checkpoint.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>

#include "checkpoint/checkpoint.h"
#include "error.h"
#include "io/mapped_file.h"
#include "pt_builder.h"

namespace ferry::test {

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Keeps the file and its mapping alive as long as the tensors that view it.
struct Loaded {
  std::unique_ptr<TempFile> file;
  std::unique_ptr<conv::MappedFile> map;
  conv::Checkpoint ck;
};

inline Loaded load(const Bytes& bytes, const conv::LoadOptions& options = {}) {
  Loaded l;
  l.file = std::make_unique<TempFile>(bytes);
  l.map = std::make_unique<conv::MappedFile>(l.file->path());
  l.ck = conv::load_checkpoint(*l.map, options);
  return l;
}

// The error message load() gives, or "" when the bytes load.
inline std::string load_error(const Bytes& bytes, const conv::LoadOptions& options = {}) {
  try {
    load(bytes, options);
  } catch (const conv::Error& e) {
    return e.what();
  }
  return "";
}

// Flips every `step`-th byte of `good` with each mask in turn and loads the
// result, converting every tensor it yields: each must either load or be
// refused with an Error — never crash (the sanitizer builds check memory).
inline void load_every_corruption(const Bytes& good, size_t step, std::initializer_list<uint8_t> masks) {
  for (size_t i = 0; i < good.size(); i += step) {
    for (uint8_t mask : masks) {
      Bytes bad = good;
      bad[i] ^= mask;
      try {
        Loaded l = load(bad);
        for (const conv::TensorRef& t : l.ck.tensors) conv::to_float32(t);
      } catch (const conv::Error&) {
      }
    }
  }
}

}  // namespace ferry::test
