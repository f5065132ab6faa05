// How much memory this process can still take (what a load compares a model's weights with),
// and how much it has taken at most.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace moe {

// MemAvailable of /proc/meminfo, or the room left under this process's cgroup limit (v1 or v2,
// its inactive file cache counted as room) when that is lower; nullopt when neither can be read.
std::optional<size_t> AvailableMemoryBytes();

// OK when `bytes` fit in `available` (or nothing is known of it), else ResourceExhausted naming
// both: what a large buffer is checked against before it is mapped, so that a request the
// system cannot back fails with a message instead of the process being killed once the memory
// is touched.
absl::Status RoomFor(size_t bytes, std::optional<size_t> available);

// The process's peak resident set (VmHWM of /proc/self/status), in bytes; 0 if unknown.
size_t PeakResidentBytes();

// The parsing, for tests: meminfo's text, and the cgroup's limit and use (memory.max and
// memory.current, or v1's limit_in_bytes and usage_in_bytes; empty where absent) and its
// memory.stat, whose inactive file cache does not count as used: a cgroup at its limit is
// mostly such cache after much file reading, which the kernel drops for new memory.
std::optional<size_t> AvailableMemoryFrom(const std::string& meminfo, const std::string& cgroup_max,
                                          const std::string& cgroup_current,
                                          const std::string& cgroup_stat = "");

}  // namespace moe
