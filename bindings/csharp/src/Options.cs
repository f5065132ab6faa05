using System.Collections.Generic;

namespace LibMoe {
  /// <summary>How to generate. Starts from the library's defaults (temperature 0.8, top-k 40,
  /// top-p 0.95, min-p 0.05, 256 tokens).</summary>
  public sealed class GenerateOptions {
    public GenerateOptions() {
      using (var d = new NativeGenerateOptions()) {
        MaxTokens = d.max_tokens;
        Temperature = d.temperature;
        TopK = d.top_k;
        TopP = d.top_p;
        MinP = d.min_p;
        RepeatPenalty = d.repeat_penalty;
        Seed = d.seed;
        ParseSpecial = d.parse_special;
      }
      Stops = new List<string>();
    }

    public int MaxTokens { get; set; }
    /// <summary>0 or less: greedy (argmax).</summary>
    public float Temperature { get; set; }
    public int TopK { get; set; }
    public float TopP { get; set; }
    public float MinP { get; set; }
    public float RepeatPenalty { get; set; }
    /// <summary>Added to the context's seed: same seeds and inputs give the same output.</summary>
    public long Seed { get; set; }
    /// <summary>Recognise control-token markup such as &lt;|im_start|&gt; in the prompt.</summary>
    public bool ParseSpecial { get; set; }
    /// <summary>Generation ends before any of these; they are not part of the output.</summary>
    public IList<string> Stops { get; private set; }

    internal NativeGenerateOptions ToNative() {
      var n = new NativeGenerateOptions();
      n.max_tokens = MaxTokens;
      n.temperature = Temperature;
      n.top_k = TopK;
      n.top_p = TopP;
      n.min_p = MinP;
      n.repeat_penalty = RepeatPenalty;
      n.seed = Seed;
      n.parse_special = ParseSpecial;
      foreach (string s in Stops) n.AddStop(s);
      return n;
    }
  }

  /// <summary>How to create a <see cref="Context"/>; the defaults suit most uses.</summary>
  public sealed class ContextOptions {
    /// <summary>Tokens the context holds; 0: the model's, at most 4096.</summary>
    public int ContextLength { get; set; }
    /// <summary>Worker threads; 0: one per core.</summary>
    public int Threads { get; set; }
    public long Seed { get; set; }
  }

  /// <summary>Statistics of the last generate call on a context.</summary>
  public sealed class Stats {
    public int PromptTokens { get; internal set; }
    public int GeneratedTokens { get; internal set; }
    public double PromptSeconds { get; internal set; }
    public double GenerateSeconds { get; internal set; }
    public double PromptTokensPerSecond { get; internal set; }
    public double GenerateTokensPerSecond { get; internal set; }
    public double ActiveFraction { get; internal set; }
    public FinishReason FinishReason { get; internal set; }
  }

  /// <summary>A model's hyper-parameters and vocabulary facts.</summary>
  public sealed class ModelInfo {
    public string Architecture { get; internal set; }
    public string Name { get; internal set; }
    public int Layers { get; internal set; }
    public int Experts { get; internal set; }
    public int ExpertsUsed { get; internal set; }
    public int VocabularySize { get; internal set; }
    public int TrainedContextLength { get; internal set; }
    public long TotalParameters { get; internal set; }
    public long ActiveParameters { get; internal set; }
    public int BosToken { get; internal set; }
    public int EosToken { get; internal set; }
    public bool HasTokenizer { get; internal set; }
    public bool HasChatTemplate { get; internal set; }
  }
}
