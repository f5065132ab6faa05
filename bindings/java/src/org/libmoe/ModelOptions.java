package org.libmoe;

/** How to load a {@link Model}; the defaults suit most uses. */
public final class ModelOptions {
  boolean useMmap;
  ProgressListener progress;

  /**
   * Leave the weights in the memory-mapped file instead of copying them into memory (default
   * false): instant start and pages shared between processes, but reads through a cold or crowded
   * page cache are slower ({@code moe_model_params.use_mmap}).
   */
  public ModelOptions useMmap(boolean on) {
    useMmap = on;
    return this;
  }

  /** Reports load progress in [0, 1]; returning false cancels the load (may be null). */
  public ModelOptions progress(ProgressListener listener) {
    progress = listener;
    return this;
  }
}
