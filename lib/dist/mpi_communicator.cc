#include "lib/dist/mpi_communicator.h"

#include <mpi.h>

#include <climits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/dist/poll.h"

namespace moe {
namespace {

absl::Status MpiError(int code, const char* what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return absl::UnknownError(absl::StrCat(what, ": MPI error: ", std::string(text, len)));
}

// MPI itself, started once per process by the first communicator and finalised with the last.
class MpiRuntime {
 public:
  static absl::StatusOr<std::shared_ptr<MpiRuntime>> Get() {
    static std::mutex mu;
    static std::weak_ptr<MpiRuntime> current;
    std::lock_guard<std::mutex> lock(mu);
    if (auto live = current.lock()) return live;
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized) return absl::FailedPreconditionError("MPI was finalised in this process");
    bool owned = false;
    int provided = MPI_THREAD_SINGLE;
    if (!initialized) {
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      if (rc != MPI_SUCCESS) return MpiError(rc, "starting MPI");
      owned = true;
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      if (owned) MPI_Finalize();
      return absl::FailedPreconditionError(
          absl::StrCat("MPI gives thread level ", provided,
                       ", below MPI_THREAD_SERIALIZED: the runtime calls it from its own threads"));
    }
    auto runtime = std::shared_ptr<MpiRuntime>(new MpiRuntime(owned));
    current = runtime;
    return runtime;
  }
  ~MpiRuntime() {
    if (owned_) MPI_Finalize();
  }

 private:
  explicit MpiRuntime(bool owned) : owned_(owned) {}
  bool owned_;
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(std::shared_ptr<MpiRuntime> runtime, MPI_Comm comm,
                  std::chrono::milliseconds timeout)
      : runtime_(std::move(runtime)), comm_(comm), timeout_(timeout) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    // Collectives given up on may have finished since: complete them if so (MPI forbids freeing
    // them); one that never will is left to MPI_Finalize.
    for (Abandoned& a : abandoned_) {
      int done = 0;
      MPI_Test(&a.request, &done, MPI_STATUS_IGNORE);
    }
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllToAll(absl::Span<const Bytes> send, std::vector<Bytes>* received) override {
    if (static_cast<int>(send.size()) != size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("all-to-all with ", send.size(), " payloads for ", size_, " ranks"));
    }
    // The sizes first, then the bytes.
    auto send_sizes = Buffer<long long>(size_), recv_sizes = Buffer<long long>(size_);
    for (int r = 0; r < size_; ++r) (*send_sizes)[r] = static_cast<long long>(send[r].size());
    MPI_Request request;
    int rc = MPI_Ialltoall(send_sizes->data(), 1, MPI_LONG_LONG, recv_sizes->data(), 1,
                           MPI_LONG_LONG, comm_, &request);
    MOE_RETURN_IF_ERROR(
        Finish(rc, &request, "all-to-all sizes", timeout_, {send_sizes, recv_sizes}));
    auto send_counts = Buffer<int>(size_), send_displs = Buffer<int>(size_);
    auto recv_counts = Buffer<int>(size_), recv_displs = Buffer<int>(size_);
    long long send_total = 0, recv_total = 0;
    for (int r = 0; r < size_; ++r) {
      (*send_displs)[r] = static_cast<int>(send_total);
      (*recv_displs)[r] = static_cast<int>(recv_total);
      (*send_counts)[r] = static_cast<int>((*send_sizes)[r]);
      (*recv_counts)[r] = static_cast<int>((*recv_sizes)[r]);
      send_total += (*send_sizes)[r];
      recv_total += (*recv_sizes)[r];
      if ((*recv_sizes)[r] < 0) return absl::DataLossError("a negative all-to-all size");
      if (send_total > INT_MAX || recv_total > INT_MAX) {
        return absl::InvalidArgumentError("an all-to-all of 2 GiB or more per rank");
      }
    }
    auto out = Buffer<uint8_t>(send_total), in = Buffer<uint8_t>(recv_total);
    for (int r = 0; r < size_; ++r) {
      std::copy(send[r].begin(), send[r].end(), out->begin() + (*send_displs)[r]);
    }
    rc = MPI_Ialltoallv(out->data(), send_counts->data(), send_displs->data(), MPI_BYTE, in->data(),
                        recv_counts->data(), recv_displs->data(), MPI_BYTE, comm_, &request);
    MOE_RETURN_IF_ERROR(Finish(rc, &request, "all-to-all", timeout_,
                               {out, in, send_counts, send_displs, recv_counts, recv_displs}));
    received->assign(size_, {});
    for (int r = 0; r < size_; ++r) {
      (*received)[r].assign(in->begin() + (*recv_displs)[r],
                            in->begin() + (*recv_displs)[r] + (*recv_counts)[r]);
    }
    return absl::OkStatus();
  }

  absl::Status AllGather(absl::Span<const uint8_t> mine, std::vector<Bytes>* all) override {
    // The sizes first, then every rank's bytes once (not a copy per destination).
    auto my_size = Buffer<long long>(1), sizes = Buffer<long long>(size_);
    (*my_size)[0] = static_cast<long long>(mine.size());
    MPI_Request request;
    int rc = MPI_Iallgather(my_size->data(), 1, MPI_LONG_LONG, sizes->data(), 1, MPI_LONG_LONG,
                            comm_, &request);
    MOE_RETURN_IF_ERROR(Finish(rc, &request, "all-gather sizes", timeout_, {my_size, sizes}));
    std::vector<size_t> counts(size_);
    for (int r = 0; r < size_; ++r) {
      if ((*sizes)[r] < 0) return absl::DataLossError("a negative all-gather size");
      counts[r] = static_cast<size_t>((*sizes)[r]);
    }
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<PendingGather> pending, StartAllGather(mine, counts));
    return pending->Wait(all);
  }

  absl::StatusOr<std::unique_ptr<PendingGather>> StartAllGather(
      absl::Span<const uint8_t> mine, absl::Span<const size_t> sizes) override;
  absl::StatusOr<std::unique_ptr<PendingGather>> StartGather(
      int root, absl::Span<const uint8_t> mine, absl::Span<const size_t> sizes) override;

  absl::Status Barrier() override {
    MPI_Request request;
    return Finish(MPI_Ibarrier(comm_, &request), &request, "barrier", timeout_, {});
  }

  absl::Status Broadcast(int root, Bytes* data, std::chrono::milliseconds timeout) override {
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast from rank ", root, " of ", size_));
    }
    // The size first (the wait a rank idle until its next order may make), then the bytes.
    auto size = Buffer<long long>(1);
    (*size)[0] = rank_ == root ? static_cast<long long>(data->size()) : 0;
    MPI_Request request;
    int rc = MPI_Ibcast(size->data(), 1, MPI_LONG_LONG, root, comm_, &request);
    MOE_RETURN_IF_ERROR(Finish(rc, &request, "broadcast size", timeout, {size}));
    const long long n = (*size)[0];
    if (n < 0 || n > INT_MAX) return absl::InvalidArgumentError("a broadcast of 2 GiB or more");
    if (n == 0) {
      data->clear();
      return absl::OkStatus();
    }
    auto bytes = rank_ == root ? std::make_shared<Bytes>(*data) : Buffer<uint8_t>(n);
    rc = MPI_Ibcast(bytes->data(), static_cast<int>(n), MPI_BYTE, root, comm_, &request);
    MOE_RETURN_IF_ERROR(Finish(rc, &request, "broadcast", timeout_, {bytes}));
    if (rank_ != root) *data = std::move(*bytes);
    return absl::OkStatus();
  }

  std::chrono::milliseconds timeout() const override { return timeout_; }

 private:
  // Buffers a collective reads or writes, kept alive past a timeout: MPI may still use them.
  using Keep = std::vector<std::shared_ptr<const void>>;
  template <typename T>
  static std::shared_ptr<std::vector<T>> Buffer(size_t n) {
    return std::make_shared<std::vector<T>>(n);
  }

  // Polls a started collective until it completes, fails, or the timeout passes
  // (PollUntilDone). A collective given up on is kept, with `keep`, until the communicator goes.
  absl::Status Finish(int rc, MPI_Request* request, const char* what,
                      std::chrono::milliseconds timeout, Keep keep) {
    if (rc != MPI_SUCCESS) return MpiError(rc, what);
    return PollUntilDone(
        timeout,
        [&]() -> absl::StatusOr<bool> {
          int done = 0;
          const int test = MPI_Test(request, &done, MPI_STATUS_IGNORE);
          if (test != MPI_SUCCESS) return MpiError(test, what);
          return done != 0;
        },
        [&] {
          abandoned_.push_back({*request, std::move(keep)});
          return absl::DeadlineExceededError(
              absl::StrCat(what, ": not complete after ", timeout.count(), " ms on rank ", rank_,
                           " of ", size_, " (a rank stopped or the network broke)"));
        });
  }

  friend class MpiPendingGather;
  std::shared_ptr<MpiRuntime> runtime_;  // outlives comm_
  MPI_Comm comm_;
  std::chrono::milliseconds timeout_;
  int rank_ = 0, size_ = 1;
  struct Abandoned {
    MPI_Request request;
    Keep buffers;
  };
  std::vector<Abandoned> abandoned_;  // collectives that timed out
};

// An MPI_Iallgatherv (root < 0) or MPI_Igatherv to root in flight: MPI moves the bytes while the
// caller computes (in an MPI call's progress, or at once for messages under the transport's eager
// limit).
class MpiPendingGather : public PendingGather {
 public:
  MpiPendingGather(MpiCommunicator* comm, int root) : comm_(comm), root_(root) {}
  ~MpiPendingGather() override {
    if (request_ != MPI_REQUEST_NULL) {  // never waited for: MPI may still use the buffers
      comm_->abandoned_.push_back({request_, {out_, in_, counts_, displs_}});
    }
  }
  absl::Status Start(absl::Span<const uint8_t> mine, absl::Span<const size_t> sizes) {
    const int n = comm_->size_;
    counts_ = MpiCommunicator::Buffer<int>(n);
    displs_ = MpiCommunicator::Buffer<int>(n);
    size_t total = 0;
    for (int r = 0; r < n; ++r) {
      (*displs_)[r] = static_cast<int>(total);
      (*counts_)[r] = static_cast<int>(sizes[r]);
      total += sizes[r];
      if (total > INT_MAX) return absl::InvalidArgumentError("an all-gather of 2 GiB or more");
    }
    out_ = std::make_shared<Bytes>(mine.begin(), mine.end());  // MPI reads it until the end
    const bool receives = root_ < 0 || root_ == comm_->rank_;
    in_ = MpiCommunicator::Buffer<uint8_t>(receives ? total : 0);
    const int rc = root_ < 0 ? MPI_Iallgatherv(out_->data(), static_cast<int>(out_->size()),
                                               MPI_BYTE, in_->data(), counts_->data(),
                                               displs_->data(), MPI_BYTE, comm_->comm_, &request_)
                             : MPI_Igatherv(out_->data(), static_cast<int>(out_->size()), MPI_BYTE,
                                            in_->data(), counts_->data(), displs_->data(), MPI_BYTE,
                                            root_, comm_->comm_, &request_);
    if (rc != MPI_SUCCESS) {
      request_ = MPI_REQUEST_NULL;
      return MpiError(rc, what());
    }
    return absl::OkStatus();
  }
  absl::Status Wait(std::vector<Bytes>* all) override {
    if (request_ == MPI_REQUEST_NULL) {
      return absl::FailedPreconditionError(
          absl::StrCat("an ", what(), " not started or waited for twice"));
    }
    MPI_Request request = request_;
    request_ = MPI_REQUEST_NULL;  // Finish completes it, or keeps it with the buffers
    MOE_RETURN_IF_ERROR(comm_->Finish(MPI_SUCCESS, &request, what(), comm_->timeout_,
                                      {out_, in_, counts_, displs_}));
    all->assign(counts_->size(), {});
    if (in_->empty()) return absl::OkStatus();  // a gather to another rank
    for (size_t r = 0; r < counts_->size(); ++r) {
      (*all)[r].assign(in_->begin() + (*displs_)[r], in_->begin() + (*displs_)[r] + (*counts_)[r]);
    }
    return absl::OkStatus();
  }

 private:
  const char* what() const { return root_ < 0 ? "all-gather" : "gather"; }

  MpiCommunicator* comm_;
  int root_;
  std::shared_ptr<std::vector<int>> counts_, displs_;
  std::shared_ptr<Bytes> out_, in_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

absl::StatusOr<std::unique_ptr<PendingGather>> MpiCommunicator::StartAllGather(
    absl::Span<const uint8_t> mine, absl::Span<const size_t> sizes) {
  MOE_RETURN_IF_ERROR(CheckGatherSizes(mine, sizes));
  auto pending = std::make_unique<MpiPendingGather>(this, /*root=*/-1);
  MOE_RETURN_IF_ERROR(pending->Start(mine, sizes));
  return std::unique_ptr<PendingGather>(std::move(pending));
}

absl::StatusOr<std::unique_ptr<PendingGather>> MpiCommunicator::StartGather(
    int root, absl::Span<const uint8_t> mine, absl::Span<const size_t> sizes) {
  MOE_RETURN_IF_ERROR(CheckGatherSizes(mine, sizes));
  MOE_RETURN_IF_ERROR(CheckGatherRoot(root));
  auto pending = std::make_unique<MpiPendingGather>(this, root);
  MOE_RETURN_IF_ERROR(pending->Start(mine, sizes));
  return std::unique_ptr<PendingGather>(std::move(pending));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(
    std::chrono::milliseconds timeout) {
  auto runtime = MpiRuntime::Get();
  if (!runtime.ok()) return runtime.status();
  MPI_Comm comm;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) return MpiError(rc, "duplicating MPI_COMM_WORLD");
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<Communicator>(new MpiCommunicator(*std::move(runtime), comm, timeout));
}

}  // namespace moe
