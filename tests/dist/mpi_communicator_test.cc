// Run under mpirun (tests/dist/CMakeLists.txt: -np 2 and -np 4 on this machine): every rank checks
// the collectives against what the others must have sent, then that a rank which stops taking
// part is a timeout on the others, not a hang. Exits non-zero on any failure.
#include "lib/dist/mpi_communicator.h"

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

int failures = 0;
void Check(bool ok, const char* what, int rank) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAILED %s\n", rank, what);
    ++failures;
  }
}

moe::Bytes Payload(int from, int to, int round) {
  return moe::Bytes((from * 7 + to * 3 + round) % 50, static_cast<uint8_t>(16 * from + to));
}

}  // namespace

int main() {
  auto comm = moe::CreateMpiCommunicator(std::chrono::milliseconds(20000));
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", std::string(comm.status().message()).c_str());
    return 1;
  }
  moe::Communicator& c = **comm;
  const int n = c.size(), me = c.rank();
  for (int round = 0; round < 50; ++round) {
    std::vector<moe::Bytes> send, got;
    for (int d = 0; d < n; ++d) send.push_back(Payload(me, d, round));
    Check(c.AllToAll(send, &got).ok(), "all-to-all", me);
    for (int from = 0; from < n; ++from) {
      Check(got.size() == static_cast<size_t>(n) && got[from] == Payload(from, me, round),
            "all-to-all payload", me);
    }
  }
  std::vector<moe::Bytes> all;
  const uint8_t mine[] = {static_cast<uint8_t>(me), 42};
  Check(c.AllGather(mine, &all).ok(), "all-gather", me);
  for (int r = 0; r < n; ++r) {
    Check(all[r] == moe::Bytes{static_cast<uint8_t>(r), 42}, "all-gather payload", me);
  }
  Check(c.Barrier().ok(), "barrier", me);

  // The last rank stops taking part for a while: the others' barrier times out.
  auto impatient = moe::CreateMpiCommunicator(std::chrono::milliseconds(300));
  Check(impatient.ok(), "second communicator", me);
  if (me == n - 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    Check((*impatient)->Barrier().ok(), "the late barrier", me);
  } else if (n > 1) {
    const auto t0 = std::chrono::steady_clock::now();
    const absl::Status s = (*impatient)->Barrier();
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Check(s.code() == absl::StatusCode::kDeadlineExceeded, "a timeout, not a hang", me);
    Check(waited < 1.2, "within the timeout", me);
  }
  Check(c.Barrier().ok(), "the closing barrier", me);
  std::printf("rank %d of %d: %s\n", me, n, failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
