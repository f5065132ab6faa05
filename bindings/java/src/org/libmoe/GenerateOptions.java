package org.libmoe;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * How to generate: length, sampling and stop strings (the sampling settings also serve {@link
 * Context#sample}). Starts from the library's defaults (temperature 0.8, top-k 40, top-p 0.95,
 * min-p 0.05, 256 tokens); setters return {@code this}:
 *
 * <pre>{@code new GenerateOptions().maxTokens(64).temperature(0).stop("\n\n")}</pre>
 */
public final class GenerateOptions {
  private final NativeGenerateOptions defaults = new NativeGenerateOptions();
  private int maxTokens = defaults.getMax_tokens();
  private float temperature = defaults.getTemperature();
  private int topK = defaults.getTop_k();
  private float topP = defaults.getTop_p();
  private float minP = defaults.getMin_p();
  private float repeatPenalty = defaults.getRepeat_penalty();
  private float frequencyPenalty = defaults.getFrequency_penalty();
  private float presencePenalty = defaults.getPresence_penalty();
  private int penaltyLastN = defaults.getPenalty_last_n();
  private long seed = defaults.getSeed();
  private boolean parseSpecial = defaults.getParse_special();
  private final List<String> stops = new ArrayList<>();
  private final Map<Integer, Float> logitBias = new LinkedHashMap<>();

  public GenerateOptions() {
    defaults.delete();
  }

  /** At most this many tokens. */
  public GenerateOptions maxTokens(int n) {
    maxTokens = n;
    return this;
  }

  /** 0 or less: greedy (argmax). */
  public GenerateOptions temperature(float t) {
    temperature = t;
    return this;
  }

  /** 0 or less: off. */
  public GenerateOptions topK(int k) {
    topK = k;
    return this;
  }

  /** 1 or more: off. */
  public GenerateOptions topP(float p) {
    topP = p;
    return this;
  }

  /** 0 or less: off. */
  public GenerateOptions minP(float p) {
    minP = p;
    return this;
  }

  /** 1: off. */
  public GenerateOptions repeatPenalty(float penalty) {
    repeatPenalty = penalty;
    return this;
  }

  /** Penalises tokens in proportion to how often they occurred lately; 0 (default): off. */
  public GenerateOptions frequencyPenalty(float penalty) {
    frequencyPenalty = penalty;
    return this;
  }

  /** Penalises every token that occurred lately, however often; 0 (default): off. */
  public GenerateOptions presencePenalty(float penalty) {
    presencePenalty = penalty;
    return this;
  }

  /** Tokens the penalties look back over; -1: all. Default 64. */
  public GenerateOptions penaltyLastN(int n) {
    penaltyLastN = n;
    return this;
  }

  /**
   * Adds {@code bias} to {@code token}'s logit before sampling (replacing an earlier bias for
   * the same token). A large positive bias forces the token; {@code Float.NEGATIVE_INFINITY} bans
   * it. An id outside the vocabulary makes the call fail with {@link Status#OUT_OF_RANGE}.
   */
  public GenerateOptions logitBias(int token, float bias) {
    logitBias.put(token, bias);
    return this;
  }

  /** Adds every (token, bias) of {@code biases}; see {@link #logitBias(int, float)}. */
  public GenerateOptions logitBias(Map<Integer, Float> biases) {
    logitBias.putAll(biases);
    return this;
  }

  /** Added to the context's seed: same seeds and inputs give the same output. */
  public GenerateOptions seed(long s) {
    seed = s;
    return this;
  }

  /** Recognise control-token markup such as {@code <|im_start|>} in the prompt. */
  public GenerateOptions parseSpecial(boolean on) {
    parseSpecial = on;
    return this;
  }

  /** Adds a stop string; generation ends before it and it is not part of the output. */
  public GenerateOptions stop(String text) {
    stops.add(text);
    return this;
  }

  // A native copy for one call; the caller deletes it.
  NativeGenerateOptions toNative() {
    NativeGenerateOptions n = new NativeGenerateOptions();
    n.setMax_tokens(maxTokens);
    n.setTemperature(temperature);
    n.setTop_k(topK);
    n.setTop_p(topP);
    n.setMin_p(minP);
    n.setRepeat_penalty(repeatPenalty);
    n.setFrequency_penalty(frequencyPenalty);
    n.setPresence_penalty(presencePenalty);
    n.setPenalty_last_n(penaltyLastN);
    for (Map.Entry<Integer, Float> e : logitBias.entrySet()) n.AddLogitBias(e.getKey(), e.getValue());
    n.setSeed(seed);
    n.setParse_special(parseSpecial);
    for (String s : stops) n.AddStop(Utf8.encode(s, "a stop string"));
    return n;
  }
}
