// The communicator over MPI (Open MPI from Debian): ranks launched by mpirun, on one machine or
// many. Collectives run non-blocking and are polled against the timeout, so a rank that died
// or a broken network ends the call with an error instead of a hang; MPI reports errors
// (MPI_ERRORS_RETURN) rather than aborting the process.
#pragma once

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "lib/dist/communicator.h"

namespace moe {

// Initialises MPI if nobody has (and finalises it when the last communicator made here goes),
// checking that it gives at least MPI_THREAD_SERIALIZED (one thread at a time may call it, any
// thread), and duplicates MPI_COMM_WORLD. An error naming the problem when MPI cannot start.
absl::StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(
    std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace moe
