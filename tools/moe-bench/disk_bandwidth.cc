#include "tools/moe-bench/disk_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <vector>

#include "lib/base/anonymous_memory.h"

namespace moe::bench {

absl::StatusOr<double> MeasureDiskReadBandwidth(const ExpertFileReader& reader, size_t total_bytes,
                                                size_t read_bytes) {
  const uint64_t pieces = reader.size() / read_bytes;
  if (pieces == 0) return absl::InvalidArgumentError("the file is smaller than one read");
  auto buffer = AnonymousMemory::Allocate(read_bytes);
  if (!buffer.ok()) return buffer.status();
  std::vector<uint64_t> order(pieces);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  const size_t reads = std::max<size_t>(1, std::min<uint64_t>(pieces, total_bytes / read_bytes));
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < reads; ++i) {
    absl::Status s = reader.Read(order[i] * read_bytes, {(*buffer)->data(), read_bytes});
    if (!s.ok()) return s;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(reads * read_bytes) / seconds / 1e9;
}

}  // namespace moe::bench
