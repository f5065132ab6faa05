package org.libmoe;

/** How to create a {@link Context}; the defaults suit most uses. */
public final class ContextOptions {
  int contextLength;
  int threads;
  long seed;
  KvType kvType = KvType.F32;
  float expertConfidence;
  int minExperts = 1;
  float routerTemperature = 1.0f;
  RouterNoise routerNoise = RouterNoise.NONE;
  float routerNoiseScale;
  long routerNoiseSeed;
  float expertCapacityFactor;
  int loadWindow;
  float loadLimit = 2.0f;

  /** Tokens the context holds; 0 (default): the model's, at most 4096. */
  public ContextOptions contextLength(int n) {
    contextLength = n;
    return this;
  }

  /** Worker threads; 0 (default): one per core. */
  public ContextOptions threads(int n) {
    threads = n;
    return this;
  }

  /** Base seed of the samplers (default 0). */
  public ContextOptions seed(long s) {
    seed = s;
    return this;
  }

  /** Element type of the KV cache (default {@link KvType#F32}; F16 halves its memory). */
  public ContextOptions kvType(KvType type) {
    kvType = java.util.Objects.requireNonNull(type, "kvType is null");
    return this;
  }

  /**
   * Dynamic top-k: each token keeps its best routed experts until they hold this share of its
   * top-k router scores, in [0, 1]; 0 (default): always the model's top-k.
   */
  public ContextOptions expertConfidence(float share) {
    expertConfidence = share;
    return this;
  }

  /** With {@link #expertConfidence}: at least this many experts per token (default 1). */
  public ContextOptions minExperts(int n) {
    minExperts = n;
    return this;
  }

  /** The router's logits are divided by this before gating (default 1: as the model routes). */
  public ContextOptions routerTemperature(float t) {
    routerTemperature = t;
    return this;
  }

  /**
   * Noise on the logits that choose experts (not on those that weight them), of the given scale,
   * reproducible from the seed: a token's noise depends on the seed, layer, position and expert.
   */
  public ContextOptions routerNoise(RouterNoise kind, float scale, long seed) {
    routerNoise = java.util.Objects.requireNonNull(kind, "kind is null");
    routerNoiseScale = scale;
    routerNoiseSeed = seed;
    return this;
  }

  /**
   * Capacity with re-routing: in one forward step of n tokens (a prompt chunk; one decode token
   * is never capped) no expert takes more than ceil(factor x n x k / experts) of them, and a token
   * whose choice is full takes its next best expert with room. 0 (default): no cap.
   */
  public ContextOptions expertCapacityFactor(float factor) {
    expertCapacityFactor = factor;
    return this;
  }

  /**
   * Load-aware re-weighting: over the {@code window} tokens before each one, an expert that took
   * more than {@code limit} x its fair share of a layer's choices has its weight scaled down by
   * the excess and the token's other experts' weights up. Window 0 (default): off; limit >= 1
   * (default 2).
   */
  public ContextOptions loadBalance(int window, float limit) {
    loadWindow = window;
    loadLimit = limit;
    return this;
  }
}
