// Ranks as threads of one process, for tests: a world of n communicators, each used by its own
// thread, exchanging through shared memory with the same collectives and timeouts as MPI's.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "lib/dist/communicator.h"

namespace moe {

// n >= 1 ranks; a collective some rank does not enter within `timeout` is DeadlineExceeded for
// the ranks waiting in it.
std::vector<std::unique_ptr<Communicator>> CreateLoopbackWorld(
    int n, std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace moe
