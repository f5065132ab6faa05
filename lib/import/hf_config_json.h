// config.json read with transformers' semantics: a key that is absent or null takes the
// configuration class's default, and a value of the wrong kind is an error naming the key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moe {

class ConfigJson {
 public:
  explicit ConfigJson(const nlohmann::json& j, std::string prefix = "")
      : j_(j), prefix_(std::move(prefix)) {}

  // The value, or null when the key is absent or null.
  const nlohmann::json* Get(const char* key) const;
  // Present with the value null (transformers then takes None, which may differ from the
  // class default an absent key gets).
  bool IsNull(const char* key) const;
  absl::StatusOr<int64_t> Int(const char* key, std::optional<int64_t> def = {}) const;
  absl::StatusOr<double> Float(const char* key, double def) const;
  absl::StatusOr<bool> Bool(const char* key, bool def) const;
  absl::StatusOr<std::string> String(const char* key, const std::string& def) const;
  // The key's name in messages: "rope_scaling.factor" for a key of a nested object.
  std::string Name(const char* key) const { return prefix_ + key; }

 private:
  const nlohmann::json& j_;
  std::string prefix_;
};

}  // namespace moe
