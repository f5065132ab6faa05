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

bool Contains(absl::Span<const ExpertKey> keys, ExpertKey k) {
  return std::find(keys.begin(), keys.end(), k) != keys.end();
}

}  // namespace

// Applies op to each pair of fields: the one list of them that += and -= share.
template <typename Op>
void EachField(ExpertCacheStats& a, const ExpertCacheStats& b, Op op) {
  op(a.hits, b.hits);
  op(a.misses, b.misses);
  op(a.evictions, b.evictions);
  op(a.bytes_loaded, b.bytes_loaded);
  op(a.load_seconds, b.load_seconds);
  op(a.wait_seconds, b.wait_seconds);
  op(a.slot_wait_seconds, b.slot_wait_seconds);
  op(a.prefetches, b.prefetches);
  op(a.prefetch_hits, b.prefetch_hits);
  op(a.prefetch_wasted_bytes, b.prefetch_wasted_bytes);
  op(a.predicted, b.predicted);
  op(a.predicted_right, b.predicted_right);
}

ExpertCacheStats& ExpertCacheStats::operator+=(const ExpertCacheStats& o) {
  EachField(*this, o, [](auto& x, auto y) { x += y; });
  return *this;
}

ExpertCacheStats& ExpertCacheStats::operator-=(const ExpertCacheStats& o) {
  EachField(*this, o, [](auto& x, auto y) { x -= y; });
  return *this;
}

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
      slots_(slots),
      stats_(std::max(0, options.n_layer)) {
  for (int i = 0; i < std::max(1, options.io_threads); ++i) {
    io_threads_.emplace_back([this] { IoLoop(); });
  }
}

ExpertCache::~ExpertCache() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
  }
  io_work_.notify_all();
  for (std::thread& t : io_threads_) t.join();
}

ExpertCacheStats& ExpertCache::StatsLocked(int32_t layer) {
  const size_t l = static_cast<size_t>(std::max(0, layer));
  if (l >= stats_.size()) stats_.resize(l + 1);
  return stats_[l];
}

void ExpertCache::TouchLocked(Slot& s) {
  s.last_use = ++clock_;
  ++s.frequency;
  if (policy_ == EvictionPolicy::kLfru && clock_ % (kAgingUsesPerSlot * slot_count_) == 0) {
    for (Slot& other : slots_) other.frequency /= 2;
  }
}

std::vector<int32_t> ExpertCache::VictimsLocked(size_t n, absl::Span<const ExpertKey> keep,
                                                absl::Span<const ExpertKey> keep_too) {
  std::vector<int32_t> free, evictable;
  for (int32_t i = 0; i < static_cast<int32_t>(slots_.size()); ++i) {
    const Slot& s = slots_[i];
    if (!s.used) {
      free.push_back(i);
    } else if (s.pins == 0 && !s.loading && !Contains(keep, s.key) && !Contains(keep_too, s.key)) {
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

void ExpertCache::AssignLocked(int32_t slot, ExpertKey key) {
  Slot& s = slots_[slot];
  if (s.used) {
    where_.erase(s.key);
    ExpertCacheStats& st = StatsLocked(s.key.layer);
    ++st.evictions;
    if (s.prefetched) st.prefetch_wasted_bytes += static_cast<int64_t>(slot_bytes_);
  }
  s = Slot{};
  s.key = key;
  s.used = true;
  s.loading = true;
  where_[key] = slot;
}

void ExpertCache::IoLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    io_work_.wait(lock,
                  [&] { return stopping_ || !demand_queue_.empty() || !prefetch_queue_.empty(); });
    if (stopping_) return;
    std::deque<int32_t>& queue = demand_queue_.empty() ? prefetch_queue_ : demand_queue_;
    const int32_t slot = queue.front();
    queue.pop_front();
    slots_[slot].queued_for_prefetch = false;
    slots_[slot].reading = true;
    slots_[slot].joined_mid_read = false;
    const ExpertKey key = slots_[slot].key;
    lock.unlock();
    // The slot is `loading`: nobody else writes it or evicts it meanwhile.
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status status = loader_(key, {SlotData(slot), slot_bytes_});
    const double seconds = SecondsSince(t0);
    lock.lock();
    ExpertCacheStats& st = StatsLocked(key.layer);
    st.load_seconds += seconds;
    Slot& s = slots_[slot];
    s.reading = false;
    if (status.ok()) {
      s.loading = false;
      st.bytes_loaded += static_cast<int64_t>(slot_bytes_);
    } else if (s.joined_mid_read && s.pins > 0) {
      // A step came to need it while this read was under way (a guess, or the read of a step
      // that has since failed): the error belongs to a read it never asked for, so it gets one of
      // its own, first in line, and the error only if that fails too.
      demand_queue_.push_front(slot);
    } else {
      s.loading = false;
      // Missing again for whoever asks next; the steps pinning it get the error from Wait.
      where_.erase(key);
      if (s.pins == 0) {
        s = Slot{};
      } else {
        s.error = std::move(status);
      }
    }
    changed_.notify_all();
  }
}

absl::StatusOr<ExpertCache::Pinned> ExpertCache::Request(absl::Span<const ExpertKey> keys) {
  // Distinct keys in order, and for each given key the index of its distinct key.
  std::vector<ExpertKey> distinct;
  std::vector<size_t> index_of(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = std::find(distinct.begin(), distinct.end(), keys[i]);
    index_of[i] = it - distinct.begin();
    if (it == distinct.end()) distinct.push_back(keys[i]);
  }
  std::vector<int32_t> slot_of(distinct.size(), -1);
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
    if (!distinct.empty()) StatsLocked(distinct[0].layer).slot_wait_seconds += SecondsSince(t0);
    size_t next_victim = 0;
    bool queued = false;
    for (size_t i = 0; i < distinct.size(); ++i) {
      ExpertCacheStats& st = StatsLocked(distinct[i].layer);
      auto it = where_.find(distinct[i]);
      int32_t slot;
      if (it != where_.end()) {
        slot = it->second;
        Slot& s = slots_[slot];
        ++st.hits;
        s.joined_mid_read |= s.reading;
        if (s.prefetched) {
          ++st.prefetch_hits;
          s.prefetched = false;
        }
        if (s.queued_for_prefetch) {
          // A step needs it now: read it before any other guess.
          prefetch_queue_.erase(std::find(prefetch_queue_.begin(), prefetch_queue_.end(), slot));
          s.queued_for_prefetch = false;
          demand_queue_.push_back(slot);
          queued = true;
        }
      } else {
        slot = victims[next_victim++];
        AssignLocked(slot, distinct[i]);
        demand_queue_.push_back(slot);
        queued = true;
        ++st.misses;
      }
      ++slots_[slot].pins;
      TouchLocked(slots_[slot]);
      slot_of[i] = slot;
    }
    if (queued) io_work_.notify_all();
  }
  Pinned pinned;
  pinned.cache_ = this;
  pinned.slots_ = std::move(slot_of);  // one pin each, taken above
  pinned.index_of_ = std::move(index_of);
  return pinned;
}

absl::StatusOr<ExpertCache::Pinned> ExpertCache::Acquire(absl::Span<const ExpertKey> keys) {
  auto pinned = Request(keys);
  if (!pinned.ok()) return pinned.status();
  if (absl::Status s = pinned->WaitAll(); !s.ok()) return s;
  return pinned;
}

size_t ExpertCache::Prefetch(absl::Span<const ExpertKey> keys, absl::Span<const ExpertKey> keep) {
  std::unique_lock<std::mutex> lock(mu_);
  // Guesses queued earlier that no step has asked for since: stale, give their slots back.
  for (int32_t slot : prefetch_queue_) {
    Slot& s = slots_[slot];
    if (s.pins > 0) continue;  // cannot be: a step's request moves it to the demand queue
    --StatsLocked(s.key.layer).prefetches;  // never read
    where_.erase(s.key);
    s = Slot{};
  }
  prefetch_queue_.clear();
  size_t queued = 0;
  for (const ExpertKey& k : keys) {
    if (where_.contains(k)) continue;
    std::vector<int32_t> victim = VictimsLocked(1, keep, keys);
    if (victim.empty()) break;  // everything else is pinned, being read or to be kept
    AssignLocked(victim[0], k);
    Slot& s = slots_[victim[0]];
    s.prefetched = true;
    s.queued_for_prefetch = true;
    // Not touched: until a step uses it, it is the first to go.
    prefetch_queue_.push_back(victim[0]);
    ++StatsLocked(k.layer).prefetches;
    ++queued;
  }
  if (queued > 0) io_work_.notify_all();
  return queued;
}

absl::StatusOr<size_t> ExpertCache::Warm(absl::Span<const ExpertKey> keys) {
  std::vector<ExpertKey> chosen;
  {
    std::unique_lock<std::mutex> lock(mu_);
    size_t free = 0;
    for (const Slot& s : slots_) free += !s.used;
    for (const ExpertKey& k : keys) {
      if (chosen.size() == free) break;
      if (!where_.contains(k) && std::find(chosen.begin(), chosen.end(), k) == chosen.end()) {
        chosen.push_back(k);
      }
    }
  }
  if (chosen.empty()) return 0;
  // Requested coldest first, so that the hottest is the most recently used (the last to go).
  std::reverse(chosen.begin(), chosen.end());
  auto pinned = Acquire(chosen);  // free slots only: the keys fit, nothing is evicted
  if (!pinned.ok()) return pinned.status();
  return chosen.size();
}

void ExpertCache::RecordPrediction(int layer, int64_t used, int64_t right) {
  std::unique_lock<std::mutex> lock(mu_);
  ExpertCacheStats& st = StatsLocked(layer);
  st.predicted += used;
  st.predicted_right += right;
}

void ExpertCache::ReleaseSlots(absl::Span<const int32_t> slots) {
  std::unique_lock<std::mutex> lock(mu_);
  for (int32_t slot : slots) {
    if (slot < 0) continue;
    Slot& s = slots_[slot];
    if (s.pins > 0) --s.pins;
    if (s.pins == 0 && !s.error.ok()) s = Slot{};  // its read failed: free again
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

size_t ExpertCache::step_capacity() const {
  std::unique_lock<std::mutex> lock(mu_);
  return slot_count_ - static_cast<size_t>(user_pins_);
}

std::vector<ExpertKey> ExpertCache::Resident() const {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<ExpertKey> out;
  for (const Slot& s : slots_) {
    if (s.used && !s.loading && s.error.ok()) out.push_back(s.key);
  }
  return out;
}

ExpertCacheStats ExpertCache::stats() const {
  std::unique_lock<std::mutex> lock(mu_);
  ExpertCacheStats sum;
  for (const ExpertCacheStats& s : stats_) sum += s;
  return sum;
}

std::vector<ExpertCacheStats> ExpertCache::layer_stats() const {
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

bool ExpertCache::Pinned::ready(size_t i) const {
  std::unique_lock<std::mutex> lock(cache_->mu_);
  return !cache_->slots_[slots_[index_of_[i]]].loading;
}

absl::Status ExpertCache::Pinned::Wait(size_t i) const {
  const Slot& s = cache_->slots_[slots_[index_of_[i]]];
  std::unique_lock<std::mutex> lock(cache_->mu_);
  if (s.loading) {
    const auto t0 = std::chrono::steady_clock::now();
    cache_->changed_.wait(lock, [&] { return !s.loading; });
    cache_->StatsLocked(s.key.layer).wait_seconds += SecondsSince(t0);
  }
  return s.error;
}

absl::Status ExpertCache::Pinned::WaitAll() const {
  absl::Status first;
  for (size_t i = 0; i < size(); ++i) first.Update(Wait(i));
  return first;
}

absl::Span<const uint8_t> ExpertCache::Pinned::bytes(size_t i) const {
  return {cache_->SlotData(slots_[index_of_[i]]), cache_->slot_bytes_};
}

}  // namespace moe
