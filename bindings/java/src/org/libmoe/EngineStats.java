package org.libmoe;

/**
 * What an {@link Engine} has done ({@code moe_engine_stats}).
 *
 * @param kvBlocksCached unreferenced full blocks kept for prompts to reuse
 * @param meanExpertsPerStep distinct experts a step ran, per layer
 */
public record EngineStats(long submitted, long finished, long running, long waiting, long steps,
    long tokens, long decodeTokens, long prefixTokensReused, long preemptions, int kvBlocks,
    int kvBlocksInUse, int kvBlocksCached, int kvBlockSize, double stepSeconds,
    double meanSequencesPerStep, double meanTokensPerStep, double meanExpertsPerStep) {}
