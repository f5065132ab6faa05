#include "lib/base/anonymous_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moe {

absl::StatusOr<std::unique_ptr<AnonymousMemory>> AnonymousMemory::Allocate(size_t bytes) {
  constexpr size_t kHugePage = 2u << 20;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t size = std::max<size_t>(page, (bytes + page - 1) / page * page);
  // Reserve a huge page more and keep a range that starts on a huge-page boundary: transparent
  // huge pages back only aligned 2 MiB ranges. The tail past the last whole huge page stays in
  // small pages, so the memory never holds more than a page beyond the bytes asked for (an
  // expert cache's budget is exact).
  const size_t reserve = size + kHugePage;
  void* raw = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return absl::UnavailableError(
        absl::StrCat("out of memory: cannot map ", bytes, " bytes: ", std::strerror(errno)));
  }
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (begin + kHugePage - 1) / kHugePage * kHugePage;
  if (start > begin) ::munmap(raw, start - begin);
  if (begin + reserve > start + size) {
    ::munmap(reinterpret_cast<void*>(start + size), begin + reserve - (start + size));
  }
  void* p = reinterpret_cast<void*>(start);
#ifdef MADV_HUGEPAGE
  ::madvise(p, size, MADV_HUGEPAGE);  // a hint: fine if the kernel says no
#endif
  return std::unique_ptr<AnonymousMemory>(new AnonymousMemory(static_cast<uint8_t*>(p), size));
}

AnonymousMemory::~AnonymousMemory() { ::munmap(data_, size_); }

}  // namespace moe
