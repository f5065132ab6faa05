// The CUDA backend's entry points as libmoe sees them: each loads libmoe_cuda.so on first use
// (cuda/cuda_module.h) and calls into it; without the module, or with one of another build, each
// says why a device cannot be used. Where the module is looked for: $MOE_CUDA_MODULE (a path),
// then beside the library or program this code is in, then the loader's search path.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "lib/backend/cuda/cuda_module.h"
#include "lib/backend/cuda_backend.h"

namespace moe {
namespace {

struct Loaded {
  const cuda::ModuleTable* table = nullptr;
  absl::Status status;
};

std::string BesideThisCode() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&CudaDeviceAvailable), &info) == 0 ||
      info.dli_fname == nullptr) {
    return {};
  }
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

Loaded Load() {
  std::string tried;
  void* handle = nullptr;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("MOE_CUDA_MODULE"); env != nullptr && *env != '\0') {
    candidates.push_back(env);
  } else {
    if (std::string dir = BesideThisCode(); !dir.empty()) {
      candidates.push_back(dir + cuda::kModuleFile);
    }
    candidates.push_back(cuda::kModuleFile);
  }
  for (const std::string& c : candidates) {
    handle = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    const char* why = ::dlerror();
    absl::StrAppend(&tried, tried.empty() ? "" : "; ", why != nullptr ? why : c);
  }
  if (handle == nullptr) {
    return {nullptr, absl::UnavailableError(absl::StrCat(
                         "the CUDA backend module (", cuda::kModuleFile,
                         ") could not be loaded: this libmoe was built without CUDA, or the "
                         "module or the CUDA libraries it needs are not installed (",
                         tried, ")"))};
  }
  using Entry = const cuda::ModuleTable* (*)();
  auto entry = reinterpret_cast<Entry>(::dlsym(handle, cuda::kModuleEntry));
  const cuda::ModuleTable* table = entry != nullptr ? entry() : nullptr;
  if (table == nullptr || table->abi != cuda::kModuleAbi ||
      std::strcmp(table->build, MOE_BUILD_ID) != 0) {
    // Never unloaded: a module once loaded stays.
    return {nullptr, absl::FailedPreconditionError(absl::StrCat(
                         "the CUDA backend module found is not from this build of libmoe (",
                         MOE_BUILD_ID, ")"))};
  }
  return {table, absl::OkStatus()};
}

const Loaded& Module() {
  static const Loaded* loaded = new Loaded(Load());
  return *loaded;
}

}  // namespace

absl::Status CudaDeviceAvailable() {
  const Loaded& m = Module();
  return m.table == nullptr ? m.status : m.table->available();
}

absl::StatusOr<std::shared_ptr<const DeviceWeights>> UploadWeights(
    absl::Span<const HostTensor> tensors, const DeviceWeightsOptions& options) {
  const Loaded& m = Module();
  if (m.table == nullptr) return m.status;
  return m.table->upload(tensors, options);
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    std::shared_ptr<const DeviceWeights> weights, int cpu_threads) {
  const Loaded& m = Module();
  if (m.table == nullptr) return m.status;
  return m.table->create(std::move(weights), cpu_threads);
}

}  // namespace moe
