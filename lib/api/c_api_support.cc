#include "lib/api/c_api_support.h"

#include <mutex>

namespace moe::api {
namespace {

thread_local std::string g_last_error;

struct LogSink {
  std::mutex mu;
  moe_log_callback callback = nullptr;
  moe_log_level min_level = MOE_LOG_WARN;
  void* user_data = nullptr;
};
LogSink& Sink() {
  static LogSink* sink = new LogSink();  // never destroyed: usable during static destruction
  return *sink;
}

}  // namespace

const char* LastError() { return g_last_error.c_str(); }

moe_status Fail(moe_status code, std::string message) {
  g_last_error = std::move(message);
  Log(MOE_LOG_DEBUG, g_last_error);
  return code;
}

moe_status CodeFor(const absl::Status& s) {
  if (s.ok()) return MOE_OK;
  moe_status code;
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
      code = MOE_ERROR_INVALID_ARGUMENT;
      break;
    case absl::StatusCode::kNotFound:
      code = MOE_ERROR_NOT_FOUND;
      break;
    case absl::StatusCode::kPermissionDenied:
      code = MOE_ERROR_IO;
      break;
    case absl::StatusCode::kDataLoss:
      code = MOE_ERROR_CORRUPT_MODEL;
      break;
    case absl::StatusCode::kUnimplemented:
      code = MOE_ERROR_UNSUPPORTED;
      break;
    case absl::StatusCode::kOutOfRange:
      code = MOE_ERROR_OUT_OF_RANGE;
      break;
    case absl::StatusCode::kResourceExhausted:
      code = MOE_ERROR_CONTEXT_FULL;
      break;
    case absl::StatusCode::kCancelled:
      code = MOE_ERROR_CANCELLED;
      break;
    case absl::StatusCode::kUnavailable:
      code = MOE_ERROR_OUT_OF_MEMORY;
      break;
    case absl::StatusCode::kAborted:
      code = MOE_ERROR_BUSY;
      break;
    case absl::StatusCode::kDeadlineExceeded:  // a rank of the world did not answer in time
      code = MOE_ERROR_TIMEOUT;
      break;
    case absl::StatusCode::kUnknown:  // the transport between ranks failed (MPI's own error)
      code = MOE_ERROR_IO;
      break;
    default:
      code = MOE_ERROR_INTERNAL;
      break;
  }
  return code;
}

moe_status FromStatus(const absl::Status& s) {
  if (s.ok()) return MOE_OK;
  return Fail(CodeFor(s), std::string(s.message()));
}

void Log(moe_log_level level, const std::string& message) {
  LogSink& sink = Sink();
  std::lock_guard<std::mutex> lock(sink.mu);
  if (sink.callback != nullptr && level >= sink.min_level) {
    sink.callback(level, message.c_str(), sink.user_data);
  }
}

void SetLogCallback(moe_log_callback callback, moe_log_level min_level, void* user_data) {
  LogSink& sink = Sink();
  std::lock_guard<std::mutex> lock(sink.mu);
  sink.callback = callback;
  sink.min_level = min_level;
  sink.user_data = user_data;
}

moe_status CopyOut(const void* data, size_t size, size_t elem_size, void* buf, size_t capacity,
                   size_t* len, bool nul_terminate) {
  if (len == nullptr) return Fail(MOE_ERROR_INVALID_ARGUMENT, "len is NULL");
  *len = size;
  if (capacity < size) {
    return Fail(MOE_ERROR_BUFFER_TOO_SMALL, "buffer of " + std::to_string(capacity) +
                                                " holds less than the " + std::to_string(size) +
                                                " needed");
  }
  if (size > 0 && buf == nullptr) return Fail(MOE_ERROR_INVALID_ARGUMENT, "buffer is NULL");
  if (size > 0) std::memcpy(buf, data, size * elem_size);
  if (nul_terminate && capacity > size && buf != nullptr) static_cast<char*>(buf)[size] = '\0';
  return MOE_OK;
}

}  // namespace moe::api
