// Measures the machine's streaming-read bandwidth with a buffer far larger than any cache.
#pragma once

namespace moe::bench {

// Best of several passes, in GB/s (1e9 bytes), reading with `threads` threads.
double MeasureReadBandwidth(int threads, double buffer_gib = 1.0);

}  // namespace moe::bench
