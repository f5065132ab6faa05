#include "lib/dist/loopback_communicator.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

// Runs f(communicator) on a thread per rank and collects each rank's status.
template <typename F>
std::vector<absl::Status> OnEveryRank(std::vector<std::unique_ptr<Communicator>>& world, F f) {
  std::vector<absl::Status> status(world.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < world.size(); ++r) {
    threads.emplace_back([&, r] { status[r] = f(*world[r]); });
  }
  for (auto& t : threads) t.join();
  return status;
}

// Rank r sends rank d (d + 1) copies of the byte 16 r + d.
Bytes Payload(int from, int to) { return Bytes(to + 1, static_cast<uint8_t>(16 * from + to)); }

TEST(LoopbackCommunicatorTest, AllToAllDeliversEachPayloadToItsRank) {
  for (int n : {1, 2, 4}) {
    auto world = CreateLoopbackWorld(n);
    auto status = OnEveryRank(world, [&](Communicator& c) -> absl::Status {
      EXPECT_EQ(c.size(), n);
      for (int round = 0; round < 20; ++round) {  // rounds follow each other without mixing
        std::vector<Bytes> send;
        for (int d = 0; d < n; ++d) send.push_back(Payload(c.rank(), d));
        send[0].push_back(static_cast<uint8_t>(round));
        std::vector<Bytes> got;
        if (absl::Status s = c.AllToAll(send, &got); !s.ok()) return s;
        for (int from = 0; from < n; ++from) {
          Bytes want = Payload(from, c.rank());
          if (c.rank() == 0) want.push_back(static_cast<uint8_t>(round));
          EXPECT_EQ(got[from], want) << "from " << from << " to " << c.rank();
        }
      }
      std::vector<Bytes> all;
      const uint8_t mine[] = {static_cast<uint8_t>(c.rank()), 7};
      if (absl::Status s = c.AllGather(mine, &all); !s.ok()) return s;
      for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], (Bytes{static_cast<uint8_t>(r), 7}));
      return c.Barrier();
    });
    for (const auto& s : status) EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(LoopbackCommunicatorTest, ARankThatNeverComesIsATimeoutNotAHang) {
  auto world = CreateLoopbackWorld(3, std::chrono::milliseconds(200));
  std::vector<absl::Status> status(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {  // rank 2 never enters
    threads.emplace_back([&, r] { status[r] = world[r]->Barrier(); });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : status) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("3 ranks"), std::string::npos) << s;
  }
  std::vector<Bytes> got;
  EXPECT_EQ(world[0]->AllToAll(std::vector<Bytes>(2), &got).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe
