using System.Collections.Generic;

namespace LibMoe {
  /// <summary>How to generate (its sampling settings also serve <see cref="Context.Sample"/>).
  /// Starts from the library's defaults (temperature 0.8, top-k 40,
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
        FrequencyPenalty = d.frequency_penalty;
        PresencePenalty = d.presence_penalty;
        PenaltyLastN = d.penalty_last_n;
        Seed = d.seed;
        ParseSpecial = d.parse_special;
      }
      Stops = new List<string>();
      LogitBias = new Dictionary<int, float>();
    }

    /// <summary>At most this many tokens (default 256).</summary>
    public int MaxTokens { get; set; }
    /// <summary>0 or less: greedy (argmax).</summary>
    public float Temperature { get; set; }
    /// <summary>Keep the k likeliest tokens; 0 or less: off.</summary>
    public int TopK { get; set; }
    /// <summary>Nucleus sampling; 1 or more: off.</summary>
    public float TopP { get; set; }
    /// <summary>Drop tokens below this fraction of the likeliest one's probability; 0: off.
    /// </summary>
    public float MinP { get; set; }
    /// <summary>1: off (default).</summary>
    public float RepeatPenalty { get; set; }
    /// <summary>Penalises tokens in proportion to how often they occurred lately; 0: off.
    /// </summary>
    public float FrequencyPenalty { get; set; }
    /// <summary>Penalises every token that occurred lately, however often; 0: off.</summary>
    public float PresencePenalty { get; set; }
    /// <summary>Tokens the penalties look back over; -1: all. Default 64.</summary>
    public int PenaltyLastN { get; set; }
    /// <summary>Added to a token's logit before sampling: a large positive bias forces the token,
    /// float.NegativeInfinity bans it. An id outside the vocabulary makes the call fail with
    /// Status.OutOfRange.</summary>
    public IDictionary<int, float> LogitBias { get; private set; }
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
      n.frequency_penalty = FrequencyPenalty;
      n.presence_penalty = PresencePenalty;
      n.penalty_last_n = PenaltyLastN;
      foreach (KeyValuePair<int, float> b in LogitBias) n.AddLogitBias(b.Key, b.Value);
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
    /// <summary>Base seed of the samplers (default 0).</summary>
    public long Seed { get; set; }
    /// <summary>Element type of the KV cache (default F32; F16 halves its memory).</summary>
    public KvType KvType { get; set; }
    /// <summary>Dynamic top-k: each token keeps its best routed experts until they hold this
    /// share of its top-k router scores, in [0, 1]; 0 (default): always the model's
    /// top-k.</summary>
    public float ExpertConfidence { get; set; }
    /// <summary>With <see cref="ExpertConfidence"/>: at least this many experts per token
    /// (default 1).</summary>
    public int MinExperts { get; set; } = 1;
    /// <summary>The router's logits are divided by this before gating (default 1: as the model
    /// routes).</summary>
    public float RouterTemperature { get; set; } = 1.0f;
    /// <summary>Noise on the logits that choose experts (not on those that weight them); a
    /// token's noise depends on the seed, layer, position and expert (default none).</summary>
    public RouterNoise RouterNoise { get; set; }
    /// <summary>The noise's standard deviation (Gaussian) or scale (Gumbel).</summary>
    public float RouterNoiseScale { get; set; }
    /// <summary>The noise's seed.</summary>
    public long RouterNoiseSeed { get; set; }
    /// <summary>Capacity with re-routing: in one forward step of n tokens (a prompt chunk; one
    /// decode token is never capped) no expert takes more than ceil(factor x n x k / experts) of
    /// them, and a token whose choice is full takes its next best expert with room. 0 (default):
    /// no cap.</summary>
    public float ExpertCapacityFactor { get; set; }
    /// <summary>Load-aware re-weighting: over this many tokens before each one, an expert that
    /// took more than <see cref="LoadLimit"/> x its fair share of a layer's choices has its
    /// weight scaled down by the excess, the token's other experts' up. 0 (default): off.</summary>
    public int LoadWindow { get; set; }
    /// <summary>With <see cref="LoadWindow"/>: the share, in multiples of the fair share, above
    /// which an expert gives way (default 2, at least 1).</summary>
    public float LoadLimit { get; set; } = 2.0f;
  }

  /// <summary>Noise on the router's logits that choose experts (<c>moe_router_noise</c>).</summary>
  public enum RouterNoise {
    /// <summary>None (the default).</summary>
    None = 0,
    /// <summary>Gaussian, of the given standard deviation.</summary>
    Gaussian = 1,
    /// <summary>Gumbel, of the given scale: at 1 the top-k draws experts by probability.</summary>
    Gumbel = 2,
  }

  /// <summary>Element type of a context's KV cache (<c>moe_kv_type</c>).</summary>
  public enum KvType {
    /// <summary>32-bit floats (the default).</summary>
    F32 = 0,
    /// <summary>16-bit floats: half the memory, a little rounding.</summary>
    F16 = 1,
    /// <summary>8-bit blocks with a scale per 32 values (Q8_0): a quarter of F32's memory; the
    /// model's head size must be a multiple of 32.</summary>
    Q8_0 = 2,
  }

  /// <summary>How to load a <see cref="Model"/>; the defaults suit most uses.</summary>
  public sealed class ModelOptions {
    /// <summary>Leave the weights in the memory-mapped file instead of copying them into memory
    /// (default false): instant start and pages shared between processes, but reads through a
    /// cold or crowded page cache are slower (<c>moe_model_params.use_mmap</c>).</summary>
    public bool UseMmap { get; set; }
    /// <summary>Reports load progress in [0, 1]; returning false cancels the load.</summary>
    public ProgressHandler Progress { get; set; }
    /// <summary>Reads the routed experts from the model file on demand into a cache of this many
    /// bytes instead of loading them all (<c>expert_cache_bytes</c>; 0: all resident). Outputs
    /// are the same. .moe and GGUF files, and Hugging Face checkpoints whose experts are stored
    /// one matrix per expert.</summary>
    public long ExpertCacheBytes { get; set; }
    /// <summary>The expert cache as a fraction (0, 1] of all expert bytes.</summary>
    public double ExpertCacheFraction { get; set; }
    /// <summary>Which cached expert makes room (default Lru).</summary>
    public ExpertEviction ExpertEviction { get; set; }
    /// <summary>Direct I/O for expert reads where the file system allows it (default true).
    /// </summary>
    public bool ExpertDirectIo { get; set; } = true;
    /// <summary>A placement file (JSON; see the README): experts resident or pinned, the others
    /// cached (expert_placement_path; null: none). Turns the expert cache on by itself.</summary>
    public string ExpertPlacementFile { get; set; }
    /// <summary>A routing profile (<see cref="Context.WriteRoutingProfile"/> or moe-cli
    /// profile): its most chosen experts are read into the cache at load (null: none).</summary>
    public string ExpertWarmupProfile { get; set; }
    /// <summary>Read the next layer's likely experts ahead (default true).</summary>
    public bool ExpertPrefetch { get; set; } = true;
    /// <summary>The memory the model may take in bytes (0, the default: what the system has
    /// available); a model that does not fit is handled as <see cref="MemoryFit"/> says.</summary>
    public long MemoryLimitBytes { get; set; }
    /// <summary>What a model larger than its memory does.</summary>
    public MemoryFit MemoryFit { get; set; } = MemoryFit.CacheExperts;
    /// <summary>Where the model runs (default Cpu). The CUDA path has been compiled but not yet
    /// run on a GPU: see the README.</summary>
    public Device Device { get; set; } = Device.Cpu;
    /// <summary>Which CUDA device (default 0).</summary>
    public int GpuIndex { get; set; }
    /// <summary>Device memory the weights may take in bytes (0: the free memory less a reserve);
    /// routed experts beyond it stay in host memory and run on the CPU.</summary>
    public long GpuMemoryBytes { get; set; }
  }

  /// <summary>Where a model runs (moe_device).</summary>
  public enum Device {
    /// <summary>The CPU (the default).</summary>
    Cpu = 0,
    /// <summary>A CUDA GPU; the load fails with Status.Unsupported and the reason when none can
    /// be used.</summary>
    Cuda = 1,
    /// <summary>A CUDA GPU when one can be used, the CPU otherwise (Model.Device says which).
    /// </summary>
    Auto = 2,
  }

  /// <summary>What a load does when the weights copied into memory would not fit.</summary>
  public enum MemoryFit {
    /// <summary>The routed experts stay in the file behind an expert cache sized to fit (the
    /// default).</summary>
    CacheExperts = 0,
    /// <summary>The load fails with Status.OutOfMemory, naming the bytes needed.</summary>
    Error = 1,
  }

  /// <summary>Where an expert lives.</summary>
  public enum ExpertTier {
    /// <summary>Loaded with the model, always in memory.</summary>
    Resident = 0,
    /// <summary>Read from the model file into the expert cache when a step needs it.</summary>
    Cached = 1,
    /// <summary>In the expert cache and never evicted.</summary>
    Pinned = 2,
  }

  /// <summary>Where one expert lives (moe_expert_placement).</summary>
  public sealed class ExpertPlacement {
    public ExpertTier Tier { get; internal set; }
    /// <summary>Whether its weights are in memory now.</summary>
    public bool InMemory { get; internal set; }
    /// <summary>Its gate, up and down matrices as the model file stores them.</summary>
    public long Bytes { get; internal set; }
    /// <summary>Their types as stored, "gate/up/down", e.g. "Q4_K/Q4_K/Q6_K".</summary>
    public string WeightTypes { get; internal set; }
  }

  /// <summary>What the expert cache did during a call, for one layer
  /// (<see cref="Context.GetExpertLayerStats"/>) or all of them (<see cref="Stats.ExpertCache"/>);
  /// all zero when every expert is resident.</summary>
  public sealed class ExpertCacheStats {
    /// <summary>The call's experts found in memory (or already being read).</summary>
    public long Hits { get; internal set; }
    /// <summary>The call's experts read from the model file.</summary>
    public long Misses { get; internal set; }
    /// <summary>Read from the file, misses and prefetches.</summary>
    public long BytesRead { get; internal set; }
    /// <summary>Time reading, on the I/O threads.</summary>
    public double ReadSeconds { get; internal set; }
    /// <summary>Time compute waited for reads.</summary>
    public double WaitSeconds { get; internal set; }
    /// <summary>Experts read ahead by pre-gating.</summary>
    public long Prefetches { get; internal set; }
    /// <summary>Of those, the ones a step then used.</summary>
    public long PrefetchHits { get; internal set; }
    /// <summary>Read ahead and evicted unused.</summary>
    public long PrefetchWastedBytes { get; internal set; }
    /// <summary>Experts used while a guess was out for their layer.</summary>
    public long Predicted { get; internal set; }
    /// <summary>Of those, the ones the guess named.</summary>
    public long PredictedRight { get; internal set; }
    /// <summary>Experts in memory when the call ended.</summary>
    public int ExpertsInMemory { get; internal set; }
    /// <summary>Hits / (hits + misses), or 0 when there were none.</summary>
    public double HitRate { get { return Hits + Misses > 0 ? (double)Hits / (Hits + Misses) : 0; } }
    /// <summary>The share of the used experts that pre-gating had guessed (0: no guesses).</summary>
    public double PredictionRecall { get { return Predicted > 0 ? (double)PredictedRight / Predicted : 0; } }
  }

  /// <summary>Which cached expert makes room when the expert cache is full.</summary>
  public enum ExpertEviction {
    /// <summary>The least recently used (the default).</summary>
    Lru = 0,
    /// <summary>The least frequently used (counts age), then the least recent.</summary>
    Lfru = 1,
  }

  /// <summary>Statistics of the last Generate or Decode call on a context.</summary>
  public sealed class Stats {
    /// <summary>Prompt tokens this call processed (not those already in the context).</summary>
    public int PromptTokens { get; internal set; }
    /// <summary>Tokens generated.</summary>
    public int GeneratedTokens { get; internal set; }
    /// <summary>Time spent on the prompt.</summary>
    public double PromptSeconds { get; internal set; }
    /// <summary>Time spent generating.</summary>
    public double GenerateSeconds { get; internal set; }
    /// <summary>Prompt speed.</summary>
    public double PromptTokensPerSecond { get; internal set; }
    /// <summary>Generation speed.</summary>
    public double GenerateTokensPerSecond { get; internal set; }
    /// <summary>Fraction of all parameters touched per token, measured from the experts that
    /// fired.</summary>
    public double ActiveFraction { get; internal set; }
    /// <summary>Why generation stopped.</summary>
    public FinishReason FinishReason { get; internal set; }
    /// <summary>Time in attention, summed over the call.</summary>
    public double AttentionSeconds { get; internal set; }
    /// <summary>Time in the expert routers.</summary>
    public double RouterSeconds { get; internal set; }
    /// <summary>Time in the experts.</summary>
    public double ExpertsSeconds { get; internal set; }
    /// <summary>Time in the output head.</summary>
    public double HeadSeconds { get; internal set; }
    /// <summary>Time in sampling.</summary>
    public double SamplingSeconds { get; internal set; }
    /// <summary>Mean parameters touched per token.</summary>
    public double ActiveParametersPerToken { get; internal set; }
    /// <summary>Mean router entropy in nats, per token and layer.</summary>
    public double MeanRouterEntropy { get; internal set; }
    /// <summary>Weight bytes read during the call.</summary>
    public long WeightBytesRead { get; internal set; }
    /// <summary>What the expert cache did during the call, over all layers.</summary>
    public ExpertCacheStats ExpertCache { get; internal set; }
    /// <summary>Choices an expert capacity moved to a later expert, over tokens and
    /// layers.</summary>
    public long ReroutedChoices { get; internal set; }
    /// <summary>Choices an expert capacity left out.</summary>
    public long DroppedChoices { get; internal set; }
    /// <summary>Weights load-aware re-weighting scaled down.</summary>
    public long ReweightedChoices { get; internal set; }
    /// <summary>Weight bytes a token's computation touched, on average (dense matrices, its
    /// routed experts, the head where logits were computed).</summary>
    public double WeightBytesPerToken { get; internal set; }
    /// <summary>Multiply-adds of a token's matrix products and attention, on average.</summary>
    public double MultiplyAddsPerToken { get; internal set; }
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
    /// <summary>End of turn, -1 when the vocabulary has none.</summary>
    public int EotToken { get; internal set; }
    /// <summary>The embedding (hidden) size, n_embd.</summary>
    public int EmbeddingSize { get; internal set; }
    /// <summary>Attention (query) heads.</summary>
    public int Heads { get; internal set; }
    /// <summary>Key/value heads (fewer than Heads with grouped-query attention).</summary>
    public int KvHeads { get; internal set; }
    public bool HasTokenizer { get; internal set; }
    public bool HasChatTemplate { get; internal set; }
  }
}
