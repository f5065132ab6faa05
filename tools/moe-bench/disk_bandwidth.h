// Measures how fast the expert cache's reader gets bytes off the disk: the other limit of a
// decode step that misses (missed bytes / this bandwidth), measured in the same run.
#pragma once

#include "absl/status/statusor.h"
#include "lib/moe/expert_file_reader.h"

namespace moe::bench {

// Reads `total_bytes` of the reader's file in `read_bytes` pieces at offsets spread over the
// whole file (aligned, in a fixed pseudo-random order, so no read-ahead helps), as the I/O
// threads do; GB/s (1e9 bytes). With direct I/O the page cache plays no part.
absl::StatusOr<double> MeasureDiskReadBandwidth(const ExpertFileReader& reader,
                                                size_t total_bytes = size_t{256} << 20,
                                                size_t read_bytes = size_t{1} << 20);

}  // namespace moe::bench
