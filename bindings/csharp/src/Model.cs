using System;
using System.Collections.Generic;

namespace LibMoe {
  /// <summary>A loaded model (.moe or GGUF). Immutable once loaded: share one model between
  /// threads, each with its own <see cref="Context"/>. Dispose it when done; contexts still open
  /// keep the native model alive until they are disposed too.</summary>
  /// <example><code>
  /// using (var model = Model.Load("model.moe"))
  /// using (var ctx = model.CreateContext()) {
  ///   ctx.Generate("Once upon a time", new GenerateOptions { MaxTokens = 32 },
  ///                (token, piece) => { Console.Write(piece); return true; });
  /// }
  /// </code></example>
  public sealed class Model : IDisposable {
    // Never disposed by Dispose(): another thread may be calling it. The native layer keeps what
    // a running call uses; the wrapper goes with its finalizer.
    private readonly NativeModel native;
    private volatile bool disposed;

    private Model(NativeModel native) {
      this.native = native;
    }

    /// <summary>Loads a model.</summary>
    /// <exception cref="MoeException">Status.NotFound for a missing file, Status.CorruptModel
    /// for a damaged one, and so on.</exception>
    public static Model Load(string path, ProgressHandler progress = null) {
      return Load(path, new ModelOptions { Progress = progress });
    }

    /// <summary>Loads a model with <paramref name="options"/> (null: the defaults).</summary>
    public static Model Load(string path, ModelOptions options) {
      if (path == null) throw new ArgumentNullException("path");
      ModelOptions o = options ?? new ModelOptions();
      ProgressBridge bridge = o.Progress == null ? null : new ProgressBridge(o.Progress);
      try {
        return new Model(NativeModel.Load(path, o.UseMmap, bridge, o.ExpertCacheBytes,
                                          o.ExpertCacheFraction, (int)o.ExpertEviction,
                                          o.ExpertDirectIo, o.ExpertPlacementFile ?? "",
                                          o.ExpertPrefetch, o.MemoryLimitBytes,
                                          (int)o.MemoryFit, o.ExpertWarmupProfile ?? "",
                                          (int)o.Device, o.GpuIndex, o.GpuMemoryBytes));
      } catch (MoeException) {
        if (bridge != null) bridge.Rethrow();
        throw;
      } finally {
        if (bridge != null) bridge.Dispose();
      }
    }

    /// <summary>A new context (conversation) over this model; options null: the defaults.</summary>
    public Context CreateContext(ContextOptions options = null) {
      return new Context(this, options ?? new ContextOptions());
    }

    /// <summary>Where expert <paramref name="expert"/> of layer <paramref name="layer"/>
    /// lives.</summary>
    /// <exception cref="MoeException">Status.OutOfRange for an expert the model does not
    /// have.</exception>
    public ExpertPlacement GetExpertPlacement(int layer, int expert) {
      using (NativeExpertPlacement p = Native.ExpertPlacement(layer, expert)) {
        return new ExpertPlacement {
          Tier = (ExpertTier)p.tier, InMemory = p.in_memory, Bytes = p.bytes,
          WeightTypes = p.WeightTypes(),
        };
      }
    }

    /// <summary>Keeps a cached expert in memory (reading it now) until
    /// <see cref="UnpinExpert"/>; it counts against the cache's budget, which keeps room for one
    /// step besides.</summary>
    /// <exception cref="MoeException">Status.OutOfMemory when it would not.</exception>
    public void PinExpert(int layer, int expert) { Native.PinExpert(layer, expert); }

    /// <summary>A pinned expert becomes cached again.</summary>
    /// <exception cref="MoeException">Status.InvalidArgument for a resident expert.</exception>
    public void UnpinExpert(int layer, int expert) { Native.UnpinExpert(layer, expert); }

    /// <summary>Fills the expert cache's free slots with the most chosen experts of a routing
    /// profile; returns how many were read (0 when every expert is resident).</summary>
    public long Warmup(string profilePath) {
      if (profilePath == null) throw new ArgumentNullException("profilePath");
      return Native.Warmup(profilePath);
    }

    /// <summary>Where the forward passes run: "cpu", "cpu (why no GPU)" after Device.Auto, or
    /// "cuda:N NAME (what it holds)".</summary>
    public string Device {
      get { return Native.Device(); }
    }

    /// <summary>The model's hyper-parameters and vocabulary facts.</summary>
    public ModelInfo Info {
      get {
        NativeModel m = Native;
        using (NativeModelInfo i = m.Info()) {
          return new ModelInfo {
            Architecture = m.Architecture(), Name = m.Name(), Layers = i.n_layer,
            Experts = i.n_expert, ExpertsUsed = i.n_expert_used, VocabularySize = i.n_vocab,
            TrainedContextLength = i.n_ctx_train, TotalParameters = i.n_params_total,
            ActiveParameters = i.n_params_active, BosToken = i.bos_token, EosToken = i.eos_token,
            EotToken = i.eot_token, EmbeddingSize = i.n_embd, Heads = i.n_head,
            KvHeads = i.n_head_kv,
            HasTokenizer = i.has_tokenizer, HasChatTemplate = i.has_chat_template,
          };
        }
      }
    }

    /// <summary>The model's chat template (Jinja text), or "" if it has none.</summary>
    public string ChatTemplate { get { return Native.ChatTemplate(); } }

    /// <summary>Formats a conversation with the model's own chat template
    /// (<paramref name="templateName"/> null) or a named one: "chatml", "llama3", "mistral",
    /// "llama2", "zephyr", "deepseek", "plain", "chatglm4", "deepseek3", "gpt-oss", "ernie4.5",
    /// "granite" or "llama4". With <paramref name="addGenerationPrompt"/> the text ends
    /// where the assistant's reply begins. BOS is not included (generation adds it); generate from
    /// the result with <see cref="GenerateOptions.ParseSpecial"/> set.</summary>
    /// <exception cref="MoeException">Status.NotFound when the model has no template (name one),
    /// Status.Unsupported or Status.InvalidArgument for an unknown template name or role.
    /// </exception>
    public string ApplyChatTemplate(IEnumerable<ChatMessage> messages,
                                    bool addGenerationPrompt = true, string templateName = null) {
      if (messages == null) throw new ArgumentNullException("messages");
      NativeModel m = Native;
      using (var chat = new NativeChat()) {
        foreach (ChatMessage message in messages) chat.Add(message.Role, message.Content);
        return m.ApplyChatTemplate(chat, templateName ?? "", addGenerationPrompt);
      }
    }

    /// <summary>A new streaming detokenizer over this model's vocabulary.</summary>
    public Detokenizer CreateDetokenizer() {
      return new Detokenizer(this);
    }

    /// <summary>Token ids of <paramref name="text"/>. addBos prepends BOS when the vocabulary
    /// uses one; parseSpecial recognises control-token
    /// markup; it is off by default so that user text cannot inject it.</summary>
    public int[] Tokenize(string text, bool addBos = true, bool parseSpecial = false) {
      if (text == null) throw new ArgumentNullException("text");
      return Native.Tokenize(text, addBos, parseSpecial);
    }

    /// <summary>The text of <paramref name="tokens"/>.</summary>
    /// <exception cref="MoeException">Status.OutOfRange or Status.InvalidArgument for an id
    /// outside the vocabulary.</exception>
    public string Detokenize(int[] tokens) {
      if (tokens == null) throw new ArgumentNullException("tokens");
      return Native.Detokenize(tokens, (uint)tokens.Length);
    }

    /// <summary>Releases the model; idempotent, and safe from any thread. Contexts and
    /// detokenizers made from it stay usable and keep its weights until they are disposed. Using
    /// the model afterwards throws <see cref="ObjectDisposedException"/>.</summary>
    public void Dispose() {
      disposed = true;
      native.Close();
    }

    internal NativeModel Native {
      get {
        if (disposed) throw new ObjectDisposedException("Model", "the model is disposed");
        return native;
      }
    }

    // Forwards progress, keeping an exception for the caller: none may cross into C.
    private sealed class ProgressBridge : ProgressSink {
      private readonly ProgressHandler handler;
      private readonly CallbackError error = new CallbackError();

      public ProgressBridge(ProgressHandler handler) {
        this.handler = handler;
      }

      public override bool OnProgress(float progress) {
        try {
          return handler(progress);
        } catch (Exception e) {
          error.Capture(e);
          return false;
        }
      }

      public void Rethrow() { error.Rethrow(); }
    }
  }
}
