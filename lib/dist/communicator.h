// What expert parallelism needs from a transport between ranks (processes, nodes, GPUs): who I
// am, how many we are, and collectives over byte payloads. Implementations: an in-process
// loopback (tests), MPI (lib/dist/mpi_communicator.h); NCCL later. A collective every rank must
// enter; one that does not complete within the communicator's timeout returns DeadlineExceeded
// instead of hanging (a rank that died, a network that broke).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace moe {

using Bytes = std::vector<uint8_t>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Sends send[r] to rank r (send has size() entries, any lengths, its own entry included) and
  // fills received[r] with what rank r sent to this one.
  virtual absl::Status AllToAll(absl::Span<const Bytes> send, std::vector<Bytes>* received) = 0;
  // Every rank's `mine`, in rank order.
  virtual absl::Status AllGather(absl::Span<const uint8_t> mine, std::vector<Bytes>* all) = 0;
  virtual absl::Status Barrier() = 0;
  // Root's *data to every rank (*data is replaced on the others). Waits up to `timeout` instead
  // of the communicator's own: a rank waiting for its next order may wait long (kWaitForever).
  virtual absl::Status Broadcast(int root, Bytes* data, std::chrono::milliseconds timeout) = 0;
  // How long one collective may take before it is DeadlineExceeded.
  virtual std::chrono::milliseconds timeout() const = 0;

  static constexpr std::chrono::milliseconds kWaitForever = std::chrono::milliseconds::max();
};

}  // namespace moe
