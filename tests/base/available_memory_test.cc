// The memory a load compares a model with: MemAvailable, or less under a cgroup limit.
#include "lib/base/available_memory.h"

#include "gtest/gtest.h"

namespace moe {
namespace {

constexpr char kMeminfo[] =
    "MemTotal:       24000000 kB\n"
    "MemFree:         1000000 kB\n"
    "MemAvailable:    8000000 kB\n"
    "Buffers:           10000 kB\n";

TEST(AvailableMemoryTest, MemAvailableWithoutACgroupLimit) {
  EXPECT_EQ(AvailableMemoryFrom(kMeminfo, "", ""), size_t{8000000} * 1024);
  EXPECT_EQ(AvailableMemoryFrom(kMeminfo, "max\n", "123\n"), size_t{8000000} * 1024);  // v2
}

TEST(AvailableMemoryTest, TheRoomUnderALowerCgroupLimit) {
  EXPECT_EQ(AvailableMemoryFrom(kMeminfo, "4294967296\n", "1073741824\n"), size_t{3} << 30);
  EXPECT_EQ(AvailableMemoryFrom(kMeminfo, "1000\n", "2000\n"), 0u);  // over its limit already
  // v1's "unlimited" is a huge number: MemAvailable stays the smaller.
  EXPECT_EQ(AvailableMemoryFrom(kMeminfo, "9223372036854771712\n", "5000\n"),
            size_t{8000000} * 1024);
  EXPECT_EQ(AvailableMemoryFrom("", "4096\n", "1024\n"), 3072u);
}

TEST(AvailableMemoryTest, ACgroupsInactiveFileCacheIsRoom) {
  // At its limit after reading files: 3 GiB used, 2 GiB of it inactive file cache (v2's key).
  const std::string v2 = "anon 1073741824\nfile 2147483648\ninactive_file 2147483648\n";
  EXPECT_EQ(AvailableMemoryFrom(kMeminfo, "3221225472\n", "3221225472\n", v2), size_t{2} << 30);
  const std::string v1 = "cache 2147483648\ntotal_inactive_file 1073741824\n";
  EXPECT_EQ(AvailableMemoryFrom(kMeminfo, "3221225472\n", "3221225472\n", v1), size_t{1} << 30);
  // More inactive cache than use (counters read at different moments): all of it room.
  EXPECT_EQ(AvailableMemoryFrom(kMeminfo, "4096\n", "1024\n", "inactive_file 2048\n"), 4096u);
}

TEST(AvailableMemoryTest, NothingReadableIsNothing) {
  EXPECT_EQ(AvailableMemoryFrom("", "", ""), std::nullopt);
  EXPECT_EQ(AvailableMemoryFrom("MemAvailable: lots\n", "", ""), std::nullopt);
}

TEST(AvailableMemoryTest, ABufferLargerThanTheRoomIsRefusedNamingBoth) {
  EXPECT_TRUE(RoomFor(size_t{3} << 20, size_t{4} << 20).ok());
  EXPECT_TRUE(RoomFor(size_t{4} << 20, size_t{4} << 20).ok());
  EXPECT_TRUE(RoomFor(size_t{1} << 40, std::nullopt).ok()) << "nothing known: not refused";
  const absl::Status s = RoomFor(size_t{5} << 20, size_t{4} << 20);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("5.0 MiB asked for, 4.0 MiB of memory available"), std::string::npos)
      << s;
}

TEST(AvailableMemoryTest, ThisMachineSaysSomething) {
  std::optional<size_t> a = AvailableMemoryBytes();
  ASSERT_TRUE(a.has_value());
  EXPECT_GT(*a, size_t{16} << 20);
}

}  // namespace
}  // namespace moe
