#include "lib/base/available_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace moe {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct CgroupFilePaths {
  std::string max, current, stat;
};

// The files holding this process's cgroup memory limit, use and its breakdown: the v1 memory
// controller's ("N:memory:/path") where there is one, else the unified (v2) hierarchy's
// ("0::/path").
CgroupFilePaths CgroupFiles() {
  std::istringstream lines(ReadAll("/proc/self/cgroup"));
  std::string v2;
  for (std::string line; std::getline(lines, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    absl::string_view rest = absl::string_view(line).substr(colon + 1);
    if (absl::ConsumePrefix(&rest, "memory:")) {
      const std::string dir = absl::StrCat("/sys/fs/cgroup/memory", rest);
      return {dir + "/memory.limit_in_bytes", dir + "/memory.usage_in_bytes", dir + "/memory.stat"};
    }
    if (absl::ConsumePrefix(&rest, ":")) v2 = absl::StrCat("/sys/fs/cgroup", rest);
  }
  if (v2.empty()) return {};
  return {v2 + "/memory.max", v2 + "/memory.current", v2 + "/memory.stat"};
}

// The inactive file cache of a cgroup's memory.stat (v2's inactive_file, v1's
// total_inactive_file): pages its use counts that the kernel takes back before it fails an
// allocation; 0 when absent.
uint64_t InactiveFileBytes(const std::string& stat) {
  for (absl::string_view line : absl::StrSplit(stat, '\n')) {
    if (!absl::ConsumePrefix(&line, "inactive_file ") &&
        !absl::ConsumePrefix(&line, "total_inactive_file ")) {
      continue;
    }
    uint64_t bytes;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &bytes)) return bytes;
  }
  return 0;
}

}  // namespace

std::optional<size_t> AvailableMemoryFrom(const std::string& meminfo, const std::string& cgroup_max,
                                          const std::string& cgroup_current,
                                          const std::string& cgroup_stat) {
  std::optional<size_t> available;
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    uint64_t kib;
    if (absl::ConsumeSuffix(&line, "kB") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) {
      available = static_cast<size_t>(kib) * 1024;
    }
  }
  uint64_t max, current;
  if (absl::SimpleAtoi(absl::StripAsciiWhitespace(cgroup_max), &max) &&
      absl::SimpleAtoi(absl::StripAsciiWhitespace(cgroup_current), &current)) {
    current -= std::min(current, InactiveFileBytes(cgroup_stat));
    const size_t room = current < max ? static_cast<size_t>(max - current) : 0;
    if (!available || room < *available) available = room;
  }
  return available;
}

size_t PeakResidentBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "VmHWM:")) {
      size_t kib = 0;
      return absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(rest), "kB"), &kib)
                 ? kib * 1024
                 : 0;
    }
  }
  return 0;
}

absl::Status RoomFor(size_t bytes, std::optional<size_t> available) {
  if (!available || bytes <= *available) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%.1f MiB asked for, %.1f MiB of memory available", static_cast<double>(bytes) / 1048576.0,
      static_cast<double>(*available) / 1048576.0));
}

std::optional<size_t> AvailableMemoryBytes() {
  const CgroupFilePaths cgroup = CgroupFiles();
  auto read = [](const std::string& path) { return path.empty() ? "" : ReadAll(path); };
  return AvailableMemoryFrom(ReadAll("/proc/meminfo"), read(cgroup.max), read(cgroup.current),
                             read(cgroup.stat));
}

}  // namespace moe
