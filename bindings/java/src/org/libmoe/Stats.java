package org.libmoe;

/** Statistics of the last generate call on a context. */
public record Stats(
    int promptTokens,
    int generatedTokens,
    double promptSeconds,
    double generateSeconds,
    double promptTokensPerSecond,
    double generateTokensPerSecond,
    double activeFraction,
    FinishReason finishReason) {}
