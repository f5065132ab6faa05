#include "lib/dist/communicator.h"

#include "absl/strings/str_cat.h"

namespace moe {
namespace {

// What the default StartAllGather returns: the gather already done.
class DoneGather : public PendingGather {
 public:
  DoneGather(absl::Status status, std::vector<Bytes> all)
      : status_(std::move(status)), all_(std::move(all)) {}
  absl::Status Wait(std::vector<Bytes>* all) override {
    *all = std::move(all_);
    return status_;
  }

 private:
  absl::Status status_;
  std::vector<Bytes> all_;
};

}  // namespace

absl::Status Communicator::CheckGatherSizes(absl::Span<const uint8_t> mine,
                                            absl::Span<const size_t> sizes) const {
  if (static_cast<int>(sizes.size()) != size() || mine.size() != sizes[rank()]) {
    return absl::InvalidArgumentError(absl::StrCat("an all-gather of ", mine.size(),
                                                   " bytes announced as ", sizes.size(),
                                                   " sizes for ", size(), " ranks"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PendingGather>> Communicator::StartAllGather(
    absl::Span<const uint8_t> mine, absl::Span<const size_t> sizes) {
  if (absl::Status s = CheckGatherSizes(mine, sizes); !s.ok()) return s;
  std::vector<Bytes> all;
  absl::Status s = AllGather(mine, &all);
  for (int r = 0; s.ok() && r < size(); ++r) {
    if (all[r].size() != sizes[r]) {
      s = absl::DataLossError(absl::StrCat("rank ", r, " sent ", all[r].size(), " bytes, not the ",
                                           sizes[r], " every rank expected"));
    }
  }
  return std::unique_ptr<PendingGather>(new DoneGather(std::move(s), std::move(all)));
}

absl::Status Communicator::CheckGatherRoot(int root) const {
  if (root < 0 || root >= size()) {
    return absl::InvalidArgumentError(absl::StrCat("a gather to rank ", root, " of ", size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PendingGather>> Communicator::StartGather(
    int root, absl::Span<const uint8_t> mine, absl::Span<const size_t> sizes) {
  if (absl::Status s = CheckGatherRoot(root); !s.ok()) return s;
  return StartAllGather(mine, sizes);
}

}  // namespace moe
