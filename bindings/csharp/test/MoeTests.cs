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
    var e = Assert.Throws<MoeException>(() => ctx.Generate(prompt, Greedy(2), null));
    Assert.AreEqual(Status.InvalidArgument, e.Status);
    ctx.Cancel();  // harmless

    Model m = Model.Load(ModelPath);
    Context open = m.CreateContext();
    m.Dispose();  // the open context keeps the native model alive
    Assert.Throws<MoeException>(() => m.Tokenize("x"));
    Assert.AreEqual(2, GenerateIds(open, prompt, 2).Length);
    open.Dispose();
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
}
