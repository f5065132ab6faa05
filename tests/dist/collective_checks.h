// The checks every communicator between processes passes, run on each rank (mpirun): the
// collectives against what the others must have sent, then that a rank which stops taking part
// is a timeout on the others, not a hang. Failures are printed with "FAILED" and counted.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/dist/communicator.h"

namespace moe::testing {

inline int failures = 0;
inline void Check(bool ok, const char* what, int rank) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAILED %s\n", rank, what);
    ++failures;
  }
}

inline Bytes Payload(int from, int to, int round) {
  return Bytes((from * 7 + to * 3 + round) % 50, static_cast<uint8_t>(16 * from + to));
}

// `make` makes another communicator over the same ranks with the given timeout.
using MakeCommunicator =
    std::function<absl::StatusOr<std::unique_ptr<Communicator>>(std::chrono::milliseconds)>;

// Returns the number of failures on this rank.
inline int CheckCollectives(Communicator& c, const MakeCommunicator& make) {
  const int n = c.size(), me = c.rank();
  for (int round = 0; round < 50; ++round) {
    std::vector<Bytes> send, got;
    for (int d = 0; d < n; ++d) send.push_back(Payload(me, d, round));
    Check(c.AllToAll(send, &got).ok(), "all-to-all", me);
    for (int from = 0; from < n; ++from) {
      Check(got.size() == static_cast<size_t>(n) && got[from] == Payload(from, me, round),
            "all-to-all payload", me);
    }
  }
  std::vector<Bytes> all;
  const uint8_t mine[] = {static_cast<uint8_t>(me), 42};
  Check(c.AllGather(mine, &all).ok(), "all-gather", me);
  for (int r = 0; r < n; ++r) {
    Check(all[r] == Bytes{static_cast<uint8_t>(r), 42}, "all-gather payload", me);
  }
  // Gathers of known sizes to each rank in turn: the root gets every payload.
  for (int root = 0; root < n; ++root) {
    std::vector<size_t> sizes(n);
    for (int r = 0; r < n; ++r) sizes[r] = Payload(r, root, 7).size();
    const Bytes payload = Payload(me, root, 7);
    auto pending = c.StartGather(root, payload, sizes);
    Check(pending.ok(), "starting a gather", me);
    if (!pending.ok()) continue;
    std::vector<Bytes> gathered;
    Check((*pending)->Wait(&gathered).ok(), "gather", me);
    if (me != root) continue;
    for (int r = 0; r < n; ++r) {
      Check(gathered.size() == static_cast<size_t>(n) && gathered[r] == Payload(r, root, 7),
            "gathered payload", me);
    }
  }
  Check(!c.StartGather(n, mine, std::vector<size_t>(n, 2)).ok(), "a gather to no rank", me);
  Check(c.Barrier().ok(), "barrier", me);

  // The last rank stops taking part for a while: the others' barrier times out.
  auto impatient = make(std::chrono::milliseconds(300));
  Check(impatient.ok(), "second communicator", me);
  if (me == n - 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    // MPI still completes it; NCCL has aborted the others' side, so this one times out too.
    const absl::Status late = (*impatient)->Barrier();
    Check(late.ok() || late.code() == absl::StatusCode::kDeadlineExceeded, "the late barrier", me);
  } else if (n > 1) {
    const auto t0 = std::chrono::steady_clock::now();
    const absl::Status s = (*impatient)->Barrier();
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Check(s.code() == absl::StatusCode::kDeadlineExceeded, "a timeout, not a hang", me);
    Check(waited < 1.2, "within the timeout", me);
  }
  Check(c.Barrier().ok(), "the closing barrier", me);
  Bytes order;
  if (me == 0) order = {1, 2, 3};
  Check(c.Broadcast(0, &order, c.timeout()).ok() && order == Bytes{1, 2, 3}, "broadcast", me);
  Check(c.Barrier().ok(), "the last barrier", me);
  std::printf("rank %d of %d: %s\n", me, n, failures == 0 ? "ok" : "FAILED");
  return failures;
}

}  // namespace moe::testing
