// What expert parallelism needs from a transport between ranks (processes, nodes, GPUs): who I
// am, how many we are, and collectives over byte payloads. Implementations: an in-process
// loopback (tests), MPI (lib/dist/mpi_communicator.h); NCCL later. A collective every rank must
// enter; one that does not complete within the communicator's timeout returns DeadlineExceeded
// instead of hanging (a rank that died, a network that broke).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace moe {

using Bytes = std::vector<uint8_t>;

// A collective started and not yet complete (Communicator::StartAllGather): work done before Wait
// overlaps the transfer. Wait must come before the communicator's next collective.
class PendingGather {
 public:
  virtual ~PendingGather() = default;
  // Every rank's payload, in rank order, once all have arrived (or the timeout's error).
  virtual absl::Status Wait(std::vector<Bytes>* all) = 0;
};

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
  // AllGather when every rank knows beforehand how many bytes each sends (sizes[r] from rank r;
  // mine.size() == sizes[rank()]): one collective, started now and finished by the returned
  // Wait. `mine` stays alive until then. By default it completes here, before returning.
  virtual absl::StatusOr<std::unique_ptr<PendingGather>> StartAllGather(
      absl::Span<const uint8_t> mine, absl::Span<const size_t> sizes);
  // StartAllGather where only `root` needs the payloads: root's Wait gives every rank's; on the
  // others only Wait's status counts (what it fills in is unspecified). A rank's traffic is then
  // its own payload, not every other rank's too. By default, StartAllGather.
  virtual absl::StatusOr<std::unique_ptr<PendingGather>> StartGather(
      int root, absl::Span<const uint8_t> mine, absl::Span<const size_t> sizes);
  // Root's *data to every rank (*data is replaced on the others). Waits up to `timeout` instead
  // of the communicator's own: a rank waiting for its next order may wait long (kWaitForever).
  virtual absl::Status Broadcast(int root, Bytes* data, std::chrono::milliseconds timeout) = 0;
  // How long one collective may take before it is DeadlineExceeded.
  virtual std::chrono::milliseconds timeout() const = 0;

  static constexpr std::chrono::milliseconds kWaitForever = std::chrono::milliseconds::max();

 protected:
  // StartAllGather's arguments: a size per rank, this rank's matching `mine`.
  absl::Status CheckGatherSizes(absl::Span<const uint8_t> mine,
                                absl::Span<const size_t> sizes) const;
  // StartGather's root: a rank of this world.
  absl::Status CheckGatherRoot(int root) const;
};

}  // namespace moe
