// Where the forward pass runs, shared by moe-cli run and moe-bench: --device cpu|cuda|auto,
// --gpu N, --gpu-memory SIZE (the device memory the weights may take; routed experts beyond it
// stay on the CPU). Applied by LoadOptions (lib/runtime/engine.h).
#pragma once

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/runtime/engine.h"
#include "tools/expert_cache_flag.h"

namespace moe::cli {

struct DeviceFlags {
  std::string device = "cpu";
  int gpu = 0;
  std::string gpu_memory;
};

inline void AddDeviceFlags(CLI::App* app, DeviceFlags* f) {
  app->add_option("--device", f->device,
                  "where the forward pass runs: cpu, cuda (an error when no GPU can be used), "
                  "or auto (a GPU when one can be used)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  app->add_option("--gpu", f->gpu, "which CUDA device")->check(CLI::Range(0, 63));
  app->add_option("--gpu-memory", f->gpu_memory,
                  "device memory the weights may take (SIZE; default: the free memory less a "
                  "reserve); routed experts beyond it run on the CPU");
}

inline absl::Status ApplyDeviceFlags(const DeviceFlags& f, LoadOptions* options) {
  options->device = f.device == "cuda"   ? ComputeDevice::kCuda
                    : f.device == "auto" ? ComputeDevice::kAuto
                                         : ComputeDevice::kCpu;
  options->device_index = f.gpu;
  if (!f.gpu_memory.empty()) {
    std::optional<size_t> bytes = ParseByteSize(f.gpu_memory);
    if (!bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpu-memory '", f.gpu_memory, "': give a size (8GiB, 512MiB, bytes)"));
    }
    options->device_memory_bytes = *bytes;
  }
  return absl::OkStatus();
}

}  // namespace moe::cli
