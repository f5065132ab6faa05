// Reads byte ranges of a model file for the expert cache's disk tier: with direct I/O where the
// filesystem allows it, so the page cache does not keep a second copy of what the cache holds,
// else buffered reads that tell the kernel to drop the pages again (posix_fadvise DONTNEED).
// Thread-safe: reads are positioned (pread) and share nothing but the descriptor.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace moe {

class ExpertFileReader {
 public:
  enum class Mode { kDirect, kBuffered };

  // prefer_direct false: buffered reads even where direct I/O works.
  static absl::StatusOr<std::unique_ptr<ExpertFileReader>> Open(const std::string& path,
                                                                bool prefer_direct = true);
  ~ExpertFileReader();
  ExpertFileReader(const ExpertFileReader&) = delete;
  ExpertFileReader& operator=(const ExpertFileReader&) = delete;

  // Reads out.size() bytes at `offset`. An I/O error or a short read (the file shrank) is a
  // status naming the file and the range; nothing is retried behind the caller's back.
  absl::Status Read(uint64_t offset, absl::Span<uint8_t> out) const;

  // Whether the file is still the one opened: same size and modification time (a file rewritten
  // under a running model would otherwise feed it other bytes).
  absl::Status CheckUnchanged() const;

  Mode mode() const { return mode_; }
  static const char* ModeName(Mode mode) { return mode == Mode::kDirect ? "direct" : "buffered"; }
  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }

  // Tests: called before every read; an error it returns is what the read returns.
  // Safe while reads run on other threads (the cache's I/O threads may be reading ahead).
  void set_fault_for_testing(std::function<absl::Status(uint64_t offset, size_t size)> fault) {
    std::lock_guard<std::mutex> lock(fault_mu_);
    fault_ = std::move(fault);
  }

 private:
  ExpertFileReader(std::string path, int fd, Mode mode, uint64_t size, int64_t mtime_ns);
  absl::Status ReadDirect(uint64_t offset, absl::Span<uint8_t> out) const;
  absl::Status ReadBuffered(uint64_t offset, absl::Span<uint8_t> out) const;

  std::string path_;
  int fd_;
  Mode mode_;
  uint64_t size_;
  int64_t mtime_ns_;
  mutable std::mutex fault_mu_;
  std::function<absl::Status(uint64_t, size_t)> fault_;  // guarded by fault_mu_
};

}  // namespace moe
