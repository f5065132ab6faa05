#include "lib/base/anonymous_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moe {

absl::StatusOr<std::unique_ptr<AnonymousMemory>> AnonymousMemory::Allocate(size_t bytes) {
  constexpr size_t kHugePage = 2u << 20;
  const size_t size = std::max<size_t>(kHugePage, (bytes + kHugePage - 1) / kHugePage * kHugePage);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::UnavailableError(absl::StrCat("out of memory: cannot map ", bytes,
                                               " bytes: ", std::strerror(errno)));
  }
#ifdef MADV_HUGEPAGE
  ::madvise(p, size, MADV_HUGEPAGE);  // a hint: fine if the kernel says no
#endif
  return std::unique_ptr<AnonymousMemory>(new AnonymousMemory(static_cast<uint8_t*>(p), size));
}

AnonymousMemory::~AnonymousMemory() { ::munmap(data_, size_); }

}  // namespace moe
