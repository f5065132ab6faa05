package org.libmoe;

/** How to load a {@link Model}; the defaults suit most uses. */
public final class ModelOptions {
  boolean useMmap;
  ProgressListener progress;
  long expertCacheBytes;
  double expertCacheFraction;
  ExpertEviction expertEviction = ExpertEviction.LRU;
  boolean expertDirectIo = true;

  /**
   * Leave the weights in the memory-mapped file instead of copying them into memory (default
   * false): instant start and pages shared between processes, but reads through a cold or crowded
   * page cache are slower ({@code moe_model_params.use_mmap}).
   */
  public ModelOptions useMmap(boolean on) {
    useMmap = on;
    return this;
  }

  /**
   * Reads the routed experts from the model file on demand into a cache of {@code bytes}
   * instead of loading them all ({@code moe_model_params.expert_cache_bytes}; 0: all resident).
   * Outputs are the same; a model larger than memory runs. .moe and GGUF files.
   */
  public ModelOptions expertCacheBytes(long bytes) {
    expertCacheBytes = bytes;
    return this;
  }

  /** The expert cache as a fraction (0, 1] of all expert bytes ({@code expert_cache_fraction}). */
  public ModelOptions expertCacheFraction(double fraction) {
    expertCacheFraction = fraction;
    return this;
  }

  /** Which cached expert makes room ({@code expert_eviction}; default LRU). */
  public ModelOptions expertEviction(ExpertEviction policy) {
    expertEviction = java.util.Objects.requireNonNull(policy, "expertEviction is null");
    return this;
  }

  /** Direct I/O for expert reads where the file system allows it (default true). */
  public ModelOptions expertDirectIo(boolean on) {
    expertDirectIo = on;
    return this;
  }

  /** Reports load progress in [0, 1]; returning false cancels the load (may be null). */
  public ModelOptions progress(ProgressListener listener) {
    progress = listener;
    return this;
  }
}
