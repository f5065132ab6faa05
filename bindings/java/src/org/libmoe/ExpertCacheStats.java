package org.libmoe;

/**
 * What the expert cache did during a call, for one layer ({@link Context#expertLayerStats()}) or
 * all of them ({@link Stats#expertCache()}); all zero when every expert is resident.
 *
 * @param hits the call's experts found in memory (or already being read)
 * @param misses the call's experts read from the model file
 * @param bytesRead read from the file, misses and prefetches
 * @param readSeconds time reading, on the I/O threads
 * @param waitSeconds time compute waited for reads
 * @param prefetches experts read ahead by pre-gating
 * @param prefetchHits of those, the ones a step then used
 * @param prefetchWastedBytes read ahead and evicted unused
 * @param predicted experts used while a guess was out for their layer
 * @param predictedRight of those, the ones the guess named
 * @param expertsInMemory experts in memory when the call ended
 */
public record ExpertCacheStats(
    long hits,
    long misses,
    long bytesRead,
    double readSeconds,
    double waitSeconds,
    long prefetches,
    long prefetchHits,
    long prefetchWastedBytes,
    long predicted,
    long predictedRight,
    int expertsInMemory) {

  /** No expert cache, or nothing done. */
  public static final ExpertCacheStats NONE = new ExpertCacheStats(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);

  /** hits / (hits + misses), or 0 when there were none. */
  public double hitRate() {
    return hits + misses > 0 ? (double) hits / (hits + misses) : 0;
  }

  /** The share of the used experts that pre-gating had guessed, or 0 when nothing was guessed. */
  public double predictionRecall() {
    return predicted > 0 ? (double) predictedRight / predicted : 0;
  }
}
