#include "lib/backend/memory_space.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "lib/base/anonymous_memory.h"
#include "lib/base/available_memory.h"

namespace moe {
namespace {

class Host final : public MemorySpace {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (bytes >= kLarge) {
      // Large buffers (K/V pools) in huge-page-aligned anonymous memory, as weights are: fewer
      // TLB misses where attention walks them. Mapped memory is only backed once touched, and
      // the caller zeroes it at once: more than the system has would get the process killed
      // there, so it is refused here.
      if (absl::Status room = RoomFor(bytes, AvailableMemoryBytes()); !room.ok()) return room;
      absl::StatusOr<std::unique_ptr<AnonymousMemory>> m = AnonymousMemory::Allocate(bytes);
      if (!m.ok()) return absl::ResourceExhaustedError(m.status().message());
      void* p = (*m)->data();
      std::lock_guard<std::mutex> lock(mu_);
      large_.emplace(p, *std::move(m));
      return p;
    }
    void* p = ::operator new (std::max<size_t>(bytes, 1), std::align_val_t{64}, std::nothrow);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("could not allocate ", bytes, " bytes"));
    }
    return p;
  }
  void Free(void* p) override {
    if (p == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (large_.erase(p) > 0) return;
    }
    ::operator delete (p, std::align_val_t{64});
  }
  void Zero(void* p, size_t bytes) override {
    if (bytes > 0) std::memset(p, 0, bytes);
  }

 private:
  static constexpr size_t kLarge = size_t{2} << 20;
  // std::mutex, not absl::Mutex: ThreadSanitizer sees the standard library's locks, not those of
  // Debian's uninstrumented Abseil.
  std::mutex mu_;
  absl::flat_hash_map<void*, std::unique_ptr<AnonymousMemory>> large_;  // guarded by mu_
};

}  // namespace

MemorySpace& HostMemory() {
  static Host* host = new Host();  // never destroyed: caches may outlive static destruction
  return *host;
}

}  // namespace moe
