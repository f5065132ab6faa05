using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using LibMoe;
using NUnit.Framework;

// The batching engine from C#: many threads at once, tasks, handlers, cancellation tokens.
[TestFixture]
public class EngineTests {
  static readonly string Fixtures = Environment.GetEnvironmentVariable("MOE_FIXTURES");
  static readonly string[] Prompts = {"Hello", "The quick brown fox", "Once upon a time",
      "1 2 3 4 5", "What is a mixture of experts?", "Bonjour", "A", "Attention is all you need"};
  Model model;

  [TestFixtureSetUp]
  public void Load() {
    model = Model.Load(Path.Combine(Fixtures, "tiny-qwen2moe-f32.gguf"));
  }

  [TestFixtureTearDown]
  public void Unload() {
    model.Dispose();
  }

  static GenerateOptions Greedy(int n) {
    return new GenerateOptions { Temperature = 0, MaxTokens = n };
  }

  string Lone(string prompt, int n) {
    using (Context ctx = model.CreateContext(
               new ContextOptions { KvType = KvType.F16, Threads = 2, ContextLength = 256 })) {
      return ctx.Complete(prompt, Greedy(n));
    }
  }

  [Test]
  public void ThreadsSubmittingAtOnceGetWhatALoneContextGenerates() {
    using (var engine = new Engine(model, new EngineOptions { Threads = 2, ContextLength = 256 })) {
      var texts = new string[Prompts.Length];
      var streamed = new StringBuilder[Prompts.Length];
      var threads = new List<Thread>();
      for (int i = 0; i < Prompts.Length; i++) {
        int k = i;
        streamed[k] = new StringBuilder();
        var t = new Thread(() => {
          RequestResult r = engine.SubmitAsync(Prompts[k], Greedy(6 + k), (token, piece) => {
            lock (streamed[k]) streamed[k].Append(piece);
            return true;
          }).Result;
          Assert.AreEqual(Status.Ok, r.Status);
          Assert.AreEqual(r.GeneratedTokens, r.Tokens.Length);
          texts[k] = r.Text;
        });
        t.Start();
        threads.Add(t);
      }
      foreach (Thread t in threads) t.Join();
      for (int i = 0; i < Prompts.Length; i++) {
        Assert.AreEqual(Lone(Prompts[i], 6 + i), texts[i], Prompts[i]);
        lock (streamed[i]) Assert.AreEqual(texts[i], streamed[i].ToString());
      }
      EngineStats st = engine.Stats;
      Assert.AreEqual(Prompts.Length, st.Finished);
      Assert.AreEqual(0, st.KvBlocksInUse);
      // The fixture model has no sliding-window or convolution layers; the cache's memory is its
      // blocks'.
      Assert.AreEqual(0, st.KvWindowBlocks);
      Assert.AreEqual(0, st.KvStateSlots);
      Assert.Greater(st.KvBytes, 0);
      Assert.AreEqual(0, st.KvBytes % st.KvBlocks);
      StringAssert.Contains("moe_engine_requests_finished_total " + Prompts.Length + "\n",
                            engine.MetricsText());
    }
  }

  [Test]
  public void ACancellationTokenAndAThrowingHandlerEndOnlyTheirRequest() {
    using (var engine = new Engine(model, new EngineOptions { Threads = 2, ContextLength = 256 }))
    using (var cts = new CancellationTokenSource()) {
      int seen = 0;
      Task<RequestResult> slow = engine.SubmitAsync(Prompts[0], Greedy(200), (token, piece) => {
        Interlocked.Increment(ref seen);
        return true;
      }, cts.Token);
      Task<RequestResult> throwing = engine.SubmitAsync(
          Prompts[1], Greedy(50), (token, piece) => { throw new InvalidOperationException("no"); });
      Task<RequestResult> fine = engine.SubmitAsync(Prompts[3], Greedy(8));
      while (Volatile.Read(ref seen) < 2) Thread.Sleep(1);
      cts.Cancel();
      Assert.AreEqual(FinishReason.Cancelled, slow.Result.FinishReason);
      Assert.AreEqual(Status.Cancelled, slow.Result.Status);
      var e = Assert.Throws<AggregateException>(() => throwing.Wait());
      Assert.IsInstanceOf<InvalidOperationException>(e.InnerException);
      Assert.AreEqual(Lone(Prompts[3], 8), fine.Result.Text);
    }
  }

  [Test]
  public void StreamYieldsThePiecesAndDisposingCancelsTheRest() {
    using (var engine = new Engine(model, new EngineOptions { Threads = 2, ContextLength = 256 })) {
      Assert.AreEqual(Lone(Prompts[2], 7), string.Concat(engine.Stream(Prompts[2], Greedy(7))));
      Task<RequestResult> left = engine.SubmitAsync(Prompts[4], Greedy(100000));
      engine.Dispose();
      FinishReason f = left.Result.FinishReason;
      Assert.IsTrue(f == FinishReason.Cancelled || f == FinishReason.ContextFull, f.ToString());
      Assert.Throws<ObjectDisposedException>(() => engine.SubmitAsync("x"));
    }
  }

  [Test]
  public void CallerDrivenStepsAndBadInput() {
    using (var engine = new Engine(model, new EngineOptions { OwnThread = false, KvTokens = 64 })) {
      Task<RequestResult> r = engine.SubmitAsync(Prompts[2], Greedy(5));
      Assert.IsFalse(r.IsCompleted);
      while (engine.Step()) {
      }
      Assert.AreEqual(Lone(Prompts[2], 5), r.Result.Text);
      Task<RequestResult> byTokens = engine.SubmitAsync(model.Tokenize(Prompts[2]), Greedy(5));
      while (engine.Step()) {
      }
      Assert.AreEqual(Lone(Prompts[2], 5), byTokens.Result.Text);
      var tooLong = Assert.Throws<MoeException>(
          () => engine.SubmitAsync(string.Concat(Enumerable.Repeat("x ", 200))));
      Assert.AreEqual(Status.ContextFull, tooLong.Status);
    }
    var bad = Assert.Throws<MoeException>(
        () => new Engine(model, new EngineOptions { KvBlockSize = 3 }));
    Assert.AreEqual(Status.InvalidArgument, bad.Status);
    var share = Assert.Throws<MoeException>(
        () => new Engine(model, new EngineOptions { ExpertConfidence = 2.0f }));
    Assert.AreEqual(Status.InvalidArgument, share.Status);
    // Capacity and load-aware re-weighting, counted over the engine's steps.
    using (var engine = new Engine(model, new EngineOptions { ExpertCapacityFactor = 1.0f,
                                                              LoadWindow = 8, LoadLimit = 1.0f })) {
      RequestResult done = engine.SubmitAsync(Prompts[4], Greedy(3)).Result;
      Assert.Greater(done.DecodeMultiplyAddsPerToken, 0);
      Assert.Greater(done.WeightBytes, 0);
      engine.DisableExperts(0, 0, 1, 2);
      Assert.AreEqual(3, engine.SubmitAsync(Prompts[1], Greedy(3)).Result.Tokens.Length);
      var noLayer = Assert.Throws<MoeException>(() => engine.DisableExperts(99, 0));
      Assert.AreEqual(Status.InvalidArgument, noLayer.Status);
      EngineStats st = engine.Stats;
      Assert.Greater(st.ReroutedChoices, 0);
      Assert.Greater(st.ReweightedChoices, 0);
    }
    var limit = Assert.Throws<MoeException>(
        () => new Engine(model, new EngineOptions { LoadWindow = 4, LoadLimit = 0f }));
    Assert.AreEqual(Status.InvalidArgument, limit.Status);
  }
}
