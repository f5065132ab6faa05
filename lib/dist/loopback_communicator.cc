#include "lib/dist/loopback_communicator.h"

#include <condition_variable>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace moe {
namespace {

// The world's shared state: one collective at a time, in rounds. Each rank deposits its
// outgoing payloads; the last to arrive closes the round, and each rank then takes what was
// addressed to it. A rank leaves once it has taken its share; the next round waits until all have.
class Hub {
 public:
  Hub(int n, std::chrono::milliseconds timeout)
      : n_(n), timeout_(timeout), outbox_(n, std::vector<Bytes>(n)) {}

  std::chrono::milliseconds timeout() const { return timeout_; }

  // outgoing[r]: for rank r. Returns what every rank sent to `rank`.
  absl::Status Exchange(int rank, std::vector<Bytes> outgoing, std::vector<Bytes>* incoming,
                        const char* what) {
    return Exchange(rank, std::move(outgoing), incoming, what, timeout_);
  }
  absl::Status Exchange(int rank, std::vector<Bytes> outgoing, std::vector<Bytes>* incoming,
                        const char* what, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    // Waiting forever is waiting until a point no clock reaches.
    const auto deadline = timeout >= std::chrono::hours(24 * 365 * 100)
                              ? std::chrono::steady_clock::time_point::max()
                              : now + timeout;
    // Wait for the previous round to be emptied.
    if (!cv_.wait_until(lock, deadline, [&] { return taken_ == 0 || taken_ == n_; })) {
      return Late(what, timeout);
    }
    if (taken_ == n_) {
      taken_ = 0;
      arrived_ = 0;
      ++round_;
    }
    const uint64_t round = round_;
    outbox_[rank] = std::move(outgoing);
    if (++arrived_ == n_) cv_.notify_all();
    if (!cv_.wait_until(lock, deadline, [&] { return arrived_ == n_ || round_ != round; })) {
      --arrived_;  // withdrawn: the others time out too
      return Late(what, timeout);
    }
    incoming->assign(n_, {});
    for (int r = 0; r < n_; ++r) (*incoming)[r] = outbox_[r][rank];
    if (++taken_ == n_) cv_.notify_all();
    return absl::OkStatus();
  }

 private:
  absl::Status Late(const char* what, std::chrono::milliseconds timeout) const {
    return absl::DeadlineExceededError(absl::StrCat(what, ": not every one of the ", n_,
                                                    " ranks arrived within ", timeout.count(),
                                                    " ms (a rank stopped?)"));
  }

  const int n_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<Bytes>> outbox_;  // [from][to]
  int arrived_ = 0, taken_ = 0;
  uint64_t round_ = 0;
};

class LoopbackCommunicator : public Communicator {
 public:
  LoopbackCommunicator(std::shared_ptr<Hub> hub, int rank, int size)
      : hub_(std::move(hub)), rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllToAll(absl::Span<const Bytes> send, std::vector<Bytes>* received) override {
    if (static_cast<int>(send.size()) != size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("all-to-all with ", send.size(), " payloads for ", size_, " ranks"));
    }
    return hub_->Exchange(rank_, std::vector<Bytes>(send.begin(), send.end()), received,
                          "all-to-all");
  }

  absl::Status AllGather(absl::Span<const uint8_t> mine, std::vector<Bytes>* all) override {
    return hub_->Exchange(rank_, std::vector<Bytes>(size_, Bytes(mine.begin(), mine.end())), all,
                          "all-gather");
  }

  absl::Status Barrier() override {
    std::vector<Bytes> unused;
    return hub_->Exchange(rank_, std::vector<Bytes>(size_), &unused, "barrier");
  }

  absl::Status Broadcast(int root, Bytes* data, std::chrono::milliseconds timeout) override {
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast from rank ", root, " of ", size_));
    }
    std::vector<Bytes> out(size_), in;
    if (rank_ == root) out.assign(size_, *data);
    MOE_RETURN_IF_ERROR(hub_->Exchange(rank_, std::move(out), &in, "broadcast", timeout));
    if (rank_ != root) *data = std::move(in[root]);
    return absl::OkStatus();
  }

  std::chrono::milliseconds timeout() const override { return hub_->timeout(); }

 private:
  std::shared_ptr<Hub> hub_;
  int rank_, size_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> CreateLoopbackWorld(int n,
                                                               std::chrono::milliseconds timeout) {
  auto hub = std::make_shared<Hub>(n, timeout);
  std::vector<std::unique_ptr<Communicator>> world;
  for (int r = 0; r < n; ++r) world.push_back(std::make_unique<LoopbackCommunicator>(hub, r, n));
  return world;
}

}  // namespace moe
