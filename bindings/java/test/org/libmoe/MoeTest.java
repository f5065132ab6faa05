package org.libmoe;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
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
    IllegalStateException e =
        assertThrows(IllegalStateException.class, () -> ctx.generate(prompt, greedy(2), null));
    assertTrue(e.getMessage().contains("closed"), e.getMessage());
    ctx.cancel(); // harmless

    Model m = Model.load(FIXTURES.resolve("tiny-qwen2moe-f32.gguf").toString());
    Context open = m.newContext();
    m.close(); // the open context keeps the native model alive
    assertThrows(IllegalStateException.class, () -> m.tokenize("x"));
    assertThrows(IllegalStateException.class, m::newContext);
    assertEquals(2, generateIds(open, prompt, 2).length);
    open.close();
  }

  // Generation slowed by the listener so that it is still running when another thread acts.
  private static Thread slowGeneration(Context ctx, CountDownLatch started,
      AtomicReference<Throwable> outcome) {
    Thread t = new Thread(() -> {
      try {
        ctx.generate(prompt, greedy(200), (token, piece) -> {
          started.countDown();
          try {
            Thread.sleep(10);
          } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
          }
          return true;
        });
        outcome.set(new AssertionError("generation was not cancelled"));
      } catch (Throwable th) {
        outcome.set(th);
      }
    });
    t.start();
    return t;
  }

  @Test
  void closeDuringGenerateCancelsItAndWaits() throws Exception {
    for (int round = 0; round < 3; round++) {
      Context ctx = model.newContext();
      CountDownLatch started = new CountDownLatch(1);
      AtomicReference<Throwable> outcome = new AtomicReference<>();
      Thread t = slowGeneration(ctx, started, outcome);
      assertTrue(started.await(30, TimeUnit.SECONDS));
      long t0 = System.nanoTime();
      ctx.close(); // from another thread, mid-generation: must not free what generate uses
      assertTrue(System.nanoTime() - t0 < 1_000_000_000L, "close waited for the whole generation");
      t.join(30_000);
      assertFalse(t.isAlive());
      MoeException e = assertInstanceOf(MoeException.class, outcome.get());
      assertEquals(Status.CANCELLED, e.status());
      assertThrows(IllegalStateException.class, ctx::size);
      ctx.cancel(); // harmless after close
    }
  }

  @Test
  void closingTheModelDuringGenerateLetsItFinish() throws Exception {
    Model m = Model.load(FIXTURES.resolve("tiny-qwen2moe-f32.gguf").toString());
    Context ctx = m.newContext();
    AtomicReference<int[]> got = new AtomicReference<>();
    CountDownLatch started = new CountDownLatch(1);
    Thread t = new Thread(() -> {
      List<Integer> ids = new ArrayList<>();
      ctx.generate(prompt, greedy(expected.length), (token, piece) -> {
        started.countDown();
        if (token >= 0) ids.add(token);
        try {
          Thread.sleep(2);
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
        }
        return true;
      });
      got.set(ids.stream().mapToInt(Integer::intValue).toArray());
    });
    t.start();
    assertTrue(started.await(30, TimeUnit.SECONDS));
    m.close();
    t.join(30_000);
    assertArrayEquals(expected, got.get());
    ctx.close();
  }

  @Test
  void closeFromTheListenerStopsTheCall() {
    Context ctx = model.newContext();
    MoeException e = assertThrows(MoeException.class,
        () -> ctx.generate(prompt, greedy(16), (token, piece) -> {
          ctx.close();
          return true;
        }));
    assertEquals(Status.CANCELLED, e.status());
    assertThrows(IllegalStateException.class, ctx::size);
  }

  @Test
  void mappedWeightsAndAnF16CacheAreReachable() {
    try (Model mapped = Model.load(FIXTURES.resolve("tiny-qwen2moe-f32.gguf").toString(),
             new ModelOptions().useMmap(true));
         Context ctx = mapped.newContext()) {
      assertArrayEquals(expected, generateIds(ctx, prompt, expected.length));
    }
    try (Context f16 = model.newContext(new ContextOptions().kvType(KvType.F16))) {
      assertEquals(4, generateIds(f16, prompt, 4).length);
    }
    // Dynamic top-k: a share of 1 is the model's top-k; a lower one still generates; values out
    // of range are refused.
    try (Context all = model.newContext(new ContextOptions().expertConfidence(1.0f));
         Context fewer =
             model.newContext(new ContextOptions().expertConfidence(0.5f).minExperts(1))) {
      assertArrayEquals(expected, generateIds(all, prompt, expected.length));
      assertEquals(4, generateIds(fewer, prompt, 4).length);
      // Router noise is reproducible from its seed; a temperature of 0 is refused.
      ContextOptions noisy =
          new ContextOptions().routerTemperature(1.5f).routerNoise(RouterNoise.GUMBEL, 1.0f, 3);
      try (Context a = model.newContext(noisy); Context b = model.newContext(noisy)) {
        assertArrayEquals(generateIds(a, prompt, 6), generateIds(b, prompt, 6));
      }
      MoeException cold = assertThrows(
          MoeException.class, () -> model.newContext(new ContextOptions().routerTemperature(0f)));
      assertEquals(Status.INVALID_ARGUMENT, cold.status());
      // Switched-off experts are never chosen.
      fewer.reset();
      fewer.disableExperts(0, 0, 1, 2);
      assertEquals(4, generateIds(fewer, prompt, 4).length);
      long[][] counts = fewer.expertCounts();
      assertEquals(0, counts[0][0] + counts[0][1] + counts[0][2]);
      MoeException none = assertThrows(MoeException.class,
          () -> fewer.disableExperts(0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
      assertEquals(Status.INVALID_ARGUMENT, none.status());
      fewer.disableExperts(0);
      // The last call's statistics as Prometheus text, per layer too.
      String metrics = fewer.metricsText();
      assertTrue(metrics.contains("# TYPE moe_experts_per_token gauge"), metrics);
      assertTrue(metrics.contains("moe_expert_jain_fairness{layer=\"1\"}"), metrics);
    }
    // A capacity re-routes some of a prompt's choices, load-aware re-weighting scales weights;
    // both are counted.
    try (Context capped = model.newContext(new ContextOptions().expertCapacityFactor(1.0f));
         Context balanced = model.newContext(new ContextOptions().loadBalance(8, 1.0f))) {
      generateIds(capped, prompt, 2);
      assertTrue(capped.stats().reroutedChoices() > 0);
      assertTrue(capped.stats().multiplyAddsPerToken() > 0);
      assertTrue(capped.stats().weightBytesPerToken() > 0);
      generateIds(balanced, prompt, 2);
      assertTrue(balanced.stats().reweightedChoices() > 0);
      assertEquals(0, balanced.stats().reroutedChoices());
    }
    for (ContextOptions bad : new ContextOptions[] {new ContextOptions().expertConfidence(2.0f),
             new ContextOptions().expertConfidence(0.5f).minExperts(0),
             new ContextOptions().expertCapacityFactor(-1.0f),
             new ContextOptions().loadBalance(8, 0.5f)}) {
      MoeException refused = assertThrows(MoeException.class, () -> model.newContext(bad));
      assertEquals(Status.INVALID_ARGUMENT, refused.status());
    }
    // Half the experts cached from disk: the same tokens.
    try (Model cached = Model.load(FIXTURES.resolve("tiny-qwen2moe-f32.gguf").toString(),
             new ModelOptions().expertCacheFraction(0.5).expertEviction(ExpertEviction.LFRU));
         Context ctx = cached.newContext()) {
      assertArrayEquals(expected, generateIds(ctx, prompt, expected.length));
    }
    MoeException e = assertThrows(MoeException.class,
        () -> Model.load(FIXTURES.resolve("tiny-qwen2moe-f32.gguf").toString(),
            new ModelOptions().expertCacheBytes(10)));
    assertEquals(Status.INVALID_ARGUMENT, e.status());
  }

  @Test
  void expertPlacementPinningAndStatistics() throws IOException {
    Path placement = Files.createTempFile("placement", ".json");
    Files.writeString(placement, "{\"layers\": {\"0\": {\"resident\": [1]}, \"1\": {\"pinned\": [0]}}}");
    String path = FIXTURES.resolve("tiny-qwen2moe-f32.gguf").toString();
    try (Model m = Model.load(path, new ModelOptions().expertCacheFraction(0.5)
                                        .expertPlacementFile(placement.toString()));
         Context ctx = m.newContext()) {
      ExpertPlacement resident = m.expertPlacement(0, 1);
      assertEquals(ExpertTier.RESIDENT, resident.tier());
      assertTrue(resident.inMemory());
      assertTrue(resident.bytes() > 0);
      assertEquals("F32/F32/F32", resident.weightTypes());
      assertEquals(ExpertTier.CACHED, m.expertPlacement(1, 3).tier());
      m.pinExpert(1, 3);
      assertEquals(ExpertTier.PINNED, m.expertPlacement(1, 3).tier());
      assertTrue(m.expertPlacement(1, 3).inMemory());
      assertEquals(Status.INVALID_ARGUMENT,
          assertThrows(MoeException.class, () -> m.unpinExpert(0, 1)).status());
      assertEquals(Status.OUT_OF_RANGE,
          assertThrows(MoeException.class, () -> m.expertPlacement(99, 0)).status());
      assertArrayEquals(expected, generateIds(ctx, prompt, expected.length));
      Stats st = ctx.stats();
      ExpertCacheStats[] layers = ctx.expertLayerStats();
      assertEquals(m.info().layers(), layers.length);
      long hits = 0, misses = 0;
      for (ExpertCacheStats l : layers) {
        hits += l.hits();
        misses += l.misses();
      }
      assertEquals(st.expertCache().hits(), hits);
      assertEquals(st.expertCache().misses(), misses);
      assertTrue(hits + misses > 0);
      assertTrue(st.expertCache().expertsInMemory() >= 2);
      assertTrue(st.expertCache().hitRate() > 0);
      // The call's routing as a profile warms a load.
      Path profile = Files.createTempFile("profile", ".json");
      try {
        ctx.writeRoutingProfile(profile.toString());
        assertTrue(Files.readString(profile).contains("libmoe-routing-profile"));
        try (Model warm = Model.load(path, new ModelOptions().expertCacheFraction(0.5)
                                               .expertWarmupProfile(profile.toString()))) {
          int inMemory = 0;
          for (int l = 0; l < warm.info().layers(); l++) {
            for (int x = 0; x < warm.info().experts(); x++) {
              if (warm.expertPlacement(l, x).inMemory()) inMemory++;
            }
          }
          assertTrue(inMemory > 0, "warmed before any token");
          assertTrue(warm.warmup(profile.toString()) >= 0);
          assertEquals(Status.INVALID_ARGUMENT,
              assertThrows(MoeException.class, () -> warm.warmup(placement.toString())).status());
        }
      } finally {
        Files.deleteIfExists(profile);
      }
    } finally {
      Files.deleteIfExists(placement);
    }
    MoeException e = assertThrows(MoeException.class, () -> Model.load(path,
        new ModelOptions().memoryLimitBytes(1).memoryFit(MemoryFit.ERROR)));
    assertEquals(Status.OUT_OF_MEMORY, e.status());
  }

  // Without a GPU (CI): CUDA asked for is UNSUPPORTED with the reason; AUTO runs on the CPU and
  // says so. With one, the GPU tests run it.
  @Test
  void deviceChoiceWithoutAGpu() {
    String path = FIXTURES.resolve("tiny-qwen2moe-f32.gguf").toString();
    assertEquals("cpu", model.device());
    try (Model auto = Model.load(path, new ModelOptions().device(Device.AUTO))) {
      if (!auto.device().startsWith("cpu")) return;  // a GPU is here
      assertTrue(auto.device().startsWith("cpu ("), auto.device());
      MoeException e = assertThrows(MoeException.class,
          () -> Model.load(path, new ModelOptions().device(Device.CUDA)));
      assertEquals(Status.UNSUPPORTED, e.status());
      assertTrue(e.getMessage().contains("a CUDA device was asked for"), e.getMessage());
    }
    assertThrows(MoeException.class,
        () -> Model.load(path, new ModelOptions().device(Device.AUTO).gpuMemoryBytes(-1)));
  }

  @Test
  void nullArgumentsAreNamed() {
    try (Context ctx = model.newContext()) {
      NullPointerException e = assertThrows(NullPointerException.class,
          () -> ctx.generate((String) null, greedy(2), null));
      assertEquals("prompt is null", e.getMessage());
      e = assertThrows(NullPointerException.class,
          () -> ctx.generate((int[]) null, greedy(2), null));
      assertEquals("prompt is null", e.getMessage());
      e = assertThrows(NullPointerException.class, () -> model.tokenize(null));
      assertEquals("text is null", e.getMessage());
    }
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

  private static final List<ChatMessage> CHAT =
      List.of(ChatMessage.system("Be brief."), ChatMessage.user("Hi!"));

  @Test
  void chatTemplates() {
    MoeException none = assertThrows(MoeException.class, () -> model.applyChatTemplate(CHAT, true));
    assertEquals(Status.NOT_FOUND, none.status());
    assertTrue(none.getMessage().contains("chat template"), none.getMessage());
    assertEquals("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
            + "<|im_start|>assistant\n",
        model.applyChatTemplate(CHAT, true, "chatml"));
    assertFalse(model.applyChatTemplate(CHAT, false, "chatml").endsWith("assistant\n"));
    MoeException unknown = assertThrows(MoeException.class,
        () -> model.applyChatTemplate(CHAT, true, "jinja-soup"));
    assertTrue(unknown.getMessage().contains("jinja-soup"), unknown.getMessage());
    MoeException role = assertThrows(MoeException.class,
        () -> model.applyChatTemplate(List.of(new ChatMessage("wizard", "x")), true, "chatml"));
    assertEquals(Status.INVALID_ARGUMENT, role.status());
  }

  @Test
  void lowLevelGreedyLoopReproducesTheReference() throws IOException {
    int[] p2 = readIds("p2.tokens.txt");
    int[] want = readIds("p2.gen_tokens.txt");
    GenerateOptions greedy = new GenerateOptions().temperature(0);
    try (Context ctx = model.newContext()) {
      ctx.decode(p2);
      // p2's greedy margins stay above the reference's tolerance for 6 steps.
      for (int i = 0; i < 6; i++) {
        float[] logits = ctx.logits();
        assertEquals(model.info().vocabularySize(), logits.length);
        int argmax = 0;
        for (int t = 1; t < logits.length; t++) if (logits[t] > logits[argmax]) argmax = t;
        int token = ctx.sample(greedy);
        assertEquals(want[i], token, "step " + i);
        assertEquals(argmax, token);
        ctx.decode(new int[] {token});
      }
      assertEquals(p2.length + 6, ctx.size());
      MoeException bad = assertThrows(MoeException.class, () -> ctx.decode(new int[] {40000}));
      assertEquals(Status.OUT_OF_RANGE, bad.status());
      assertEquals(Status.OUT_OF_RANGE,
          assertThrows(MoeException.class, () -> ctx.sample(greedy().logitBias(1 << 20, 1f)))
              .status());
    }
  }

  private static GenerateOptions greedy() {
    return new GenerateOptions().temperature(0);
  }

  @Test
  void logitBiasForcesAToken() {
    try (Context ctx = model.newContext()) {
      assertThrows(MoeException.class, ctx::logits); // nothing decoded yet
      ctx.decode(new int[] {model.info().bosToken()});
      assertEquals(1234, ctx.sample(new GenerateOptions().logitBias(1234, 1000f)));
      assertEquals(1234, ctx.sample(new GenerateOptions().logitBias(java.util.Map.of(1234, 1000f))
          .frequencyPenalty(0.5f).presencePenalty(0.5f).penaltyLastN(-1)));
      int any = ctx.sample(null); // the library's defaults
      assertTrue(any >= 0 && any < model.info().vocabularySize());
      // The bias also steers generate.
      List<Integer> got = new ArrayList<>();
      ctx.generate(new int[] {1}, greedy(3).logitBias(1234, 1000f), (token, piece) -> {
        if (token >= 0) got.add(token);
        return true;
      });
      assertEquals(List.of(1234, 1234, 1234), got);
    }
  }

  @Test
  void fullStatsAndExpertCounts() {
    ModelInfo info = model.info();
    try (Context ctx = model.newContext()) {
      generateIds(ctx, prompt, expected.length);
      Stats s = ctx.stats();
      assertEquals(prompt.length, s.promptTokens());
      assertEquals(FinishReason.MAX_TOKENS, s.finishReason());
      assertTrue(s.activeFraction() > 0 && s.activeFraction() < 1, "" + s.activeFraction());
      assertTrue(s.activeParametersPerToken() > 0);
      assertTrue(s.meanRouterEntropy() > 0);
      assertTrue(s.weightBytesRead() > 0);
      assertTrue(s.expertsSeconds() > 0 && s.attentionSeconds() > 0);
      assertTrue(s.routerSeconds() >= 0 && s.headSeconds() >= 0 && s.samplingSeconds() >= 0);
      long[][] counts = ctx.expertCounts();
      assertEquals(info.layers(), counts.length);
      long total = 0;
      for (long[] layer : counts) {
        assertEquals(info.experts(), layer.length);
        for (long c : layer) total += c;
      }
      // Prompt and generated tokens (the last one is fed back too) pick top-k experts per layer.
      assertEquals((long) (prompt.length + expected.length) * info.expertsUsed() * info.layers(),
          total);
    }
  }

  // The routing trace tells every processed token once per layer, its experts distinct and in
  // range, and in sum the call's expert counts; removed, it tells nothing; a listener's exception
  // comes back from the call, which still completes.
  @Test
  void routingListenerTracesEveryToken() {
    ModelInfo info = model.info();
    try (Context ctx = model.newContext()) {
      long[][] seen = new long[info.layers()][info.experts()];
      java.util.Set<Long> positions = new java.util.HashSet<>();
      ctx.setRoutingListener((position, layer, experts, weights) -> {
        assertTrue(positions.add((long) position * info.layers() + layer), "told twice");
        assertEquals(info.expertsUsed(), experts.length);
        assertEquals(experts.length, weights.length);
        assertEquals(experts.length, java.util.Arrays.stream(experts).distinct().count());
        for (int i = 0; i < experts.length; i++) {
          assertTrue(experts[i] >= 0 && experts[i] < info.experts());
          assertTrue(weights[i] > 0 && weights[i] <= 1);
          seen[layer][experts[i]]++;
        }
      });
      generateIds(ctx, prompt, expected.length);
      assertEquals((prompt.length + expected.length) * info.layers(), positions.size());
      assertArrayEquals(ctx.expertCounts(), seen);
      ctx.setRoutingListener(null);
      ctx.reset();
      generateIds(ctx, prompt, 2);
      assertEquals((prompt.length + expected.length) * info.layers(), positions.size());
      IllegalStateException boom = new IllegalStateException("boom");
      ctx.setRoutingListener((position, layer, experts, weights) -> {
        throw boom;
      });
      ctx.reset();
      assertSame(boom, assertThrows(IllegalStateException.class,
          () -> ctx.decode(java.util.Arrays.copyOf(prompt, 3))));
      assertEquals(3, ctx.size());
      assertSame(boom, assertThrows(IllegalStateException.class,
          () -> generateIds(ctx, new int[] {prompt[3]}, 1)));
    }
  }

  @Test
  void contextManagementAndMultiTurn() {
    try (Context ctx = model.newContext(new ContextOptions().contextLength(128))) {
      assertEquals(128, ctx.capacity());
      assertEquals(0, ctx.size());
      generateIds(ctx, prompt, 4);
      int afterFirst = ctx.size();
      assertEquals(prompt.length + 4, afterFirst);
      // The second turn processes only its own tokens: the first turn's stay cached.
      int[] turn = model.tokenize(" and then", false, false);
      generateIds(ctx, turn, 3);
      assertEquals(turn.length, ctx.stats().promptTokens());
      assertEquals(afterFirst + turn.length + 3, ctx.size());
      ctx.truncate(prompt.length);
      assertEquals(prompt.length, ctx.size());
      ctx.reset();
      assertEquals(0, ctx.size());
      assertArrayEquals(expected, generateIds(ctx, prompt, expected.length));
    }
  }

  @Test
  void streamingDetokenizerMatchesDetokenize() {
    int[] ids = model.tokenize("Hello, wörld 👋 and ünïcode", false, false);
    StringBuilder text = new StringBuilder();
    try (Detokenizer d = model.newDetokenizer()) {
      for (int id : ids) text.append(d.push(id));
      assertThrows(MoeException.class, () -> d.push(1 << 30));
    }
    assertEquals(model.detokenize(ids), text.toString());
    Detokenizer closed = model.newDetokenizer();
    closed.close();
    assertThrows(IllegalStateException.class, () -> closed.push(1));
  }

  @Test
  void tokenizeFlags() {
    int bos = model.info().bosToken();
    int[] plain = model.tokenize("Hello", false, false);
    int[] withBos = model.tokenize("Hello", true, false);
    assertTrue(bos >= 0);
    assertEquals(bos, withBos[0]);
    assertArrayEquals(plain, Arrays.copyOfRange(withBos, 1, withBos.length));
    // A control token's text is that token only when parseSpecial asks for it.
    String bosText = model.detokenize(new int[] {bos});
    assertArrayEquals(new int[] {bos}, model.tokenize(bosText, false, true));
    assertTrue(model.tokenize(bosText, false, false).length > 1);
  }

  @Test
  void logHandlerCanBeReplacedWhileOtherThreadsLoad() throws Exception {
    String path = FIXTURES.resolve("tiny-qwen2moe-f32.gguf").toString();
    List<String> lines = Collections.synchronizedList(new ArrayList<>());
    AtomicInteger other = new AtomicInteger();
    AtomicReference<Throwable> failure = new AtomicReference<>();
    try {
      MoeLog.setHandler(LogLevel.INFO, (level, msg) -> lines.add(level + ":" + msg));
      Model.load(path).close();
      assertTrue(lines.stream().anyMatch(l -> l.startsWith("INFO:") && l.contains("qwen2moe")),
          lines.toString());
      // A handler cannot change the handler (that would deadlock the library's log lock).
      AtomicReference<Throwable> inside = new AtomicReference<>();
      MoeLog.setHandler(LogLevel.DEBUG, (level, msg) -> {
        try {
          MoeLog.removeHandler();
        } catch (Throwable t) {
          inside.compareAndSet(null, t);
        }
        throw new IllegalStateException("dropped, not a crash");
      });
      Model.load(path).close();
      assertTrue(inside.get() instanceof MoeException, String.valueOf(inside.get()));

      Thread[] loaders = new Thread[3];
      for (int i = 0; i < loaders.length; i++) {
        loaders[i] = new Thread(() -> {
          try {
            for (int k = 0; k < 4; k++) Model.load(path).close();
          } catch (Throwable t) {
            failure.set(t);
          }
        });
        loaders[i].start();
      }
      for (int k = 0; k < 200; k++) {
        if (k % 3 == 0) MoeLog.removeHandler();
        else MoeLog.setHandler(LogLevel.INFO, (level, msg) -> other.incrementAndGet());
      }
      for (Thread t : loaders) t.join();
      if (failure.get() != null) throw new AssertionError(failure.get());
    } finally {
      MoeLog.removeHandler();
    }
    int before = lines.size();
    Model.load(path).close(); // silent again
    assertEquals(before, lines.size());
  }
}
