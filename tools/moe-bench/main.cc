// moe-bench: prompt processing (pp) and generation (tg) speed as llama-bench defines them, with
// the active weight bytes per token measured from the experts that fired, the achieved GB/s and
// the machine's streaming-read bandwidth measured in the same run.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/base/available_memory.h"
#include "lib/base/thread_pool.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/model/kv_cache_for.h"
#include "lib/runtime/engine.h"
#include "lib/runtime/session.h"
#include "lib/sampling/sampler.h"
#include "nlohmann/json.hpp"
#include "tools/device_flags.h"
#include "tools/distributed_flags.h"
#include "tools/expert_cache_flag.h"
#include "tools/flag_checks.h"
#include "tools/moe-bench/bandwidth.h"
#include "tools/moe-bench/disk_bandwidth.h"
#include "tools/moe-bench/parallel.h"
#include "tools/routing_flags.h"
#include "tools/text_tokens.h"

namespace {

struct Options {
  std::string model;
  int threads = 2;
  moe::RoutingPolicy routing;
  int p = 128;
  int n = 64;
  int reps = 3;
  std::string load = "ram";
  moe::cli::ExpertFlags experts;
  moe::cli::DeviceFlags device;
  moe::cli::DistributedFlags distributed;
  bool json = false;
  double bandwidth_gib = 1.0;
  double bandwidth_gbps = 0;  // given instead of measured (a GPU's memory); 0: measure the host's
  std::string text;           // tokens to process instead of random ones and greedy continuations
  std::vector<int> parallel;  // the batching engine at these numbers of sequences
  int prefix_ttft = 0;        // time to first token of requests sharing this many prompt tokens
  int prefix_requests = 8;
  bool no_prefix_sharing = false;
};

struct Result {
  std::string test;
  std::vector<double> tps;
  double bytes_per_token = 0;
  // With the expert cache, over all repetitions of the test.
  moe::ExpertCacheStats cache;
  double seconds = 0;
  int64_t tokens = 0;
  // Over ranks, over all repetitions: expert outputs exchanged and the time it took.
  int64_t exchange_bytes = 0;
  double exchange_s = 0;
};

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}
double Sd(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double m = Mean(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / (v.size() - 1));
}

// What a test's expert cache statistics come to per token.
struct CacheFigures {
  double hit_rate = 0;
  double disk_bytes_per_token = 0;
  double stall_share = 0;        // of the test's time, compute waiting for reads
  double prediction_recall = 0;  // of the experts steps used, the share pre-gating had guessed
  double wasted_bytes_per_token = 0;
  double disk_limit = 0;  // tok/s the disk allows at these reads per token (0: none read)
};

CacheFigures Figures(const Result& r, double disk_gbps) {
  const moe::ExpertCacheStats& c = r.cache;
  CacheFigures f;
  f.hit_rate = c.hits + c.misses > 0 ? double(c.hits) / double(c.hits + c.misses) : 0.0;
  if (r.tokens > 0) {
    f.disk_bytes_per_token = double(c.bytes_loaded) / r.tokens;
    f.wasted_bytes_per_token = double(c.prefetch_wasted_bytes) / r.tokens;
  }
  f.stall_share = r.seconds > 0 ? c.wait_seconds / r.seconds : 0.0;
  f.prediction_recall = c.predicted > 0 ? double(c.predicted_right) / double(c.predicted) : 0.0;
  f.disk_limit = f.disk_bytes_per_token > 0 ? disk_gbps * 1e9 / f.disk_bytes_per_token : 0.0;
  return f;
}

int Run(const Options& o) {
  moe::LoadOptions lo;
  lo.use_mmap = o.load == "mmap";
  if (absl::Status s = moe::cli::ApplyExpertFlags(o.experts, &lo); !s.ok()) {
    std::fprintf(stderr, "moe-bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (absl::Status s = moe::cli::ApplyDeviceFlags(o.device, &lo); !s.ok()) {
    std::fprintf(stderr, "moe-bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto world = moe::cli::World::Join(o.distributed, &lo);
  if (!world.ok()) {
    std::fprintf(stderr, "moe-bench: %s\n", std::string(world.status().message()).c_str());
    return 1;
  }
  auto engine = moe::Engine::Load(o.model, lo);
  if (!engine.ok()) {
    std::fprintf(stderr, "moe-bench: %s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  if ((*world)->serves()) {  // rank 0 measures and prints; this rank runs its steps
    absl::Status s = (*world)->Serve(*engine, o.threads);
    if (s.ok()) s = (*world)->Memory(**engine).status();
    if (!s.ok()) std::fprintf(stderr, "moe-bench: %s\n", std::string(s.message()).c_str());
    return s.ok() ? 0 : 1;
  }
  if (!o.parallel.empty() || o.prefix_ttft > 0) {
    moe::bench::ParallelOptions po;
    po.threads = o.threads, po.prompt = o.p, po.generate = o.n, po.reps = o.reps;
    po.json = o.json, po.prefix_sharing = !o.no_prefix_sharing;
    po.communicator = (*world)->comm();
    int rc = 0;
    if (po.communicator != nullptr && !o.distributed.dense_on_root) {
      std::fprintf(stderr,
                   "moe-bench: --parallel and --prefix-ttft run the batching engine, which runs "
                   "over ranks with --dense-on-rank0 only\n");
      rc = 2;
    }
    if (rc == 0 && !o.parallel.empty()) rc = moe::bench::RunParallel(*engine, po, o.parallel);
    if (rc == 0 && o.prefix_ttft > 0) {
      rc = moe::bench::RunPrefixTtft(*engine, po, o.prefix_ttft, o.prefix_requests);
    }
    if (po.communicator != nullptr) {  // every rank reports its memory, the serving ones too
      const auto ranks = (*world)->Memory(**engine);
      if (!ranks.ok()) {
        std::fprintf(stderr, "moe-bench: %s\n", std::string(ranks.status().message()).c_str());
        return 1;
      }
      if (!o.json) {
        std::printf("expert parallel over %zu ranks (this is rank 0):\n%s", ranks->size(),
                    moe::cli::World::MemoryTable(*ranks).c_str());
      }
    }
    return rc;
  }
  const moe::HParams& h = (*engine)->model()->hp();
  if (lo.device != moe::ComputeDevice::kCpu) {
    std::fprintf(stderr, "device: %s\n", (*engine)->device_note().c_str());
  }
  auto made = (*engine)->CreateBackend(o.threads);
  if (!made.ok()) {
    std::fprintf(stderr, "moe-bench: %s\n", std::string(made.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<moe::Backend> backend = *std::move(made);
  moe::Transformer tf((*engine)->model(), backend.get());
  if (absl::Status s = moe::CheckRoutingPolicy(o.routing); !s.ok()) {
    std::fprintf(stderr, "moe-bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  (*engine)->PrepareTransformer(&tf, o.routing);
  moe::ExpertStore* store = (*engine)->expert_store();
  // Over ranks: each step is announced to the serving ranks first, as a session's are.
  moe::Communicator* comm = (*world)->comm();
  std::unique_ptr<moe::StepDriver> driver;
  auto cache_stats = [&] { return store ? store->cache().stats() : moe::ExpertCacheStats(); };
  std::vector<float> logits;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> random_token(0, static_cast<int32_t>(h.n_vocab) - 1);
  // Trained routing is measured on text: prompts are its next tokens, and generation feeds its
  // next token at each step instead of the greedy choice, which soon repeats itself (and routes
  // the same experts over and over).
  std::vector<int32_t> text_ids;
  if (!o.text.empty()) {
    auto ids = moe::cli::ReadTextTokens(**engine, o.text);
    if (!ids.ok()) {
      std::fprintf(stderr, "moe-bench: %s\n", std::string(ids.status().message()).c_str());
      return 1;
    }
    text_ids = *std::move(ids);
  }
  size_t text_pos = 0;
  auto tok = [&](auto&) {
    if (text_ids.empty()) return random_token(rng);
    const int32_t t = text_ids[text_pos];
    text_pos = (text_pos + 1) % text_ids.size();
    return t;
  };
  auto cache = moe::KvCacheFor(*(*engine)->model(), o.p + o.n + 1, moe::DType::kF16, 0, *backend);
  if (!cache.ok()) return 1;
  if (comm != nullptr && comm->size() > 1) {
    driver =
        std::make_unique<moe::StepDriver>(comm, *(*engine)->model(), *(*engine)->expert_ranks());
    moe::SessionOptions so;
    so.kv_type = moe::DType::kF16;
    so.n_batch = std::max(o.p, 2);
    so.routing = o.routing;
    if (absl::Status s = driver->Open(so, cache->n_ctx()); !s.ok()) {
      std::fprintf(stderr, "moe-bench: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    tf.set_expert_parallel(comm, (*engine)->expert_ranks());
  }
  absl::Status failed;
  auto forward = [&](absl::Span<const int32_t> tokens, moe::Telemetry* tel) {
    if (!failed.ok()) return;
    if (driver) failed = driver->Step(cache->size(), tokens, {});
    if (failed.ok()) failed = tf.Forward(tokens, *cache, moe::LogitsFor::kLast, &logits, tel);
  };
  std::vector<Result> results;
  auto timed = [](auto&& fn) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // Warm-up: one short pass touches the weights once.
  {
    std::vector<int32_t> w = {tok(rng), tok(rng)};
    forward(w, nullptr);
  }
  if (o.p > 0) {
    Result r;
    r.test = absl::StrFormat("pp%d", o.p);
    moe::Telemetry tel;
    const moe::ExpertCacheStats before = cache_stats();
    for (int rep = 0; rep < o.reps; ++rep) {
      std::vector<int32_t> prompt(o.p);
      for (auto& t : prompt) t = tok(rng);
      cache->set_size(0);
      tel = moe::Telemetry();
      double s = timed([&] { forward(prompt, &tel); });
      r.tps.push_back(o.p / s);
      r.seconds += s;
      r.tokens += o.p;
      r.exchange_bytes += tel.exchange_bytes;
      r.exchange_s += tel.exchange_s;
    }
    r.bytes_per_token = static_cast<double>(tel.weight_bytes_read) / o.p;
    r.cache = cache_stats() - before;
    results.push_back(r);
  }
  if (o.n > 0) {
    Result r;
    r.test = absl::StrFormat("tg%d", o.n);
    moe::Telemetry tel;
    const moe::ExpertCacheStats before = cache_stats();
    for (int rep = 0; rep < o.reps; ++rep) {
      cache->set_size(0);
      tel = moe::Telemetry();
      int32_t t = tok(rng);
      double s = timed([&] {
        for (int i = 0; i < o.n; ++i) {
          forward({&t, 1}, &tel);
          t = text_ids.empty() ? moe::ArgMax(logits) : tok(rng);
        }
      });
      r.tps.push_back(o.n / s);
      r.seconds += s;
      r.tokens += o.n;
      r.exchange_bytes += tel.exchange_bytes;
      r.exchange_s += tel.exchange_s;
    }
    r.bytes_per_token = static_cast<double>(tel.weight_bytes_read) / o.n;
    r.cache = cache_stats() - before;
    results.push_back(r);
  }
  if (!failed.ok()) {
    std::fprintf(stderr, "moe-bench: %s\n", std::string(failed.message()).c_str());
    return 1;
  }
  // Peak memory of loading and running, before the bandwidth buffer adds its own: every rank's.
  if (driver) (void)driver->Close();
  const auto ranks = (*world)->Memory(**engine);
  if (!ranks.ok()) {
    std::fprintf(stderr, "moe-bench: %s\n", std::string(ranks.status().message()).c_str());
    return 1;
  }
  const int64_t peak_rss = (*ranks)[0].peak_rss;
  const double bw = o.bandwidth_gbps > 0
                        ? o.bandwidth_gbps
                        : moe::bench::MeasureReadBandwidth(o.threads, o.bandwidth_gib);
  // With the expert cache, the disk is the other limit: missed bytes / its bandwidth.
  double disk_bw = 0;
  if (store != nullptr) {
    auto measured = moe::bench::MeasureDiskReadBandwidth(store->reader());
    if (!measured.ok()) {
      std::fprintf(stderr, "moe-bench: measuring the disk: %s\n",
                   std::string(measured.status().message()).c_str());
      return 1;
    }
    disk_bw = *measured;
  }
  const std::string simd(moe::CpuSimdLevelName(moe::ActiveSimdLevel()));
  // How much of the weights the 16-row group kernels run (re-laid at load, or stored so by
  // `moe-convert --layout groups`): mapped files in their own layout run the slower row kernels.
  double grouped_bytes = 0, weight_bytes = 0;
  for (const auto& t : (*engine)->model()->spec().tensors) {
    weight_bytes += t.data.size();
    if (moe::RowGroup(t.dtype) > 1) grouped_bytes += t.data.size();
  }
  const double grouped = weight_bytes > 0 ? grouped_bytes / weight_bytes : 0;
  // With the expert cache, the weights in memory are the others plus the cache's slab.
  const double weights_in_memory = static_cast<double>(moe::cli::WeightBytesInMemory(**engine));
  if (!o.json) {
    std::printf("model: %s (%s, %lld layers, %lld experts top-%lld)\n", o.model.c_str(),
                std::string(moe::ArchName((*engine)->model()->spec().arch)).c_str(),
                (long long)h.n_layer, (long long)h.n_expert, (long long)h.n_expert_used);
    std::printf("threads %d, load %s, simd %s, %s bandwidth %.1f GB/s\n", o.threads, o.load.c_str(),
                simd.c_str(), o.bandwidth_gbps > 0 ? "given memory" : "streaming read", bw);
    std::printf("device: %s\n", (*engine)->device_note().c_str());
    std::printf("layout: %.0f%% of weight bytes in 16-row groups\n", 100.0 * grouped);
    std::printf("%s\n", moe::cli::ExpertPlacementLine(**engine).c_str());
    if (store != nullptr) {
      std::printf("disk: %.2f GB/s in 1 MiB %s reads spread over the model file\n", disk_bw,
                  moe::ExpertFileReader::ModeName(store->reader().mode()));
    }
    const double peak_mb = peak_rss / 1e6, model_mb = weights_in_memory / 1e6,
                 kv_mb = cache->byte_size() / 1e6;
    std::printf(
        "memory: peak RSS %.0f MB = weights in memory %.0f MB + KV cache %.1f MB + %.0f MB "
        "(%.1f%%)\n\n",
        peak_mb, model_mb, kv_mb, peak_mb - model_mb - kv_mb,
        100.0 * (peak_mb - model_mb - kv_mb) / (model_mb + kv_mb));
    if (ranks->size() > 1) {
      std::printf("expert parallel over %zu ranks (this is rank 0):\n%s\n", ranks->size(),
                  moe::cli::World::MemoryTable(*ranks).c_str());
    }
    std::printf("%-7s %16s %16s %10s %12s %10s\n", "test", "tokens/s", "weight MB/token", "GB/s",
                "limit tok/s", "% limit");
  }
  for (const Result& r : results) {
    double mean = Mean(r.tps), gbps = mean * r.bytes_per_token / 1e9;
    double limit = bw * 1e9 / r.bytes_per_token;
    if (o.json) {
      nlohmann::json j = {{"test", r.test},
                          {"threads", o.threads},
                          {"load", o.load},
                          {"simd", simd},
                          {"tokens_per_s", mean},
                          {"tokens_per_s_sd", Sd(r.tps)},
                          {"active_bytes_per_token", r.bytes_per_token},
                          {"gbps", gbps},
                          {"bandwidth_gbps", bw},
                          {"percent_of_limit", 100.0 * mean / limit},
                          {"peak_rss_bytes", peak_rss},
                          {"weight_bytes", (*engine)->params().total_bytes},
                          {"weight_bytes_in_memory", weights_in_memory},
                          {"grouped_weight_fraction", grouped}};
      if (ranks->size() > 1) {
        j["ranks"] = nlohmann::json::array();
        for (const moe::cli::RankMemory& m : *ranks) {
          j["ranks"].push_back(
              {{"weight_bytes_in_memory", m.weight_bytes}, {"peak_rss_bytes", m.peak_rss}});
        }
        j["exchange_bytes_per_token"] = static_cast<double>(r.exchange_bytes) / r.tokens;
        j["exchange_share"] = r.exchange_s / r.seconds;
      }
      if (store != nullptr) {
        const CacheFigures f = Figures(r, disk_bw);
        j["expert_cache"] = {{"budget_bytes", store->cache().capacity_bytes()},
                             {"hit_rate", f.hit_rate},
                             {"disk_bytes_per_token", f.disk_bytes_per_token},
                             {"stall_share", f.stall_share},
                             {"prediction_recall", f.prediction_recall},
                             {"prefetched_unused_bytes_per_token", f.wasted_bytes_per_token},
                             {"disk_gbps", disk_bw},
                             {"disk_limit_tokens_per_s", f.disk_limit},
                             {"io", moe::ExpertFileReader::ModeName(store->reader().mode())}};
      }
      std::printf("%s\n", j.dump().c_str());
    } else {
      // The bandwidth limit bounds generation; a prompt batch reads each weight once for all its
      // tokens, so its per-token bytes are shown but no limit.
      if (r.test[0] == 't') {
        std::printf("%-7s %9.2f ± %5.2f %16.1f %10.1f %12.1f %9.1f%%\n", r.test.c_str(), mean,
                    Sd(r.tps), r.bytes_per_token / 1e6, gbps, limit, 100.0 * mean / limit);
      } else {
        std::printf("%-7s %9.2f ± %5.2f %16.1f %10.1f %12s %10s\n", r.test.c_str(), mean, Sd(r.tps),
                    r.bytes_per_token / 1e6, gbps, "-", "-");
      }
      if (ranks->size() > 1) {
        std::printf(
            "        exchange: %.1f KB per token (expert outputs; with --dense-on-rank0 the "
            "layers' inputs too), %.1f%% of the time\n",
            static_cast<double>(r.exchange_bytes) / r.tokens / 1e3,
            100.0 * r.exchange_s / r.seconds);
      }
      if (store != nullptr) {
        const CacheFigures f = Figures(r, disk_bw);
        std::printf(
            "        expert cache: hit rate %.1f%%, %.2f MB from disk per token, compute waited "
            "on reads %.1f%% of the time; guesses: %.0f%% of the experts used, %.2f MB read "
            "ahead unused per token; disk-bound limit %.1f tok/s\n",
            100.0 * f.hit_rate, f.disk_bytes_per_token / 1e6, 100.0 * f.stall_share,
            100.0 * f.prediction_recall, f.wasted_bytes_per_token / 1e6, f.disk_limit);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Measures prompt processing and generation speed.", "moe-bench");
  app.add_option("-m,--model", o.model, "model (.moe or .gguf)")->required();
  moe::cli::AddRoutingFlags(&app, &o.routing);
  app.add_option("-t,--threads", o.threads, "threads (0 = one per core)")
      ->check(moe::cli::ThreadCount())
      ->capture_default_str();
  app.add_option("-p", o.p, "prompt tokens processed in one batch (0 = skip)")
      ->check(moe::cli::AtLeast(0, "0 = skip"))
      ->capture_default_str();
  app.add_option("-n", o.n, "tokens generated one at a time (0 = skip)")
      ->check(moe::cli::AtLeast(0, "0 = skip"))
      ->capture_default_str();
  app.add_option("-r", o.reps, "repetitions")->check(moe::cli::AtLeast(1))->capture_default_str();
  app.add_option("--load", o.load, "ram: copy weights into memory; mmap: map the file")
      ->check(CLI::IsMember({"ram", "mmap"}))
      ->capture_default_str();
  app.add_option("--bandwidth-gib", o.bandwidth_gib, "buffer for the bandwidth measurement")
      ->check(moe::cli::NumberIn(1.0 / 1024, 1024))
      ->capture_default_str();
  app.add_option("--bandwidth-gbps", o.bandwidth_gbps,
                 "the memory bandwidth to hold the speeds against, instead of measuring the "
                 "host's (a GPU's: e.g. 4800 for an H200's HBM3e)")
      ->check(moe::cli::NumberIn(0.001, 1e6));
  app.add_flag("--json", o.json, "one JSON object per test");
  app.add_option("--text", o.text,
                 "text file (the model's tokenizer): prompts are its tokens, and generation feeds "
                 "its next token at each step (for trained routing); default: random tokens and "
                 "greedy continuations")
      ->check(CLI::ExistingFile);
  app.add_option("--parallel", o.parallel,
                 "the batching engine instead: aggregate decode speed at these numbers of "
                 "concurrent sequences (e.g. 1,2,4,8,16), each with -p prompt and -n generated "
                 "tokens")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  app.add_flag("--no-prefix-sharing", o.no_prefix_sharing,
               "with --parallel: engines without prefix sharing (recurrent models then keep one "
               "state slot a request instead of two)");
  app.add_option("--prefix-ttft", o.prefix_ttft,
                 "the batching engine instead: time to first token of requests sharing this many "
                 "prompt tokens, with prefix sharing off and on")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--prefix-requests", o.prefix_requests, "requests for --prefix-ttft")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  moe::cli::AddExpertFlags(&app, &o.experts);
  moe::cli::AddDeviceFlags(&app, &o.device);
  moe::cli::AddDistributedFlags(&app, &o.distributed);
  CLI11_PARSE(app, argc, argv);
  // -t 0 as the engine reads it, so that the bandwidth beside it is read by as many threads.
  if (o.threads <= 0) o.threads = moe::DefaultThreadCount();
  return Run(o);
}
