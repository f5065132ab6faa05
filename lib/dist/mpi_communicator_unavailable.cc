// Built instead of mpi_communicator.cc where the MPI development files are missing: callers link
// the same function and get an error naming what to install.
#include "lib/dist/mpi_communicator.h"

namespace moe {

absl::StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(
    std::chrono::milliseconds /*timeout*/) {
  return absl::UnimplementedError(
      "libmoe was built without MPI: install Open MPI's development files (scripts/"
      "install-deps.sh) and build again");
}

}  // namespace moe
