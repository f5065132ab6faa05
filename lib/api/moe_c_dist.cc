// The C ABI of expert parallelism over MPI ranks: a world (moe_dist), each rank's share of a
// model, rank 0's context or batching engine over the world, and the other ranks' serving loop
// (lib/runtime/expert_parallel.h).
#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "include/moe_c.h"
#include "lib/api/c_api_support.h"
#include "lib/api/handles.h"
#include "lib/dist/mpi_communicator.h"
#include "lib/runtime/expert_parallel.h"

using moe::api::Fail;
using moe::api::FromStatus;
using moe::api::Guard;
using moe::api::Null;

extern "C" {

moe_status moe_dist_create(int32_t timeout_ms, moe_dist** out) {
  return Guard("moe_dist_create", [&]() -> moe_status {
    if (out == nullptr) return Null("out_dist");
    *out = nullptr;
    if (timeout_ms <= 0) {
      return Fail(MOE_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("timeout_ms is ", timeout_ms, ": it must be > 0"));
    }
    auto comm = moe::CreateMpiCommunicator(std::chrono::milliseconds(timeout_ms));
    if (!comm.ok()) return FromStatus(comm.status());
    *out = new moe_dist;
    (*out)->world = *std::move(comm);
    return MOE_OK;
  });
}

int32_t moe_dist_rank(const moe_dist* dist) { return dist ? dist->world->rank() : -1; }
int32_t moe_dist_size(const moe_dist* dist) { return dist ? dist->world->size() : -1; }

moe_status moe_dist_placement_init(moe_dist_placement* p, size_t struct_size) {
  moe_dist_placement d{};
  d.struct_size = sizeof(moe_dist_placement);
  return moe::api::InitVersioned(d, p, struct_size, "moe_dist_placement_init: placement");
}

moe_status moe_dist_model_load_placed(moe_dist* dist, const char* path,
                                      const moe_model_params* params,
                                      const moe_dist_placement* placement, moe_model** out) {
  return Guard("moe_dist_model_load", [&]() -> moe_status {
    if (out != nullptr) *out = nullptr;
    if (dist == nullptr) return Null("dist");
    moe_dist_placement p;
    moe_dist_placement_init(&p, sizeof(p));
    if (moe_status s = moe::api::ReadVersioned(placement, &p, "moe_dist_placement"); s != MOE_OK) {
      return s;
    }
    if (p.expert_replicas < 0) {
      return Fail(MOE_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("expert_replicas is ", p.expert_replicas, ": it must be >= 0"));
    }
    moe::LoadOptions lo;
    lo.expert_world = dist->world->size();
    lo.expert_rank = dist->world->rank();
    if (p.balance_profile_path != nullptr) lo.expert_rank_profile = p.balance_profile_path;
    lo.expert_replicas = p.expert_replicas;
    lo.dense_on_root_only = p.dense_on_rank0 != 0;
    const moe_status s = moe::api::LoadModel(path, params, std::move(lo), out);
    if (s == MOE_OK && dist->world->rank() == 0 && dist->world->size() > 1) dist->serving = true;
    return s;
  });
}

moe_status moe_dist_model_load(moe_dist* dist, const char* path, const moe_model_params* params,
                               const char* balance_profile_path, moe_model** out) {
  moe_dist_placement p;
  moe_dist_placement_init(&p, sizeof(p));
  p.balance_profile_path = balance_profile_path;
  return moe_dist_model_load_placed(dist, path, params, &p, out);
}

moe_status moe_dist_context_create(moe_dist* dist, moe_model* model,
                                   const moe_context_params* params, moe_context** out) {
  return Guard("moe_dist_context_create", [&]() -> moe_status {
    if (dist == nullptr) {
      if (out != nullptr) *out = nullptr;
      return Null("dist");
    }
    return moe::api::CreateContext(model, params, dist->world, out);
  });
}

moe_status moe_dist_engine_create(moe_dist* dist, moe_model* model, const moe_engine_params* params,
                                  moe_engine** out) {
  return Guard("moe_dist_engine_create", [&]() -> moe_status {
    if (dist == nullptr) {
      if (out != nullptr) *out = nullptr;
      return Null("dist");
    }
    return moe::api::CreateEngine(model, params, dist->world, out);
  });
}

moe_status moe_dist_serve(moe_dist* dist, moe_model* model, int32_t n_threads,
                          int32_t idle_timeout_ms) {
  return Guard("moe_dist_serve", [&]() -> moe_status {
    if (dist == nullptr) return Null("dist");
    if (model == nullptr) return Null("model");
    if (n_threads < 0 || idle_timeout_ms < 0) {
      return Fail(MOE_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("n_threads ", n_threads, " and idle_timeout_ms ", idle_timeout_ms,
                               " must be >= 0"));
    }
    moe::ServeOptions so;
    so.threads = n_threads;
    if (idle_timeout_ms > 0) so.idle_timeout = std::chrono::milliseconds(idle_timeout_ms);
    return FromStatus(moe::ServeExpertParallel(model->engine, dist->world.get(), so));
  });
}

moe_status moe_dist_stop_serving(moe_dist* dist) {
  return Guard("moe_dist_stop_serving", [&]() -> moe_status {
    if (dist == nullptr) return Null("dist");
    if (dist->world->rank() != 0) {
      return Fail(MOE_ERROR_INVALID_ARGUMENT,
                  absl::StrCat("rank ", dist->world->rank(), " serves: only rank 0 stops serving"));
    }
    dist->serving = false;
    if (dist->world->size() == 1) return MOE_OK;
    return FromStatus(moe::StopExpertParallelServers(dist->world.get()));
  });
}

void moe_dist_free(moe_dist* dist) {
  if (dist == nullptr) return;
  if (dist->serving && moe_dist_stop_serving(dist) != MOE_OK) {
    moe::api::Log(MOE_LOG_WARN, absl::StrCat("moe_dist_free: the other ranks were not told to "
                                             "stop serving: ",
                                             moe::api::LastError()));
  }
  delete dist;
}

}  // extern "C"
