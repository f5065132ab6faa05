// The communicator between GPU ranks over NCCL, one GPU per rank: the all-to-all as grouped
// ncclSend/ncclRecv, broadcasts with ncclBroadcast. Payloads are host bytes, as the CPU backend
// hands them, staged through device buffers on the rank's own stream; the CUDA backend will hand
// device buffers directly. A collective not complete within the timeout aborts the NCCL
// communicator (ncclCommAbort) and is DeadlineExceeded; every later call then fails.
//
// Built whenever the CUDA toolkit and NCCL are found; not run on machines without a GPU (here:
// compiled and its no-GPU error tested only).
#pragma once

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "lib/dist/communicator.h"

namespace moe {

// Every rank of `bootstrap` (an MPI world) calls this with the GPU it uses: rank 0's NCCL id
// reaches the others through `bootstrap`, and the NCCL world has the same ranks. An error naming
// the problem when there is no such GPU or NCCL cannot start.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    Communicator& bootstrap, int device,
    std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace moe
