// Weights copied out of their file into anonymous memory (huge pages where the kernel allows),
// where matrices can be re-laid into the kernels' own layouts: what `--load ram` does at load,
// and what `moe-convert --layout groups` does before writing a .moe file that a mapped load can
// then run at full speed.
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/model/model_spec.h"

namespace moe {

// Copies every tensor of spec into one anonymous allocation, which becomes spec's only owner
// (the file's pages are released as they are copied). With repack, each matrix is re-laid as
// RepackedType(dtype, rows, cols, level) (repack.h): at kAvx2 that is the row-group layouts
// only, which every level runs; at kAvx512Vnni also the row layouts of that level. progress
// (may be empty) is told 0.1 .. 0.9 as the copy goes and can cancel it by returning false.
// Tensors for which leave_in_file (when given) is true are not copied: they stay where they are,
// and so do the owners that keep them alive (the expert cache reads experts from the file).
absl::Status CopyWeights(ModelSpec& spec, bool repack, SimdLevel level,
                         const std::function<bool(float)>& progress,
                         const std::function<bool(const TensorSpec&)>& leave_in_file = {});

}  // namespace moe
