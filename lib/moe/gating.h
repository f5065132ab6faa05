// How router logits become expert scores (GGUF expert_gating_func 1 and 2).
#pragma once

namespace moe {

enum class Gating {
  kSoftmax,  // over all experts
  kSigmoid,  // each expert on its own
};

}  // namespace moe
