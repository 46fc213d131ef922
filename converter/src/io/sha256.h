// SHA-256 of the source checkpoint, for the provenance record of a model.
// Through OpenSSL's EVP interface, which uses the CPU's SHA extensions where
// present (~1.3 GB/s here), so hashing a large checkpoint does not bound the
// conversion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "io/mapped_file.h"

namespace ferry::conv {

// Lower-case hex SHA-256 of `size` bytes.
std::string sha256_hex(const uint8_t* data, size_t size);

// Of a whole mapped file, in 16 MiB chunks, releasing each chunk's pages from
// the resident set once hashed (page_release.h), so hashing a file larger
// than memory costs no more than a chunk.
std::string sha256_file(const MappedFile& file);

}  // namespace ferry::conv
