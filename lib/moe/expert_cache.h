// A memory budget for experts: a slab of fixed-size slots, each holding one (layer, expert) unit
// in the layout the kernels run. The experts a step uses are made resident and pinned until the
// step ends; the others are evicted by policy when room is needed. The budget is exact: the slab
// is allocated once, as many whole slots as fit, and nothing else holds expert bytes.
//
// Loading is the caller's (a Loader fills a slot: a disk read, a re-layout) and runs on the
// cache's own I/O threads, never on the thread that asked: a step's misses are queued at once and
// the step waits on each expert only when it is about to run it, so experts already resident
// compute meanwhile. Prefetches (a guess at a coming step's experts) queue behind every miss.
// Thread-safe: contexts on several threads share one cache.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
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

// Kept per layer (the layer of the expert concerned) and summed over layers.
struct ExpertCacheStats {
  int64_t hits = 0;    // a step's expert found resident, or already being read
  int64_t misses = 0;  // a step's expert that had to be read
  int64_t evictions = 0;
  int64_t bytes_loaded = 0;      // read into slots (misses and prefetches)
  double load_seconds = 0;       // inside the loader, on the I/O threads
  double wait_seconds = 0;       // a step waiting for an expert's read (compute stalled on I/O)
  double slot_wait_seconds = 0;  // a step waiting for slots other threads' steps had pinned
  int64_t prefetches = 0;        // reads started by Prefetch
  int64_t prefetch_hits = 0;     // prefetched experts a step then used
  int64_t prefetch_wasted_bytes = 0;  // prefetched experts evicted before any step used them
  int64_t predicted = 0;              // experts used by steps whose experts had been predicted
  int64_t predicted_right = 0;        // of those, the ones the prediction named

  ExpertCacheStats& operator+=(const ExpertCacheStats& o);
  ExpertCacheStats& operator-=(const ExpertCacheStats& o);
};

// What happened between two snapshots of a cache's statistics, and sums of them.
inline ExpertCacheStats operator-(ExpertCacheStats now, const ExpertCacheStats& before) {
  return now -= before;
}
inline ExpertCacheStats operator+(ExpertCacheStats a, const ExpertCacheStats& b) { return a += b; }

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
    int io_threads = 2;  // the loader runs on these; at least 1
    int n_layer = 0;     // statistics per layer are kept for layers [0, n_layer) (more on demand)
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
    size_t size() const { return index_of_.size(); }
    // Whether the i-th key's read has finished (well or not): Wait(i) would not block.
    bool ready(size_t i) const;
    // Blocks until the i-th key given is resident, counting the time as the step's wait for I/O;
    // its read error, if it failed (the call that needed the expert reports it).
    absl::Status Wait(size_t i) const;
    absl::Status WaitAll() const;
    // The bytes of the i-th key given, once Wait(i) succeeded.
    absl::Span<const uint8_t> bytes(size_t i) const;

   private:
    friend class ExpertCache;
    ExpertCache* cache_ = nullptr;
    std::vector<int32_t> slots_;    // one per distinct key, pinned once each
    std::vector<size_t> index_of_;  // for each key given, its distinct key
  };

  // Pins a slot for every key and queues the reads of the missing ones ahead of any prefetch,
  // returning before they finish (Pinned::Wait). The slots for all of them are reserved at once
  // (so two threads' steps cannot each hold part of what the other needs); it waits, holding
  // nothing, while other threads' steps have them pinned, and fails at once when the keys, with
  // the experts pinned by Pin(), could never fit. Duplicate keys share one slot.
  absl::StatusOr<Pinned> Request(absl::Span<const ExpertKey> keys);
  // Request, then waits for every read: the first read error is the status.
  absl::StatusOr<Pinned> Acquire(absl::Span<const ExpertKey> keys);

  // Starts reading the keys that are not resident, into free slots or ones the policy would give
  // up first, never one holding a key in `keep` (or in `keys`), pinned or being read; never waits.
  // Reads queued by an earlier Prefetch that have not started and no step wants are dropped
  // first: that guess is stale. Returns how many reads it queued.
  size_t Prefetch(absl::Span<const ExpertKey> keys, absl::Span<const ExpertKey> keep = {});

  // Reads the keys into the slots nothing holds yet, in order, until none is free (never
  // evicting), and waits for the reads; the first key given ends up the most recently used.
  // Returns how many it read, or the first read error.
  absl::StatusOr<size_t> Warm(absl::Span<const ExpertKey> keys);

  // A step's prediction was checked: `used` experts ran, `right` of them had been predicted.
  void RecordPrediction(int layer, int64_t used, int64_t right);

  // Keeps an expert resident until Unpin (loading it now); counted against the budget.
  absl::Status Pin(ExpertKey key);
  void Unpin(ExpertKey key);

  bool IsResident(ExpertKey key) const;
  std::vector<ExpertKey> Resident() const;
  ExpertCacheStats stats() const;  // summed over layers
  std::vector<ExpertCacheStats> layer_stats() const;
  size_t slot_count() const { return slot_count_; }
  // The most experts one step can have pinned at once: the slots not pinned by Pin().
  size_t step_capacity() const;
  size_t slot_bytes() const { return slot_bytes_; }
  // Bytes the slab holds: slot_count() * slot_bytes() <= the budget, always.
  size_t capacity_bytes() const { return slot_count_ * slot_bytes_; }

 private:
  struct Slot {
    ExpertKey key;
    bool used = false;                 // holds `key`, or is being read for it, or failed to be
    bool loading = false;              // queued or being read on an I/O thread
    bool reading = false;              // being read on an I/O thread now
    bool joined_mid_read = false;      // a step pinned it while it was being read
    bool queued_for_prefetch = false;  // in prefetch_queue_, not started
    bool prefetched = false;           // read by Prefetch, no step has used it yet
    int32_t pins = 0;                  // steps using it plus user pins
    bool user_pinned = false;
    uint64_t last_use = 0;
    uint32_t frequency = 0;
    absl::Status error;  // its read failed: no longer in where_, freed when the last pin goes
  };

  ExpertCache(const Options& options, Loader loader, std::shared_ptr<void> slab, size_t slots);
  // Up to n slots a request may take: free ones first, then unpinned ones in the order the
  // policy gives them up, never one holding a key in `keep` (the request's own hits).
  // The *Locked functions run with mu_ held.
  std::vector<int32_t> VictimsLocked(size_t n, absl::Span<const ExpertKey> keep,
                                     absl::Span<const ExpertKey> keep_too = {});
  // Makes slot hold `key`, being read (evicting what it held).
  void AssignLocked(int32_t slot, ExpertKey key);
  void TouchLocked(Slot& s);
  ExpertCacheStats& StatsLocked(int32_t layer);
  void ReleaseSlots(absl::Span<const int32_t> slots);
  void IoLoop();
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
  std::deque<int32_t> demand_queue_, prefetch_queue_;  // slots to read, misses first
  bool stopping_ = false;
  std::condition_variable io_work_;
  std::vector<ExpertCacheStats> stats_;  // per layer

  std::vector<std::thread> io_threads_;  // last: started once everything above is ready
};

}  // namespace moe
