package org.libmoe;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Flow;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The batching engine from Java: many threads at once, futures, listeners, cancellation. */
class EngineTest {
  private static final Path FIXTURES = Paths.get(System.getProperty("moe.fixtures"));
  private static final String[] PROMPTS = {"Hello", "The quick brown fox", "Once upon a time",
      "1 2 3 4 5", "What is a mixture of experts?", "Bonjour", "A", "Attention is all you need"};
  private static Model model;

  @BeforeAll
  static void load() {
    model = Model.load(FIXTURES.resolve("tiny-qwen2moe-f32.gguf").toString());
  }

  @AfterAll
  static void close() {
    model.close();
  }

  private static GenerateOptions greedy(int n) {
    return new GenerateOptions().temperature(0).maxTokens(n);
  }

  private static String lone(String prompt, int n) {
    try (Context ctx = model.newContext(
        new ContextOptions().kvType(KvType.F16).threads(2).contextLength(256))) {
      return ctx.complete(prompt, greedy(n));
    }
  }

  @Test
  void threadsSubmittingAtOnceGetWhatALoneContextGenerates() throws Exception {
    try (Engine engine = new Engine(model, new EngineOptions().threads(2).contextLength(256))) {
      ExecutorService pool = Executors.newFixedThreadPool(8);
      List<Future<String>> texts = new ArrayList<>();
      List<StringBuilder> streamed = new ArrayList<>();
      for (int i = 0; i < PROMPTS.length; i++) {
        final int n = 6 + i;
        final String prompt = PROMPTS[i];
        final StringBuilder pieces = new StringBuilder();
        streamed.add(pieces);
        texts.add(pool.submit(() -> {
          Request r = engine.submit(prompt, greedy(n), (token, piece) -> {
            synchronized (pieces) {
              pieces.append(piece);
            }
            return true;
          });
          RequestResult result = r.result().get(60, TimeUnit.SECONDS);
          assertEquals(Status.OK, result.status());
          assertEquals(result.generatedTokens(), result.tokens().length);
          return result.text();
        }));
      }
      for (int i = 0; i < PROMPTS.length; i++) {
        String text = texts.get(i).get();
        assertEquals(lone(PROMPTS[i], 6 + i), text, PROMPTS[i]);
        synchronized (streamed.get(i)) {
          assertEquals(text, streamed.get(i).toString());
        }
      }
      pool.shutdown();
      EngineStats stats = engine.stats();
      assertEquals(PROMPTS.length, stats.finished());
      assertEquals(0, stats.kvBlocksInUse());
      // The fixture model has no sliding-window or convolution layers; the cache's memory is its
      // blocks'.
      assertEquals(0, stats.kvWindowBlocks());
      assertEquals(0, stats.kvStateSlots());
      assertTrue(stats.kvBytes() > 0 && stats.kvBytes() % stats.kvBlocks() == 0, stats.toString());
      String metrics = engine.metricsText();
      assertTrue(
          metrics.contains("moe_engine_requests_finished_total " + PROMPTS.length + "\n"), metrics);
    }
  }

  @Test
  void cancellingAndAThrowingListenerEndOnlyTheirRequest() throws Exception {
    try (Engine engine = new Engine(model, new EngineOptions().threads(2).contextLength(256))) {
      AtomicInteger seen = new AtomicInteger();
      Request slow = engine.submit(PROMPTS[0], greedy(200), (token, piece) -> {
        seen.incrementAndGet();
        return true;
      });
      Request throwing = engine.submit(PROMPTS[1], greedy(50), (token, piece) -> {
        throw new IllegalStateException("listener failed");
      });
      Request fine = engine.submit(PROMPTS[3], greedy(8), null);
      while (seen.get() < 2) Thread.sleep(1);
      slow.cancel();
      RequestResult cancelled = slow.result().get(60, TimeUnit.SECONDS);
      assertEquals(FinishReason.CANCELLED, cancelled.finishReason());
      assertEquals(Status.CANCELLED, cancelled.status());
      CompletionException thrown =
          assertThrows(CompletionException.class, () -> throwing.result().join());
      assertInstanceOf(IllegalStateException.class, thrown.getCause());
      assertEquals(lone(PROMPTS[3], 8), fine.result().get(60, TimeUnit.SECONDS).text());
    }
  }

  @Test
  void closingCompletesWhatIsLeftAsCancelled() throws Exception {
    Engine engine = new Engine(model, new EngineOptions().threads(2).contextLength(256));
    Request r = engine.submit(PROMPTS[4], greedy(100000), null);
    engine.close();
    RequestResult result = r.result().get(60, TimeUnit.SECONDS);
    assertTrue(result.finishReason() == FinishReason.CANCELLED
        || result.finishReason() == FinishReason.CONTEXT_FULL);
    assertThrows(IllegalStateException.class, () -> engine.submit("x", null, null));
    engine.close();  // idempotent
  }

  @Test
  void callerDrivenStepsAndBadInput() throws Exception {
    try (Engine engine = new Engine(model, new EngineOptions().ownThread(false).kvTokens(64))) {
      Request r = engine.submit(PROMPTS[2], greedy(5), null);
      assertFalse(r.result().isDone());
      while (engine.step()) {}
      assertEquals(lone(PROMPTS[2], 5), r.result().get().text());
      Request byTokens = engine.submit(model.tokenize(PROMPTS[2]), greedy(5), null);
      while (engine.step()) {}
      assertEquals(lone(PROMPTS[2], 5), byTokens.result().get().text());
      MoeException tooLong =
          assertThrows(MoeException.class, () -> engine.submit("x ".repeat(200), null, null));
      assertEquals(Status.CONTEXT_FULL, tooLong.status());
      assertThrows(MoeException.class, () -> engine.submit("x", greedy(-1), null));
    }
    MoeException bad = assertThrows(
        MoeException.class, () -> new Engine(model, new EngineOptions().kvBlockSize(3)));
    assertEquals(Status.INVALID_ARGUMENT, bad.status());
    MoeException share = assertThrows(
        MoeException.class, () -> new Engine(model, new EngineOptions().expertConfidence(2.0f)));
    assertEquals(Status.INVALID_ARGUMENT, share.status());
    // Capacity and load-aware re-weighting, counted over the engine's steps.
    try (Engine engine = new Engine(
             model, new EngineOptions().expertCapacityFactor(1.0f).loadBalance(8, 1.0f))) {
      RequestResult done = engine.submit(PROMPTS[4], greedy(3), null).result().get();
      assertTrue(done.decodeMultiplyAddsPerToken() > 0, done.toString());
      assertTrue(done.weightBytes() > 0, done.toString());
      engine.disableExperts(0, 0, 1, 2);
      assertEquals(3, engine.submit(PROMPTS[1], greedy(3), null).result().get().tokens().length);
      MoeException noLayer = assertThrows(MoeException.class, () -> engine.disableExperts(99, 0));
      assertEquals(Status.INVALID_ARGUMENT, noLayer.status());
      EngineStats st = engine.stats();
      assertTrue(st.reroutedChoices() > 0, st.toString());
      assertTrue(st.reweightedChoices() > 0, st.toString());
    }
    MoeException limit = assertThrows(
        MoeException.class, () -> new Engine(model, new EngineOptions().loadBalance(4, 0f)));
    assertEquals(Status.INVALID_ARGUMENT, limit.status());
  }
  // A subscriber that asks for `batch` pieces at a time, optionally cancels after `cancelAfter`
  // pieces, and records what it got.
  private static final class Collecting implements Flow.Subscriber<String> {
    final StringBuilder text = new StringBuilder();
    final CompletableFuture<String> done = new CompletableFuture<>();
    final AtomicInteger pieces = new AtomicInteger();
    final AtomicInteger signalsAfterEnd = new AtomicInteger();
    private final long batch;
    private final int cancelAfter;
    private Flow.Subscription subscription;
    private volatile boolean ended;

    Collecting(long batch, int cancelAfter) {
      this.batch = batch;
      this.cancelAfter = cancelAfter;
    }

    @Override
    public void onSubscribe(Flow.Subscription s) {
      subscription = s;
      s.request(batch);
    }

    @Override
    public void onNext(String piece) {
      if (ended) signalsAfterEnd.incrementAndGet();
      synchronized (text) {
        text.append(piece);
      }
      int n = pieces.incrementAndGet();
      if (n == cancelAfter) {
        ended = true;
        subscription.cancel();
        done.complete("cancelled");
      } else if (batch != Long.MAX_VALUE && n % batch == 0) {
        subscription.request(batch);
      }
    }

    @Override
    public void onError(Throwable t) {
      if (ended) signalsAfterEnd.incrementAndGet();
      ended = true;
      done.completeExceptionally(t);
    }

    @Override
    public void onComplete() {
      if (ended) signalsAfterEnd.incrementAndGet();
      ended = true;
      synchronized (text) {
        done.complete(text.toString());
      }
    }
  }

  @Test
  void publishersStreamWhatALoneContextGeneratesWithBackPressure() throws Exception {
    try (Engine engine = new Engine(model, new EngineOptions().threads(2).contextLength(256))) {
      ExecutorService pool = Executors.newFixedThreadPool(8);
      List<Collecting> subscribers = new ArrayList<>();
      List<Future<?>> subscribed = new ArrayList<>();
      for (int i = 0; i < PROMPTS.length; i++) {
        // One piece at a time, two, or all at once.
        Collecting c = new Collecting(i % 3 == 0 ? 1 : i % 3 == 1 ? 2 : Long.MAX_VALUE, -1);
        subscribers.add(c);
        Flow.Publisher<String> p = engine.publish(PROMPTS[i], greedy(6 + i));
        subscribed.add(pool.submit(() -> p.subscribe(c)));
      }
      for (Future<?> f : subscribed) f.get(60, TimeUnit.SECONDS);
      for (int i = 0; i < PROMPTS.length; i++) {
        Collecting c = subscribers.get(i);
        assertEquals(lone(PROMPTS[i], 6 + i), c.done.get(60, TimeUnit.SECONDS), PROMPTS[i]);
        assertEquals(0, c.signalsAfterEnd.get());
      }
      pool.shutdown();
      // Pieces not asked for wait in the queue: a subscriber that asks for one and no more gets
      // one, and the rest (and the end) once it asks again.
      Flow.Publisher<String> p = engine.publish(PROMPTS[2], greedy(8));
      CompletableFuture<Flow.Subscription> held = new CompletableFuture<>();
      Collecting rest = new Collecting(Long.MAX_VALUE, -1);
      AtomicInteger before = new AtomicInteger();
      p.subscribe(new Flow.Subscriber<String>() {
        @Override
        public void onSubscribe(Flow.Subscription s) {
          s.request(1);
          held.complete(s);
        }

        @Override
        public void onNext(String piece) {
          if (before.incrementAndGet() > 1) {
            rest.onNext(piece);
          } else {
            rest.text.append(piece);
          }
        }

        @Override
        public void onError(Throwable t) {
          rest.onError(t);
        }

        @Override
        public void onComplete() {
          rest.onComplete();
        }
      });
      awaitFinished(engine, PROMPTS.length + 1);
      assertEquals(1, before.get());
      assertFalse(rest.done.isDone());
      held.get().request(Long.MAX_VALUE);
      assertEquals(lone(PROMPTS[2], 8), rest.done.get(60, TimeUnit.SECONDS));
      // A second subscriber is refused.
      Collecting second = new Collecting(1, -1);
      p.subscribe(second);
      ExecutionException refused =
          assertThrows(ExecutionException.class, () -> second.done.get(60, TimeUnit.SECONDS));
      assertInstanceOf(IllegalStateException.class, refused.getCause());
    }
  }

  @Test
  void cancellingASubscriptionEndsItsRequestAndBadDemandIsAnError() throws Exception {
    try (Engine engine = new Engine(model, new EngineOptions().threads(2).contextLength(256))) {
      Collecting cancelling = new Collecting(1, 2);
      engine.publish(PROMPTS[0], greedy(200)).subscribe(cancelling);
      assertEquals("cancelled", cancelling.done.get(60, TimeUnit.SECONDS));
      awaitFinished(engine, 1);
      assertEquals(2, cancelling.pieces.get());
      assertEquals(0, cancelling.signalsAfterEnd.get());
      assertTrue(engine.stats().tokens() < 100, "the request stopped early");
      assertEquals(0, engine.stats().kvBlocksInUse());

      Collecting zero = new Collecting(0, -1);  // request(0): Reactive Streams rule 3.9
      engine.publish(PROMPTS[1], greedy(50)).subscribe(zero);
      ExecutionException bad =
          assertThrows(ExecutionException.class, () -> zero.done.get(60, TimeUnit.SECONDS));
      assertInstanceOf(IllegalArgumentException.class, bad.getCause());

      Collecting tooLong = new Collecting(1, -1);
      engine.publish("x ".repeat(400), null).subscribe(tooLong);  // past the 256 of a request
      ExecutionException full =
          assertThrows(ExecutionException.class, () -> tooLong.done.get(60, TimeUnit.SECONDS));
      assertEquals(Status.CONTEXT_FULL, ((MoeException) full.getCause()).status());

    }
    // Closing the engine cancels what is still running (caller-driven: one step, then close).
    Engine engine = new Engine(model, new EngineOptions().ownThread(false));
    Collecting elsewhere = new Collecting(1, -1);
    engine.publish(PROMPTS[4], greedy(100)).subscribe(elsewhere);
    assertTrue(engine.step());
    engine.close();
    // (A future completed with a CancellationException throws it unwrapped.)
    assertThrows(CancellationException.class, () -> elsewhere.done.get(60, TimeUnit.SECONDS));
    Collecting closed = new Collecting(1, -1);
    engine.publish(PROMPTS[4], greedy(3)).subscribe(closed);
    ExecutionException refused =
        assertThrows(ExecutionException.class, () -> closed.done.get(60, TimeUnit.SECONDS));
    assertInstanceOf(IllegalStateException.class, refused.getCause());
  }

  // Waits (at most a minute) until the engine has finished `n` requests.
  private static void awaitFinished(Engine engine, long n) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (engine.stats().finished() < n) {
      assertTrue(System.nanoTime() < deadline, "requests did not finish: " + engine.stats());
      Thread.sleep(1);
    }
  }
}
