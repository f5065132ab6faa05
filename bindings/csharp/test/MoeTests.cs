using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Threading;
using LibMoe;
using NUnit.Framework;

// The C# binding against the tiny-qwen2moe fixture (random weights, real tokenizer).
[TestFixture]
public class MoeTests {
  static readonly string Fixtures = Environment.GetEnvironmentVariable("MOE_FIXTURES");
  static string ModelPath { get { return Path.Combine(Fixtures, "tiny-qwen2moe-f32.gguf"); } }
  Model model;
  int[] prompt;
  int[] expected;

  static int[] ReadIds(string name) {
    return File.ReadAllLines(Path.Combine(Fixtures, name))
        .Select(l => l.Trim()).Where(l => l.Length > 0).Select(int.Parse).ToArray();
  }

  static GenerateOptions Greedy(int n) {
    return new GenerateOptions { Temperature = 0, MaxTokens = n };
  }

  static int[] GenerateIds(Context ctx, int[] ids, int n) {
    var got = new List<int>();
    FinishReason reason = ctx.Generate(ids, Greedy(n), (token, piece) => {
      if (token >= 0) got.Add(token);
      return true;
    });
    Assert.AreEqual(FinishReason.MaxTokens, reason);
    return got.ToArray();
  }

  [TestFixtureSetUp]
  public void Load() {
    model = Model.Load(ModelPath);
    prompt = ReadIds("p1.tokens.txt");
    expected = ReadIds("p1.gen_tokens.txt");
  }

  [TestFixtureTearDown]
  public void Unload() {
    model.Dispose();
  }

  [Test]
  public void StreamsTheReferenceGreedyTokens() {
    using (Context ctx = model.CreateContext()) {
      Assert.AreEqual(expected, GenerateIds(ctx, prompt, expected.Length));
      Assert.AreEqual(expected.Length, ctx.Stats.GeneratedTokens);
      Assert.AreEqual(FinishReason.MaxTokens, ctx.Stats.FinishReason);
    }
  }

  [Test]
  public void TextRoundTripsThroughTheTokenizer() {
    Assert.AreEqual("qwen2moe", model.Info.Architecture);
    int[] ids = model.Tokenize("Hello, wörld 👋", addBos: false);
    Assert.AreEqual("Hello, wörld 👋", model.Detokenize(ids));
    using (Context ctx = model.CreateContext()) {
      Assert.IsNotEmpty(ctx.Complete("Once upon a time", Greedy(4)));
    }
  }

  [Test]
  public void StopsWhenTheHandlerReturnsFalse() {
    using (Context ctx = model.CreateContext()) {
      int calls = 0;
      FinishReason reason = ctx.Generate(prompt, Greedy(16), (token, piece) => ++calls < 3);
      Assert.AreEqual(FinishReason.Callback, reason);
      Assert.AreEqual(3, calls);
    }
  }

  [Test]
  public void MissingFileIsNotFound() {
    var e = Assert.Throws<MoeException>(() => Model.Load("/no/such/model.moe"));
    Assert.AreEqual(Status.NotFound, e.Status);
    StringAssert.Contains("/no/such/model.moe", e.Message);
  }

  [Test]
  public void OutOfRangeTokenIsAnError() {
    var e = Assert.Throws<MoeException>(() => model.Detokenize(new[] { 1 << 30 }));
    Assert.That(e.Status == Status.OutOfRange || e.Status == Status.InvalidArgument);
    using (Context ctx = model.CreateContext()) {
      var g = Assert.Throws<MoeException>(() => ctx.Generate(new[] { -5 }, Greedy(2), null));
      Assert.IsNotEmpty(g.Message);
    }
  }

  [Test]
  public void DisposedHandlesThrow() {
    Context ctx = model.CreateContext();
    ctx.Dispose();
    ctx.Dispose();  // idempotent
    var e = Assert.Throws<ObjectDisposedException>(() => ctx.Generate(prompt, Greedy(2), null));
    StringAssert.Contains("disposed", e.Message);
    ctx.Cancel();  // harmless

    Model m = Model.Load(ModelPath);
    Context open = m.CreateContext();
    m.Dispose();  // the open context keeps the native model alive
    Assert.Throws<ObjectDisposedException>(() => m.Tokenize("x"));
    Assert.AreEqual(2, GenerateIds(open, prompt, 2).Length);
    open.Dispose();
  }

  // Generation slowed by the handler, so that it still runs when another thread acts.
  Thread SlowGeneration(Context ctx, ManualResetEvent started, Exception[] outcome) {
    var t = new Thread(() => {
      try {
        ctx.Generate(prompt, Greedy(200), (token, piece) => {
          started.Set();
          Thread.Sleep(10);
          return true;
        });
        outcome[0] = new Exception("generation was not cancelled");
      } catch (Exception ex) {
        outcome[0] = ex;
      }
    });
    t.Start();
    return t;
  }

  [Test]
  public void DisposeDuringGenerateCancelsItAndWaits() {
    for (int round = 0; round < 3; round++) {
      Context ctx = model.CreateContext();
      var started = new ManualResetEvent(false);
      var outcome = new Exception[1];
      Thread t = SlowGeneration(ctx, started, outcome);
      Assert.IsTrue(started.WaitOne(30000));
      var clock = System.Diagnostics.Stopwatch.StartNew();
      ctx.Dispose();  // from another thread, mid-generation
      Assert.Less(clock.ElapsedMilliseconds, 1000, "Dispose waited for the whole generation");
      Assert.IsTrue(t.Join(30000));
      Assert.IsInstanceOf<MoeException>(outcome[0]);
      Assert.AreEqual(Status.Cancelled, ((MoeException)outcome[0]).Status);
      Assert.Throws<ObjectDisposedException>(() => { int n = ctx.Count; });
    }
  }

  [Test]
  public void MappedWeightsAndAnF16CacheAreReachable() {
    using (Model mapped = Model.Load(ModelPath, new ModelOptions { UseMmap = true }))
    using (Context ctx = mapped.CreateContext()) {
      Assert.AreEqual(expected, GenerateIds(ctx, prompt, expected.Length));
    }
    using (Context f16 = model.CreateContext(new ContextOptions { KvType = KvType.F16 })) {
      Assert.AreEqual(4, GenerateIds(f16, prompt, 4).Length);
    }
    // Dynamic top-k: a share of 1 is the model's top-k; a lower one still generates; values out
    // of range are refused.
    using (Context all = model.CreateContext(new ContextOptions {
      ExpertConfidence = 1.0f
    })) using (Context fewer = model.CreateContext(new ContextOptions { ExpertConfidence = 0.5f,
                                                                        MinExperts = 1 })) {
      Assert.AreEqual(expected, GenerateIds(all, prompt, expected.Length));
      Assert.AreEqual(4, GenerateIds(fewer, prompt, 4).Length);
      // Router noise is reproducible from its seed; a temperature of 0 is refused.
      var noisy = new ContextOptions { RouterTemperature = 1.5f, RouterNoise = RouterNoise.Gumbel,
                                       RouterNoiseScale = 1.0f, RouterNoiseSeed = 3 };
      using (Context a = model.CreateContext(noisy)) using (Context b =
                                                                model.CreateContext(noisy)) {
        Assert.AreEqual(GenerateIds(a, prompt, 6), GenerateIds(b, prompt, 6));
      }
      var cold = Assert.Throws<MoeException>(
          () => model.CreateContext(new ContextOptions { RouterTemperature = 0f }));
      Assert.AreEqual(Status.InvalidArgument, cold.Status);
      // Switched-off experts are never chosen.
      fewer.Reset();
      fewer.DisableExperts(0, 0, 1, 2);
      Assert.AreEqual(4, GenerateIds(fewer, prompt, 4).Length);
      long[,] counts = fewer.GetExpertCounts();
      Assert.AreEqual(0, counts[0, 0] + counts[0, 1] + counts[0, 2]);
      var none = Assert.Throws<MoeException>(
          () => fewer.DisableExperts(0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
      Assert.AreEqual(Status.InvalidArgument, none.Status);
      fewer.DisableExperts(0);
      // The last call's statistics as Prometheus text, per layer too.
      string metrics = fewer.MetricsText();
      StringAssert.Contains("# TYPE moe_experts_per_token gauge", metrics);
      StringAssert.Contains("moe_expert_jain_fairness{layer=\"1\"}", metrics);
    }
    // A capacity re-routes some of a prompt's choices, load-aware re-weighting scales weights;
    // both are counted.
    using (Context capped = model.CreateContext(new ContextOptions { ExpertCapacityFactor = 1.0f }))
    using (Context balanced =
               model.CreateContext(new ContextOptions { LoadWindow = 8, LoadLimit = 1.0f })) {
      GenerateIds(capped, prompt, 2);
      Assert.Greater(capped.Stats.ReroutedChoices, 0);
      Assert.Greater(capped.Stats.MultiplyAddsPerToken, 0);
      Assert.Greater(capped.Stats.WeightBytesPerToken, 0);
      GenerateIds(balanced, prompt, 2);
      Assert.Greater(balanced.Stats.ReweightedChoices, 0);
      Assert.AreEqual(0, balanced.Stats.ReroutedChoices);
    }
    foreach (var bad in new[] { new ContextOptions { ExpertConfidence = 2.0f },
                                new ContextOptions { ExpertConfidence = 0.5f, MinExperts = 0 },
                                new ContextOptions { ExpertCapacityFactor = -1.0f },
                                new ContextOptions { LoadWindow = 8, LoadLimit = 0.5f } }) {
      var refused = Assert.Throws<MoeException>(() => model.CreateContext(bad));
      Assert.AreEqual(Status.InvalidArgument, refused.Status);
    }
    // Half the experts cached from disk: the same tokens.
    var half = new ModelOptions { ExpertCacheFraction = 0.5, ExpertEviction = ExpertEviction.Lfru };
    using (Model cached = Model.Load(ModelPath, half))
    using (Context ctx = cached.CreateContext()) {
      Assert.AreEqual(expected, GenerateIds(ctx, prompt, expected.Length));
    }
    var e = Assert.Throws<MoeException>(
        () => Model.Load(ModelPath, new ModelOptions { ExpertCacheBytes = 10 }));
    Assert.AreEqual(Status.InvalidArgument, e.Status);
  }

  [Test]
  public void ExpertPlacementPinningAndStatistics() {
    string placement = Path.GetTempFileName();
    File.WriteAllText(placement, "{\"layers\": {\"0\": {\"resident\": [1]}, \"1\": {\"pinned\": [0]}}}");
    try {
      var options = new ModelOptions { ExpertCacheFraction = 0.5, ExpertPlacementFile = placement };
      using (Model m = Model.Load(ModelPath, options))
      using (Context ctx = m.CreateContext()) {
        ExpertPlacement resident = m.GetExpertPlacement(0, 1);
        Assert.AreEqual(ExpertTier.Resident, resident.Tier);
        Assert.IsTrue(resident.InMemory);
        Assert.Greater(resident.Bytes, 0);
        Assert.AreEqual("F32/F32/F32", resident.WeightTypes);
        Assert.AreEqual(ExpertTier.Cached, m.GetExpertPlacement(1, 3).Tier);
        m.PinExpert(1, 3);
        Assert.AreEqual(ExpertTier.Pinned, m.GetExpertPlacement(1, 3).Tier);
        Assert.AreEqual(Status.InvalidArgument,
                        Assert.Throws<MoeException>(() => m.UnpinExpert(0, 1)).Status);
        Assert.AreEqual(Status.OutOfRange,
                        Assert.Throws<MoeException>(() => m.GetExpertPlacement(99, 0)).Status);
        Assert.AreEqual(expected, GenerateIds(ctx, prompt, expected.Length));
        Stats st = ctx.Stats;
        ExpertCacheStats[] layers = ctx.GetExpertLayerStats();
        Assert.AreEqual(m.Info.Layers, layers.Length);
        Assert.AreEqual(st.ExpertCache.Hits, layers.Sum(l => l.Hits));
        Assert.AreEqual(st.ExpertCache.Misses, layers.Sum(l => l.Misses));
        Assert.Greater(st.ExpertCache.Hits + st.ExpertCache.Misses, 0);
        Assert.GreaterOrEqual(st.ExpertCache.ExpertsInMemory, 2);
        Assert.Greater(st.ExpertCache.HitRate, 0);
        // The call's routing as a profile warms a load.
        string profile = Path.GetTempFileName();
        try {
          ctx.WriteRoutingProfile(profile);
          StringAssert.Contains("libmoe-routing-profile", File.ReadAllText(profile));
          var warmOptions = new ModelOptions { ExpertCacheFraction = 0.5, ExpertWarmupProfile = profile };
          using (Model warm = Model.Load(ModelPath, warmOptions)) {
            Assert.GreaterOrEqual(warm.Warmup(profile), 0);
            Assert.AreEqual(Status.InvalidArgument,
                            Assert.Throws<MoeException>(() => warm.Warmup(placement)).Status);
          }
        } finally {
          File.Delete(profile);
        }
      }
    } finally {
      File.Delete(placement);
    }
    var e = Assert.Throws<MoeException>(() => Model.Load(
        ModelPath, new ModelOptions { MemoryLimitBytes = 1, MemoryFit = MemoryFit.Error }));
    Assert.AreEqual(Status.OutOfMemory, e.Status);
  }

  // Without a GPU (CI): CUDA asked for is Unsupported with the reason; Auto runs on the CPU and
  // says so. With one, the GPU tests run it.
  [Test]
  public void DeviceChoiceWithoutAGpu() {
    Assert.AreEqual("cpu", model.Device);
    using (Model auto = Model.Load(ModelPath, new ModelOptions { Device = Device.Auto })) {
      if (!auto.Device.StartsWith("cpu")) return;  // a GPU is here
      StringAssert.StartsWith("cpu (", auto.Device);
      var e = Assert.Throws<MoeException>(
          () => Model.Load(ModelPath, new ModelOptions { Device = Device.Cuda }));
      Assert.AreEqual(Status.Unsupported, e.Status);
      StringAssert.Contains("a CUDA device was asked for", e.Message);
    }
    Assert.Throws<MoeException>(() => Model.Load(
        ModelPath, new ModelOptions { Device = Device.Auto, GpuMemoryBytes = -1 }));
  }

  [Test]
  public void DisposeFromTheHandlerStopsTheCall() {
    Context ctx = model.CreateContext();
    var e = Assert.Throws<MoeException>(() => ctx.Generate(prompt, Greedy(16), (token, piece) => {
      ctx.Dispose();
      return true;
    }));
    Assert.AreEqual(Status.Cancelled, e.Status);
    Assert.Throws<ObjectDisposedException>(() => { int n = ctx.Count; });
  }

  [Test]
  public void HandlerExceptionSurfacesInTheCaller() {
    using (Context ctx = model.CreateContext()) {
      var boom = new InvalidOperationException("boom");
      var e = Assert.Throws<InvalidOperationException>(
          () => ctx.Generate(prompt, Greedy(16), (token, piece) => { throw boom; }));
      Assert.AreSame(boom, e);
      ctx.Reset();  // still usable
      Assert.AreEqual(expected, GenerateIds(ctx, prompt, expected.Length));
    }
  }

  // The routing trace tells every processed token once per layer, its experts distinct and in
  // range, and in sum the call's expert counts; removed, it tells nothing; a handler's exception
  // comes back from the call, which still completes.
  [Test]
  public void RoutingHandlerTracesEveryToken() {
    ModelInfo info = model.Info;
    using (Context ctx = model.CreateContext()) {
      var seen = new long[info.Layers, info.Experts];
      var told = new HashSet<long>();
      ctx.SetRoutingHandler((position, layer, experts, weights) => {
        Assert.IsTrue(told.Add((long)position * info.Layers + layer), "told twice");
        Assert.AreEqual(info.ExpertsUsed, experts.Length);
        Assert.AreEqual(experts.Length, weights.Length);
        Assert.AreEqual(experts.Length, experts.Distinct().Count());
        for (int i = 0; i < experts.Length; i++) {
          Assert.IsTrue(experts[i] >= 0 && experts[i] < info.Experts);
          Assert.IsTrue(weights[i] > 0 && weights[i] <= 1);
          seen[layer, experts[i]]++;
        }
      });
      GenerateIds(ctx, prompt, expected.Length);
      Assert.AreEqual((prompt.Length + expected.Length) * info.Layers, told.Count);
      Assert.AreEqual(ctx.GetExpertCounts(), seen);
      ctx.SetRoutingHandler(null);
      ctx.Reset();
      GenerateIds(ctx, prompt, 2);
      Assert.AreEqual((prompt.Length + expected.Length) * info.Layers, told.Count);
      var boom = new InvalidOperationException("boom");
      ctx.SetRoutingHandler((position, layer, experts, weights) => { throw boom; });
      ctx.Reset();
      Assert.AreSame(boom, Assert.Throws<InvalidOperationException>(
          () => ctx.Decode(prompt.Take(3).ToArray())));
      Assert.AreEqual(3, ctx.Count);
      Assert.AreSame(boom, Assert.Throws<InvalidOperationException>(
          () => GenerateIds(ctx, new[] { prompt[3] }, 1)));
    }
  }

  [Test]
  public void ProgressIsReportedAndCanCancel() {
    var seen = new List<float>();
    using (Model m = Model.Load(ModelPath, p => { seen.Add(p); return true; })) {
      Assert.IsNotEmpty(seen);
    }
    var e = Assert.Throws<MoeException>(() => Model.Load(ModelPath, p => false));
    Assert.AreEqual(Status.Cancelled, e.Status);
    Assert.Throws<ArithmeticException>(
        () => Model.Load(ModelPath, p => { throw new ArithmeticException("stop"); }));
  }

  [Test]
  public void TwoThreadsShareOneModel() {
    var results = new int[2][];
    Exception failure = null;
    var threads = Enumerable.Range(0, 2).Select(i => new Thread(() => {
      try {
        using (Context ctx = model.CreateContext(new ContextOptions { Threads = 1 })) {
          results[i] = GenerateIds(ctx, prompt, expected.Length);
        }
      } catch (Exception ex) {
        failure = ex;
      }
    })).ToList();
    threads.ForEach(t => t.Start());
    threads.ForEach(t => t.Join());
    Assert.IsNull(failure, failure == null ? "" : failure.ToString());
    Assert.AreEqual(expected, results[0]);
    Assert.AreEqual(expected, results[1]);
  }

  [Test]
  public void CancelFromAnotherThread() {
    using (Context ctx = model.CreateContext()) {
      var started = new ManualResetEventSlim();
      var cancelled = new ManualResetEventSlim();
      var canceller = new Thread(() => {
        started.Wait();
        ctx.Cancel();
        cancelled.Set();
      });
      canceller.Start();
      var e = Assert.Throws<MoeException>(() => ctx.Generate(prompt, Greedy(200), (token, piece) => {
        started.Set();
        cancelled.Wait(TimeSpan.FromSeconds(10));  // hold the first token until Cancel()
        return true;
      }));
      canceller.Join();
      Assert.AreEqual(Status.Cancelled, e.Status);
      Assert.Greater(ctx.Count, 0);  // the context stays usable
    }
  }

  static readonly ChatMessage[] Chat = { ChatMessage.System("Be brief."), ChatMessage.User("Hi!") };

  [Test]
  public void ChatTemplates() {
    var none = Assert.Throws<MoeException>(() => model.ApplyChatTemplate(Chat));
    Assert.AreEqual(Status.NotFound, none.Status);
    StringAssert.Contains("chat template", none.Message);
    Assert.AreEqual("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n" +
                    "<|im_start|>assistant\n",
                    model.ApplyChatTemplate(Chat, true, "chatml"));
    StringAssert.DoesNotEndWith("assistant\n", model.ApplyChatTemplate(Chat, false, "chatml"));
    var unknown = Assert.Throws<MoeException>(() => model.ApplyChatTemplate(Chat, true, "jinja-soup"));
    StringAssert.Contains("jinja-soup", unknown.Message);
    var role = Assert.Throws<MoeException>(
        () => model.ApplyChatTemplate(new[] { new ChatMessage("wizard", "x") }, true, "chatml"));
    Assert.AreEqual(Status.InvalidArgument, role.Status);
  }

  [Test]
  public void LowLevelGreedyLoopReproducesTheReference() {
    int[] p2 = ReadIds("p2.tokens.txt");
    int[] want = ReadIds("p2.gen_tokens.txt");
    var greedy = new GenerateOptions { Temperature = 0 };
    using (Context ctx = model.CreateContext()) {
      ctx.Decode(p2);
      // p2's greedy margins stay above the reference's tolerance for 6 steps.
      for (int i = 0; i < 6; i++) {
        float[] logits = ctx.GetLogits();
        Assert.AreEqual(model.Info.VocabularySize, logits.Length);
        int argmax = 0;
        for (int t = 1; t < logits.Length; t++) if (logits[t] > logits[argmax]) argmax = t;
        int token = ctx.Sample(greedy);
        Assert.AreEqual(want[i], token, "step " + i);
        Assert.AreEqual(argmax, token);
        ctx.Decode(token);
      }
      Assert.AreEqual(p2.Length + 6, ctx.Count);
      Assert.AreEqual(Status.OutOfRange, Assert.Throws<MoeException>(() => ctx.Decode(40000)).Status);
      greedy.LogitBias[1 << 20] = 1f;
      Assert.AreEqual(Status.OutOfRange, Assert.Throws<MoeException>(() => ctx.Sample(greedy)).Status);
    }
  }

  [Test]
  public void LogitBiasForcesAToken() {
    using (Context ctx = model.CreateContext()) {
      Assert.Throws<MoeException>(() => ctx.GetLogits());  // nothing decoded yet
      ctx.Decode(model.Info.BosToken);
      var forced = new GenerateOptions();
      forced.LogitBias[1234] = 1000f;
      Assert.AreEqual(1234, ctx.Sample(forced));
      forced.FrequencyPenalty = 0.5f;
      forced.PresencePenalty = 0.5f;
      forced.PenaltyLastN = -1;
      Assert.AreEqual(1234, ctx.Sample(forced));
      int any = ctx.Sample();  // the library's defaults
      Assert.That(any >= 0 && any < model.Info.VocabularySize);
      // The bias also steers Generate.
      var greedy = Greedy(3);
      greedy.LogitBias[1234] = 1000f;
      var got = new List<int>();
      ctx.Generate(new[] { 1 }, greedy, (token, piece) => {
        if (token >= 0) got.Add(token);
        return true;
      });
      Assert.AreEqual(new[] { 1234, 1234, 1234 }, got.ToArray());
    }
  }

  [Test]
  public void FullStatsAndExpertCounts() {
    ModelInfo info = model.Info;
    using (Context ctx = model.CreateContext()) {
      GenerateIds(ctx, prompt, expected.Length);
      Stats s = ctx.Stats;
      Assert.AreEqual(prompt.Length, s.PromptTokens);
      Assert.AreEqual(FinishReason.MaxTokens, s.FinishReason);
      Assert.That(s.ActiveFraction > 0 && s.ActiveFraction < 1);
      Assert.Greater(s.ActiveParametersPerToken, 0);
      Assert.Greater(s.MeanRouterEntropy, 0);
      Assert.Greater(s.WeightBytesRead, 0);
      Assert.Greater(s.ExpertsSeconds, 0);
      Assert.Greater(s.AttentionSeconds, 0);
      Assert.That(s.RouterSeconds >= 0 && s.HeadSeconds >= 0 && s.SamplingSeconds >= 0);
      long[,] counts = ctx.GetExpertCounts();
      Assert.AreEqual(info.Layers, counts.GetLength(0));
      Assert.AreEqual(info.Experts, counts.GetLength(1));
      long total = counts.Cast<long>().Sum();
      // Prompt and generated tokens (the last one is fed back too) pick top-k experts per layer.
      Assert.AreEqual((long)(prompt.Length + expected.Length) * info.ExpertsUsed * info.Layers, total);
    }
  }

  [Test]
  public void ContextManagementAndMultiTurn() {
    using (Context ctx = model.CreateContext(new ContextOptions { ContextLength = 128 })) {
      Assert.AreEqual(128, ctx.Capacity);
      Assert.AreEqual(0, ctx.Count);
      GenerateIds(ctx, prompt, 4);
      int afterFirst = ctx.Count;
      Assert.AreEqual(prompt.Length + 4, afterFirst);
      // The second turn processes only its own tokens: the first turn's stay cached.
      int[] turn = model.Tokenize(" and then", addBos: false);
      GenerateIds(ctx, turn, 3);
      Assert.AreEqual(turn.Length, ctx.Stats.PromptTokens);
      Assert.AreEqual(afterFirst + turn.Length + 3, ctx.Count);
      ctx.Truncate(prompt.Length);
      Assert.AreEqual(prompt.Length, ctx.Count);
      ctx.Reset();
      Assert.AreEqual(0, ctx.Count);
      Assert.AreEqual(expected, GenerateIds(ctx, prompt, expected.Length));
    }
  }

  [Test]
  public void StreamingDetokenizerMatchesDetokenize() {
    int[] ids = model.Tokenize("Hello, wörld 👋 and ünïcode", addBos: false);
    var text = new System.Text.StringBuilder();
    using (Detokenizer d = model.CreateDetokenizer()) {
      foreach (int id in ids) text.Append(d.Push(id));
      Assert.Throws<MoeException>(() => d.Push(1 << 30));
    }
    Assert.AreEqual(model.Detokenize(ids), text.ToString());
    Detokenizer disposed = model.CreateDetokenizer();
    disposed.Dispose();
    Assert.Throws<ObjectDisposedException>(() => disposed.Push(ids[0]));
  }

  [Test]
  public void TokenizeFlags() {
    int bos = model.Info.BosToken;
    int[] plain = model.Tokenize("Hello", addBos: false);
    int[] withBos = model.Tokenize("Hello", addBos: true);
    Assert.AreEqual(bos, withBos[0]);
    Assert.AreEqual(plain, withBos.Skip(1).ToArray());
    // A control token's text is that token only when parseSpecial asks for it.
    string bosText = model.Detokenize(new[] { bos });
    Assert.AreEqual(new[] { bos }, model.Tokenize(bosText, false, parseSpecial: true));
    Assert.Greater(model.Tokenize(bosText, false, parseSpecial: false).Length, 1);
  }

  [Test]
  public void LogHandlerCanBeReplacedWhileOtherThreadsLoad() {
    var lines = new List<string>();
    Exception failure = null;
    try {
      MoeLog.SetHandler((level, msg) => { lock (lines) lines.Add(level + ":" + msg); });
      Model.Load(ModelPath).Dispose();
      lock (lines) Assert.That(lines.Any(l => l.StartsWith("Info:") && l.Contains("qwen2moe")),
                               string.Join("\n", lines));
      // A handler cannot change the handler (that would deadlock the library's log lock).
      Exception inside = null;
      MoeLog.SetHandler((level, msg) => {
        try {
          MoeLog.RemoveHandler();
        } catch (Exception e) {
          if (inside == null) inside = e;
        }
        throw new InvalidOperationException("dropped, not a crash");
      }, LogLevel.Debug);
      Model.Load(ModelPath).Dispose();
      Assert.IsInstanceOf<MoeException>(inside);

      var loaders = Enumerable.Range(0, 3).Select(i => new Thread(() => {
        try {
          for (int k = 0; k < 4; k++) Model.Load(ModelPath).Dispose();
        } catch (Exception e) {
          failure = e;
        }
      })).ToList();
      loaders.ForEach(t => t.Start());
      int seen = 0;
      for (int k = 0; k < 200; k++) {
        if (k % 3 == 0) MoeLog.RemoveHandler();
        else MoeLog.SetHandler((level, msg) => Interlocked.Increment(ref seen));
        GC.Collect();  // a collected delegate would crash the next log call
      }
      loaders.ForEach(t => t.Join());
      Assert.IsNull(failure, failure == null ? "" : failure.ToString());
    } finally {
      MoeLog.RemoveHandler();
    }
    int before;
    lock (lines) before = lines.Count;
    Model.Load(ModelPath).Dispose();  // silent again
    lock (lines) Assert.AreEqual(before, lines.Count);
  }
}
