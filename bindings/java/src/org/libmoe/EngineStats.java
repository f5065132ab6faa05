package org.libmoe;

/**
 * What an {@link Engine} has done ({@code moe_engine_stats}).
 *
 * @param kvBlocksCached unreferenced full blocks kept for prompts to reuse
 * @param meanExpertsPerStep distinct experts a step ran, per layer
 * @param reroutedChoices choices an expert capacity moved to a later expert, over every step
 * @param droppedChoices choices an expert capacity left out
 * @param reweightedChoices weights load-aware re-weighting scaled down
 * @param kvWindowBlocks the sliding-window layers' own blocks (0 when no layer slides), which hold
 *     only each request's window; {@code kvBlocks} counts the other layers'
 * @param kvWindowBlocksInUse of them, held by running requests
 * @param kvWindowBlocksCached of them, kept with the cached prefixes they belong to
 * @param kvBytes the paged KV cache's memory
 * @param kvStateSlots the convolution layers' slots (0 when no layer convolves), each their last
 *     inputs and recurrent state: a live one per running request, snapshots of block ends
 * @param kvStateSlotsInUse of them, held by running requests
 * @param kvStateSlotsCached of them, kept at the ends of cached prefixes
 */
public record EngineStats(long submitted, long finished, long running, long waiting, long steps,
    long tokens, long decodeTokens, long prefixTokensReused, long preemptions, int kvBlocks,
    int kvBlocksInUse, int kvBlocksCached, int kvBlockSize, double stepSeconds,
    double meanSequencesPerStep, double meanTokensPerStep, double meanExpertsPerStep,
    long reroutedChoices, long droppedChoices, long reweightedChoices, int kvWindowBlocks,
    int kvWindowBlocksInUse, int kvWindowBlocksCached, long kvBytes, int kvStateSlots,
    int kvStateSlotsInUse, int kvStateSlotsCached) {

  /** The third release's constructor, kept for source compatibility; the newer fields are 0. */
  public EngineStats(long submitted, long finished, long running, long waiting, long steps,
      long tokens, long decodeTokens, long prefixTokensReused, long preemptions, int kvBlocks,
      int kvBlocksInUse, int kvBlocksCached, int kvBlockSize, double stepSeconds,
      double meanSequencesPerStep, double meanTokensPerStep, double meanExpertsPerStep,
      long reroutedChoices, long droppedChoices, long reweightedChoices, int kvWindowBlocks,
      int kvWindowBlocksInUse, int kvWindowBlocksCached, long kvBytes) {
    this(submitted, finished, running, waiting, steps, tokens, decodeTokens, prefixTokensReused,
        preemptions, kvBlocks, kvBlocksInUse, kvBlocksCached, kvBlockSize, stepSeconds,
        meanSequencesPerStep, meanTokensPerStep, meanExpertsPerStep, reroutedChoices,
        droppedChoices, reweightedChoices, kvWindowBlocks, kvWindowBlocksInUse,
        kvWindowBlocksCached, kvBytes, 0, 0, 0);
  }

  /** The second release's constructor, kept for source compatibility; the newer fields are 0. */
  public EngineStats(long submitted, long finished, long running, long waiting, long steps,
      long tokens, long decodeTokens, long prefixTokensReused, long preemptions, int kvBlocks,
      int kvBlocksInUse, int kvBlocksCached, int kvBlockSize, double stepSeconds,
      double meanSequencesPerStep, double meanTokensPerStep, double meanExpertsPerStep,
      long reroutedChoices, long droppedChoices, long reweightedChoices) {
    this(submitted, finished, running, waiting, steps, tokens, decodeTokens, prefixTokensReused,
        preemptions, kvBlocks, kvBlocksInUse, kvBlocksCached, kvBlockSize, stepSeconds,
        meanSequencesPerStep, meanTokensPerStep, meanExpertsPerStep, reroutedChoices,
        droppedChoices, reweightedChoices, 0, 0, 0, 0, 0, 0, 0);
  }

  /** The first release's constructor, kept for source compatibility; the newer fields are 0. */
  public EngineStats(long submitted, long finished, long running, long waiting, long steps,
      long tokens, long decodeTokens, long prefixTokensReused, long preemptions, int kvBlocks,
      int kvBlocksInUse, int kvBlocksCached, int kvBlockSize, double stepSeconds,
      double meanSequencesPerStep, double meanTokensPerStep, double meanExpertsPerStep) {
    this(submitted, finished, running, waiting, steps, tokens, decodeTokens, prefixTokensReused,
        preemptions, kvBlocks, kvBlocksInUse, kvBlocksCached, kvBlockSize, stepSeconds,
        meanSequencesPerStep, meanTokensPerStep, meanExpertsPerStep, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0);
  }
}
