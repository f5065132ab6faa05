// moe-bench --parallel: aggregate decode speed of the batching engine at several numbers of
// concurrent sequences (as llama-batched-bench measures it), and --prefix-ttft: time to first
// token of requests that share a long system prompt, with and without prefix sharing.
#pragma once

#include <memory>
#include <vector>

#include "lib/dist/communicator.h"
#include "lib/runtime/engine.h"

namespace moe::bench {

struct ParallelOptions {
  int threads = 2;
  int prompt = 128;   // prompt tokens per sequence
  int generate = 64;  // tokens each sequence generates
  int reps = 1;
  bool json = false;
  bool prefix_sharing = true;  // --parallel's engines (--prefix-ttft runs both ways)
  // --distributed: rank 0 of the world the model's share was loaded for (dense weights on rank 0
  // only); the engines and the lone context run over it.
  Communicator* communicator = nullptr;
};

// One line per count in `sequences`; returns the process exit code.
int RunParallel(std::shared_ptr<const Engine> engine, const ParallelOptions& o,
                const std::vector<int>& sequences);

// `requests` requests, each arriving once the one before has its first token, all starting with
// the same `prefix` tokens (then 16 of their own); first with sharing off, then on.
int RunPrefixTtft(std::shared_ptr<const Engine> engine, const ParallelOptions& o, int prefix,
                  int requests);

}  // namespace moe::bench
