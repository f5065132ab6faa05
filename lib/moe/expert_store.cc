#include "lib/moe/expert_store.h"

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace moe {
namespace {

size_t Align64(size_t n) { return (n + 63) / 64 * 64; }

std::vector<ExpertKey> KeysOf(int layer, absl::Span<const int32_t> experts) {
  std::vector<ExpertKey> keys;
  keys.reserve(experts.size());
  for (int32_t e : experts) keys.push_back({layer, e});
  return keys;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertStore>> ExpertStore::Create(
    const std::vector<std::string>& paths, std::vector<std::vector<ExpertSource>> sources,
    const ExpertLayout& layout, const ExpertStoreOptions& options) {
  std::unique_ptr<ExpertStore> store(new ExpertStore());
  for (const std::string& path : paths) {
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<ExpertFileReader> reader,
                         ExpertFileReader::Open(path, options.prefer_direct_io));
    store->readers_.push_back(std::move(reader));
  }
  if (store->readers_.empty()) return absl::InvalidArgumentError("no file to read experts from");
  for (size_t l = 0; l < sources.size(); ++l) {
    for (size_t e = 0; e < sources[l].size(); ++e) {
      for (const ExpertPart* p : {&sources[l][e].gate, &sources[l][e].up, &sources[l][e].down}) {
        if (p->file < 0 || static_cast<size_t>(p->file) >= store->readers_.size()) {
          return absl::InvalidArgumentError(absl::StrCat("expert ", e, " of layer ", l,
                                                         " names file ", p->file, " of ",
                                                         store->readers_.size()));
        }
        const ExpertFileReader& reader = *store->readers_[p->file];
        if (p->offset > reader.size() || p->bytes() > reader.size() - p->offset) {
          return absl::DataLossError(absl::StrCat("expert ", e, " of layer ", l,
                                                  " lies past the end of '", reader.path(), "'"));
        }
      }
    }
  }
  store->slot_bytes_ = SlotBytes(sources);
  store->prefetch_ = options.prefetch;
  store->experts_per_step_ = std::max<size_t>(1, options.experts_per_step);
  store->sources_ = std::move(sources);
  store->layout_ = layout;
  const int n_layer = store->n_layer(), n_expert = store->n_expert();
  ExpertPlacement cached(n_layer, n_expert);
  const ExpertPlacement& placement = options.placement ? *options.placement : cached;
  if (placement.n_layer() != n_layer || placement.n_expert() != n_expert) {
    return absl::InvalidArgumentError(
        absl::StrCat("the placement is for ", placement.n_layer(), " layers of ",
                     placement.n_expert(), " experts, the model has ", n_layer, " of ", n_expert));
  }
  const size_t slot = store->slot_bytes_;
  // Experts without weights here (pruned, another rank's, a dense layer's) take no slot, whatever
  // the placement names for them ("*" names every layer).
  auto has_weights = [&](int l, int e) { return store->sources_[l][e].has_weights(); };
  auto count = [&](ExpertTier tier) {
    size_t n = 0;
    for (int l = 0; l < n_layer; ++l) {
      for (int e = 0; e < n_expert; ++e) n += has_weights(l, e) && placement.tier(l, e) == tier;
    }
    return n;
  };
  const size_t resident = count(ExpertTier::kResident);
  const size_t pinned = count(ExpertTier::kPinned);
  const size_t step = count(ExpertTier::kCached) > 0 ? store->experts_per_step_ : 0;
  const size_t budget_slots = options.budget_bytes / slot;
  if (budget_slots < pinned + step) {
    const size_t need = pinned + step;
    return absl::InvalidArgumentError(
        absl::StrCat("an expert cache of ", options.budget_bytes, " bytes holds ", budget_slots,
                     " experts, fewer than the ",
                     pinned > 0 ? absl::StrCat(pinned, " pinned plus the ") : std::string(), step,
                     " one step uses at once: it needs at least ", need * slot, " bytes"));
  }
  store->resident_slots_ = resident;
  ExpertCache::Options co;
  co.budget_bytes = (budget_slots + resident) * slot;
  co.slot_bytes = slot;
  co.min_slots = resident + pinned + step;
  co.policy = options.policy;
  co.io_threads = options.io_threads;
  co.n_layer = n_layer;
  store->latest_.resize(n_layer);
  store->tiers_.assign(n_layer, std::vector<ExpertTier>(n_expert, ExpertTier::kCached));
  const ExpertStore* self = store.get();
  auto cache = ExpertCache::Create(
      co, [self](ExpertKey key, absl::Span<uint8_t> slot) { return self->Load(key, slot); });
  if (!cache.ok()) return cache.status();
  store->cache_ = *std::move(cache);
  // Resident and pinned experts are read now, at load.
  for (int l = 0; l < n_layer; ++l) {
    for (int e = 0; e < n_expert; ++e) {
      const ExpertTier t = placement.tier(l, e);
      if (t == ExpertTier::kCached || !has_weights(l, e)) continue;
      MOE_RETURN_IF_ERROR(store->cache_->Pin({l, e}));
      store->tiers_[l][e] = t;
    }
  }
  return store;
}

size_t ExpertStore::SlotBytes(const std::vector<std::vector<ExpertSource>>& sources) {
  size_t slot = 64;
  for (const auto& layer : sources) {
    for (const ExpertSource& src : layer) {
      slot = std::max(
          slot, Align64(src.gate.bytes()) + Align64(src.up.bytes()) + Align64(src.down.bytes()));
    }
  }
  return slot;
}

size_t ExpertStore::total_expert_bytes() const {
  size_t n = 0;  // experts with weights (a pruned expert's source is empty)
  for (const auto& layer : sources_) {
    for (const ExpertSource& src : layer) n += src.has_weights();
  }
  return n * slot_bytes_;
}

absl::Status ExpertStore::Load(ExpertKey key, absl::Span<uint8_t> slot) const {
  const ExpertSource& src = sources_[key.layer][key.expert];
  size_t offset = 0;
  for (const ExpertPart* p : {&src.gate, &src.up, &src.down}) {
    if (p->bytes() == 0) continue;  // an ungated expert's gate
    uint8_t* data = slot.data() + offset;
    const ExpertFileReader& reader = *readers_[p->file];
    // A file rewritten under a running model would feed it other weights: refuse instead.
    absl::Status s = reader.CheckUnchanged();
    if (s.ok()) s = reader.Read(p->offset, {data, p->bytes()});
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("loading expert ", key.expert, " of layer ",
                                                 key.layer, ": ", s.message()));
    }
    if (layout_.relayout) layout_.relayout(p->dtype, data, p->rows, p->cols);
    offset += Align64(p->bytes());
  }
  return absl::OkStatus();
}

absl::StatusOr<ExpertStore::Step> ExpertStore::Acquire(int layer,
                                                       absl::Span<const int32_t> experts) {
  auto step = Request(layer, experts);
  if (!step.ok()) return step.status();
  if (absl::Status s = step->pinned_.WaitAll(); !s.ok()) return s;
  return step;
}

size_t ExpertStore::Prefetch(int layer, absl::Span<const int32_t> experts) {
  if (layer < 0 || layer >= n_layer()) return 0;
  const std::vector<ExpertKey> keys = KeysOf(layer, experts);
  std::vector<ExpertKey> keep;
  {
    std::lock_guard<std::mutex> lock(latest_mu_);
    keep = latest_[layer];
  }
  return cache_->Prefetch(keys, keep);
}

absl::StatusOr<ExpertStore::Step> ExpertStore::Request(int layer,
                                                       absl::Span<const int32_t> experts) {
  std::vector<ExpertKey> keys = KeysOf(layer, experts);
  auto pinned = cache_->Request(keys);
  if (!pinned.ok()) return pinned.status();
  Step step;
  step.views_.reserve(experts.size());
  for (size_t i = 0; i < experts.size(); ++i) {
    const ExpertSource& src = sources_[layer][experts[i]];
    const uint8_t* base = pinned->bytes(i).data();
    ExpertViews v;
    size_t offset = 0;
    for (auto [part, view] : {std::pair{&src.gate, &v.gate}, std::pair{&src.up, &v.up},
                              std::pair{&src.down, &v.down}}) {
      if (part->bytes() == 0) continue;  // an ungated expert's gate: an empty view
      const DType t =
          layout_.type ? layout_.type(part->dtype, part->rows, part->cols) : part->dtype;
      *view = WeightView{t, part->rows, part->cols, base + offset};
      offset += Align64(part->bytes());
    }
    step.views_.push_back(v);
  }
  step.pinned_ = *std::move(pinned);
  {
    std::lock_guard<std::mutex> lock(latest_mu_);
    latest_[layer] = std::move(keys);
  }
  return step;
}

ExpertTier ExpertStore::tier(int layer, int expert) const {
  std::lock_guard<std::mutex> lock(tier_mu_);
  return tiers_[layer][expert];
}

absl::StatusOr<size_t> ExpertStore::Warm(const RoutingProfile& profile) {
  if (profile.counts.size() != sources_.size()) {
    return absl::InvalidArgumentError("the routing profile is for another model");
  }
  return cache_->Warm(profile.HottestFirst());
}

int ExpertStore::ExpertsInMemory(int layer) const {
  int n = 0;
  for (const ExpertKey& k : cache_->Resident()) n += k.layer == layer;
  return n;
}

int ExpertStore::CountTier(ExpertTier tier) const {
  std::lock_guard<std::mutex> lock(tier_mu_);
  return CountTierLocked(tier);
}

int ExpertStore::CountTierLocked(ExpertTier tier) const {
  int n = 0;
  for (const auto& l : tiers_) {
    for (ExpertTier x : l) n += x == tier;
  }
  return n;
}

absl::Status ExpertStore::CheckExpert(int layer, int expert) const {
  if (layer < 0 || layer >= n_layer() || expert < 0 || expert >= n_expert()) {
    return absl::InvalidArgumentError(absl::StrCat("expert ", expert, " of layer ", layer,
                                                   " does not exist: the model has ", n_layer(),
                                                   " layers of ", n_expert(), " experts"));
  }
  return absl::OkStatus();
}

absl::Status ExpertStore::Pin(int layer, int expert) {
  MOE_RETURN_IF_ERROR(CheckExpert(layer, expert));
  std::lock_guard<std::mutex> lock(tier_mu_);  // one Pin/Unpin at a time: the count below holds
  ExpertTier& t = tiers_[layer][expert];
  if (t != ExpertTier::kCached) return absl::OkStatus();
  const size_t pinned = CountTierLocked(ExpertTier::kPinned);
  // Keep room for a step's experts besides everything pinned.
  const size_t budget_slots = cache_->slot_count() - resident_slots_;
  if (pinned + 1 + experts_per_step_ > budget_slots) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot pin expert ", expert, " of layer ", layer, ": the expert cache holds ",
                     budget_slots, " experts, ", pinned, " pinned already and ", experts_per_step_,
                     " kept free for a step"));
  }
  MOE_RETURN_IF_ERROR(cache_->Pin({layer, expert}));
  t = ExpertTier::kPinned;
  return absl::OkStatus();
}

absl::Status ExpertStore::Unpin(int layer, int expert) {
  MOE_RETURN_IF_ERROR(CheckExpert(layer, expert));
  std::lock_guard<std::mutex> lock(tier_mu_);
  ExpertTier& t = tiers_[layer][expert];
  if (t == ExpertTier::kResident) {
    return absl::FailedPreconditionError(
        absl::StrCat("expert ", expert, " of layer ", layer, " is resident by the placement file"));
  }
  if (t == ExpertTier::kPinned) {
    cache_->Unpin({layer, expert});
    t = ExpertTier::kCached;
  }
  return absl::OkStatus();
}

}  // namespace moe
