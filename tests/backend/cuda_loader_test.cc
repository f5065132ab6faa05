// How libmoe finds the CUDA backend's module (lib/backend/cuda_loader.cc) and what it says when
// it cannot use one. The loader decides once per process, so each case runs in a child process
// of its own (a death-test child re-runs only that case, from a fresh start).
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "lib/backend/cuda_backend.h"

namespace moe {
namespace {

// In the child: the module at `path`, and an exit code saying what CudaDeviceAvailable said
// (printed on stderr for the parent to match).
[[noreturn]] void ProbeWith(const std::string& path) {
  ::setenv("MOE_CUDA_MODULE", path.c_str(), 1);
  const absl::Status s = CudaDeviceAvailable();
  std::fprintf(stderr, "status: %s\n", s.ToString().c_str());
  std::fflush(stderr);
  std::_Exit(static_cast<int>(s.code()));
}

class CudaLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(CudaLoaderTest, AMissingModuleIsUnavailableAndSaysWhatWasTried) {
  EXPECT_EXIT(ProbeWith("/nonexistent/libmoe_cuda.so"),
              ::testing::ExitedWithCode(static_cast<int>(absl::StatusCode::kUnavailable)),
              "could not be loaded.*built without CUDA.*/nonexistent/libmoe_cuda.so");
}

// A shared library that is not the module (no entry point): refused as not of this build.
TEST_F(CudaLoaderTest, ALibraryThatIsNotTheModuleIsRefused) {
  EXPECT_EXIT(ProbeWith(MOE_OTHER_SHARED_LIBRARY),
              ::testing::ExitedWithCode(static_cast<int>(absl::StatusCode::kFailedPrecondition)),
              "not from this build");
}

// The module this build made (when CUDA is built): it loads and answers for the device (here:
// none; on a GPU machine: OK).
TEST_F(CudaLoaderTest, TheModuleOfThisBuildLoads) {
#ifndef MOE_TEST_CUDA_MODULE
  GTEST_SKIP() << "built without CUDA";
#else
  const auto answered = [](int status) {
    if (!WIFEXITED(status)) return false;
    const int code = WEXITSTATUS(status);
    return code == 0 || code == static_cast<int>(absl::StatusCode::kUnavailable);
  };
  EXPECT_EXIT(ProbeWith(MOE_TEST_CUDA_MODULE), answered,
              "status: (OK|UNAVAILABLE: no usable CUDA device)");
#endif
}

}  // namespace
}  // namespace moe
