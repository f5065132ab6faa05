using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace LibMoe {
  /// <summary>What an <see cref="Engine"/> does when its KV cache cannot grow.</summary>
  public enum KvFullPolicy {
    /// <summary>Free the youngest running request's blocks; it is computed again later, its
    /// output unchanged.</summary>
    Preempt = 0,
    /// <summary>The request that needs room finishes with FinishReason.ContextFull.</summary>
    Finish = 1,
  }

  /// <summary>How to create an <see cref="Engine"/>; the defaults suit most services.</summary>
  public sealed class EngineOptions {
    public EngineOptions() {
      using (var d = new NativeEngineOptions()) {
        Threads = d.threads;
        KvBlockSize = d.kv_block_size;
        ContextLength = d.n_ctx;
        KvTokens = d.kv_tokens;
        KvBytes = d.kv_bytes;
        MaxSequences = d.max_sequences;
        MaxStepTokens = d.max_step_tokens;
        PrefixSharing = d.prefix_sharing;
        OwnThread = d.own_thread;
        Seed = d.seed;
        ExpertConfidence = d.expert_confidence;
        MinExperts = d.min_experts;
        RouterTemperature = d.router_temperature;
        RouterNoiseScale = d.router_noise_scale;
        RouterNoiseSeed = d.router_noise_seed;
        ExpertCapacityFactor = d.expert_capacity_factor;
        LoadWindow = d.load_window;
        LoadLimit = d.load_limit;
      }
      KvType = KvType.F16;
      WhenKvFull = KvFullPolicy.Preempt;
    }

    /// <summary>Compute threads; 0: one per core.</summary>
    public int Threads { get; set; }
    /// <summary>Element type of the KV cache (default F16).</summary>
    public KvType KvType { get; set; }
    /// <summary>Positions per KV block, a power of two (default 32).</summary>
    public int KvBlockSize { get; set; }
    /// <summary>The most tokens one request holds; 0: the model's, at most 4096.</summary>
    public int ContextLength { get; set; }
    /// <summary>The KV cache's size in tokens; 0: 16384, or the context length if larger.</summary>
    public long KvTokens { get; set; }
    /// <summary>The KV cache's size in bytes instead (0: by tokens).</summary>
    public long KvBytes { get; set; }
    /// <summary>Requests running at once (default 16).</summary>
    public int MaxSequences { get; set; }
    /// <summary>Tokens one step computes, decode tokens first (default 256).</summary>
    public int MaxStepTokens { get; set; }
    /// <summary>Whether prompts reuse the KV blocks of a prefix computed before (default true).</summary>
    public bool PrefixSharing { get; set; }
    /// <summary>What happens when the KV cache cannot grow (default Preempt).</summary>
    public KvFullPolicy WhenKvFull { get; set; }
    /// <summary>True (default): the engine steps on its own thread; false: only in
    /// <see cref="Engine.Step"/>.</summary>
    public bool OwnThread { get; set; }
    /// <summary>Added to every request's sampling seed (default 0).</summary>
    public long Seed { get; set; }
    /// <summary>Every request's dynamic top-k: a token keeps its best routed experts until they
    /// hold this share of its top-k router scores, in [0, 1]; 0 (default): the model's
    /// top-k.</summary>
    public float ExpertConfidence { get; set; }
    /// <summary>With <see cref="ExpertConfidence"/>: at least this many experts (default
    /// 1).</summary>
    public int MinExperts { get; set; }
    /// <summary>Every request's router temperature (default 1), as a context's.</summary>
    public float RouterTemperature { get; set; }
    /// <summary>Every request's router noise (default none), as a context's.</summary>
    public RouterNoise RouterNoise { get; set; }
    /// <summary>The noise's standard deviation (Gaussian) or scale (Gumbel).</summary>
    public float RouterNoiseScale { get; set; }
    /// <summary>The noise's seed.</summary>
    public long RouterNoiseSeed { get; set; }
    /// <summary>Capacity with re-routing, as a context's, over all the requests of each step
    /// (default 0: no cap).</summary>
    public float ExpertCapacityFactor { get; set; }
    /// <summary>Load-aware re-weighting over each request's own tokens, as a context's (default
    /// 0: off); it turns prefix sharing off, as cached blocks do not keep the routing.</summary>
    public int LoadWindow { get; set; }
    /// <summary>With <see cref="LoadWindow"/>: the limit in multiples of the fair share (default
    /// 2).</summary>
    public float LoadLimit { get; set; }

    internal NativeEngineOptions ToNative() {
      var n = new NativeEngineOptions();
      n.threads = Threads;
      n.kv_type = (int)KvType;
      n.kv_block_size = KvBlockSize;
      n.n_ctx = ContextLength;
      n.kv_tokens = KvTokens;
      n.kv_bytes = KvBytes;
      n.max_sequences = MaxSequences;
      n.max_step_tokens = MaxStepTokens;
      n.prefix_sharing = PrefixSharing;
      n.when_kv_full = (int)WhenKvFull;
      n.own_thread = OwnThread;
      n.seed = Seed;
      n.expert_confidence = ExpertConfidence;
      n.min_experts = MinExperts;
      n.router_temperature = RouterTemperature;
      n.router_noise = (int)RouterNoise;
      n.router_noise_scale = RouterNoiseScale;
      n.router_noise_seed = RouterNoiseSeed;
      n.expert_capacity_factor = ExpertCapacityFactor;
      n.load_window = LoadWindow;
      n.load_limit = LoadLimit;
      return n;
    }
  }

  /// <summary>What an engine request produced, and how it went.</summary>
  public sealed class RequestResult {
    public string Text { get; internal set; }
    public int[] Tokens { get; internal set; }
    public FinishReason FinishReason { get; internal set; }
    /// <summary>Ok, Cancelled, or why its step failed.</summary>
    public Status Status { get; internal set; }
    public string Message { get; internal set; }
    public int PromptTokens { get; internal set; }
    /// <summary>Prompt positions taken from KV blocks an earlier request computed.</summary>
    public int PrefixTokensReused { get; internal set; }
    public int GeneratedTokens { get; internal set; }
    public int Preemptions { get; internal set; }
    public double QueueSeconds { get; internal set; }
    public double FirstTokenSeconds { get; internal set; }
    public double TotalSeconds { get; internal set; }
    public double DecodeTokensPerSecond { get; internal set; }
    /// <summary>Weight bytes its tokens' computation touched (dense matrices, the routed experts
    /// each chose, the head where logits were computed), over every token computed.</summary>
    public long WeightBytes { get; internal set; }
    /// <summary>Multiply-adds of its tokens' matrix products and attention.</summary>
    public long MultiplyAdds { get; internal set; }
    public double DecodeWeightBytesPerToken { get; internal set; }
    public double DecodeMultiplyAddsPerToken { get; internal set; }

    internal static RequestResult Of(NativeRequestResult r) {
      return new RequestResult {
        Text = r.Text(), Tokens = r.Tokens(), FinishReason = (FinishReason)r.finish_reason,
        Status = (Status)r.status, Message = r.Message(), PromptTokens = r.prompt_tokens,
        PrefixTokensReused = r.prefix_tokens_reused, GeneratedTokens = r.generated_tokens,
        Preemptions = r.preemptions, QueueSeconds = r.queue_seconds,
        FirstTokenSeconds = r.first_token_seconds, TotalSeconds = r.total_seconds,
        DecodeTokensPerSecond = r.decode_tokens_per_second, WeightBytes = r.weight_bytes,
        MultiplyAdds = r.multiply_adds, DecodeWeightBytesPerToken = r.decode_weight_bytes_per_token,
        DecodeMultiplyAddsPerToken = r.decode_multiply_adds_per_token,
      };
    }
  }

  /// <summary>What an <see cref="Engine"/> has done.</summary>
  public sealed class EngineStats {
    public long Submitted, Finished, Running, Waiting, Steps, Tokens, DecodeTokens;
    public long PrefixTokensReused, Preemptions;
    public int KvBlocks, KvBlocksInUse, KvBlocksCached, KvBlockSize;
    public double StepSeconds, MeanSequencesPerStep, MeanTokensPerStep, MeanExpertsPerStep;
    /// <summary>The routing policies at work over every step: choices a capacity re-routed or
    /// dropped, weights load-aware re-weighting scaled down.</summary>
    public long ReroutedChoices, DroppedChoices, ReweightedChoices;
    /// <summary>The sliding-window layers' own blocks (0 when no layer slides), which hold only
    /// each request's window (KvBlocks counts the other layers'): in all, held by running
    /// requests, and kept with cached prefixes.</summary>
    public int KvWindowBlocks, KvWindowBlocksInUse, KvWindowBlocksCached;
    /// <summary>The paged KV cache's memory in bytes.</summary>
    public long KvBytes;
    /// <summary>The convolution layers' slots (0 when no layer convolves), each their last
    /// inputs and recurrent state: in all, held by running requests, and kept at the ends of
    /// cached prefixes.</summary>
    public int KvStateSlots, KvStateSlotsInUse, KvStateSlotsCached;
  }

  /// <summary>Serves many requests at once over one <see cref="Model"/>: each step runs the new
  /// tokens of every running request in one batched pass, so an expert that several requests
  /// chose is read once for all, and prompts that start alike share their KV cache. Any thread
  /// may submit at any time. Handlers and the tasks' continuations run on the engine's thread
  /// (or inside <see cref="Step"/>) unless the task is awaited elsewhere: keep handlers short.
  /// Dispose it when done: what is still running completes as cancelled.</summary>
  public sealed class Engine : IDisposable {
    private readonly NativeEngine native;
    // The sinks of running requests: the native side calls them until their last event.
    private readonly ConcurrentDictionary<RequestBridge, bool> running =
        new ConcurrentDictionary<RequestBridge, bool>();
    private volatile bool disposed;

    public Engine(Model model, EngineOptions options = null) {
      if (model == null) throw new ArgumentNullException("model");
      Model = model;
      using (NativeEngineOptions o = (options ?? new EngineOptions()).ToNative()) {
        native = new NativeEngine(model.Native, o);
      }
    }

    public Model Model { get; private set; }

    /// <summary>Queues a request and returns the task of its result; <paramref name="onToken"/>
    /// (may be null) gets each piece of text (return false to end this request). Cancelling
    /// <paramref name="cancellation"/> cancels the request (its result says
    /// FinishReason.Cancelled). A handler that throws ends its request and faults its task.
    /// </summary>
    /// <exception cref="MoeException">Bad options, or a prompt that can never fit
    /// (Status.ContextFull).</exception>
    public Task<RequestResult> SubmitAsync(string prompt, GenerateOptions options = null,
                                           TokenHandler onToken = null,
                                           CancellationToken cancellation = default(CancellationToken)) {
      long id;
      return Submit(prompt, options, onToken, cancellation, out id);
    }

    /// <summary>The same with the prompt as token ids, used exactly as given (no BOS is added:
    /// <see cref="LibMoe.Model.Tokenize"/> with addBos puts it first).</summary>
    public Task<RequestResult> SubmitAsync(int[] prompt, GenerateOptions options = null,
                                           TokenHandler onToken = null,
                                           CancellationToken cancellation = default(CancellationToken)) {
      if (prompt == null) throw new ArgumentNullException("prompt");
      long id;
      return Submit((e, o, sink) => e.SubmitTokens(prompt, (uint)prompt.Length, o, sink), options,
                    onToken, cancellation, out id);
    }

    private Task<RequestResult> Submit(string prompt, GenerateOptions options, TokenHandler onToken,
                                       CancellationToken cancellation, out long id) {
      if (prompt == null) throw new ArgumentNullException("prompt");
      return Submit((e, o, sink) => e.Submit(prompt, o, sink), options, onToken, cancellation,
                    out id);
    }

    private Task<RequestResult> Submit(Func<NativeEngine, NativeGenerateOptions, RequestSink, long> call,
                                       GenerateOptions options, TokenHandler onToken,
                                       CancellationToken cancellation, out long id) {
      NativeEngine e = Native;
      var completion = new TaskCompletionSource<RequestResult>(
          TaskCreationOptions.RunContinuationsAsynchronously);
      var bridge = new RequestBridge(this, onToken, completion);
      running[bridge] = true;
      try {
        using (NativeGenerateOptions o = (options ?? new GenerateOptions()).ToNative()) {
          id = call(e, o, bridge);
        }
      } catch {
        bool ignored;
        running.TryRemove(bridge, out ignored);
        throw;
      }
      if (cancellation.CanBeCanceled) {
        long request = id;
        CancellationTokenRegistration reg = cancellation.Register(() => Cancel(request));
        completion.Task.ContinueWith(_ => reg.Dispose(), TaskScheduler.Default);
      }
      return completion.Task;
    }

    /// <summary>The pieces of text of a new request as they come (a blocking enumeration: it
    /// waits for each piece). Breaking off the enumeration, or cancelling
    /// <paramref name="cancellation"/>, cancels the request.</summary>
    public IEnumerable<string> Stream(string prompt, GenerateOptions options = null,
                                      CancellationToken cancellation = default(CancellationToken)) {
      var pieces = new BlockingCollection<string>();
      long id;
      Task<RequestResult> task = Submit(prompt, options, (token, piece) => {
        if (piece.Length > 0) pieces.Add(piece);
        return true;
      }, cancellation, out id);
      task.ContinueWith(_ => pieces.CompleteAdding(), TaskScheduler.Default);
      return Drain(pieces, task, id);
    }

    private IEnumerable<string> Drain(BlockingCollection<string> pieces, Task<RequestResult> task,
                                      long id) {
      bool done = false;
      try {
        foreach (string piece in pieces.GetConsumingEnumerable()) yield return piece;
        done = true;
        if (task.IsFaulted) task.Wait();  // rethrows what the request failed with
      } finally {
        if (!done) Cancel(id);  // the caller stopped reading: the request ends too
      }
    }

    /// <summary>Generates and waits for the whole completion.</summary>
    public string Complete(string prompt, GenerateOptions options = null) {
      return SubmitAsync(prompt, options).Result.Text;
    }

    /// <summary>Ends a request soon; nothing happens for a finished one or a disposed engine.
    /// </summary>
    public void Cancel(long request) {
      if (!disposed) native.Cancel(request);
    }

    /// <summary>One step on the calling thread, for engines made with OwnThread false; returns
    /// false when there was nothing to do.</summary>
    public bool Step() { return Native.Step(); }

    /// <summary>Switches experts of one MoE layer off for every request from the engine's next
    /// step on: the router takes the best of the others. The experts replace the layer's set;
    /// none switches them all back on. Invalid layers, ids out of range or a set leaving the layer
    /// no expert throw InvalidArgument.</summary>
    public void DisableExperts(int layer, params int[] experts) {
      if (experts == null)
        throw new ArgumentNullException("experts");
      Native.DisableExperts(layer, experts, (uint)experts.Length);
    }

    /// <summary>What the engine has done so far in the Prometheus text exposition format (request
    /// and token counters, running and waiting requests, KV blocks by state, step averages), for
    /// a service's own metrics endpoint.</summary>
    public string MetricsText() {
      return Native.MetricsText();
    }

    public EngineStats Stats {
      get {
        using (NativeEngineStats s = Native.Stats()) {
          return new EngineStats {
            Submitted = s.submitted, Finished = s.finished, Running = s.running,
            Waiting = s.waiting, Steps = s.steps, Tokens = s.tokens,
            DecodeTokens = s.decode_tokens, PrefixTokensReused = s.prefix_tokens_reused,
            Preemptions = s.preemptions, KvBlocks = s.kv_blocks, KvBlocksInUse = s.kv_blocks_in_use,
            KvBlocksCached = s.kv_blocks_cached, KvBlockSize = s.kv_block_size,
            StepSeconds = s.step_seconds, MeanSequencesPerStep = s.mean_sequences_per_step,
            MeanTokensPerStep = s.mean_tokens_per_step, MeanExpertsPerStep = s.mean_experts_per_step,
            ReroutedChoices = s.rerouted_choices, DroppedChoices = s.dropped_choices,
            ReweightedChoices = s.reweighted_choices, KvWindowBlocks = s.kv_window_blocks,
            KvWindowBlocksInUse = s.kv_window_blocks_in_use,
            KvWindowBlocksCached = s.kv_window_blocks_cached, KvBytes = s.kv_bytes,
            KvStateSlots = s.kv_state_slots, KvStateSlotsInUse = s.kv_state_slots_in_use,
            KvStateSlotsCached = s.kv_state_slots_cached,
          };
        }
      }
    }

    /// <summary>Completes what is still running as cancelled, stops the engine's thread and
    /// releases it; idempotent, from any thread (from a handler, right after it returns).</summary>
    public void Dispose() {
      disposed = true;
      native.Close();
    }

    private NativeEngine Native {
      get {
        if (disposed) throw new ObjectDisposedException("Engine", "the engine is disposed");
        return native;
      }
    }

    // One request's events; what the handler throws ends the request and faults the task
    // (nothing may cross into C).
    private sealed class RequestBridge : RequestSink {
      private readonly Engine engine;
      private readonly TokenHandler handler;
      private readonly TaskCompletionSource<RequestResult> completion;
      private Exception thrown;

      public RequestBridge(Engine engine, TokenHandler handler,
                           TaskCompletionSource<RequestResult> completion) {
        this.engine = engine;
        this.handler = handler;
        this.completion = completion;
      }

      public override bool OnToken(long request, int token, string piece) {
        if (thrown != null) return false;
        if (handler == null) return true;
        try {
          return handler(token, piece);
        } catch (Exception e) {
          thrown = e;
          return false;
        }
      }

      public override void OnFinish(long request, NativeRequestResult result) {
        bool ignored;
        engine.running.TryRemove(this, out ignored);
        try {
          if (thrown != null) {
            completion.TrySetException(thrown);
          } else {
            completion.TrySetResult(RequestResult.Of(result));
          }
        } catch (Exception e) {
          completion.TrySetException(e);
        }
      }
    }
  }
}
