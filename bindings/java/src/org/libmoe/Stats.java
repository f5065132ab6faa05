package org.libmoe;

/**
 * Statistics of the last generate or {@link Context#decode} call on a context.
 *
 * @param promptTokens prompt tokens this call processed (not those already in the context)
 * @param generatedTokens tokens generated
 * @param promptSeconds time spent on the prompt
 * @param generateSeconds time spent generating
 * @param promptTokensPerSecond prompt speed
 * @param generateTokensPerSecond generation speed
 * @param activeFraction fraction of all parameters touched per token, measured from the experts
 *     that fired
 * @param finishReason why generation stopped
 * @param attentionSeconds time in attention, summed over the call
 * @param routerSeconds time in the expert routers
 * @param expertsSeconds time in the experts
 * @param headSeconds time in the output head
 * @param samplingSeconds time in sampling
 * @param activeParametersPerToken mean parameters touched per token
 * @param meanRouterEntropy mean router entropy in nats, per token and layer
 * @param weightBytesRead weight bytes read during the call
 * @param expertCache what the expert cache did during the call, over all layers
 * @param reroutedChoices choices an expert capacity moved to a later expert (over tokens and
 *     layers; {@link ContextOptions#expertCapacityFactor})
 * @param droppedChoices choices an expert capacity left out
 * @param reweightedChoices weights load-aware re-weighting scaled down
 *     ({@link ContextOptions#loadBalance})
 * @param weightBytesPerToken weight bytes a token's computation touched, on average (dense
 *     matrices, its routed experts, the head where logits were computed)
 * @param multiplyAddsPerToken multiply-adds of a token's matrix products and attention
 */
public record Stats(
    int promptTokens,
    int generatedTokens,
    double promptSeconds,
    double generateSeconds,
    double promptTokensPerSecond,
    double generateTokensPerSecond,
    double activeFraction,
    FinishReason finishReason,
    double attentionSeconds,
    double routerSeconds,
    double expertsSeconds,
    double headSeconds,
    double samplingSeconds,
    double activeParametersPerToken,
    double meanRouterEntropy,
    long weightBytesRead,
    ExpertCacheStats expertCache,
    long reroutedChoices,
    long droppedChoices,
    long reweightedChoices,
    double weightBytesPerToken,
    double multiplyAddsPerToken) {

  /** The third release's constructor, kept for source compatibility: no routing counts. */
  public Stats(int promptTokens, int generatedTokens, double promptSeconds,
      double generateSeconds, double promptTokensPerSecond, double generateTokensPerSecond,
      double activeFraction, FinishReason finishReason, double attentionSeconds,
      double routerSeconds, double expertsSeconds, double headSeconds, double samplingSeconds,
      double activeParametersPerToken, double meanRouterEntropy, long weightBytesRead,
      ExpertCacheStats expertCache) {
    this(promptTokens, generatedTokens, promptSeconds, generateSeconds, promptTokensPerSecond,
        generateTokensPerSecond, activeFraction, finishReason, attentionSeconds, routerSeconds,
        expertsSeconds, headSeconds, samplingSeconds, activeParametersPerToken, meanRouterEntropy,
        weightBytesRead, expertCache, 0, 0, 0, 0, 0);
  }

  /** The second release's constructor, kept for source compatibility: no expert cache figures. */
  public Stats(int promptTokens, int generatedTokens, double promptSeconds,
      double generateSeconds, double promptTokensPerSecond, double generateTokensPerSecond,
      double activeFraction, FinishReason finishReason, double attentionSeconds,
      double routerSeconds, double expertsSeconds, double headSeconds, double samplingSeconds,
      double activeParametersPerToken, double meanRouterEntropy, long weightBytesRead) {
    this(promptTokens, generatedTokens, promptSeconds, generateSeconds, promptTokensPerSecond,
        generateTokensPerSecond, activeFraction, finishReason, attentionSeconds, routerSeconds,
        expertsSeconds, headSeconds, samplingSeconds, activeParametersPerToken, meanRouterEntropy,
        weightBytesRead, ExpertCacheStats.NONE);
  }

  /** The first release's constructor, kept for source compatibility; the newer fields are 0. */
  public Stats(int promptTokens, int generatedTokens, double promptSeconds,
      double generateSeconds, double promptTokensPerSecond, double generateTokensPerSecond,
      double activeFraction, FinishReason finishReason) {
    this(promptTokens, generatedTokens, promptSeconds, generateSeconds, promptTokensPerSecond,
        generateTokensPerSecond, activeFraction, finishReason, 0, 0, 0, 0, 0, 0, 0, 0,
        ExpertCacheStats.NONE);
  }
}
