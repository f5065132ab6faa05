package org.libmoe;

/** Receives model loading progress. */
@FunctionalInterface
public interface ProgressListener {
  /**
   * @param progress in [0, 1]
   * @return true to go on, false to cancel the load (it then fails with {@link Status#CANCELLED}).
   *     An exception thrown here cancels the load and is rethrown by {@link Model#load}.
   */
  boolean onProgress(float progress);
}
