// Anonymous memory holds the bytes asked for rounded to a page, not to a huge page (an expert
// cache's slab is its exact budget), and starts on a huge-page boundary so that transparent huge
// pages can back it.
#include "lib/base/anonymous_memory.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(AnonymousMemoryTest, RoundsToAPageAndStartsOnAHugePage) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  for (size_t bytes : {size_t{1}, page, (size_t{3} << 20) + 5, size_t{5} << 20}) {
    auto m = AnonymousMemory::Allocate(bytes);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ((*m)->size(), (bytes + page - 1) / page * page) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*m)->data()) % (size_t{2} << 20), 0u) << bytes;
    std::memset((*m)->data(), 0x5a, (*m)->size());  // all of it is ours to write
    EXPECT_EQ((*m)->data()[(*m)->size() - 1], 0x5a);
  }
}

}  // namespace
}  // namespace moe
