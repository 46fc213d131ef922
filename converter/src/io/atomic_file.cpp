#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "error.h"

namespace ferry::conv {
namespace {

// Set by cancel_writes(), from a signal handler.
volatile sig_atomic_t g_writes_cancelled = 0;

}  // namespace

AtomicFile::AtomicFile(const std::string& path) : path_(path), tmp_(path + ".tmp." + std::to_string(getpid())) {
  fd_ = ::open(tmp_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot create '" + tmp_ + "': " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const uint8_t* data, size_t size) {
  while (size > 0) {
    check_cancelled();
    const ssize_t n = ::write(fd_, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("cannot write '" + path_ + "': " + std::strerror(errno));
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::zeros(uint64_t size) {
  static const uint8_t kZeros[4096] = {};
  while (size > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(size, sizeof(kZeros)));
    write(kZeros, n);
    size -= n;
  }
}

void AtomicFile::copy_from(int in_fd, uint64_t offset, uint64_t size) {
  loff_t in_off = static_cast<loff_t>(offset);
  while (size > 0) {
    check_cancelled();
    const ssize_t n = ::copy_file_range(in_fd, &in_off, fd_, nullptr, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // refused (another file system, an old kernel): copy what is left by hand
    size -= static_cast<uint64_t>(n);
  }
  std::vector<uint8_t> buf(size ? size_t{1} << 20 : 0);
  while (size > 0) {
    const ssize_t n = ::pread(in_fd, buf.data(), static_cast<size_t>(std::min<uint64_t>(size, buf.size())), in_off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("cannot read the source file at offset " + std::to_string(in_off) + ": " + std::strerror(errno));
    write(buf.data(), static_cast<size_t>(n));
    in_off += n;
    size -= static_cast<uint64_t>(n);
  }
}

void AtomicFile::commit() {
  check_cancelled();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw Error("cannot write '" + path_ + "': " + std::strerror(errno));
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    throw Error("cannot rename '" + tmp_ + "' to '" + path_ + "': " + std::strerror(errno));
  }
  committed_ = true;
}

void AtomicFile::check_cancelled() const {
  if (g_writes_cancelled) throw Error("interrupted: '" + path_ + "' was not written");
}

void write_file_atomic(const std::string& path, const uint8_t* data, size_t size) {
  AtomicFile out(path);
  out.write(data, size);
  out.commit();
}

void cancel_writes() { g_writes_cancelled = 1; }

bool writes_cancelled() { return g_writes_cancelled != 0; }

}  // namespace ferry::conv
