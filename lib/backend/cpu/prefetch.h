// Software prefetch of the weights a kernel reads next. A prompt tile computes on each weight
// byte for several tokens, and the hardware prefetcher alone left a core waiting on the weights
// of an expert no recent token had read: ~7 GB/s a core, about half the kernel's pace (measured
// with Q8_0 groups: cold weights 105 GMAC/s a core, 168 with this, 182 warm); there the next
// row group is asked for while this one runs.
//
// With fewer tokens (decode, and the experts of a batched step that few tokens chose) a core
// also waits on its loads, for another reason: each load stays in the reorder window behind the
// arithmetic on the block before it, so the lines in flight are those of the few blocks the
// window holds (a K-quant block is hundreds of instructions), too few to cover the memory's
// latency. A prefetch retires at once, so asking kStreamPrefetchBytes ahead in the same stream
// keeps more lines in flight. AVX-512 VNNI, 2 threads, one binary against the other in turn:
// decode of the Q4_K_M bench model 194–203 → 229–264 tok/s, of the MXFP4 gpt-oss shape
// 312–343 → 354–361; prompts unchanged (within the noise). Asking for the next group instead
// (as prompts do) gained nothing there, and prefetcht1 gained less than prefetcht0. The AVX2
// kernels, which take a row group in chunks of about 4 KiB that both 8-row halves read, ask
// for the next chunk as they start one.
//
// The AVX-512 kernels read their stream ahead for any batch that takes one tile a group (up to
// 8 tokens: a batching step's dense products, experts chosen by several of its tokens), not only
// below kPrefetchTokens: a tile of 8 tokens asking for the next group was still waiting on
// memory, at about a third of its arithmetic's pace on weights larger than the caches (one
// thread, Q4_K, 1024 columns: ~120 GMAC/s against ~270 when the weights are in L2 and ~265 with
// the stream). On the 8-sequence bench model, three pairs of runs: the q/k/v products −10 %, the
// output projection −10 %, the output head −9 %, 2–8 % more tokens a second (1.4–1.9 % shorter
// steps, median, the two alternating step by step in one run). Prompt batches (several tiles a
// group, each reading it from L1/L2 after the first) keep the next group.
#pragma once

#include <cstdint>

namespace moe::kernels {

// Below this many tokens a kernel prefetches the stream it reads, kStreamPrefetchBytes ahead;
// from it on, the next row group. 6 KiB against 4 (per-step alternation in one run, median step,
// 2 threads): decode of the MXFP4 gpt-oss shape -0.5 to -0.8 % (three runs), of the Q4_K_M bench
// model -1.5/-1.7 %, its 8 sequences within +-0.3 %; 2 KiB was 4-5 % slower than 4, 8 KiB
// 0.2-1.3 % slower, 12 KiB 1.5 % (the A/A control of those runs within 0.3 %).
inline constexpr int64_t kPrefetchTokens = 4;
inline constexpr int64_t kStreamPrefetchBytes = 6144;

// Asks for the cache lines of [p, p + bytes) in L2 (locality 2: prefetcht1).
inline void PrefetchToL2(const uint8_t* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
}

// Asks for the cache lines of [p, p + bytes) in L1 (locality 3: prefetcht0). An address past
// the weights' end is harmless: a prefetch never faults.
inline void PrefetchToL1(const uint8_t* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
}

// Asks for the cache lines that start in [p, p + bytes) in L1: a kernel reading its stream
// ahead block by block calls it for consecutive ranges, and each line is asked for once.
// PrefetchToL1 over blocks that are not whole lines (MXFP4X16's 272 bytes, Q8_0X16's 544,
// Q3_K's eighths of 1,760) asks for the line a block ends in again at the next block's start:
// 5 prefetches for 4.25 lines of MXFP4. Those instructions are not free while the lines are in
// flight: on the MXFP4 gpt-oss shape (2 threads, decode, the two alternating step by step in
// one run, median) asking for each line once made steps 0.9-2.0 % shorter (the Q4_K_M bench
// model, whose blocks are mostly whole lines: within 1 %, one sequence and eight); one more
// prefetch a line (to L2, 4 KiB further) made them 5-7 % longer, and leaving every other line to
// the hardware prefetcher 20-26 % longer.
inline void PrefetchStreamToL1(const uint8_t* p, int64_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = begin + static_cast<uintptr_t>(bytes);
  for (uintptr_t line = (begin + 63) & ~uintptr_t{63}; line < end; line += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 3);
  }
}

}  // namespace moe::kernels
