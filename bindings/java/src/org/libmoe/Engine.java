package org.libmoe;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Flow;

/**
 * Serves many requests at once over one {@link Model}: each step runs the new tokens of every
 * running request in one batched pass, so an expert that several requests chose is read once for
 * all of them, and prompts that start with the same text (a system prompt) share its KV cache.
 *
 * <p>Any thread may call {@link #submit} at any time. Listeners and the futures' completions run
 * on the engine's own thread (or inside {@link #step()}): keep them short, and do not block there
 * on another request's future. Close the engine when done: what is still running completes as
 * {@link FinishReason#CANCELLED}.
 */
public final class Engine implements AutoCloseable {
  private final Model model;
  private final NativeEngine nativeEngine;
  // The sinks of running requests: the native side calls them until their last event.
  private final ConcurrentHashMap<RequestBridge, Boolean> running = new ConcurrentHashMap<>();
  private volatile boolean closed;

  /** An engine over {@code model} (options may be null: the defaults). */
  public Engine(Model model, EngineOptions options) {
    this.model = java.util.Objects.requireNonNull(model, "model is null");
    NativeEngineOptions o = (options != null ? options : new EngineOptions()).toNative();
    try {
      this.nativeEngine = new NativeEngine(model.get(), o);
    } finally {
      o.delete();
    }
  }

  /** The model this engine serves. */
  public Model model() {
    return model;
  }

  /**
   * Queues a request: {@code prompt} (BOS first as the vocabulary wants), generated with {@code
   * options} (may be null), each piece of text streamed to {@code listener} (may be null; return
   * false from it to end this request).
   *
   * @throws MoeException for bad options or a prompt that can never fit ({@link
   *     Status#CONTEXT_FULL})
   */
  public Request submit(String prompt, GenerateOptions options, TokenListener listener) {
    byte[] text = Utf8.encode(prompt, "prompt");
    return submit((e, o, sink) -> e.Submit(text, o, sink), options, listener);
  }

  /**
   * The same with the prompt as token ids, used exactly as given (no BOS is added: {@link
   * Model#tokenize(String)} puts it first).
   */
  public Request submit(int[] prompt, GenerateOptions options, TokenListener listener) {
    java.util.Objects.requireNonNull(prompt, "prompt is null");
    return submit((e, o, sink) -> e.SubmitTokens(prompt, o, sink), options, listener);
  }

  private interface Submission {
    long run(NativeEngine engine, NativeGenerateOptions options, RequestSink sink);
  }

  private Request submit(Submission submission, GenerateOptions options, TokenListener listener) {
    NativeEngine e = get();
    CompletableFuture<RequestResult> future = new CompletableFuture<>();
    Request request = new Request(this, future);
    RequestBridge bridge = new RequestBridge(listener, future);
    NativeGenerateOptions o = (options != null ? options : new GenerateOptions()).toNative();
    running.put(bridge, Boolean.TRUE);
    try {
      request.setId(submission.run(e, o, bridge));
    } catch (RuntimeException ex) {
      running.remove(bridge);
      bridge.delete();
      throw ex;
    } finally {
      o.delete();
    }
    future.whenComplete((r, t) -> {
      if (future.isCancelled()) request.cancel();
    });
    return request;
  }

  /**
   * A request's text pieces as a {@link Flow.Publisher}, the JDK's reactive-streams interface
   * (Reactor's {@code JdkFlowAdapter} and reactive-streams' {@code FlowAdapters} take it). The
   * request is submitted when a subscriber subscribes (one subscriber: another gets an {@link
   * IllegalStateException} through {@code onError}). Pieces arrive as the subscriber asks for them; the engine never waits for it (the
   * other requests step on), so pieces not asked for yet are queued. {@code onComplete} ends a
   * request that finished generating (its token limit, a stop string, the end of generation, a
   * full context); {@code onError} carries what kept it from finishing: submission errors (a
   * {@link MoeException} for bad options or a prompt that can never fit, an {@link
   * IllegalStateException} for a closed engine), a {@link MoeException} when its step failed, a
   * {@link java.util.concurrent.CancellationException} when it was cancelled elsewhere or the
   * engine closed. Cancelling the subscription cancels the request. {@code onNext} runs on the
   * engine's thread or on the thread that calls {@code request(n)}, one call at a time: keep it
   * short, as a listener.
   */
  public Flow.Publisher<String> publish(String prompt, GenerateOptions options) {
    return new PiecePublisher(listener -> submit(prompt, options, listener));
  }

  /** The same with the prompt as token ids, used exactly as given. */
  public Flow.Publisher<String> publish(int[] prompt, GenerateOptions options) {
    return new PiecePublisher(listener -> submit(prompt, options, listener));
  }

  /** Generates and waits for the whole completion (a convenience over {@link #submit}). */
  public String complete(String prompt, GenerateOptions options) {
    return submit(prompt, options, null).result().join().text();
  }

  /** Ends a request soon; nothing happens for one that has finished or a closed engine. */
  public void cancel(long request) {
    if (!closed) nativeEngine.Cancel(request);
  }

  /**
   * Runs one step on the calling thread, for engines made with {@link EngineOptions#ownThread}
   * false; listeners run inside it.
   *
   * @return false when there was nothing to do
   */
  public boolean step() {
    return get().Step();
  }

  /**
   * What the engine has done so far in the Prometheus text exposition format (request and token
   * counters, running and waiting requests, KV blocks by state, step averages), for a service's
   * own metrics endpoint.
   */
  public String metricsText() {
    return Utf8.decode(get().MetricsText());
  }

  /**
   * Switches experts of one MoE layer off for every request from the engine's next step on: the
   * router takes the best of the others. The experts replace the layer's set; none switches them
   * all back on. Invalid layers, ids out of range or a set leaving the layer no expert throw
   * INVALID_ARGUMENT.
   */
  public void disableExperts(int layer, int... experts) {
    java.util.Objects.requireNonNull(experts, "experts is null");
    get().DisableExperts(layer, experts);
  }

  /** What the engine has done so far. */
  public EngineStats stats() {
    NativeEngineStats s = get().Stats();
    try {
      return new EngineStats(s.getSubmitted(), s.getFinished(), s.getRunning(), s.getWaiting(),
          s.getSteps(), s.getTokens(), s.getDecode_tokens(), s.getPrefix_tokens_reused(),
          s.getPreemptions(), s.getKv_blocks(), s.getKv_blocks_in_use(), s.getKv_blocks_cached(),
          s.getKv_block_size(), s.getStep_seconds(), s.getMean_sequences_per_step(),
          s.getMean_tokens_per_step(), s.getMean_experts_per_step(), s.getRerouted_choices(),
          s.getDropped_choices(), s.getReweighted_choices(), s.getKv_window_blocks(),
          s.getKv_window_blocks_in_use(), s.getKv_window_blocks_cached(), s.getKv_bytes(),
          s.getKv_state_slots(), s.getKv_state_slots_in_use(), s.getKv_state_slots_cached());
    } finally {
      s.delete();
    }
  }

  /**
   * Finishes what is still running as cancelled (its futures complete), stops the engine's thread
   * and releases it; idempotent, from any thread (from a listener it completes right after that
   * listener returns).
   */
  @Override
  public void close() {
    closed = true;
    nativeEngine.Close();
  }

  private NativeEngine get() {
    if (closed) throw new IllegalStateException("the engine is closed");
    return nativeEngine;
  }

  // Forwards one request's events; what the listener throws ends the request and completes the
  // future exceptionally (nothing may cross into C).
  private final class RequestBridge extends RequestSink {
    private final TokenListener listener;
    private final CompletableFuture<RequestResult> future;
    private final CallbackError error = new CallbackError();

    RequestBridge(TokenListener listener, CompletableFuture<RequestResult> future) {
      this.listener = listener;
      this.future = future;
    }

    @Override
    public boolean OnToken(long request, int token, byte[] piece) {
      if (error.caught() || listener == null) return !error.caught();
      try {
        return listener.onToken(token, Utf8.decode(piece));
      } catch (Throwable t) {
        error.capture(t);
        return false;
      }
    }

    @Override
    public void OnFinish(long request, NativeRequestResult result) {
      running.remove(this);
      try {
        RequestResult r = RequestResult.of(result);
        if (error.caught()) {
          try {
            error.rethrow();
          } catch (Throwable t) {
            future.completeExceptionally(t);
          }
        } else {
          future.complete(r);
        }
      } catch (Throwable t) {
        future.completeExceptionally(t);
      }
    }
  }
}
