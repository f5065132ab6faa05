package org.libmoe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The Java binding against the tiny-qwen2moe fixture (random weights, real tokenizer). */
class MoeTest {
  private static final Path FIXTURES = Paths.get(System.getProperty("moe.fixtures"));
  private static Model model;
  private static int[] prompt;
  private static int[] expected;

  @BeforeAll
  static void load() throws IOException {
    model = Model.load(FIXTURES.resolve("tiny-qwen2moe-f32.gguf").toString());
    prompt = readIds("p1.tokens.txt");
    expected = readIds("p1.gen_tokens.txt");
  }

  @AfterAll
  static void close() {
    model.close();
  }

  private static int[] readIds(String name) throws IOException {
    return Files.readAllLines(FIXTURES.resolve(name)).stream()
        .map(String::trim).filter(s -> !s.isEmpty()).mapToInt(Integer::parseInt).toArray();
  }

  private static GenerateOptions greedy(int n) {
    return new GenerateOptions().temperature(0).maxTokens(n);
  }

  private static int[] generateIds(Context ctx, int[] ids, int n) {
    List<Integer> got = new ArrayList<>();
    FinishReason reason = ctx.generate(ids, greedy(n), (token, piece) -> {
      if (token >= 0) got.add(token);
      return true;
    });
    assertEquals(FinishReason.MAX_TOKENS, reason);
    return got.stream().mapToInt(Integer::intValue).toArray();
  }

  @Test
  void streamsTheReferenceGreedyTokens() {
    try (Context ctx = model.newContext()) {
      assertArrayEquals(expected, generateIds(ctx, prompt, expected.length));
      Stats stats = ctx.stats();
      assertEquals(expected.length, stats.generatedTokens());
      assertEquals(FinishReason.MAX_TOKENS, stats.finishReason());
    }
  }

  @Test
  void textRoundTripsThroughTheTokenizer() {
    assertEquals("qwen2moe", model.info().architecture());
    int[] ids = model.tokenize("Hello, wörld 👋", false, false);
    assertEquals("Hello, wörld 👋", model.detokenize(ids));
    try (Context ctx = model.newContext()) {
      String text = ctx.complete("Once upon a time", greedy(4));
      assertFalse(text.isEmpty());
    }
  }

  @Test
  void stopsWhenTheListenerReturnsFalse() {
    try (Context ctx = model.newContext()) {
      List<Integer> got = new ArrayList<>();
      FinishReason reason = ctx.generate(prompt, greedy(16), (token, piece) -> {
        got.add(token);
        return got.size() < 3;
      });
      assertEquals(FinishReason.CALLBACK, reason);
      assertEquals(3, got.size());
    }
  }

  @Test
  void missingFileIsNotFound() {
    MoeException e = assertThrows(MoeException.class, () -> Model.load("/no/such/model.moe"));
    assertEquals(Status.NOT_FOUND, e.status());
    assertTrue(e.getMessage().contains("/no/such/model.moe"), e.getMessage());
  }

  @Test
  void outOfRangeTokenIsAnError() {
    MoeException e = assertThrows(MoeException.class, () -> model.detokenize(new int[] {1 << 30}));
    assertTrue(e.status() == Status.OUT_OF_RANGE || e.status() == Status.INVALID_ARGUMENT);
    try (Context ctx = model.newContext()) {
      MoeException g = assertThrows(MoeException.class,
          () -> ctx.generate(new int[] {-5}, greedy(2), null));
      assertFalse(g.getMessage().isEmpty());
    }
  }

  @Test
  void closedHandlesThrow() {
    Context ctx = model.newContext();
    ctx.close();
    ctx.close(); // idempotent
    MoeException e = assertThrows(MoeException.class, () -> ctx.generate(prompt, greedy(2), null));
    assertEquals(Status.INVALID_ARGUMENT, e.status());
    ctx.cancel(); // harmless

    Model m = Model.load(FIXTURES.resolve("tiny-qwen2moe-f32.gguf").toString());
    Context open = m.newContext();
    m.close(); // the open context keeps the native model alive
    assertThrows(MoeException.class, () -> m.tokenize("x"));
    assertThrows(MoeException.class, m::newContext);
    assertEquals(2, generateIds(open, prompt, 2).length);
    open.close();
  }

  @Test
  void listenerExceptionSurfacesInTheCaller() {
    try (Context ctx = model.newContext()) {
      IllegalStateException boom = new IllegalStateException("boom");
      IllegalStateException e = assertThrows(IllegalStateException.class,
          () -> ctx.generate(prompt, greedy(16), (token, piece) -> {
            throw boom;
          }));
      assertSame(boom, e);
      ctx.reset(); // still usable
      assertArrayEquals(expected, generateIds(ctx, prompt, expected.length));
    }
  }

  @Test
  void progressIsReportedAndCanCancel() {
    List<Float> seen = new ArrayList<>();
    String path = FIXTURES.resolve("tiny-qwen2moe-f32.gguf").toString();
    try (Model m = Model.load(path, p -> seen.add(p))) {
      assertFalse(seen.isEmpty());
    }
    MoeException e = assertThrows(MoeException.class, () -> Model.load(path, p -> false));
    assertEquals(Status.CANCELLED, e.status());
    assertThrows(ArithmeticException.class, () -> Model.load(path, p -> {
      throw new ArithmeticException("stop");
    }));
  }

  @Test
  void twoThreadsShareOneModel() throws Exception {
    AtomicReference<Throwable> failure = new AtomicReference<>();
    Thread[] threads = new Thread[2];
    for (int i = 0; i < threads.length; i++) {
      threads[i] = new Thread(() -> {
        try (Context ctx = model.newContext(new ContextOptions().threads(1))) {
          assertArrayEquals(expected, generateIds(ctx, prompt, expected.length));
        } catch (Throwable t) {
          failure.set(t);
        }
      });
      threads[i].start();
    }
    for (Thread t : threads) t.join();
    if (failure.get() != null) throw new AssertionError(failure.get());
  }

  @Test
  void cancelFromAnotherThread() throws Exception {
    try (Context ctx = model.newContext()) {
      CountDownLatch started = new CountDownLatch(1);
      CountDownLatch cancelled = new CountDownLatch(1);
      Thread canceller = new Thread(() -> {
        try {
          started.await();
          ctx.cancel();
          cancelled.countDown();
        } catch (InterruptedException ignored) {
          Thread.currentThread().interrupt();
        }
      });
      canceller.start();
      MoeException e = assertThrows(MoeException.class,
          () -> ctx.generate(prompt, greedy(200), (token, piece) -> {
            started.countDown();
            try {
              cancelled.await(10, TimeUnit.SECONDS); // hold the first token until cancel()
            } catch (InterruptedException ie) {
              Thread.currentThread().interrupt();
            }
            return true;
          }));
      canceller.join();
      assertEquals(Status.CANCELLED, e.status());
      assertTrue(ctx.size() > 0); // the context stays usable
    }
  }
}
