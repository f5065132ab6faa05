#include "lib/dist/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/dist/poll.h"

namespace moe {
namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::UnknownError(absl::StrCat(what, ": CUDA error: ", cudaGetErrorString(e)));
}
absl::Status NcclError(ncclResult_t r, const char* what) {
  return absl::UnknownError(absl::StrCat(what, ": NCCL error: ", ncclGetErrorString(r)));
}
#define MOE_CUDA(call, what)                        \
  if (cudaError_t e_ = (call); e_ != cudaSuccess) { \
    return CudaError(e_, what);                     \
  }
#define MOE_NCCL(call, what)                                                 \
  if (ncclResult_t r_ = (call); r_ != ncclSuccess && r_ != ncclInProgress) { \
    return NcclError(r_, what);                                              \
  }

// Whether a non-blocking communicator has finished what it was doing (joining, enqueuing an
// operation): ncclCommGetAsyncError leaves ncclInProgress.
absl::StatusOr<bool> NcclSettled(ncclComm_t comm, const char* what) {
  ncclResult_t state = ncclSuccess;
  ncclCommGetAsyncError(comm, &state);
  if (state == ncclInProgress) return false;
  if (state != ncclSuccess) return NcclError(state, what);
  return true;
}

// A device buffer that grows as payloads do.
class DeviceBuffer {
 public:
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  absl::StatusOr<uint8_t*> Reserve(size_t bytes) {
    if (bytes <= size_) return data_;
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    size_ = 0;
    MOE_CUDA(cudaMalloc(reinterpret_cast<void**>(&data_), bytes), "allocating a device buffer");
    size_ = bytes;
    return data_;
  }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, int device, int rank, int size,
                   std::chrono::milliseconds timeout)
      : comm_(comm),
        stream_(stream),
        device_(device),
        rank_(rank),
        size_(size),
        timeout_(timeout) {}
  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (broken_.ok()) {
      ncclCommFinalize(comm_);
      ncclCommDestroy(comm_);
    }
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  absl::Status AllToAll(absl::Span<const Bytes> send, std::vector<Bytes>* received) override {
    if (static_cast<int>(send.size()) != size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("all-to-all with ", send.size(), " payloads for ", size_, " ranks"));
    }
    MOE_RETURN_IF_ERROR(Ready());
    // The sizes first (grouped point-to-point of one int64 each), then the bytes.
    std::vector<int64_t> send_sizes(size_), recv_sizes(size_);
    size_t send_total = 0;
    for (int r = 0; r < size_; ++r) {
      send_sizes[r] = static_cast<int64_t>(send[r].size());
      send_total += send[r].size();
    }
    MOE_RETURN_IF_ERROR(Exchange(reinterpret_cast<const uint8_t*>(send_sizes.data()),
                                 std::vector<size_t>(size_, sizeof(int64_t)),
                                 reinterpret_cast<uint8_t*>(recv_sizes.data()),
                                 std::vector<size_t>(size_, sizeof(int64_t)), "all-to-all sizes"));
    std::vector<size_t> out_counts(size_), in_counts(size_);
    size_t recv_total = 0;
    for (int r = 0; r < size_; ++r) {
      if (recv_sizes[r] < 0) return absl::DataLossError("a negative payload size");
      out_counts[r] = send[r].size();
      in_counts[r] = static_cast<size_t>(recv_sizes[r]);
      recv_total += in_counts[r];
    }
    Bytes out(send_total), in(recv_total);
    for (int r = 0, at = 0; r < size_; at += static_cast<int>(send[r].size()), ++r) {
      std::copy(send[r].begin(), send[r].end(), out.begin() + at);
    }
    MOE_RETURN_IF_ERROR(Exchange(out.data(), out_counts, in.data(), in_counts, "all-to-all"));
    received->assign(size_, {});
    for (int r = 0, at = 0; r < size_; at += static_cast<int>(in_counts[r]), ++r) {
      (*received)[r].assign(in.begin() + at, in.begin() + at + in_counts[r]);
    }
    return absl::OkStatus();
  }

  absl::Status AllGather(absl::Span<const uint8_t> mine, std::vector<Bytes>* all) override {
    std::vector<Bytes> send(size_, Bytes(mine.begin(), mine.end()));
    return AllToAll(send, all);
  }

  absl::Status Barrier() override {
    int64_t one = 1;
    std::vector<Bytes> unused;
    Bytes token(reinterpret_cast<uint8_t*>(&one), reinterpret_cast<uint8_t*>(&one) + 8);
    return AllGather(token, &unused);
  }

  absl::Status Broadcast(int root, Bytes* data, std::chrono::milliseconds timeout) override {
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast from rank ", root, " of ", size_));
    }
    MOE_RETURN_IF_ERROR(Ready());
    int64_t size = rank_ == root ? static_cast<int64_t>(data->size()) : 0;
    MOE_RETURN_IF_ERROR(BroadcastBytes(root, reinterpret_cast<uint8_t*>(&size), sizeof(size),
                                       "broadcast size", timeout));
    if (size < 0) return absl::DataLossError("a negative broadcast size");
    if (rank_ != root) data->resize(static_cast<size_t>(size));
    if (size == 0) return absl::OkStatus();
    return BroadcastBytes(root, data->data(), data->size(), "broadcast", timeout_);
  }

 private:
  absl::Status Ready() {
    MOE_RETURN_IF_ERROR(broken_);
    MOE_CUDA(cudaSetDevice(device_), "selecting the rank's GPU");
    return absl::OkStatus();
  }

  // Grouped sends and receives: out_counts[r] bytes of `out` (in rank order) to rank r, and
  // in_counts[r] bytes from rank r into `in`.
  absl::Status Exchange(const uint8_t* out, const std::vector<size_t>& out_counts, uint8_t* in,
                        const std::vector<size_t>& in_counts, const char* what) {
    size_t out_total = 0, in_total = 0;
    for (size_t c : out_counts) out_total += c;
    for (size_t c : in_counts) in_total += c;
    MOE_ASSIGN_OR_RETURN(uint8_t * d_out, send_buffer_.Reserve(std::max<size_t>(out_total, 1)));
    MOE_ASSIGN_OR_RETURN(uint8_t * d_in, recv_buffer_.Reserve(std::max<size_t>(in_total, 1)));
    MOE_CUDA(cudaMemcpyAsync(d_out, out, out_total, cudaMemcpyHostToDevice, stream_), what);
    MOE_NCCL(ncclGroupStart(), what);
    size_t at_out = 0, at_in = 0;
    for (int r = 0; r < size_; ++r) {
      MOE_NCCL(ncclSend(d_out + at_out, out_counts[r], ncclUint8, r, comm_, stream_), what);
      MOE_NCCL(ncclRecv(d_in + at_in, in_counts[r], ncclUint8, r, comm_, stream_), what);
      at_out += out_counts[r];
      at_in += in_counts[r];
    }
    MOE_NCCL(ncclGroupEnd(), what);
    MOE_RETURN_IF_ERROR(Enqueued(what, timeout_));
    MOE_CUDA(cudaMemcpyAsync(in, d_in, in_total, cudaMemcpyDeviceToHost, stream_), what);
    return Wait(what, timeout_);
  }

  absl::Status BroadcastBytes(int root, uint8_t* bytes, size_t n, const char* what,
                              std::chrono::milliseconds timeout) {
    MOE_ASSIGN_OR_RETURN(uint8_t * d, send_buffer_.Reserve(n));
    if (rank_ == root) {
      MOE_CUDA(cudaMemcpyAsync(d, bytes, n, cudaMemcpyHostToDevice, stream_), what);
    }
    MOE_NCCL(ncclBroadcast(d, d, n, ncclUint8, root, comm_, stream_), what);
    MOE_RETURN_IF_ERROR(Enqueued(what, timeout));
    MOE_CUDA(cudaMemcpyAsync(bytes, d, n, cudaMemcpyDeviceToHost, stream_), what);
    return Wait(what, timeout);
  }

  // A non-blocking communicator may still be enqueuing the operation when the call returns: the
  // copy back must go on the stream after it.
  absl::Status Enqueued(const char* what, std::chrono::milliseconds timeout) {
    absl::Status s = PollUntilDone(
        timeout, [&] { return NcclSettled(comm_, what); },
        [&] { return absl::DeadlineExceededError(absl::StrCat(what, ": NCCL did not start it")); });
    return s.ok() ? s : Break(s);
  }

  // Polls the stream and NCCL's own error until the work is done, fails, or the time is up (then
  // the communicator is aborted: its collectives can never match again).
  absl::Status Wait(const char* what, std::chrono::milliseconds timeout) {
    absl::Status s = PollUntilDone(
        timeout,
        [&]() -> absl::StatusOr<bool> {
          const cudaError_t q = cudaStreamQuery(stream_);
          if (q == cudaSuccess) return true;
          if (q != cudaErrorNotReady) return CudaError(q, what);
          ncclResult_t async = ncclSuccess;
          ncclCommGetAsyncError(comm_, &async);
          if (async != ncclSuccess && async != ncclInProgress) return NcclError(async, what);
          return false;
        },
        [&] {
          return absl::DeadlineExceededError(
              absl::StrCat(what, ": not complete after ", timeout.count(), " ms on GPU rank ",
                           rank_, " of ", size_, " (a rank stopped or the network broke)"));
        });
    return s.ok() ? s : Break(s);
  }

  absl::Status Break(absl::Status why) {
    if (broken_.ok()) {
      ncclCommAbort(comm_);
      broken_ = why;
    }
    return why;
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  int device_, rank_, size_;
  std::chrono::milliseconds timeout_;
  absl::Status broken_;
  DeviceBuffer send_buffer_, recv_buffer_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    Communicator& bootstrap, int device, std::chrono::milliseconds timeout) {
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no GPU for NCCL on rank ", bootstrap.rank(), ": ",
                     e != cudaSuccess ? cudaGetErrorString(e) : "the CUDA runtime sees no device"));
  }
  if (device < 0 || device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU ", device, " on rank ", bootstrap.rank(), ": there are ", devices));
  }
  MOE_CUDA(cudaSetDevice(device), "selecting the rank's GPU");
  ncclUniqueId id;
  Bytes id_bytes(sizeof(id));
  if (bootstrap.rank() == 0) {
    MOE_NCCL(ncclGetUniqueId(&id), "making the NCCL id");
    std::memcpy(id_bytes.data(), &id, sizeof(id));
  }
  MOE_RETURN_IF_ERROR(bootstrap.Broadcast(0, &id_bytes, bootstrap.timeout()));
  if (id_bytes.size() != sizeof(id)) return absl::DataLossError("a truncated NCCL id");
  std::memcpy(&id, id_bytes.data(), sizeof(id));
  // Non-blocking, so that a rank that never joins is a timeout here too.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm;
  MOE_NCCL(ncclCommInitRankConfig(&comm, bootstrap.size(), id, bootstrap.rank(), &config),
           "starting NCCL");
  if (absl::Status s = PollUntilDone(
          timeout, [&] { return NcclSettled(comm, "starting NCCL"); },
          [] {
            return absl::DeadlineExceededError("starting NCCL: not every rank joined in time");
          });
      !s.ok()) {
    ncclCommAbort(comm);
    return s;
  }
  cudaStream_t stream;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    ncclCommAbort(comm);
    return CudaError(e, "making the rank's stream");
  }
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(comm, stream, device, bootstrap.rank(), bootstrap.size(), timeout));
}

}  // namespace moe
