#include "lib/moe/expert_store.h"

#include "absl/strings/str_cat.h"

namespace moe {
namespace {

size_t Align64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertStore>> ExpertStore::Create(
    const std::string& path, std::vector<std::vector<ExpertSource>> sources,
    const ExpertLayout& layout, const ExpertStoreOptions& options) {
  auto reader = ExpertFileReader::Open(path, options.prefer_direct_io);
  if (!reader.ok()) return reader.status();
  std::unique_ptr<ExpertStore> store(new ExpertStore());
  for (size_t l = 0; l < sources.size(); ++l) {
    for (size_t e = 0; e < sources[l].size(); ++e) {
      for (const ExpertPart* p : {&sources[l][e].gate, &sources[l][e].up, &sources[l][e].down}) {
        if (p->offset > (*reader)->size() || p->bytes() > (*reader)->size() - p->offset) {
          return absl::DataLossError(
              absl::StrCat("expert ", e, " of layer ", l, " lies past the end of '", path, "'"));
        }
      }
    }
  }
  store->slot_bytes_ = SlotBytes(sources);
  store->prefetch_ = options.prefetch;
  store->sources_ = std::move(sources);
  store->layout_ = layout;
  store->reader_ = *std::move(reader);
  ExpertCache::Options co;
  co.budget_bytes = options.budget_bytes;
  co.slot_bytes = store->slot_bytes_;
  co.min_slots = std::max<size_t>(1, options.experts_per_step);
  co.policy = options.policy;
  co.io_threads = options.io_threads;
  co.n_layer = static_cast<int>(store->sources_.size());
  store->latest_.resize(store->sources_.size());
  const ExpertStore* self = store.get();
  auto cache = ExpertCache::Create(
      co, [self](ExpertKey key, absl::Span<uint8_t> slot) { return self->Load(key, slot); });
  if (!cache.ok()) return cache.status();
  store->cache_ = *std::move(cache);
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
  size_t n = 0;
  for (const auto& layer : sources_) n += layer.size();
  return n * slot_bytes_;
}

absl::Status ExpertStore::Load(ExpertKey key, absl::Span<uint8_t> slot) const {
  // A file rewritten under a running model would feed it other weights: refuse instead.
  if (absl::Status s = reader_->CheckUnchanged(); !s.ok()) return s;
  const ExpertSource& src = sources_[key.layer][key.expert];
  size_t offset = 0;
  for (const ExpertPart* p : {&src.gate, &src.up, &src.down}) {
    uint8_t* data = slot.data() + offset;
    if (absl::Status s = reader_->Read(p->offset, {data, p->bytes()}); !s.ok()) {
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
  std::vector<ExpertKey> keys;
  keys.reserve(experts.size());
  for (int32_t e : experts) keys.push_back({layer, e});
  std::vector<ExpertKey> keep;
  {
    std::lock_guard<std::mutex> lock(latest_mu_);
    keep = latest_[layer];
  }
  return cache_->Prefetch(keys, keep);
}

absl::StatusOr<ExpertStore::Step> ExpertStore::Request(int layer,
                                                       absl::Span<const int32_t> experts) {
  std::vector<ExpertKey> keys;
  keys.reserve(experts.size());
  for (int32_t e : experts) keys.push_back({layer, e});
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

}  // namespace moe
