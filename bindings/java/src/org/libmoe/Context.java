package org.libmoe;

/**
 * One conversation over a {@link Model}: its KV cache and sampler. A context is used by one thread
 * at a time (a second concurrent call fails with {@link Status#BUSY}); {@link #cancel()} is the
 * exception and may be called from any thread. Close it when done.
 */
public final class Context implements AutoCloseable {
  private final Model model;
  // Never deleted by close(): a call on another thread may be entering it. The native layer keeps
  // a running call's state until it returns; the wrapper goes with the garbage collector.
  private final NativeContext nativeContext;
  private volatile boolean closed;
  // The routing listener's bridge, kept while the native context may call it.
  private RoutingBridge routing;

  Context(Model model, ContextOptions options) {
    this.model = model;
    this.nativeContext = new NativeContext(model.get(), options.contextLength, options.threads,
        options.seed, options.kvType.code, options.expertConfidence, options.minExperts,
        options.routerTemperature, options.routerNoise.code, options.routerNoiseScale,
        options.routerNoiseSeed, options.expertCapacityFactor, options.loadWindow,
        options.loadLimit);
  }

  /** The model this context was created from. */
  public Model model() {
    return model;
  }

  /**
   * Appends {@code prompt} to the context (BOS first when it is empty) and generates, streaming
   * each piece of text to {@code listener} (may be null).
   *
   * @return why generation stopped
   * @throws MoeException on failure, e.g. {@link Status#CANCELLED} after {@link #cancel()} or
   *     {@link Status#CONTEXT_FULL}
   * @throws RuntimeException whatever {@code listener} threw (generation stops at that token)
   */
  public FinishReason generate(String prompt, GenerateOptions options, TokenListener listener) {
    return run(options, listener, (ctx, o, sink) -> ctx.Generate(Utf8.encode(prompt, "prompt"), o, sink));
  }

  /**
   * The same with prompt token ids, used exactly as given: no BOS is added, on an empty context
   * too ({@link Model#tokenize(String)} puts it first).
   */
  public FinishReason generate(int[] prompt, GenerateOptions options, TokenListener listener) {
    java.util.Objects.requireNonNull(prompt, "prompt is null");
    return run(options, listener, (ctx, o, sink) -> ctx.GenerateTokens(prompt, o, sink));
  }

  /** Generates and returns the whole completion. */
  public String complete(String prompt, GenerateOptions options) {
    StringBuilder text = new StringBuilder();
    generate(prompt, options, (token, piece) -> {
      text.append(piece);
      return true;
    });
    return text.toString();
  }

  /**
   * Asks the generate call running on this context (on another thread) to stop soon; it then
   * throws {@link MoeException} with {@link Status#CANCELLED}. Tokens processed so far stay in
   * the context. Returns at once; does nothing when no call is running or the context is closed.
   */
  public void cancel() {
    nativeContext.Cancel();
  }

  /** Forgets everything in the context. */
  public void reset() {
    get().Reset();
  }

  /** Keeps the first {@code keep} tokens and forgets the rest. */
  public void truncate(int keep) {
    get().Truncate(keep);
  }

  /**
   * Tokens currently in the context ({@code moe_context_n_past}). A following generate call only
   * processes its own prompt: what is already here is reused.
   */
  public int size() {
    return get().NPast();
  }

  /** The context length in tokens. */
  public int capacity() {
    return get().NCtx();
  }

  /** Statistics of the last generate or {@link #decode} call. */
  public Stats stats() {
    NativeContext c = get();
    int inMemory = 0;
    for (ExpertCacheStats layer : expertLayerStats()) inMemory += layer.expertsInMemory();
    NativeStats s = c.Stats();
    try {
      ExpertCacheStats cache = new ExpertCacheStats(s.getExpert_cache_hits(),
          s.getExpert_cache_misses(), s.getExpert_bytes_read(), s.getExpert_read_seconds(),
          s.getExpert_wait_seconds(), s.getExpert_prefetches(), s.getExpert_prefetch_hits(),
          s.getExpert_prefetch_wasted_bytes(), s.getExpert_predicted(),
          s.getExpert_predicted_right(), inMemory);
      return new Stats(s.getPrompt_tokens(), s.getGenerated_tokens(), s.getPrompt_seconds(),
          s.getGenerate_seconds(), s.getPrompt_tokens_per_second(),
          s.getGenerate_tokens_per_second(), s.getActive_fraction(),
          FinishReason.fromCode(s.getFinish_reason()), s.getAttention_seconds(),
          s.getRouter_seconds(), s.getExperts_seconds(), s.getHead_seconds(),
          s.getSampling_seconds(), s.getActive_params_per_token(), s.getMean_router_entropy(),
          s.getWeight_bytes_read(), cache, s.getRerouted_choices(), s.getDropped_choices(),
          s.getReweighted_choices(), s.getWeight_bytes_per_token(),
          s.getMultiply_adds_per_token());
    } finally {
      s.delete();
    }
  }

  /**
   * The last generate or {@link #decode} call's statistics in the Prometheus text exposition
   * format (tokens and speed, stage times, router entropy, expert utilisation and fairness per
   * layer, active parameters, expert-cache hits), for a service's own metrics endpoint.
   */
  public String metricsText() {
    return Utf8.decode(get().MetricsText());
  }

  /**
   * Writes the expert counts of the last generate or {@link #decode} call as a routing profile
   * (JSON), to warm a later load's expert cache ({@link ModelOptions#expertWarmupProfile}).
   */
  public void writeRoutingProfile(String path) {
    get().WriteRoutingProfile(Utf8.encode(path, "path"));
  }

  /** What the expert cache did during the last generate or {@link #decode} call, per layer. */
  public ExpertCacheStats[] expertLayerStats() {
    long[] flat = get().ExpertLayerStats();
    int fields = moe.kExpertLayerStatFields;
    ExpertCacheStats[] layers = new ExpertCacheStats[flat.length / fields];
    for (int l = 0; l < layers.length; l++) {
      int b = l * fields;
      layers[l] = new ExpertCacheStats(flat[b + moe.kLayerHits], flat[b + moe.kLayerMisses],
          flat[b + moe.kLayerBytesRead], flat[b + moe.kLayerReadNanos] / 1e9,
          flat[b + moe.kLayerWaitNanos] / 1e9, flat[b + moe.kLayerPrefetches],
          flat[b + moe.kLayerPrefetchHits], flat[b + moe.kLayerPrefetchWastedBytes],
          flat[b + moe.kLayerPredicted], flat[b + moe.kLayerPredictedRight],
          (int) flat[b + moe.kLayerExpertsInMemory]);
    }
    return layers;
  }

  /**
   * How many tokens chose each expert during the last generate or {@link #decode} call, as
   * {@code counts[layer][expert]}. Each processed token picks {@link ModelInfo#expertsUsed()}
   * experts in every layer.
   */
  public long[][] expertCounts() {
    NativeContext c = get();
    long[] flat = c.ExpertCounts();
    int experts = c.NExpert();
    long[][] counts = new long[experts == 0 ? 0 : flat.length / experts][];
    for (int layer = 0; layer < counts.length; layer++) {
      counts[layer] = java.util.Arrays.copyOfRange(flat, layer * experts, (layer + 1) * experts);
    }
    return counts;
  }

  /**
   * Appends {@code tokens} to the context and computes the logits of the last one: the
   * low-level path, for callers that pick tokens themselves with {@link #logits()} or {@link
   * #sample}. Unlike generate, nothing is added for you (no BOS).
   *
   * @throws MoeException {@link Status#OUT_OF_RANGE} for an id outside the vocabulary, {@link
   *     Status#CONTEXT_FULL} when the tokens do not fit, {@link Status#CANCELLED} after {@link
   *     #cancel()}
   * @throws RuntimeException whatever the {@link #setRoutingListener routing listener} threw
   */
  public void decode(int[] tokens) {
    java.util.Objects.requireNonNull(tokens, "tokens is null");
    try {
      get().Decode(tokens);
    } finally {
      rethrowFromRouting();
    }
  }

  /**
   * Switches experts of one MoE layer off for later calls: the router takes the best of the
   * others. The experts replace the layer's set; none switches them all back on. Invalid layers,
   * ids out of range or a set leaving the layer no expert throw INVALID_ARGUMENT.
   */
  public void disableExperts(int layer, int... experts) {
    java.util.Objects.requireNonNull(experts, "experts is null");
    get().DisableExperts(layer, experts);
  }

  /**
   * Sets (null: removes) the routing trace: {@code listener} is told, during later generate and
   * {@link #decode} calls and on their thread, each processed token's experts and weights in
   * every MoE layer ({@code moe_context_set_routing_callback}). If it throws, the call goes on
   * without telling it more, and rethrows the exception as it returns.
   *
   * @throws MoeException {@link Status#BUSY} while a call runs on the context
   */
  public synchronized void setRoutingListener(RoutingListener listener) {
    RoutingBridge next = listener == null ? null : new RoutingBridge(listener);
    try {
      get().SetRoutingSink(next);
    } catch (RuntimeException e) {
      if (next != null) next.delete();
      throw e;
    }
    RoutingBridge old = routing;
    routing = next;
    if (old != null) old.delete();
  }

  /**
   * A copy of the logits of the last decoded token, one per vocabulary entry.
   *
   * @throws MoeException when nothing has been decoded yet
   */
  public float[] logits() {
    return get().Logits();
  }

  /**
   * Samples a token from the current logits with the sampling settings of {@code options}
   * (temperature, top-k/p, min-p, penalties, logit bias, seed; length, stop strings and
   * parseSpecial do not apply). The token is not appended: {@link #decode} it to continue.
   *
   * @param options null for the library's defaults
   */
  public int sample(GenerateOptions options) {
    NativeGenerateOptions o = (options != null ? options : new GenerateOptions()).toNative();
    try {
      return get().Sample(o);
    } finally {
      o.delete();
    }
  }

  /**
   * Releases the context; idempotent, and safe from any thread at any time. A generate call
   * running on another thread is cancelled (it throws {@link MoeException} with {@link
   * Status#CANCELLED}) and close waits for it to return; called from that call's own listener,
   * close returns at once and the context is released as the call returns. Using the context
   * afterwards throws {@link IllegalStateException}.
   */
  @Override
  public void close() {
    closed = true;
    nativeContext.Close();
  }

  private NativeContext get() {
    if (closed) throw new IllegalStateException("the context is closed");
    return nativeContext;
  }

  private interface Call {
    int run(NativeContext ctx, NativeGenerateOptions options, TokenSink sink);
  }

  private FinishReason run(GenerateOptions options, TokenListener listener, Call call) {
    NativeContext ctx = get();
    NativeGenerateOptions o = (options != null ? options : new GenerateOptions()).toNative();
    TokenBridge bridge = listener == null ? null : new TokenBridge(listener);
    try {
      int reason;
      try {
        reason = call.run(ctx, o, bridge);
      } catch (MoeException e) {
        if (bridge != null) bridge.rethrow();
        rethrowFromRouting();
        throw e;
      }
      if (bridge != null) bridge.rethrow();
      rethrowFromRouting();
      return FinishReason.fromCode(reason);
    } finally {
      o.delete();
      if (bridge != null) bridge.delete();
    }
  }

  private synchronized void rethrowFromRouting() {
    if (routing != null) routing.rethrow();
  }

  // Forwards each routing event as arrays; an exception from the listener is kept (the events
  // after it are not told) and rethrown once the native call has returned.
  private static final class RoutingBridge extends RoutingSink {
    private final RoutingListener listener;
    private final CallbackError error = new CallbackError();

    RoutingBridge(RoutingListener listener) {
      this.listener = listener;
    }

    @Override
    public void OnRouting(RoutingEvent event) {
      if (error.caught()) return;
      try {
        listener.onRouting(event.Position(), event.Layer(), event.Experts(), event.Weights());
      } catch (Throwable t) {
        error.capture(t);
      }
    }

    void rethrow() {
      error.rethrow();
    }
  }

  // Forwards tokens; an exception from the listener is kept, stops generation (false), and is
  // rethrown once the native call has returned: none may cross into C.
  private static final class TokenBridge extends TokenSink {
    private final TokenListener listener;
    private final CallbackError error = new CallbackError();

    TokenBridge(TokenListener listener) {
      this.listener = listener;
    }

    @Override
    public boolean OnToken(int token, byte[] piece) {
      if (error.caught()) return false;
      try {
        return listener.onToken(token, Utf8.decode(piece));
      } catch (Throwable t) {
        error.capture(t);
        return false;
      }
    }

    void rethrow() {
      error.rethrow();
    }
  }
}
