// Plumbing of the C ABI: status mapping, the thread-local last error, exception barriers,
// struct_size handling, and logging.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "include/moe_c.h"

namespace moe::api {

// Records the message on this thread and returns the code.
moe_status Fail(moe_status code, std::string message);
inline moe_status Null(const char* what) {
  return Fail(MOE_ERROR_INVALID_ARGUMENT, std::string(what) + " is NULL");
}
moe_status FromStatus(const absl::Status& status);
// The code FromStatus returns, without recording anything.
moe_status CodeFor(const absl::Status& status);
void Log(moe_log_level level, const std::string& message);
void SetLogCallback(moe_log_callback callback, moe_log_level min_level, void* user_data);
const char* LastError();

// Runs fn (returning moe_status), turning any exception into a status: nothing propagates
// through the C ABI.
template <typename Fn>
moe_status Guard(const char* function, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return Fail(MOE_ERROR_OUT_OF_MEMORY, std::string(function) + ": out of memory");
  } catch (const std::exception& e) {
    return Fail(MOE_ERROR_INTERNAL, std::string(function) + ": " + e.what());
  } catch (...) {
    return Fail(MOE_ERROR_INTERNAL, std::string(function) + ": unknown exception");
  }
}

// The size of the first published version of each struct: what older callers pass. Fields
// appended since lie past it.
template <typename T>
constexpr size_t FirstVersionSize() {
  return sizeof(T);
}
template <>
constexpr size_t FirstVersionSize<moe_model_params>() {
  return offsetof(moe_model_params, expert_cache_bytes);
}
template <>
constexpr size_t FirstVersionSize<moe_model_info>() {
  return offsetof(moe_model_info, weight_bytes_total);
}
template <>
constexpr size_t FirstVersionSize<moe_stats>() {
  return offsetof(moe_stats, expert_cache_hits);
}

// The caller's struct may come from an older or newer header: read (or write) only the fields
// both sides know; the rest of *out keeps its defaults. A size below the first published
// version's is rejected.
template <typename T>
moe_status ReadVersioned(const T* in, T* out, const char* what) {
  if (in == nullptr) return MOE_OK;  // keep the defaults in *out
  if (in->struct_size < FirstVersionSize<T>()) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT,
                std::string(what) + ": struct_size " + std::to_string(in->struct_size) +
                    " is not set or too small (start from the moe_*_default_params() functions)");
  }
  // Fields of newer headers are ignored; those of this one an older caller lacks keep defaults.
  std::memcpy(static_cast<void*>(out), in, std::min(in->struct_size, sizeof(T)));
  out->struct_size = sizeof(T);
  return MOE_OK;
}

template <typename T>
moe_status WriteVersioned(const T& value, T* out, const char* what) {
  if (out == nullptr) return Fail(MOE_ERROR_INVALID_ARGUMENT, std::string(what) + " is NULL");
  if (out->struct_size < FirstVersionSize<T>()) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT,
                std::string(what) + ": struct_size " + std::to_string(out->struct_size) +
                    " is not set or too small (use the moe_default_* functions)");
  }
  size_t caller_size = out->struct_size;
  std::memcpy(static_cast<void*>(out), &value, std::min(caller_size, sizeof(T)));
  out->struct_size = caller_size;
  return MOE_OK;
}

// For the *_init functions: fills the caller's struct (of struct_size bytes, an older header's
// perhaps) with the defaults in `value`.
template <typename T>
moe_status InitVersioned(const T& value, T* out, size_t struct_size, const char* what) {
  if (out == nullptr) return Fail(MOE_ERROR_INVALID_ARGUMENT, std::string(what) + " is NULL");
  if (struct_size < FirstVersionSize<T>()) {
    return Fail(MOE_ERROR_INVALID_ARGUMENT, std::string(what) + ": struct_size too small");
  }
  const size_t n = std::min(struct_size, sizeof(T));
  std::memcpy(static_cast<void*>(out), &value, n);
  out->struct_size = n;
  return MOE_OK;
}

// Copies bytes into a caller buffer following the header's "Caller buffers" rules.
moe_status CopyOut(const void* data, size_t size, size_t elem_size, void* buf, size_t capacity,
                   size_t* len, bool nul_terminate);

}  // namespace moe::api
