// How a model writer reports progress: told the tensor bytes written so far and their total after
// each tensor (converting a large checkpoint takes long enough that a tool should say how far it
// got). Returning false cancels the write, which then leaves no file.
#pragma once

#include <cstdint>
#include <functional>

namespace moe {

using WriteProgress = std::function<bool(uint64_t written, uint64_t total)>;

}  // namespace moe
