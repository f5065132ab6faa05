#include "lib/moe/expert_file_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace moe {
namespace {

// Direct I/O wants offsets, sizes and buffers aligned to the device's block; 4 KiB suits every
// device Linux has, and the bounce buffer is read in chunks of this size at most.
constexpr uint64_t kAlign = 4096;
constexpr size_t kChunk = 4 << 20;

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertFileReader>> ExpertFileReader::Open(const std::string& path,
                                                                         bool prefer_direct) {
  Mode mode = Mode::kBuffered;
  int fd = -1;
  if (prefer_direct) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd >= 0) mode = Mode::kDirect;  // tmpfs and some others refuse O_DIRECT: EINVAL
  }
  if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat("cannot open '", path, "': ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::PermissionDeniedError(
        absl::StrCat("cannot stat '", path, "': ", std::strerror(err)));
  }
  auto reader = std::unique_ptr<ExpertFileReader>(
      new ExpertFileReader(path, fd, mode, static_cast<uint64_t>(st.st_size), MtimeNs(st)));
  // Some filesystems accept O_DIRECT at open and refuse the reads: find out now, not mid-step.
  if (mode == Mode::kDirect && reader->size_ > 0) {
    uint8_t probe;
    if (!reader->ReadDirect(0, {&probe, 1}).ok()) {
      ::close(reader->fd_);
      reader->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (reader->fd_ < 0) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot open '", path, "': ", std::strerror(errno)));
      }
      reader->mode_ = Mode::kBuffered;
    }
  }
  return reader;
}

ExpertFileReader::ExpertFileReader(std::string path, int fd, Mode mode, uint64_t size,
                                   int64_t mtime_ns)
    : path_(std::move(path)), fd_(fd), mode_(mode), size_(size), mtime_ns_(mtime_ns) {}

ExpertFileReader::~ExpertFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status ExpertFileReader::Read(uint64_t offset, absl::Span<uint8_t> out) const {
  if (std::lock_guard<std::mutex> lock(fault_mu_); fault_) {
    if (absl::Status s = fault_(offset, out.size()); !s.ok()) return s;
  }
  if (offset > size_ || out.size() > size_ - offset) {
    return absl::DataLossError(absl::StrCat("reading '", path_, "': bytes [", offset, ", ",
                                            offset + out.size(), ") lie past its end (", size_,
                                            " bytes when it was opened)"));
  }
  return mode_ == Mode::kDirect ? ReadDirect(offset, out) : ReadBuffered(offset, out);
}

absl::Status ExpertFileReader::ReadDirect(uint64_t offset, absl::Span<uint8_t> out) const {
  const uint64_t begin = offset / kAlign * kAlign;
  const uint64_t end = (offset + out.size() + kAlign - 1) / kAlign * kAlign;
  const size_t buffer_bytes = static_cast<size_t>(std::min<uint64_t>(end - begin, kChunk));
  // One aligned buffer per reading thread, grown as needed and kept: the I/O threads read all
  // the time, and a fresh allocation of up to 4 MiB per read churns the allocator, whose arenas
  // then keep the freed chunks resident.
  thread_local std::unique_ptr<void, FreeDeleter> buffer;
  thread_local size_t buffer_capacity = 0;
  if (buffer_capacity < buffer_bytes) {
    void* raw = nullptr;
    if (posix_memalign(&raw, kAlign, buffer_bytes) != 0) {
      return absl::ResourceExhaustedError("no memory for a direct-read buffer");
    }
    buffer.reset(raw);
    buffer_capacity = buffer_bytes;
  }
  for (uint64_t pos = begin; pos < end;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(end - pos, buffer_bytes));
    const ssize_t got = ::pread(fd_, buffer.get(), want, static_cast<off_t>(pos));
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(
          absl::StrCat("reading '", path_, "' at ", pos, ": ", std::strerror(errno)));
    }
    // The file's last block comes back short; anything short of the wanted bytes is an error.
    const uint64_t useful_end = std::min<uint64_t>(pos + got, offset + out.size());
    if (useful_end < std::min<uint64_t>(pos + want, offset + out.size())) {
      return absl::DataLossError(absl::StrCat("short read of '", path_, "' at ", pos, ": ", got,
                                              " of ", want, " bytes (did the file shrink?)"));
    }
    const uint64_t from = std::max<uint64_t>(pos, offset);
    if (useful_end > from) {
      std::memcpy(out.data() + (from - offset), static_cast<uint8_t*>(buffer.get()) + (from - pos),
                  useful_end - from);
    }
    if (got == 0) break;
    pos += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

absl::Status ExpertFileReader::ReadBuffered(uint64_t offset, absl::Span<uint8_t> out) const {
  for (size_t done = 0; done < out.size();) {
    const ssize_t got =
        ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(
          absl::StrCat("reading '", path_, "' at ", offset + done, ": ", std::strerror(errno)));
    }
    if (got == 0) {
      return absl::DataLossError(absl::StrCat("short read of '", path_, "' at ", offset + done,
                                              ": the file ends (did it shrink?)"));
    }
    done += static_cast<size_t>(got);
  }
  // The cache holds these bytes now: the page cache need not hold them a second time.
  ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(out.size()),
                  POSIX_FADV_DONTNEED);
  return absl::OkStatus();
}

absl::Status ExpertFileReader::CheckUnchanged() const {
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0) {
    return absl::DataLossError(
        absl::StrCat("'", path_, "' is gone since the model was loaded: ", std::strerror(errno)));
  }
  if (static_cast<uint64_t>(st.st_size) != size_ || MtimeNs(st) != mtime_ns_) {
    return absl::DataLossError(
        absl::StrCat("'", path_, "' changed on disk since the model was loaded (size ", size_,
                     " -> ", st.st_size, ", modification time ",
                     MtimeNs(st) == mtime_ns_ ? "unchanged" : "changed", "): load it again"));
  }
  return absl::OkStatus();
}

}  // namespace moe
