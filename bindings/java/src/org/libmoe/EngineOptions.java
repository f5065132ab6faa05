package org.libmoe;

/** How to create an {@link Engine}; the defaults suit most services. */
public final class EngineOptions {
  private final NativeEngineOptions defaults = new NativeEngineOptions();
  int threads = defaults.getThreads();
  KvType kvType = KvType.F16;
  int kvBlockSize = defaults.getKv_block_size();
  int contextLength = defaults.getN_ctx();
  long kvTokens = defaults.getKv_tokens();
  long kvBytes = defaults.getKv_bytes();
  int maxSequences = defaults.getMax_sequences();
  int maxStepTokens = defaults.getMax_step_tokens();
  boolean prefixSharing = defaults.getPrefix_sharing();
  KvFullPolicy whenKvFull = KvFullPolicy.PREEMPT;
  boolean ownThread = defaults.getOwn_thread();
  long seed = defaults.getSeed();
  float expertConfidence = defaults.getExpert_confidence();
  int minExperts = defaults.getMin_experts();
  float routerTemperature = defaults.getRouter_temperature();
  RouterNoise routerNoise = RouterNoise.NONE;
  float routerNoiseScale = defaults.getRouter_noise_scale();
  long routerNoiseSeed = defaults.getRouter_noise_seed();
  float expertCapacityFactor = defaults.getExpert_capacity_factor();
  int loadWindow = defaults.getLoad_window();
  float loadLimit = defaults.getLoad_limit();

  public EngineOptions() {
    defaults.delete();
  }

  /** Compute threads; 0 (default): one per core. */
  public EngineOptions threads(int n) {
    threads = n;
    return this;
  }

  /** Element type of the KV cache (default {@link KvType#F16}). */
  public EngineOptions kvType(KvType type) {
    kvType = java.util.Objects.requireNonNull(type, "kvType is null");
    return this;
  }

  /** Positions per KV block, a power of two (default 32). */
  public EngineOptions kvBlockSize(int n) {
    kvBlockSize = n;
    return this;
  }

  /** The most tokens one request holds; 0 (default): the model's, at most 4096. */
  public EngineOptions contextLength(int n) {
    contextLength = n;
    return this;
  }

  /** The KV cache's size in tokens; 0 (default): 16384, or the context length if larger. */
  public EngineOptions kvTokens(long n) {
    kvTokens = n;
    return this;
  }

  /** The KV cache's size in bytes instead of tokens (0: by tokens). */
  public EngineOptions kvBytes(long n) {
    kvBytes = n;
    return this;
  }

  /** Requests running at once (default 16); the others wait their turn. */
  public EngineOptions maxSequences(int n) {
    maxSequences = n;
    return this;
  }

  /** Tokens one step computes, decode tokens first (default 256): long prompts go in chunks. */
  public EngineOptions maxStepTokens(int n) {
    maxStepTokens = n;
    return this;
  }

  /** Whether prompts reuse the KV blocks of a prefix computed before (default true). */
  public EngineOptions prefixSharing(boolean on) {
    prefixSharing = on;
    return this;
  }

  /** What happens when the KV cache cannot grow (default {@link KvFullPolicy#PREEMPT}). */
  public EngineOptions whenKvFull(KvFullPolicy policy) {
    whenKvFull = java.util.Objects.requireNonNull(policy, "policy is null");
    return this;
  }

  /**
   * True (default): the engine steps on its own thread. False: nothing runs until the caller
   * calls {@link Engine#step()}.
   */
  public EngineOptions ownThread(boolean on) {
    ownThread = on;
    return this;
  }

  /** Added to every request's sampling seed (default 0). */
  public EngineOptions seed(long s) {
    seed = s;
    return this;
  }

  /**
   * Every request's dynamic top-k: a token keeps its best routed experts until they hold this
   * share of its top-k router scores, in [0, 1]; 0 (default): always the model's top-k.
   */
  public EngineOptions expertConfidence(float share) {
    expertConfidence = share;
    return this;
  }

  /** With {@link #expertConfidence}: at least this many experts per token (default 1). */
  public EngineOptions minExperts(int n) {
    minExperts = n;
    return this;
  }

  /** Every request's router temperature, as {@link ContextOptions#routerTemperature}. */
  public EngineOptions routerTemperature(float t) {
    routerTemperature = t;
    return this;
  }

  /** Every request's router noise, as {@link ContextOptions#routerNoise}. */
  public EngineOptions routerNoise(RouterNoise kind, float scale, long seed) {
    routerNoise = java.util.Objects.requireNonNull(kind, "kind is null");
    routerNoiseScale = scale;
    routerNoiseSeed = seed;
    return this;
  }

  /**
   * Capacity with re-routing, as {@link ContextOptions#expertCapacityFactor}: each step's tokens
   * per expert are capped over all the requests in it. 0 (default): no cap.
   */
  public EngineOptions expertCapacityFactor(float factor) {
    expertCapacityFactor = factor;
    return this;
  }

  /**
   * Load-aware re-weighting, as {@link ContextOptions#loadBalance}, over each request's own
   * tokens; it turns prefix sharing off (cached blocks do not keep the routing).
   */
  public EngineOptions loadBalance(int window, float limit) {
    loadWindow = window;
    loadLimit = limit;
    return this;
  }

  NativeEngineOptions toNative() {
    NativeEngineOptions n = new NativeEngineOptions();
    n.setThreads(threads);
    n.setKv_type(kvType.code);
    n.setKv_block_size(kvBlockSize);
    n.setN_ctx(contextLength);
    n.setKv_tokens(kvTokens);
    n.setKv_bytes(kvBytes);
    n.setMax_sequences(maxSequences);
    n.setMax_step_tokens(maxStepTokens);
    n.setPrefix_sharing(prefixSharing);
    n.setWhen_kv_full(whenKvFull.code);
    n.setOwn_thread(ownThread);
    n.setSeed(seed);
    n.setExpert_confidence(expertConfidence);
    n.setMin_experts(minExperts);
    n.setRouter_temperature(routerTemperature);
    n.setRouter_noise(routerNoise.code);
    n.setRouter_noise_scale(routerNoiseScale);
    n.setRouter_noise_seed(routerNoiseSeed);
    n.setExpert_capacity_factor(expertCapacityFactor);
    n.setLoad_window(loadWindow);
    n.setLoad_limit(loadLimit);
    return n;
  }
}
