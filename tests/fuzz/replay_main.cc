// Driver for the fuzz targets without libFuzzer (GCC, the normal test run): replays the seed
// corpus, then a deterministic mutation loop over it (fixed seed, bounded in iterations and
// time), so every run of the test suite explores the same inputs and a failure reproduces.
//
//   <target>                      seeds + mutations (MOE_FUZZ_SECONDS, MOE_FUZZ_ITERATIONS)
//   <target> FILE...              runs each file once (reproducing a crash or a libFuzzer find)
//   <target> --write-seeds DIR    writes the seed corpus for libFuzzer
//
// A crash, sanitizer report or failed MOE_FUZZ_CHECK ends the process, failing the test; the
// input that did it is written to fuzz-crash-<target> in the working directory first.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" void __sanitizer_set_death_callback(void (*callback)()) __attribute__((weak));

namespace moe::fuzz {
namespace {

// The input being run, for the crash handlers (which may only make async-signal-safe calls).
const uint8_t* g_input = nullptr;
size_t g_input_size = 0;
char g_crash_path[512];

void SaveInput() {
  if (g_input == nullptr) return;
  const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  for (size_t done = 0; done < g_input_size;) {
    const ssize_t n = ::write(fd, g_input + done, g_input_size - done);
    if (n <= 0) break;
    done += n;
  }
  ::close(fd);
  const char msg[] = "fuzz: input that failed saved to ";
  (void)!::write(2, msg, sizeof(msg) - 1);
  (void)!::write(2, g_crash_path, std::strlen(g_crash_path));
  (void)!::write(2, "\n", 1);
  g_input = nullptr;
}

struct sigaction g_previous[32];

// Saves the input, then hands the signal to whoever handled it before (ASan prints its report
// from its SEGV handler) or to the default action.
void OnSignal(int sig, siginfo_t* info, void* context) {
  SaveInput();
  if (sig == SIGALRM) {
    const char msg[] = "fuzz: input ran past the per-input time limit (hang)\n";
    (void)!::write(2, msg, sizeof(msg) - 1);
    ::signal(SIGABRT, SIG_DFL);
    ::abort();
  }
  const struct sigaction& prev = g_previous[sig];
  if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void InstallHandlers(const std::string& target) {
  std::snprintf(g_crash_path, sizeof(g_crash_path), "fuzz-crash-%s", target.c_str());
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) {
    struct sigaction sa = {};
    sa.sa_sigaction = OnSignal;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, &g_previous[sig]);
  }
  // ASan and UBSan (with -fno-sanitize-recover) report and exit without a signal.
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(SaveInput);
}

// Runs one input with a watchdog: a parser that loops on a bad length is a bug too.
void RunOne(const uint8_t* data, size_t size, unsigned timeout_s) {
  g_input = data;
  g_input_size = size;
  ::alarm(timeout_s);
  LLVMFuzzerTestOneInput(data, size);
  ::alarm(0);
  g_input = nullptr;
}

// SplitMix64: tiny, fixed, the same on every platform (std:: distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }

 private:
  uint64_t s_;
};

// Where a mutation lands: mostly in the structure, sometimes anywhere.
size_t Position(Rng& rng, const Seed& seed, size_t size) {
  if (size == 0) return 0;
  if (seed.header_end > 0 && seed.header_end < size && rng.Below(4) != 0) {
    return rng.Below(seed.header_end);
  }
  return rng.Below(size);
}

// The values that break length and count arithmetic.
uint64_t InterestingValue(Rng& rng, uint64_t old) {
  switch (rng.Below(10)) {
    case 0:
      return 0;
    case 1:
      return ~0ull;  // -1
    case 2:
      return 0x7FFFFFFFull;
    case 3:
      return 0x80000000ull;
    case 4:
      return 0xFFFFFFFFull;
    case 5:
      return 1ull << 62;
    case 6:
      return 0x7FFFFFFFFFFFFFFFull;
    case 7:
      return old + 1;
    case 8:
      return old - 1;
    default:
      return rng.Below(1 << 16);
  }
}

void OverwriteInteger(Rng& rng, const Seed& seed, std::vector<uint8_t>& b) {
  size_t offset;
  int width;
  if (!seed.fields.empty() && rng.Below(5) != 0) {
    const Field& f = seed.fields[rng.Below(seed.fields.size())];
    offset = f.offset, width = f.width;
  } else {
    static constexpr int kWidths[] = {1, 2, 4, 8};
    width = kWidths[rng.Below(4)];
    offset = Position(rng, seed, b.size()) & ~static_cast<size_t>(width - 1);
  }
  if (offset + width > b.size()) return;
  uint64_t old = 0;
  std::memcpy(&old, b.data() + offset, width);
  const uint64_t value = InterestingValue(rng, old);
  std::memcpy(b.data() + offset, &value, width);  // little-endian host
}

void Mutate(Rng& rng, const Seed& seed, std::vector<uint8_t>& b) {
  const int n = 1 + static_cast<int>(rng.Below(3));
  for (int i = 0; i < n; ++i) {
    const size_t pos = Position(rng, seed, b.size());
    switch (rng.Below(7)) {
      case 0:  // bit flip
        if (!b.empty()) b[pos] ^= static_cast<uint8_t>(1u << rng.Below(8));
        break;
      case 1:  // random byte
        if (!b.empty()) b[pos] = static_cast<uint8_t>(rng.Next());
        break;
      case 2:  // truncation
        b.resize(pos);
        break;
      case 3: {  // insertion of up to 16 bytes
        const size_t k = 1 + rng.Below(16);
        b.insert(b.begin() + pos, k, static_cast<uint8_t>(rng.Next()));
        break;
      }
      case 4: {  // erasure of up to 64 bytes
        const size_t k = std::min<size_t>(1 + rng.Below(64), b.size() - pos);
        b.erase(b.begin() + pos, b.begin() + pos + k);
        break;
      }
      case 5: {  // copy a chunk over another (repeats structure: a second key, a tensor twice)
        if (b.empty()) break;
        const size_t from = Position(rng, seed, b.size());
        const size_t k = std::min({size_t{1} + rng.Below(32), b.size() - from, b.size() - pos});
        std::memmove(b.data() + pos, b.data() + from, k);
        break;
      }
      default:
        OverwriteInteger(rng, seed, b);
    }
  }
}

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  uint64_t x;
  return v != nullptr && absl::SimpleAtoi(v, &x) ? x : fallback;
}

int Main(int argc, char** argv) {
  const std::string target = std::filesystem::path(argv[0]).filename().string();
  InstallHandlers(target);
  const unsigned per_input_s = static_cast<unsigned>(EnvOr("MOE_FUZZ_INPUT_TIMEOUT", 30));

  if (argc == 3 && std::strcmp(argv[1], "--write-seeds") == 0) {
    std::filesystem::create_directories(argv[2]);
    std::vector<Seed> seeds = Seeds();
    for (size_t i = 0; i < seeds.size(); ++i) {
      const std::string path = absl::StrCat(argv[2], "/seed-", i, "-", seeds[i].name);
      WriteFileOrDie(path, seeds[i].bytes.data(), seeds[i].bytes.size());
    }
    std::printf("%s: wrote %zu seeds to %s\n", target.c_str(), seeds.size(), argv[2]);
    return 0;
  }
  if (argc > 1) {
    for (int i = 1; i < argc; ++i) {
      std::vector<uint8_t> input = ReadFileOrDie(argv[i]);
      RunOne(input.data(), input.size(), per_input_s);
      std::printf("%s: %s ok\n", target.c_str(), argv[i]);
    }
    return 0;
  }

  const uint64_t max_iterations = EnvOr("MOE_FUZZ_ITERATIONS", 3000);
  const double max_seconds = static_cast<double>(EnvOr("MOE_FUZZ_SECONDS", 15));
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };

  const std::vector<Seed> seeds = Seeds();
  if (seeds.empty()) {
    std::fprintf(stderr, "%s: no seeds (test data missing?)\n", target.c_str());
    return 1;
  }
  for (const Seed& seed : seeds) RunOne(seed.bytes.data(), seed.bytes.size(), per_input_s);
  std::printf("%s: %zu seeds passed\n", target.c_str(), seeds.size());
  // The corpus kept in the repository: what coverage-guided runs found worth keeping, and every
  // input that once crashed (crash-*, timeout-*, oom-*), each a regression test from then on.
  size_t kept = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(MOE_FUZZ_CORPUS, ec)) {
    if (!entry.is_regular_file()) continue;
    std::vector<uint8_t> input = ReadFileOrDie(entry.path().string());
    RunOne(input.data(), input.size(), per_input_s);
    ++kept;
  }
  std::printf("%s: %zu inputs of %s passed\n", target.c_str(), kept, MOE_FUZZ_CORPUS);

  // One working buffer, refilled from a seed each iteration: memory stays at the largest seed
  // (plus insertions), however many iterations run.
  Rng rng(EnvOr("MOE_FUZZ_RNG_SEED", 0x6D6F652D66757A7Aull));
  std::vector<uint8_t> work;
  uint64_t iterations = 0;
  while (iterations < max_iterations && elapsed() < max_seconds) {
    const Seed& seed = seeds[iterations % seeds.size()];
    work.assign(seed.bytes.begin(), seed.bytes.end());
    Mutate(rng, seed, work);
    RunOne(work.data(), work.size(), per_input_s);
    ++iterations;
  }
  std::printf("%s: %zu seeds + %llu mutated inputs passed, 0 failed (%.1f s); reached:%s\n",
              target.c_str(), seeds.size(), static_cast<unsigned long long>(iterations), elapsed(),
              StageCounts().c_str());
  return 0;
}

}  // namespace
}  // namespace moe::fuzz

int main(int argc, char** argv) { return moe::fuzz::Main(argc, argv); }
