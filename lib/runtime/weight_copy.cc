#include "lib/runtime/weight_copy.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "lib/backend/cpu/repack.h"
#include "lib/base/anonymous_memory.h"
#include "lib/base/status_macros.h"

namespace moe {
namespace {

// Drops the whole pages of a copied range of a read-only file mapping from this process, so that
// loading does not hold the model twice (the page cache may keep them; that is not ours).
void ReleaseMappedPages(absl::Span<const uint8_t> range) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t begin = (reinterpret_cast<uintptr_t>(range.data()) + page - 1) / page * page;
  uintptr_t end = (reinterpret_cast<uintptr_t>(range.data()) + range.size()) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace

absl::Status CopyWeights(ModelSpec& spec, bool repack, SimdLevel level,
                         const std::function<bool(float)>& progress,
                         const std::function<bool(const TensorSpec&)>& leave_in_file) {
  auto copied = [&](const TensorSpec& t) { return !leave_in_file || !leave_in_file(t); };
  size_t total = 0;
  for (const auto& t : spec.tensors) {
    if (copied(t)) total += (t.byte_size() + 63) / 64 * 64;
  }
  MOE_ASSIGN_OR_RETURN(std::shared_ptr<AnonymousMemory> memory,
                       AnonymousMemory::Allocate(std::max<size_t>(total, 64)));
  size_t pos = 0, done = 0;
  bool left_some = false;
  for (auto& t : spec.tensors) {
    if (!copied(t)) {
      left_some = true;
      continue;
    }
    const size_t bytes = t.byte_size();
    if (t.deferred()) {  // made in place: a converter's tensor never held twice
      MOE_RETURN_IF_ERROR(MakeDeferredTensor(t, {memory->data() + pos, bytes}));
      t.produce = nullptr;
    } else {
      std::memcpy(memory->data() + pos, t.data.data(), bytes);
      ReleaseMappedPages(t.data);
    }
    t.data = {memory->data() + pos, bytes};
    if (repack && t.shape.size() == 2) {
      const DType r = RepackedType(t.dtype, t.shape[0], t.shape[1], level);
      if (r != t.dtype) {
        RepackRows(t.dtype, memory->data() + pos, t.shape[0], t.shape[1], level);
        t.dtype = r;
      }
    }
    pos += (t.data.size() + 63) / 64 * 64;
    done += t.data.size();
    if (progress && !progress(0.1f + 0.8f * done / std::max<size_t>(1, total))) {
      return absl::CancelledError("model load cancelled");
    }
  }
  if (!left_some) spec.owners.clear();
  spec.owners.push_back(memory);
  return absl::OkStatus();
}

}  // namespace moe
