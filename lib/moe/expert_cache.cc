#include "lib/moe/expert_cache.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "lib/base/anonymous_memory.h"

namespace moe {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// LFRU counts halve every this many uses per slot, so an expert that was hot long ago does not
// stay forever (the "recently" of least frequently recently used).
constexpr uint64_t kAgingUsesPerSlot = 16;

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertCache>> ExpertCache::Create(const Options& options,
                                                                 Loader loader) {
  if (options.slot_bytes == 0) return absl::InvalidArgumentError("expert slots of 0 bytes");
  const size_t min_slots = std::max<size_t>(1, options.min_slots);
  const size_t slots = options.budget_bytes / options.slot_bytes;
  if (slots < min_slots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an expert cache of ", options.budget_bytes, " bytes holds ", slots,
        " experts, fewer than the ", min_slots, " one step uses at once: it needs at least ",
        min_slots * options.slot_bytes, " bytes"));
  }
  auto slab = AnonymousMemory::Allocate(slots * options.slot_bytes);
  if (!slab.ok()) return slab.status();
  return std::unique_ptr<ExpertCache>(new ExpertCache(
      options, std::move(loader), std::shared_ptr<AnonymousMemory>(*std::move(slab)), slots));
}

ExpertCache::ExpertCache(const Options& options, Loader loader, std::shared_ptr<void> slab,
                         size_t slots)
    : slot_bytes_(options.slot_bytes),
      slot_count_(slots),
      policy_(options.policy),
      loader_(std::move(loader)),
      slab_owner_(std::move(slab)),
      slab_(static_cast<AnonymousMemory*>(slab_owner_.get())->data()),
      slots_(slots) {}

ExpertCache::~ExpertCache() = default;

void ExpertCache::TouchLocked(Slot& s) {
  s.last_use = ++clock_;
  ++s.frequency;
  if (policy_ == EvictionPolicy::kLfru && clock_ % (kAgingUsesPerSlot * slot_count_) == 0) {
    for (Slot& other : slots_) other.frequency /= 2;
  }
}

std::vector<int32_t> ExpertCache::VictimsLocked(size_t n, absl::Span<const ExpertKey> keep) {
  std::vector<int32_t> free, evictable;
  for (int32_t i = 0; i < static_cast<int32_t>(slots_.size()); ++i) {
    const Slot& s = slots_[i];
    if (!s.used) {
      free.push_back(i);
    } else if (s.pins == 0 && !s.loading &&
               std::find(keep.begin(), keep.end(), s.key) == keep.end()) {
      evictable.push_back(i);
    }
  }
  if (free.size() >= n) {
    free.resize(n);
    return free;
  }
  const size_t from_evictable = std::min(n - free.size(), evictable.size());
  auto order = [&](int32_t a, int32_t b) {
    const Slot &x = slots_[a], &y = slots_[b];
    if (policy_ == EvictionPolicy::kLfru && x.frequency != y.frequency) {
      return x.frequency < y.frequency;
    }
    return x.last_use < y.last_use;
  };
  std::partial_sort(evictable.begin(), evictable.begin() + from_evictable, evictable.end(), order);
  free.insert(free.end(), evictable.begin(), evictable.begin() + from_evictable);
  return free;
}

absl::StatusOr<ExpertCache::Pinned> ExpertCache::Acquire(absl::Span<const ExpertKey> keys) {
  // Distinct keys in order, and for each given key the index of its distinct key.
  std::vector<ExpertKey> distinct;
  std::vector<size_t> index_of(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = std::find(distinct.begin(), distinct.end(), keys[i]);
    index_of[i] = it - distinct.begin();
    if (it == distinct.end()) distinct.push_back(keys[i]);
  }
  std::vector<int32_t> slot_of(distinct.size(), -1);
  std::vector<size_t> to_load;  // indices into distinct whose slot this call loads
  for (;;) {
    to_load.clear();
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Keys pinned by Pin() already have their slot: they count once.
      size_t pinned_among_keys = 0;
      for (const ExpertKey& k : distinct) {
        auto it = where_.find(k);
        pinned_among_keys += it != where_.end() && slots_[it->second].user_pinned;
      }
      if (distinct.size() - pinned_among_keys + user_pins_ > slots_.size()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "a step needs ", distinct.size(), " experts at once, but the expert cache holds ",
            slots_.size(), " (", user_pins_, " of them pinned): enlarge the expert cache"));
      }
      const auto t0 = std::chrono::steady_clock::now();
      // Wait, holding nothing, until the missing keys can all get a slot at once.
      std::vector<int32_t> victims;
      for (;;) {
        size_t missing = 0;
        for (const ExpertKey& k : distinct) missing += !where_.contains(k);
        victims = VictimsLocked(missing, distinct);  // never a slot this step hits
        if (victims.size() == missing) break;
        changed_.wait(lock);
      }
      stats_.wait_seconds += SecondsSince(t0);
      size_t next_victim = 0;
      for (size_t i = 0; i < distinct.size(); ++i) {
        auto it = where_.find(distinct[i]);
        int32_t slot;
        if (it != where_.end()) {
          slot = it->second;
          ++stats_.hits;
        } else {
          slot = victims[next_victim++];
          Slot& s = slots_[slot];
          if (s.used) {
            where_.erase(s.key);
            ++stats_.evictions;
          }
          s = Slot{};
          s.key = distinct[i];
          s.used = true;
          s.loading = true;
          where_[distinct[i]] = slot;
          to_load.push_back(i);
          ++stats_.misses;
        }
        ++slots_[slot].pins;
        TouchLocked(slots_[slot]);
        slot_of[i] = slot;
      }
    }
    // Load what this call reserved, outside the lock.
    absl::Status failed;
    for (size_t i : to_load) {
      const auto t0 = std::chrono::steady_clock::now();
      absl::Status s = failed.ok() ? loader_(distinct[i], {SlotData(slot_of[i]), slot_bytes_})
                                   : absl::CancelledError("an earlier expert failed to load");
      std::unique_lock<std::mutex> lock(mu_);
      stats_.load_seconds += SecondsSince(t0);
      Slot& slot = slots_[slot_of[i]];
      slot.loading = false;
      if (s.ok()) {
        stats_.bytes_loaded += slot_bytes_;
      } else {
        where_.erase(slot.key);
        slot = Slot{};  // free again, no pins
        if (failed.ok()) failed = s;
      }
      changed_.notify_all();
    }
    // Keys other threads were loading: wait until they are done; if a load failed there, start
    // over (that key is missing again).
    bool lost = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (size_t i = 0; i < distinct.size(); ++i) {
        Slot& s = slots_[slot_of[i]];
        while (s.loading) changed_.wait(lock);
        lost |= !(s.used && s.key == distinct[i]);
      }
    }
    if (!failed.ok() || lost) {
      // Drop this call's pins; a slot whose load failed was freed and holds no pin of ours.
      {
        std::unique_lock<std::mutex> lock(mu_);
        for (size_t i = 0; i < distinct.size(); ++i) {
          Slot& s = slots_[slot_of[i]];
          if (s.used && s.key == distinct[i] && s.pins > 0) --s.pins;
        }
        changed_.notify_all();
      }
      if (!failed.ok()) return failed;
      continue;
    }
    Pinned pinned;
    pinned.cache_ = this;
    pinned.slots_ = std::move(slot_of);  // one pin each, taken above
    pinned.index_of_ = std::move(index_of);
    return pinned;
  }
}

void ExpertCache::ReleaseSlots(absl::Span<const int32_t> slots) {
  std::unique_lock<std::mutex> lock(mu_);
  for (int32_t slot : slots) {
    if (slot >= 0 && slots_[slot].pins > 0) --slots_[slot].pins;
  }
  changed_.notify_all();
}

absl::Status ExpertCache::Pin(ExpertKey key) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = where_.find(key);
    if (it != where_.end() && slots_[it->second].user_pinned) return absl::OkStatus();
  }
  absl::StatusOr<Pinned> step = Acquire({&key, 1});
  if (!step.ok()) return step.status();
  std::unique_lock<std::mutex> lock(mu_);
  Slot& s = slots_[step->slots_[0]];  // `step` holds one distinct key
  if (!s.user_pinned) {
    s.user_pinned = true;
    ++s.pins;  // outlives the step's pin, released with `step` below
    ++user_pins_;
  }
  return absl::OkStatus();
}

void ExpertCache::Unpin(ExpertKey key) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = where_.find(key);
  if (it == where_.end()) return;
  Slot& s = slots_[it->second];
  if (!s.user_pinned) return;
  s.user_pinned = false;
  --s.pins;
  --user_pins_;
  changed_.notify_all();
}

bool ExpertCache::IsResident(ExpertKey key) const {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = where_.find(key);
  return it != where_.end() && !slots_[it->second].loading;
}

std::vector<ExpertKey> ExpertCache::Resident() const {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<ExpertKey> out;
  for (const Slot& s : slots_) {
    if (s.used && !s.loading) out.push_back(s.key);
  }
  return out;
}

ExpertCacheStats ExpertCache::stats() const {
  std::unique_lock<std::mutex> lock(mu_);
  return stats_;
}

ExpertCache::Pinned::Pinned(Pinned&& other) noexcept
    : cache_(other.cache_), slots_(std::move(other.slots_)), index_of_(std::move(other.index_of_)) {
  other.cache_ = nullptr;
  other.slots_.clear();
}

ExpertCache::Pinned& ExpertCache::Pinned::operator=(Pinned&& other) noexcept {
  if (this != &other) {
    if (cache_ != nullptr) cache_->ReleaseSlots(slots_);
    cache_ = other.cache_;
    slots_ = std::move(other.slots_);
    index_of_ = std::move(other.index_of_);
    other.cache_ = nullptr;
    other.slots_.clear();
  }
  return *this;
}

ExpertCache::Pinned::~Pinned() {
  if (cache_ != nullptr) cache_->ReleaseSlots(slots_);
}

absl::Span<const uint8_t> ExpertCache::Pinned::bytes(size_t i) const {
  return {cache_->SlotData(slots_[index_of_[i]]), cache_->slot_bytes_};
}

}  // namespace moe
