// One-line error propagation for absl::Status / absl::StatusOr, in the style of Abseil's internal
// macros (which the Debian Abseil does not export).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#define MOE_STATUS_CONCAT_INNER(a, b) a##b
#define MOE_STATUS_CONCAT(a, b) MOE_STATUS_CONCAT_INNER(a, b)

#define MOE_RETURN_IF_ERROR(expr)                      \
  do {                                                 \
    ::absl::Status moe_status_tmp_ = (expr);           \
    if (!moe_status_tmp_.ok()) return moe_status_tmp_; \
  } while (0)

#define MOE_ASSIGN_OR_RETURN(lhs, expr) \
  MOE_ASSIGN_OR_RETURN_IMPL(MOE_STATUS_CONCAT(moe_statusor_, __LINE__), lhs, expr)

#define MOE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

namespace moe {

// Prefixes a status message with context, keeping the code ("while loading x: <original>").
inline absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), std::string(context) + ": " + std::string(status.message()));
}

}  // namespace moe
