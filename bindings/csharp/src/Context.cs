using System;
using System.Text;

namespace LibMoe {
  /// <summary>One conversation over a <see cref="Model"/>: its KV cache and sampler. Used by one
  /// thread at a time (a concurrent call fails with <see cref="Status.Busy"/>), except
  /// <see cref="Cancel"/>, which any thread may call. Dispose it when done.</summary>
  public sealed class Context : IDisposable {
    // Never disposed by Dispose(): a call on another thread may be entering it. The native layer
    // keeps a running call's state until it returns; the wrapper goes with its finalizer.
    private readonly NativeContext native;
    private volatile bool disposed;
    // The routing handler's bridge, kept while the native context may call it.
    private RoutingBridge routing;

    internal Context(Model model, ContextOptions options) {
      Model = model;
      native = new NativeContext(model.Native, options.ContextLength, options.Threads, options.Seed,
                                 (int)options.KvType, options.ExpertConfidence, options.MinExperts,
                                 options.RouterTemperature, (int)options.RouterNoise,
                                 options.RouterNoiseScale, options.RouterNoiseSeed,
                                 options.ExpertCapacityFactor, options.LoadWindow,
                                 options.LoadLimit);
    }

    /// <summary>The model this context was created from.</summary>
    public Model Model { get; private set; }

    /// <summary>Appends <paramref name="prompt"/> (BOS first when the context is empty) and
    /// generates, streaming each piece of text to <paramref name="onToken"/> (may be null).
    /// </summary>
    /// <returns>Why generation stopped.</returns>
    /// <exception cref="MoeException">Status.Cancelled after <see cref="Cancel"/>,
    /// Status.ContextFull, ...; or whatever <paramref name="onToken"/> threw.</exception>
    public FinishReason Generate(string prompt, GenerateOptions options, TokenHandler onToken) {
      if (prompt == null) throw new ArgumentNullException("prompt");
      return Run(options, onToken, (ctx, o, sink) => ctx.Generate(prompt, o, sink));
    }

    /// <summary>The same with prompt token ids, used exactly as given: no BOS is added, on an
    /// empty context too (<see cref="LibMoe.Model.Tokenize"/> with addBos puts it first).
    /// </summary>
    public FinishReason Generate(int[] prompt, GenerateOptions options, TokenHandler onToken) {
      if (prompt == null) throw new ArgumentNullException("prompt");
      return Run(options, onToken,
                 (ctx, o, sink) => ctx.GenerateTokens(prompt, (uint)prompt.Length, o, sink));
    }

    /// <summary>Generates and returns the whole completion.</summary>
    public string Complete(string prompt, GenerateOptions options = null) {
      var text = new StringBuilder();
      Generate(prompt, options, (token, piece) => {
        text.Append(piece);
        return true;
      });
      return text.ToString();
    }

    /// <summary>Asks the Generate call running on this context (on another thread) to stop soon;
    /// it then throws <see cref="MoeException"/> with Status.Cancelled. Tokens processed so far
    /// stay in the context. Returns at once; does nothing when nothing runs or the context is
    /// disposed.</summary>
    public void Cancel() { native.Cancel(); }

    /// <summary>Forgets everything in the context.</summary>
    public void Reset() { Native.Reset(); }

    /// <summary>Keeps the first <paramref name="keep"/> tokens and forgets the rest.</summary>
    public void Truncate(int keep) { Native.Truncate(keep); }

    /// <summary>Tokens currently in the context (<c>moe_context_n_past</c>). A following Generate
    /// processes only its own prompt: what is already here is reused.</summary>
    public int Count { get { return Native.NPast(); } }

    /// <summary>The context length in tokens.</summary>
    public int Capacity { get { return Native.NCtx(); } }

    /// <summary>Statistics of the last Generate or <see cref="Decode"/> call.</summary>
    public Stats Stats {
      get {
        int inMemory = 0;
        foreach (ExpertCacheStats layer in GetExpertLayerStats()) inMemory += layer.ExpertsInMemory;
        using (NativeStats s = Native.Stats()) {
          return new Stats {
            PromptTokens = s.prompt_tokens, GeneratedTokens = s.generated_tokens,
            PromptSeconds = s.prompt_seconds, GenerateSeconds = s.generate_seconds,
            PromptTokensPerSecond = s.prompt_tokens_per_second,
            GenerateTokensPerSecond = s.generate_tokens_per_second,
            ActiveFraction = s.active_fraction, FinishReason = (FinishReason)s.finish_reason,
            AttentionSeconds = s.attention_seconds, RouterSeconds = s.router_seconds,
            ExpertsSeconds = s.experts_seconds, HeadSeconds = s.head_seconds,
            SamplingSeconds = s.sampling_seconds,
            ActiveParametersPerToken = s.active_params_per_token,
            MeanRouterEntropy = s.mean_router_entropy, WeightBytesRead = s.weight_bytes_read,
            ExpertCache = new ExpertCacheStats {
              Hits = s.expert_cache_hits, Misses = s.expert_cache_misses,
              BytesRead = s.expert_bytes_read, ReadSeconds = s.expert_read_seconds,
              WaitSeconds = s.expert_wait_seconds, Prefetches = s.expert_prefetches,
              PrefetchHits = s.expert_prefetch_hits,
              PrefetchWastedBytes = s.expert_prefetch_wasted_bytes,
              Predicted = s.expert_predicted, PredictedRight = s.expert_predicted_right,
              ExpertsInMemory = inMemory,
            },
            ReroutedChoices = s.rerouted_choices, DroppedChoices = s.dropped_choices,
            ReweightedChoices = s.reweighted_choices,
            WeightBytesPerToken = s.weight_bytes_per_token,
            MultiplyAddsPerToken = s.multiply_adds_per_token,
          };
        }
      }
    }

    /// <summary>Switches experts of one MoE layer off for later calls: the router takes the best
    /// of the others. The experts replace the layer's set; none switches them all back on.
    /// Invalid layers, ids out of range or a set leaving the layer no expert throw
    /// InvalidArgument.</summary>
    public void DisableExperts(int layer, params int[] experts) {
      if (experts == null)
        throw new ArgumentNullException("experts");
      Native.DisableExperts(layer, experts, (uint)experts.Length);
    }

    /// <summary>The last Generate or <see cref="Decode"/> call's statistics in the Prometheus
    /// text exposition format (tokens and speed, stage times, router entropy, expert utilisation
    /// and fairness per layer, active parameters, expert-cache hits), for a service's own metrics
    /// endpoint.</summary>
    public string MetricsText() {
      return Native.MetricsText();
    }

    /// <summary>Writes the expert counts of the last Generate or <see cref="Decode"/> call as a
    /// routing profile (JSON), to warm a later load's expert cache.</summary>
    public void WriteRoutingProfile(string path) {
      if (path == null) throw new ArgumentNullException("path");
      Native.WriteRoutingProfile(path);
    }

    /// <summary>What the expert cache did during the last Generate or <see cref="Decode"/> call,
    /// per layer.</summary>
    public ExpertCacheStats[] GetExpertLayerStats() {
      long[] flat = Native.ExpertLayerStats();
      int fields = moe.kExpertLayerStatFields;
      var layers = new ExpertCacheStats[flat.Length / fields];
      for (int l = 0; l < layers.Length; l++) {
        int b = l * fields;
        layers[l] = new ExpertCacheStats {
          Hits = flat[b + moe.kLayerHits], Misses = flat[b + moe.kLayerMisses],
          BytesRead = flat[b + moe.kLayerBytesRead],
          ReadSeconds = flat[b + moe.kLayerReadNanos] / 1e9,
          WaitSeconds = flat[b + moe.kLayerWaitNanos] / 1e9,
          Prefetches = flat[b + moe.kLayerPrefetches],
          PrefetchHits = flat[b + moe.kLayerPrefetchHits],
          PrefetchWastedBytes = flat[b + moe.kLayerPrefetchWastedBytes],
          Predicted = flat[b + moe.kLayerPredicted],
          PredictedRight = flat[b + moe.kLayerPredictedRight],
          ExpertsInMemory = (int)flat[b + moe.kLayerExpertsInMemory],
        };
      }
      return layers;
    }

    /// <summary>How many tokens chose each expert during the last Generate or
    /// <see cref="Decode"/> call, as <c>counts[layer, expert]</c>. Each processed token picks
    /// <see cref="ModelInfo.ExpertsUsed"/> experts in every layer.</summary>
    public long[,] GetExpertCounts() {
      NativeContext c = Native;
      long[] flat = c.ExpertCounts();
      int experts = c.NExpert();
      int layers = experts == 0 ? 0 : flat.Length / experts;
      var counts = new long[layers, experts];
      for (int layer = 0; layer < layers; layer++)
        for (int expert = 0; expert < experts; expert++)
          counts[layer, expert] = flat[layer * experts + expert];
      return counts;
    }

    /// <summary>Appends <paramref name="tokens"/> and computes the logits of the last one: the
    /// low-level path, for callers that pick tokens themselves with <see cref="GetLogits"/> or
    /// <see cref="Sample"/>. Unlike Generate, nothing is added for you (no BOS).</summary>
    /// <exception cref="MoeException">Status.OutOfRange for an id outside the vocabulary,
    /// Status.ContextFull when the tokens do not fit, Status.Cancelled after Cancel; or whatever
    /// the routing handler threw.</exception>
    public void Decode(params int[] tokens) {
      if (tokens == null) throw new ArgumentNullException("tokens");
      try {
        Native.Decode(tokens, (uint)tokens.Length);
      } finally {
        RethrowFromRouting();
      }
    }

    /// <summary>Sets (null: removes) the routing trace: <paramref name="onRouting"/> is told,
    /// during later Generate and <see cref="Decode"/> calls and on their thread, each processed
    /// token's experts and weights in every MoE layer (moe_context_set_routing_callback). A step
    /// tells layer 0 for all its tokens, then layer 1, ...; dense layers tell nothing. If it
    /// throws, the call goes on without telling it more, and rethrows the exception as it
    /// returns.</summary>
    /// <exception cref="MoeException">Status.Busy while a call runs on the context.</exception>
    public void SetRoutingHandler(RoutingHandler onRouting) {
      lock (native) {
        RoutingBridge next = onRouting == null ? null : new RoutingBridge(onRouting);
        try {
          Native.SetRoutingSink(next);
        } catch (Exception) {
          if (next != null) next.Dispose();
          throw;
        }
        RoutingBridge old = routing;
        routing = next;
        if (old != null) old.Dispose();
      }
    }

    /// <summary>A copy of the logits of the last decoded token, one per vocabulary entry.
    /// </summary>
    /// <exception cref="MoeException">When nothing has been decoded yet.</exception>
    public float[] GetLogits() { return Native.Logits(); }

    /// <summary>Samples a token from the current logits with the sampling settings of
    /// <paramref name="options"/> (temperature, top-k/p, min-p, penalties, logit bias, seed;
    /// length, stops and ParseSpecial do not apply); null: the library's defaults. The token is
    /// not appended: <see cref="Decode"/> it to continue.</summary>
    public int Sample(GenerateOptions options = null) {
      NativeContext c = Native;
      using (NativeGenerateOptions o = (options ?? new GenerateOptions()).ToNative()) {
        return c.Sample(o);
      }
    }

    /// <summary>Releases the context; idempotent, and safe from any thread at any time. A
    /// Generate running on another thread is cancelled (it throws <see cref="MoeException"/> with
    /// Status.Cancelled) and Dispose waits for it to return; called from that call's own handler,
    /// Dispose returns at once and the context is released as the call returns. Using the context
    /// afterwards throws <see cref="ObjectDisposedException"/>.</summary>
    public void Dispose() {
      disposed = true;
      native.Close();
    }

    private NativeContext Native {
      get {
        if (disposed) throw new ObjectDisposedException("Context", "the context is disposed");
        return native;
      }
    }

    private FinishReason Run(GenerateOptions options, TokenHandler onToken,
                             Func<NativeContext, NativeGenerateOptions, TokenSink, int> call) {
      NativeContext ctx = Native;
      TokenBridge bridge = onToken == null ? null : new TokenBridge(onToken);
      try {
        using (NativeGenerateOptions o = (options ?? new GenerateOptions()).ToNative()) {
          int reason;
          try {
            reason = call(ctx, o, bridge);
          } catch (MoeException) {
            if (bridge != null) bridge.Rethrow();
            RethrowFromRouting();
            throw;
          }
          if (bridge != null) bridge.Rethrow();
          RethrowFromRouting();
          return (FinishReason)reason;
        }
      } finally {
        if (bridge != null) bridge.Dispose();
      }
    }

    private void RethrowFromRouting() {
      RoutingBridge r;
      lock (native) r = routing;
      if (r != null) r.Rethrow();
    }

    // Forwards each routing event as arrays; an exception from the handler is kept (the events
    // after it are not told) and rethrown once the native call has returned.
    private sealed class RoutingBridge : RoutingSink {
      private readonly RoutingHandler handler;
      private readonly CallbackError error = new CallbackError();

      public RoutingBridge(RoutingHandler handler) {
        this.handler = handler;
      }

      public override void OnRouting(RoutingEvent e) {
        if (error.Caught) return;
        try {
          handler(e.Position(), e.Layer(), e.Experts(), e.Weights());
        } catch (Exception ex) {
          error.Capture(ex);
        }
      }

      public void Rethrow() { error.Rethrow(); }
    }

    // Forwards tokens; an exception from the handler is kept, stops generation (false), and is
    // rethrown once the native call has returned: none may cross into C.
    private sealed class TokenBridge : TokenSink {
      private readonly TokenHandler handler;
      private readonly CallbackError error = new CallbackError();

      public TokenBridge(TokenHandler handler) {
        this.handler = handler;
      }

      public override bool OnToken(int token, string piece) {
        if (error.Caught) return false;
        try {
          return handler(token, piece);
        } catch (Exception e) {
          error.Capture(e);
          return false;
        }
      }

      public void Rethrow() { error.Rethrow(); }
    }
  }
}
