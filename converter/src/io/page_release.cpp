#include "io/page_release.h"

#include <sys/mman.h>
#include <unistd.h>

namespace ferry::conv {

void release_pages(const MappedFile& file, const uint8_t* data, size_t size) {
  if (!data || size == 0 || data < file.data() || data + size > file.data() + file.size()) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  // Whole pages only, inside the range (a partial page may hold a neighbour
  // still in use; releasing it would merely cost a refault, but keep it tidy).
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + size) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace ferry::conv
