#include "lib/dist/mpi_communicator.h"

#include <mpi.h>

#include <climits>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

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
    for (MPI_Request& r : abandoned_) {
      int done = 0;
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
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
    std::vector<long long> send_sizes(size_), recv_sizes(size_);
    for (int r = 0; r < size_; ++r) send_sizes[r] = static_cast<long long>(send[r].size());
    MPI_Request request;
    int rc = MPI_Ialltoall(send_sizes.data(), 1, MPI_LONG_LONG, recv_sizes.data(), 1, MPI_LONG_LONG,
                           comm_, &request);
    if (absl::Status s = Finish(rc, &request, "all-to-all sizes"); !s.ok()) return s;
    std::vector<int> send_counts(size_), send_displs(size_), recv_counts(size_), recv_displs(size_);
    long long send_total = 0, recv_total = 0;
    for (int r = 0; r < size_; ++r) {
      send_displs[r] = static_cast<int>(send_total);
      recv_displs[r] = static_cast<int>(recv_total);
      send_counts[r] = static_cast<int>(send_sizes[r]);
      recv_counts[r] = static_cast<int>(recv_sizes[r]);
      send_total += send_sizes[r];
      recv_total += recv_sizes[r];
      if (send_total > INT_MAX || recv_total > INT_MAX) {
        return absl::InvalidArgumentError("an all-to-all of 2 GiB or more per rank");
      }
    }
    Bytes out(send_total), in(recv_total);
    for (int r = 0; r < size_; ++r) {
      std::copy(send[r].begin(), send[r].end(), out.begin() + send_displs[r]);
    }
    rc = MPI_Ialltoallv(out.data(), send_counts.data(), send_displs.data(), MPI_BYTE, in.data(),
                        recv_counts.data(), recv_displs.data(), MPI_BYTE, comm_, &request);
    if (absl::Status s = Finish(rc, &request, "all-to-all"); !s.ok()) return s;
    received->assign(size_, {});
    for (int r = 0; r < size_; ++r) {
      (*received)[r].assign(in.begin() + recv_displs[r],
                            in.begin() + recv_displs[r] + recv_counts[r]);
    }
    return absl::OkStatus();
  }

  absl::Status AllGather(absl::Span<const uint8_t> mine, std::vector<Bytes>* all) override {
    std::vector<Bytes> send(size_, Bytes(mine.begin(), mine.end()));
    return AllToAll(send, all);
  }

  absl::Status Barrier() override {
    MPI_Request request;
    return Finish(MPI_Ibarrier(comm_, &request), &request, "barrier");
  }

  absl::Status Broadcast(int root, Bytes* data, std::chrono::milliseconds timeout) override {
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast from rank ", root, " of ", size_));
    }
    // The size first (the wait a rank idle until its next order may make), then the bytes.
    long long size = rank_ == root ? static_cast<long long>(data->size()) : 0;
    MPI_Request request;
    int rc = MPI_Ibcast(&size, 1, MPI_LONG_LONG, root, comm_, &request);
    MOE_RETURN_IF_ERROR(Finish(rc, &request, "broadcast size", timeout));
    if (size < 0 || size > INT_MAX) {
      return absl::InvalidArgumentError("a broadcast of 2 GiB or more");
    }
    if (rank_ != root) data->resize(size);
    if (size == 0) return absl::OkStatus();
    rc = MPI_Ibcast(data->data(), static_cast<int>(size), MPI_BYTE, root, comm_, &request);
    return Finish(rc, &request, "broadcast");
  }

  std::chrono::milliseconds timeout() const override { return timeout_; }

 private:
  absl::Status Finish(int rc, MPI_Request* request, const char* what) {
    return Finish(rc, request, what, timeout_);
  }
  // Polls a started collective until it completes, fails, or the timeout passes. It spins for
  // the first milliseconds (a step's exchanges are quick) and then sleeps between polls, so a
  // rank waiting long does not hold a core.
  absl::Status Finish(int rc, MPI_Request* request, const char* what,
                      std::chrono::milliseconds timeout) {
    if (rc != MPI_SUCCESS) return MpiError(rc, what);
    const auto start = std::chrono::steady_clock::now();
    const bool forever = timeout == kWaitForever;
    for (int done = 0;;) {
      rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return MpiError(rc, what);
      if (done) return absl::OkStatus();
      const auto waited = std::chrono::steady_clock::now() - start;
      if (!forever && waited > timeout) {
        abandoned_.push_back(*request);
        return absl::DeadlineExceededError(
            absl::StrCat(what, ": not complete after ", timeout.count(), " ms on rank ", rank_,
                         " of ", size_, " (a rank stopped or the network broke)"));
      }
      if (waited < std::chrono::milliseconds(20)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }

  std::shared_ptr<MpiRuntime> runtime_;  // outlives comm_
  MPI_Comm comm_;
  std::chrono::milliseconds timeout_;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> abandoned_;  // collectives that timed out
};

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
