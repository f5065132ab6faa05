// The experts of a model as units the runtime places: each (layer, expert) lives in the model
// file and, while it is used or kept hot, in a slot of the expert cache (lib/moe/expert_cache.h),
// read from disk on demand (lib/moe/expert_file_reader.h) and re-laid there into the layout the
// kernels run. Everything else of the model stays resident as before.
//
// The forward pass asks for a step's experts with Acquire and gets their weights, pinned until
// the Step is gone. Bytes are what the resident path would run (same file bytes, same re-layout),
// so outputs are bit-identical whatever the budget.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/backend/weight_view.h"
#include "lib/moe/expert_cache.h"
#include "lib/moe/expert_file_reader.h"
#include "lib/moe/expert_placement.h"
#include "lib/moe/routing_profile.h"

namespace moe {

// One matrix of an expert (gate, up or down) as stored in the file.
struct ExpertPart {
  uint64_t offset = 0;  // in the file
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  int32_t file = 0;  // which of the store's files
  size_t bytes() const { return RowBytes(dtype, cols) * rows; }
};

struct ExpertSource {
  ExpertPart gate, up, down;  // an ungated expert's gate is empty
  // Pruned experts, other ranks' and dense layers' have an empty source.
  bool has_weights() const { return down.bytes() > 0; }
};

// An expert's matrices where the kernels read them: in a pinned slot.
struct ExpertViews {
  WeightView gate, up, down;
};

// How the kernels want a matrix laid out, decided by the backend that runs them: the type it
// becomes, and the in-place re-layout from the stored type. Same bytes in, same bytes out as the
// load-time re-layout of resident weights.
struct ExpertLayout {
  std::function<DType(DType stored, int64_t rows, int64_t cols)> type;
  std::function<void(DType stored, uint8_t* data, int64_t rows, int64_t cols)> relayout;
};

struct ExpertStoreOptions {
  // For the cached and pinned experts; resident ones (placement) take their slots on top.
  size_t budget_bytes = 0;
  EvictionPolicy policy = EvictionPolicy::kLru;
  bool prefer_direct_io = true;
  size_t experts_per_step = 1;  // top-k: the least a layer's step pins at once
  // Reads run on these, never on the compute threads. Four measured the same as two on this
  // machine's disk (bench model, 25% budget, 8 alternating runs: 12.2 and 12.0 tok/s); a disk
  // that wants a deeper queue may take more (LoadOptions::expert_io_threads).
  int io_threads = 2;
  bool prefetch = true;  // whether forward passes read ahead (pre-gating)
  // Which experts are resident or pinned (read at load); null: every expert cached.
  const ExpertPlacement* placement = nullptr;
};

class ExpertStore {
 public:
  // sources: [layer][expert], every part inside the file paths[part.file].
  static absl::StatusOr<std::unique_ptr<ExpertStore>> Create(
      const std::vector<std::string>& paths, std::vector<std::vector<ExpertSource>> sources,
      const ExpertLayout& layout, const ExpertStoreOptions& options);

  // The bytes one expert takes in a slot (its three matrices, each 64-byte aligned), and all of
  // them together: what a 100% budget is.
  size_t slot_bytes() const { return slot_bytes_; }
  size_t total_expert_bytes() const;
  static size_t SlotBytes(const std::vector<std::vector<ExpertSource>>& sources);

  // A step's experts, pinned while this lives.
  class Step {
   public:
    size_t size() const { return views_.size(); }
    // Whether the i-th expert asked for is read (Wait would not block).
    bool ready(size_t i) const { return pinned_.ready(i); }
    // Blocks until the i-th expert is resident; its read error if it could not be read.
    absl::Status Wait(size_t i) const { return pinned_.Wait(i); }
    // The i-th expert asked for, once Wait(i) succeeded.
    const ExpertViews& views(size_t i) const { return views_[i]; }

   private:
    friend class ExpertStore;
    ExpertCache::Pinned pinned_;
    std::vector<ExpertViews> views_;
  };
  // Pins the experts of `layer` and queues the reads of the missing ones, returning before they
  // finish: the caller runs the ready ones and waits on the others (Step::Wait), so compute
  // overlaps the reads. A read error, or the file changed on disk, is Wait's status; the store
  // stays usable. Remembers the experts as the layer's latest (see Prefetch).
  absl::StatusOr<Step> Request(int layer, absl::Span<const int32_t> experts);
  // Request, then waits for every read: the first error is the status.
  absl::StatusOr<Step> Acquire(int layer, absl::Span<const int32_t> experts);

  // A guess at a coming step's experts of `layer` (for example that layer's router applied to
  // the current hidden state): starts reading the missing ones, never evicting the layer's
  // latest step's experts (temporal locality: the next token often picks them again). Returns
  // the reads queued.
  size_t Prefetch(int layer, absl::Span<const int32_t> experts);

  // Where an expert lives now: its placement, changed by Pin and Unpin.
  ExpertTier tier(int layer, int expert) const;
  // Whether its weights are in memory now (resident, pinned, or cached and not evicted).
  bool InMemory(int layer, int expert) const { return cache_->IsResident({layer, expert}); }
  // How many of the layer's experts are in memory now.
  int ExpertsInMemory(int layer) const;
  const ExpertSource& source(int layer, int expert) const { return sources_[layer][expert]; }
  // InvalidArgument unless 0 <= layer < n_layer() and 0 <= expert < n_expert().
  absl::Status CheckExpert(int layer, int expert) const;
  // Keeps a cached expert in memory (reading it now) until Unpin; counted against the budget,
  // which must keep room for one step besides. A resident expert is in memory already.
  absl::Status Pin(int layer, int expert);
  // A pinned expert becomes cached again; a resident one cannot (FailedPrecondition).
  absl::Status Unpin(int layer, int expert);
  int CountTier(ExpertTier tier) const;
  // Fills the cache's free slots with the experts a routing profile chose most, hottest first,
  // so the first tokens do not stall on reads. Returns how many it read.
  absl::StatusOr<size_t> Warm(const RoutingProfile& profile);
  size_t resident_bytes() const { return resident_slots_ * slot_bytes_; }
  // The cache's bytes less the resident experts': what the budget bought.
  size_t budget_bytes() const { return cache_->capacity_bytes() - resident_bytes(); }

  ExpertCache& cache() { return *cache_; }
  const ExpertCache& cache() const { return *cache_; }
  // The files experts are read from: the model file, or a checkpoint's shards.
  size_t n_files() const { return readers_.size(); }
  ExpertFileReader& reader(size_t file = 0) { return *readers_[file]; }
  const ExpertFileReader& reader(size_t file = 0) const { return *readers_[file]; }
  bool prefetch() const { return prefetch_; }
  int n_layer() const { return static_cast<int>(sources_.size()); }
  int n_expert() const { return sources_.empty() ? 0 : static_cast<int>(sources_[0].size()); }

 private:
  ExpertStore() = default;
  absl::Status Load(ExpertKey key, absl::Span<uint8_t> slot) const;
  // Where each part sits in a slot, and its type there.
  struct SlotPart {
    size_t offset;
    DType dtype;
  };

  std::vector<std::vector<ExpertSource>> sources_;
  ExpertLayout layout_;
  size_t slot_bytes_ = 0;
  bool prefetch_ = true;
  size_t resident_slots_ = 0;
  size_t experts_per_step_ = 1;
  int CountTierLocked(ExpertTier tier) const;  // tier_mu_ held
  mutable std::mutex tier_mu_;
  std::vector<std::vector<ExpertTier>> tiers_;  // guarded by tier_mu_
  std::vector<std::unique_ptr<ExpertFileReader>> readers_;

  std::mutex latest_mu_;
  std::vector<std::vector<ExpertKey>> latest_;  // per layer: its latest step's experts

  std::unique_ptr<ExpertCache> cache_;  // last: its I/O threads stop before the rest goes
};

}  // namespace moe
