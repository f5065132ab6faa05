// The one way the communicators wait for a transport: poll until done, failed or out of time.
#pragma once

#include <chrono>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/dist/communicator.h"

namespace moe {

// Calls `test` (returning absl::StatusOr<bool>: done, or the transport's error) until it is done
// or fails, or `timeout` passes (Communicator::kWaitForever: never); then returns `late()`. It
// spins for the first 20 ms (a step's exchanges are quick) and then sleeps 200 µs between polls,
// so a rank waiting long does not hold a core.
template <typename Test, typename Late>
absl::Status PollUntilDone(std::chrono::milliseconds timeout, Test test, Late late) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    absl::StatusOr<bool> done = test();
    if (!done.ok()) return done.status();
    if (*done) return absl::OkStatus();
    const auto waited = std::chrono::steady_clock::now() - start;
    if (timeout != Communicator::kWaitForever && waited > timeout) return late();
    if (waited < std::chrono::milliseconds(20)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

}  // namespace moe
