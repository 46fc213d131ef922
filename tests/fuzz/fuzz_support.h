// Helpers shared by the fuzz targets.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "checkpoint/checkpoint.h"
#include "error.h"
#include "io/mapped_file.h"
#include "mapping/modules.h"

namespace ferry::fuzz {

// The fuzz input as a MappedFile, the only input type of load_checkpoint():
// the bytes are written to one memfd (reused across inputs) and mapped by its
// /proc/self/fd path, so the converter reads them exactly as it reads a file.
class MemoryFile {
 public:
  MemoryFile() : fd_(::memfd_create("ferry-fuzz-input", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  std::unique_ptr<conv::MappedFile> map(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    return std::make_unique<conv::MappedFile>(path_);
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

// A copy of the input at a 64-byte-aligned address (libFuzzer's buffer has
// none), as a model file is used in place.
class AlignedCopy {
 public:
  AlignedCopy(const uint8_t* data, size_t size)
      : data_(static_cast<uint8_t*>(std::aligned_alloc(64, (size + 64) / 64 * 64))), size_(size) {
    if (!data_) std::abort();
    if (size) std::memcpy(data_, data, size);
  }
  ~AlignedCopy() { std::free(data_); }
  AlignedCopy(const AlignedCopy&) = delete;
  AlignedCopy& operator=(const AlignedCopy&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_;
  size_t size_;
};

// Reads `bytes` as a checkpoint file and does what a conversion would with
// it: converts every tensor and groups the modules. A refusal (Error) is
// fine. Tensors over 2^20 elements are skipped: a zero-stride view may declare
// 2^40 elements backed by one, and the converter's 2 GiB output cap refuses
// those before materializing.
inline void exercise_checkpoint(MemoryFile& memory, const uint8_t* bytes, size_t size) {
  const auto file = memory.map(bytes, size);
  try {
    const conv::Checkpoint c = conv::load_checkpoint(*file);
    for (const conv::TensorRef& t : c.tensors)
      if (t.numel() <= (int64_t{1} << 20)) (void)conv::to_float32(t);
    (void)conv::group_modules(c);
  } catch (const conv::Error&) {
  }
}

// A broken invariant: abort, which libFuzzer (and the replay driver) report
// as a crash with the input that caused it.
[[noreturn]] inline void invariant_failed(const std::string& what) {
  std::fprintf(stderr, "ferry fuzz: invariant broken: %s\n", what.c_str());
  std::abort();
}

}  // namespace ferry::fuzz
