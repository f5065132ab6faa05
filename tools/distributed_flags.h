// --distributed, shared by moe-cli run and moe-bench: run over the ranks mpirun launched (expert
// parallelism, lib/runtime/expert_parallel.h). Every rank loads the weights every token needs and
// its share of the routed experts (round robin, or balanced by --balance-experts PROFILE, with
// --expert-replicas N second holders of each layer's hottest experts; with --dense-on-rank0 the
// others hold their experts alone); rank 0 does the command's work and prints; the others serve
// its steps. --dist-timeout S bounds each
// exchange, so a rank that dies ends the run with an error on every rank instead of a hang. Every
// rank gets the same command line from mpirun, so all agree on what to do.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "lib/base/available_memory.h"
#include "lib/base/status_macros.h"
#include "lib/dist/mpi_communicator.h"
#include "lib/runtime/expert_parallel.h"
#include "tools/expert_cache_flag.h"

namespace moe::cli {

struct DistributedFlags {
  bool on = false;
  std::string balance_profile;
  int replicas = 0;
  bool dense_on_root = false;
  double timeout_s = 60;
};

inline void AddDistributedFlags(CLI::App* app, DistributedFlags* f) {
  app->add_flag("--distributed", f->on,
                "run over the ranks mpirun launched: each holds its share of the experts, rank 0 "
                "drives and prints");
  app->add_option("--balance-experts", f->balance_profile,
                  "with --distributed: place experts on ranks by this routing profile's load "
                  "(moe-cli profile) instead of round robin");
  app->add_option("--expert-replicas", f->replicas,
                  "with --balance-experts: the profile's N most chosen experts of each layer get "
                  "a second rank, which takes half of their tokens")
      ->check(CLI::Range(0, 1 << 16));
  app->add_flag("--dense-on-rank0", f->dense_on_root,
                "with --distributed: only rank 0 holds the weights every token needs (attention, "
                "norms, routers, shared experts, embedding, head) and sends each MoE layer's "
                "inputs to the others, which hold their experts alone (less memory there, one "
                "more message per layer)");
  app->add_option("--dist-timeout", f->timeout_s,
                  "with --distributed: seconds an exchange may wait for the other ranks")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
}

// What one rank holds in memory at the end of a run.
struct RankMemory {
  int64_t weight_bytes = 0;  // weights in memory (WeightBytesInMemory)
  int64_t peak_rss = 0;      // the process's peak resident set
};

// This process's place in the world, with --distributed; nothing without it. Rank 0 stops the
// serving ranks when it goes (declare it before the sessions, which must go first).
class World {
 public:
  // Joins the world when the flags ask and gives `lo` this rank's share of the experts.
  static absl::StatusOr<std::unique_ptr<World>> Join(const DistributedFlags& f, LoadOptions* lo) {
    auto world = std::unique_ptr<World>(new World());
    if (!f.on) return world;
    MOE_ASSIGN_OR_RETURN(
        world->comm_,
        CreateMpiCommunicator(std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000))));
    lo->expert_world = world->comm_->size();
    lo->expert_rank = world->comm_->rank();
    lo->expert_rank_profile = f.balance_profile;
    lo->expert_replicas = f.replicas;
    lo->dense_on_root_only = f.dense_on_root;
    return world;
  }
  ~World() { Stop().IgnoreError(); }

  // Null without --distributed.
  Communicator* comm() const { return comm_.get(); }
  // A rank other than 0: it serves (Serve) instead of doing the command's work.
  bool serves() const { return comm_ != nullptr && comm_->rank() > 0; }

  absl::Status Serve(std::shared_ptr<const Engine> engine, int threads) {
    ServeOptions so;
    so.threads = threads;
    return ServeExpertParallel(std::move(engine), comm_.get(), so);
  }

  // Every rank, once the work is done (rank 0 first stops the serving ranks): each rank's memory,
  // in rank order (without --distributed, this process's alone).
  absl::StatusOr<std::vector<RankMemory>> Memory(const Engine& engine) {
    RankMemory mine{static_cast<int64_t>(WeightBytesInMemory(engine)),
                    static_cast<int64_t>(PeakResidentBytes())};
    if (comm_ == nullptr) return std::vector<RankMemory>{mine};
    MOE_RETURN_IF_ERROR(Stop());
    std::vector<Bytes> all;
    const auto* p = reinterpret_cast<const uint8_t*>(&mine);
    MOE_RETURN_IF_ERROR(comm_->AllGather({p, sizeof(mine)}, &all));
    std::vector<RankMemory> out(all.size());
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].size() != sizeof(RankMemory)) return absl::DataLossError("a short memory report");
      std::memcpy(&out[r], all[r].data(), sizeof(RankMemory));
    }
    return out;
  }

  static std::string MemoryTable(const std::vector<RankMemory>& ranks) {
    std::string text;
    for (size_t r = 0; r < ranks.size(); ++r) {
      text += absl::StrFormat("rank %d of %d: weights in memory %.1f MB, peak RSS %.1f MB\n", r,
                              ranks.size(), ranks[r].weight_bytes / 1e6, ranks[r].peak_rss / 1e6);
    }
    return text;
  }

 private:
  World() = default;
  absl::Status Stop() {
    if (comm_ == nullptr || comm_->rank() != 0 || comm_->size() == 1 || stopped_) {
      return absl::OkStatus();
    }
    stopped_ = true;
    return StopExpertParallelServers(comm_.get());
  }

  std::unique_ptr<Communicator> comm_;
  bool stopped_ = false;
};

}  // namespace moe::cli
