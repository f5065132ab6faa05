// Run under mpirun with one GPU per rank: the collectives of the NCCL communicator
// (collective_checks.h), bootstrapped over MPI. Without a GPU it says so and exits 77 (ctest:
// skipped); it has not run on GPUs here.
#include "lib/dist/nccl_communicator.h"

#include <cstdio>
#include <string>

#include "lib/dist/mpi_communicator.h"
#include "tests/dist/collective_checks.h"

int main() {
  auto mpi = moe::CreateMpiCommunicator(std::chrono::milliseconds(20000));
  if (!mpi.ok()) {
    std::fprintf(stderr, "%s\n", std::string(mpi.status().message()).c_str());
    return 1;
  }
  auto make = [&](std::chrono::milliseconds timeout) {
    return moe::CreateNcclCommunicator(**mpi, (*mpi)->rank(), timeout);
  };
  auto nccl = make(std::chrono::milliseconds(20000));
  if (nccl.status().code() == absl::StatusCode::kFailedPrecondition) {
    std::printf("SKIPPED: %s\n", std::string(nccl.status().message()).c_str());
    return 77;
  }
  if (!nccl.ok()) {
    std::fprintf(stderr, "FAILED: %s\n", std::string(nccl.status().message()).c_str());
    return 1;
  }
  return moe::testing::CheckCollectives(**nccl, make) == 0 ? 0 : 1;
}
