// A memory budget for experts: a slab of fixed-size slots, each holding one (layer, expert) unit
// in the layout the kernels run. The experts a step uses are made resident and pinned until the
// step ends; the others are evicted by policy when room is needed. The budget is exact: the slab
// is allocated once, as many whole slots as fit, and nothing else holds expert bytes.
//
// Loading is the caller's (a Loader fills a slot: a disk read, a re-layout); it runs outside the
// cache's lock, so one thread's miss does not stall other threads' hits. Thread-safe: contexts on
// several threads share one cache.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace moe {

struct ExpertKey {
  int32_t layer = 0;
  int32_t expert = 0;
  friend bool operator==(ExpertKey a, ExpertKey b) {
    return a.layer == b.layer && a.expert == b.expert;
  }
  template <typename H>
  friend H AbslHashValue(H h, ExpertKey k) {
    return H::combine(std::move(h), k.layer, k.expert);
  }
};

enum class EvictionPolicy {
  kLru,   // the least recently used unpinned expert goes
  kLfru,  // the least frequently used one (counts halve as they age), the least recent on ties
};

struct ExpertCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t evictions = 0;
  int64_t bytes_loaded = 0;
  double load_seconds = 0;  // inside the loader
  double wait_seconds = 0;  // Acquire waiting for a slot other threads had pinned
};

// What happened between two snapshots of a cache's statistics.
inline ExpertCacheStats operator-(const ExpertCacheStats& now, const ExpertCacheStats& before) {
  return {now.hits - before.hits,
          now.misses - before.misses,
          now.evictions - before.evictions,
          now.bytes_loaded - before.bytes_loaded,
          now.load_seconds - before.load_seconds,
          now.wait_seconds - before.wait_seconds};
}

class ExpertCache {
 public:
  // Fills `slot` (slot_bytes long) with the unit of `key`. An error fails the Acquire that
  // needed the expert; the slot is freed again and the cache stays usable.
  using Loader = std::function<absl::Status(ExpertKey key, absl::Span<uint8_t> slot)>;

  struct Options {
    size_t budget_bytes = 0;
    size_t slot_bytes = 0;  // the largest unit, as the kernels run it
    // The fewest slots that let one step run (the top-k experts of a layer); a budget with
    // fewer is an error naming the bytes it takes.
    size_t min_slots = 1;
    EvictionPolicy policy = EvictionPolicy::kLru;
  };

  static absl::StatusOr<std::unique_ptr<ExpertCache>> Create(const Options& options, Loader loader);
  ~ExpertCache();
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  // Experts made resident for one step and pinned while this lives.
  class Pinned {
   public:
    Pinned() = default;
    Pinned(Pinned&& other) noexcept;
    Pinned& operator=(Pinned&& other) noexcept;
    ~Pinned();
    // The bytes of the i-th key given to Acquire.
    absl::Span<const uint8_t> bytes(size_t i) const;
    size_t size() const { return index_of_.size(); }

   private:
    friend class ExpertCache;
    ExpertCache* cache_ = nullptr;
    std::vector<int32_t> slots_;    // one per distinct key, pinned once each
    std::vector<size_t> index_of_;  // for each key given, its distinct key
  };

  // Makes every key resident (loading the missing ones) and pins them. The slots for all of them
  // are reserved at once (so two threads' steps cannot each hold part of what the other needs);
  // it waits, holding nothing, while other threads' steps have them pinned, and fails at once
  // when the keys, with the experts pinned by Pin(), could never fit. Duplicate keys share one
  // slot.
  absl::StatusOr<Pinned> Acquire(absl::Span<const ExpertKey> keys);

  // Keeps an expert resident until Unpin (loading it now); counted against the budget.
  absl::Status Pin(ExpertKey key);
  void Unpin(ExpertKey key);

  bool IsResident(ExpertKey key) const;
  std::vector<ExpertKey> Resident() const;
  ExpertCacheStats stats() const;
  size_t slot_count() const { return slot_count_; }
  size_t slot_bytes() const { return slot_bytes_; }
  // Bytes the slab holds: slot_count() * slot_bytes() <= the budget, always.
  size_t capacity_bytes() const { return slot_count_ * slot_bytes_; }

 private:
  struct Slot {
    ExpertKey key;
    bool used = false;     // holds `key` (or is loading it)
    bool loading = false;  // reserved, its loader running outside the lock
    int32_t pins = 0;      // steps using it plus user pins
    bool user_pinned = false;
    uint64_t last_use = 0;
    uint32_t frequency = 0;
  };

  ExpertCache(const Options& options, Loader loader, std::shared_ptr<void> slab, size_t slots);
  // Up to n slots a request may take: free ones first, then unpinned ones in the order the
  // policy gives them up, never one holding a key in `keep` (the request's own hits).
  // The *Locked functions run with mu_ held.
  std::vector<int32_t> VictimsLocked(size_t n, absl::Span<const ExpertKey> keep);
  void TouchLocked(Slot& s);
  void ReleaseSlots(absl::Span<const int32_t> slots);
  uint8_t* SlotData(int32_t slot) const { return slab_ + static_cast<size_t>(slot) * slot_bytes_; }

  const size_t slot_bytes_;
  const size_t slot_count_;
  const EvictionPolicy policy_;
  Loader loader_;
  std::shared_ptr<void> slab_owner_;
  uint8_t* slab_ = nullptr;

  // std::mutex rather than absl::Mutex: Debian's Abseil is not built for ThreadSanitizer, which
  // then cannot see its locking; pthread-based locks it sees.
  mutable std::mutex mu_;
  std::condition_variable changed_;  // a slot was released or finished loading
  // Guarded by mu_:
  std::vector<Slot> slots_;
  absl::flat_hash_map<ExpertKey, int32_t> where_;
  uint64_t clock_ = 0;
  int32_t user_pins_ = 0;
  ExpertCacheStats stats_;
};

}  // namespace moe
