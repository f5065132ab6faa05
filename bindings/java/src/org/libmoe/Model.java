package org.libmoe;

import java.util.List;

/**
 * A loaded model (.moe or GGUF). Immutable once loaded: share one model between threads, each
 * with its own {@link Context}. Close it when done (try-with-resources); contexts still open keep
 * the native model alive until they are closed too.
 *
 * <pre>{@code
 * try (Model model = Model.load("model.moe");
 *      Context ctx = model.newContext()) {
 *   ctx.generate("Once upon a time", new GenerateOptions().maxTokens(32),
 *                (token, piece) -> { System.out.print(piece); return true; });
 * }
 * }</pre>
 */
public final class Model implements AutoCloseable {
  // Never deleted by close(): another thread may be calling it (see Context).
  private final NativeModel nativeModel;
  private volatile boolean closed;

  private Model(NativeModel nativeModel) {
    this.nativeModel = nativeModel;
  }

  /**
   * Loads a model.
   *
   * @throws MoeException with {@link Status#NOT_FOUND} for a missing file, {@link
   *     Status#CORRUPT_MODEL} for a damaged one, and so on
   */
  public static Model load(String path) {
    return load(path, new ModelOptions());
  }

  /** Loads a model, reporting progress to {@code progress} (may be null). */
  public static Model load(String path, ProgressListener progress) {
    return load(path, new ModelOptions().progress(progress));
  }

  /** Loads a model with {@code options} (null: the defaults). */
  public static Model load(String path, ModelOptions options) {
    ModelOptions o = options != null ? options : new ModelOptions();
    ProgressBridge bridge = o.progress == null ? null : new ProgressBridge(o.progress);
    try {
      byte[] placement = o.expertPlacementFile == null
          ? new byte[0]
          : Utf8.encode(o.expertPlacementFile, "expertPlacementFile");
      byte[] warmup = o.expertWarmupProfile == null
          ? new byte[0]
          : Utf8.encode(o.expertWarmupProfile, "expertWarmupProfile");
      return new Model(NativeModel.Load(Utf8.encode(path, "path"), o.useMmap, bridge,
          o.expertCacheBytes, o.expertCacheFraction, o.expertEviction.code, o.expertDirectIo,
          placement, o.expertPrefetch, o.memoryLimitBytes, o.memoryFit.code, warmup,
          o.device.code, o.gpuIndex, o.gpuMemoryBytes));
    } catch (MoeException e) {
      if (bridge != null) bridge.rethrow();
      throw e;
    } finally {
      if (bridge != null) bridge.delete();
    }
  }

  /** A new context with default options. */
  public Context newContext() {
    return new Context(this, new ContextOptions());
  }

  /** A new context. */
  public Context newContext(ContextOptions options) {
    return new Context(this, options);
  }

  /**
   * Where the forward passes run: {@code "cpu"}, {@code "cpu (why no GPU)"} after {@link
   * Device#AUTO}, or {@code "cuda:N NAME (what it holds)"}.
   */
  public String device() {
    return Utf8.decode(get().Device());
  }

  /** The model's hyper-parameters and vocabulary facts. */
  public ModelInfo info() {
    NativeModel m = get();
    NativeModelInfo i = m.Info();
    try {
      return new ModelInfo(Utf8.decode(m.Architecture()), Utf8.decode(m.Name()), i.getN_layer(),
          i.getN_embd(), i.getN_head(), i.getN_head_kv(), i.getN_expert(), i.getN_expert_used(),
          i.getN_vocab(), i.getN_ctx_train(), i.getN_params_total(), i.getN_params_active(),
          i.getBos_token(), i.getEos_token(), i.getEot_token(), i.getHas_tokenizer(),
          i.getHas_chat_template());
    } finally {
      i.delete();
    }
  }

  /**
   * Where expert {@code expert} of layer {@code layer} lives.
   *
   * @throws MoeException {@link Status#OUT_OF_RANGE} for an expert the model does not have
   */
  public ExpertPlacement expertPlacement(int layer, int expert) {
    NativeExpertPlacement p = get().ExpertPlacement(layer, expert);
    try {
      return new ExpertPlacement(ExpertTier.fromCode(p.getTier()), p.getIn_memory(), p.getBytes(),
          Utf8.decode(p.WeightTypes()));
    } finally {
      p.delete();
    }
  }

  /**
   * Keeps a cached expert in memory (reading it now) until {@link #unpinExpert}; it counts
   * against the cache's budget, which keeps room for one step besides.
   *
   * @throws MoeException {@link Status#OUT_OF_MEMORY} when it would not, {@link
   *     Status#OUT_OF_RANGE} for an expert the model does not have
   */
  public void pinExpert(int layer, int expert) {
    get().PinExpert(layer, expert);
  }

  /**
   * A pinned expert becomes cached again.
   *
   * @throws MoeException {@link Status#INVALID_ARGUMENT} for a resident expert
   */
  public void unpinExpert(int layer, int expert) {
    get().UnpinExpert(layer, expert);
  }

  /**
   * Fills the expert cache's free slots with the most chosen experts of a routing profile; returns
   * how many were read (0 when every expert is resident).
   *
   * @throws MoeException {@link Status#INVALID_ARGUMENT} for a profile of another model
   */
  public long warmup(String profilePath) {
    return get().Warmup(Utf8.encode(profilePath, "profilePath"));
  }

  /** The model's chat template (Jinja text), or "" if it has none. */
  public String chatTemplate() {
    return Utf8.decode(get().ChatTemplate());
  }

  /**
   * Formats a conversation with the model's own chat template, ready to pass to {@link
   * Context#generate(String, GenerateOptions, TokenListener)} with {@link
   * GenerateOptions#parseSpecial(boolean) parseSpecial(true)}. BOS is not included (generation
   * adds it).
   *
   * @param addGenerationPrompt end the text where the assistant's reply begins
   * @throws MoeException {@link Status#NOT_FOUND} when the model has no template (pick one by
   *     name with the other overload), {@link Status#INVALID_ARGUMENT} for an unknown role
   */
  public String applyChatTemplate(List<ChatMessage> messages, boolean addGenerationPrompt) {
    return applyChatTemplate(messages, addGenerationPrompt, null);
  }

  /**
   * Formats a conversation with a named template: "chatml", "llama3", "mistral", "llama2",
   * "zephyr", "deepseek", "plain", "chatglm4", "deepseek3", "gpt-oss", "ernie4.5", "granite"
   * or "llama4";
   * {@code templateName} null means the model's own.
   *
   * @throws MoeException {@link Status#UNSUPPORTED} or {@link Status#INVALID_ARGUMENT} for a
   *     template name the library does not know
   */
  public String applyChatTemplate(
      List<ChatMessage> messages, boolean addGenerationPrompt, String templateName) {
    NativeModel m = get();
    NativeChat chat = new NativeChat();
    try {
      for (ChatMessage message : messages) {
        chat.Add(Utf8.encode(message.role(), "a message role"),
            Utf8.encode(message.content(), "a message content"));
      }
      byte[] name = templateName == null ? new byte[0] : Utf8.encode(templateName, "templateName");
      return Utf8.decode(m.ApplyChatTemplate(chat, name, addGenerationPrompt));
    } finally {
      chat.delete();
    }
  }

  /** A new streaming detokenizer over this model's vocabulary. */
  public Detokenizer newDetokenizer() {
    return new Detokenizer(this);
  }

  /** Token ids of {@code text}, with BOS first when the vocabulary uses one. */
  public int[] tokenize(String text) {
    return tokenize(text, true, false);
  }

  /**
   * Token ids of {@code text}.
   *
   * @param addBos prepend BOS when the vocabulary uses one
   * @param parseSpecial recognise control-token markup; off by default so that user text cannot
   *     inject it
   */
  public int[] tokenize(String text, boolean addBos, boolean parseSpecial) {
    return get().Tokenize(Utf8.encode(text, "text"), addBos, parseSpecial);
  }

  /**
   * The text of {@code tokens}.
   *
   * @throws MoeException {@link Status#OUT_OF_RANGE} or {@link Status#INVALID_ARGUMENT} for an id
   *     outside the vocabulary
   */
  public String detokenize(int[] tokens) {
    return Utf8.decode(get().Detokenize(tokens));
  }

  /**
   * Releases the model; idempotent, and safe from any thread. Contexts and detokenizers made
   * from it stay usable and keep its weights until they are closed. Using the model afterwards
   * throws {@link IllegalStateException}.
   */
  @Override
  public void close() {
    closed = true;
    nativeModel.Close();
  }

  NativeModel get() {
    if (closed) throw new IllegalStateException("the model is closed");
    return nativeModel;
  }

  // Forwards progress, keeping an exception for the caller: none may cross into C.
  private static final class ProgressBridge extends ProgressSink {
    private final ProgressListener listener;
    private final CallbackError error = new CallbackError();

    ProgressBridge(ProgressListener listener) {
      this.listener = listener;
    }

    @Override
    public boolean OnProgress(float progress) {
      try {
        return listener.onProgress(progress);
      } catch (Throwable t) {
        error.capture(t);
        return false;
      }
    }

    void rethrow() {
      error.rethrow();
    }
  }
}
