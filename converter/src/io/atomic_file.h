// Output files that are never seen half-written, and the interruption that
// stops them.
//
// Every file the converter writes (the model, its --c-array header, a .npy
// output of `ferry run`) goes through AtomicFile: written under a temporary
// name in the same folder (PATH.tmp.<pid>) and renamed over PATH only when
// complete. Until commit() the temporary file is removed by the destructor,
// so an error anywhere (a refused input, a full disk, an interruption) leaves
// nothing at PATH, or the old file where there was one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ferry::conv {

class AtomicFile {
 public:
  // Creates PATH.tmp.<pid> (read-write, so the finished bytes can be mapped
  // and completed in place before the rename). Throws Error naming it.
  explicit AtomicFile(const std::string& path);
  // Removes the temporary file unless committed.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }

  // Appends bytes; throws Error naming PATH on failure or once cancelled.
  void write(const uint8_t* data, size_t size);
  void zeros(uint64_t size);
  // Appends `size` bytes of `in_fd` from `offset` inside the kernel
  // (copy_file_range), falling back to read/write where that is refused.
  void copy_from(int in_fd, uint64_t offset, uint64_t size);

  // Closes the file and renames it to PATH. No fsync: like cp or torch.save,
  // durability is left to the OS; the rename alone guarantees that PATH is
  // never seen half-written.
  void commit();

 private:
  void check_cancelled() const;

  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomic(const std::string& path, const uint8_t* data, size_t size);
inline void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes) {
  write_file_atomic(path, bytes.data(), bytes.size());
}

// Interruption. cancel_writes() only sets a flag, so a signal handler may
// call it (the CLI does, on SIGINT, SIGTERM and SIGHUP). From then on every
// AtomicFile fails at its next write or commit with Error("interrupted:
// ..."), and the unwinding removes its temporary file like any other error.
// A write that is already complete stays; a cancel is never undone.
void cancel_writes();
bool writes_cancelled();

}  // namespace ferry::conv
