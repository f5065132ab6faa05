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
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
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
}
