package org.libmoe;

/**
 * One conversation over a {@link Model}: its KV cache and sampler. A context is used by one thread
 * at a time (a second concurrent call fails with {@link Status#BUSY}); {@link #cancel()} is the
 * exception and may be called from any thread. Close it when done.
 */
public final class Context implements AutoCloseable {
  private final Model model;
  private final Object closeLock = new Object();
  private volatile NativeContext nativeContext;

  Context(Model model, ContextOptions options) {
    this.model = model;
    this.nativeContext =
        new NativeContext(model.get(), options.contextLength, options.threads, options.seed);
  }

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
    return run(options, listener, (ctx, o, sink) -> ctx.Generate(Utf8.encode(prompt), o, sink));
  }

  /** The same with prompt token ids (see {@link Model#tokenize}). */
  public FinishReason generate(int[] prompt, GenerateOptions options, TokenListener listener) {
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
   * the context. Does nothing when no call is running or the context is closed.
   */
  public void cancel() {
    synchronized (closeLock) {
      NativeContext c = nativeContext;
      if (c != null) c.Cancel();
    }
  }

  /** Forgets everything in the context. */
  public void reset() {
    get().Reset();
  }

  /** Keeps the first {@code keep} tokens and forgets the rest. */
  public void truncate(int keep) {
    get().Truncate(keep);
  }

  /** Tokens currently in the context. */
  public int size() {
    return get().NPast();
  }

  /** The context length in tokens. */
  public int capacity() {
    return get().NCtx();
  }

  /** Statistics of the last generate call. */
  public Stats stats() {
    NativeStats s = get().Stats();
    try {
      return new Stats(s.getPrompt_tokens(), s.getGenerated_tokens(), s.getPrompt_seconds(),
          s.getGenerate_seconds(), s.getPrompt_tokens_per_second(),
          s.getGenerate_tokens_per_second(), s.getActive_fraction(),
          FinishReason.fromCode(s.getFinish_reason()));
    } finally {
      s.delete();
    }
  }

  /**
   * Releases the context. Idempotent; must not overlap a generate call on another thread (cancel
   * it and let it return first). Using the context afterwards throws {@link MoeException}.
   */
  @Override
  public void close() {
    synchronized (closeLock) {
      NativeContext c = nativeContext;
      nativeContext = null;
      if (c != null) c.delete();
    }
  }

  private NativeContext get() {
    NativeContext c = nativeContext;
    if (c == null) throw new MoeException(Status.INVALID_ARGUMENT, "the context is closed");
    return c;
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
        throw e;
      }
      if (bridge != null) bridge.rethrow();
      return FinishReason.fromCode(reason);
    } finally {
      o.delete();
      if (bridge != null) bridge.delete();
    }
  }

  // Forwards tokens; an exception from the listener is kept, stops generation (false), and is
  // rethrown once the native call has returned: none may cross into C.
  private static final class TokenBridge extends TokenSink {
    private final TokenListener listener;
    private Throwable thrown;

    TokenBridge(TokenListener listener) {
      this.listener = listener;
    }

    @Override
    public boolean OnToken(int token, byte[] piece) {
      if (thrown != null) return false;
      try {
        return listener.onToken(token, Utf8.decode(piece));
      } catch (Throwable t) {
        thrown = t;
        return false;
      }
    }

    void rethrow() {
      if (thrown instanceof RuntimeException r) throw r;
      if (thrown instanceof Error e) throw e;
      if (thrown != null) throw new RuntimeException(thrown);
    }
  }
}
