// Releasing the pages of a read-only input mapping once they have been read.
//
// A conversion reads each byte of the checkpoint once (the hash, then the
// tensor being converted). Dropping those pages from this process's resident
// set right after (madvise MADV_DONTNEED: they stay in the page cache, and a
// later read simply faults them in again) keeps a conversion's memory at
// about the output's size however large the input is.
#pragma once

#include <cstddef>
#include <cstdint>

#include "io/mapped_file.h"

namespace ferry::conv {

// Drops the resident pages that lie wholly inside [data, data + size), when
// that range lies inside `file`'s mapping; a no-op otherwise, so heap memory
// (a converted copy) is never touched.
void release_pages(const MappedFile& file, const uint8_t* data, size_t size);

}  // namespace ferry::conv
