package org.libmoe;

/** How to load a {@link Model}; the defaults suit most uses. */
public final class ModelOptions {
  boolean useMmap;
  ProgressListener progress;
  long expertCacheBytes;
  double expertCacheFraction;
  ExpertEviction expertEviction = ExpertEviction.LRU;
  boolean expertDirectIo = true;
  String expertPlacementFile;
  String expertWarmupProfile;
  boolean expertPrefetch = true;
  long memoryLimitBytes;
  MemoryFit memoryFit = MemoryFit.CACHE_EXPERTS;
  Device device = Device.CPU;
  int gpuIndex;
  long gpuMemoryBytes;

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
   * Outputs are the same; a model larger than memory runs. .moe and GGUF files, and Hugging Face
   * checkpoints whose experts are stored one matrix per expert.
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

  /**
   * A placement file (JSON; see the README): experts resident or pinned, the others cached
   * ({@code expert_placement_path}; null: none). Turns the expert cache on by itself.
   */
  public ModelOptions expertPlacementFile(String path) {
    expertPlacementFile = path;
    return this;
  }

  /**
   * A routing profile ({@link Context#writeRoutingProfile} or {@code moe-cli profile}): its most
   * chosen experts are read into the cache at load ({@code expert_warmup_path}; null: none).
   */
  public ModelOptions expertWarmupProfile(String path) {
    expertWarmupProfile = path;
    return this;
  }

  /** Read the next layer's likely experts ahead (default true; {@code expert_prefetch}). */
  public ModelOptions expertPrefetch(boolean on) {
    expertPrefetch = on;
    return this;
  }

  /**
   * The memory the model may take in bytes ({@code memory_limit_bytes}; 0, the default: what the
   * system has available). A model that does not fit is handled as {@link #memoryFit} says.
   */
  public ModelOptions memoryLimitBytes(long bytes) {
    memoryLimitBytes = bytes;
    return this;
  }

  /** What a model larger than its memory does (default {@link MemoryFit#CACHE_EXPERTS}). */
  public ModelOptions memoryFit(MemoryFit fit) {
    memoryFit = java.util.Objects.requireNonNull(fit, "memoryFit is null");
    return this;
  }

  /** Where the model runs (default {@link Device#CPU}; {@code moe_model_params.device}). */
  public ModelOptions device(Device d) {
    device = java.util.Objects.requireNonNull(d, "device is null");
    return this;
  }

  /** Which CUDA device (default 0). */
  public ModelOptions gpuIndex(int index) {
    gpuIndex = index;
    return this;
  }

  /**
   * Device memory the weights may take in bytes (0, the default: the free memory less a reserve);
   * routed experts beyond it stay in host memory and run on the CPU.
   */
  public ModelOptions gpuMemoryBytes(long bytes) {
    gpuMemoryBytes = bytes;
    return this;
  }

  /** Reports load progress in [0, 1]; returning false cancels the load (may be null). */
  public ModelOptions progress(ProgressListener listener) {
    progress = listener;
    return this;
  }
}
