// Run under mpirun (tests/dist/CMakeLists.txt: -np 2 and -np 4 on this machine): the
// collectives of the MPI communicator (collective_checks.h). Exits non-zero on any failure.
#include "lib/dist/mpi_communicator.h"

#include <cstdio>
#include <string>

#include "tests/dist/collective_checks.h"

int main() {
  auto comm = moe::CreateMpiCommunicator(std::chrono::milliseconds(20000));
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", std::string(comm.status().message()).c_str());
    return 1;
  }
  return moe::testing::CheckCollectives(
             **comm, [](std::chrono::milliseconds t) { return moe::CreateMpiCommunicator(t); }) == 0
             ? 0
             : 1;
}
