package moe

import (
	"runtime"
	"strings"
	"sync"

	"github.com/libmoe/moe/internal/raw"
)

// GenerateOptions says how to generate (its sampling fields also serve Context.Sample). Start from DefaultGenerateOptions() (the library's
// defaults) or set every field you care about: the zero value means greedy decoding with
// the library's default length (MaxTokens 0: 256 tokens; a negative MaxTokens is an error).
type GenerateOptions struct {
	MaxTokens     int
	Temperature   float32 // <= 0: greedy (argmax)
	TopK          int     // <= 0: off
	TopP          float32 // >= 1 or 0: off
	MinP          float32 // <= 0: off
	RepeatPenalty float32 // 1 or 0: off
	Seed          int64   // added to the context's seed
	ParseSpecial  bool    // recognise control-token markup in the prompt
	Stop          []string

	FrequencyPenalty float32 // penalises tokens in proportion to how often they occurred lately; 0: off
	PresencePenalty  float32 // penalises every token that occurred lately, however often; 0: off
	PenaltyLastN     int     // tokens the penalties look back over; 0: the library default (64); -1: all
	// LogitBias is added to the tokens' logits before sampling: a large positive bias forces a
	// token, float32(math.Inf(-1)) bans it. An id outside the vocabulary is an error
	// (ErrOutOfRange).
	LogitBias map[int32]float32
}

// DefaultGenerateOptions returns the library's defaults (temperature 0.8, top-k 40, top-p 0.95,
// min-p 0.05, 256 tokens).
func DefaultGenerateOptions() GenerateOptions {
	d := raw.NewNativeGenerateOptions()
	defer raw.DeleteNativeGenerateOptions(d)
	return GenerateOptions{
		MaxTokens: d.GetMax_tokens(), Temperature: d.GetTemperature(), TopK: d.GetTop_k(),
		TopP: d.GetTop_p(), MinP: d.GetMin_p(), RepeatPenalty: d.GetRepeat_penalty(),
		Seed: d.GetSeed(), ParseSpecial: d.GetParse_special(),
		FrequencyPenalty: d.GetFrequency_penalty(), PresencePenalty: d.GetPresence_penalty(),
		PenaltyLastN: d.GetPenalty_last_n(),
	}
}

func (o *GenerateOptions) native() raw.NativeGenerateOptions {
	n := raw.NewNativeGenerateOptions()
	if o == nil {
		return n
	}
	if o.MaxTokens != 0 { // negative values reach the library, which rejects them
		n.SetMax_tokens(o.MaxTokens)
	}
	n.SetTemperature(o.Temperature)
	n.SetTop_k(o.TopK)
	topP := o.TopP
	if topP == 0 {
		topP = 1
	}
	n.SetTop_p(topP)
	n.SetMin_p(o.MinP)
	penalty := o.RepeatPenalty
	if penalty == 0 {
		penalty = 1
	}
	n.SetRepeat_penalty(penalty)
	n.SetFrequency_penalty(o.FrequencyPenalty)
	n.SetPresence_penalty(o.PresencePenalty)
	if o.PenaltyLastN != 0 {
		n.SetPenalty_last_n(o.PenaltyLastN)
	}
	for token, bias := range o.LogitBias {
		n.AddLogitBias(int(token), bias)
	}
	n.SetSeed(o.Seed)
	n.SetParse_special(o.ParseSpecial)
	for _, s := range o.Stop {
		n.AddStop(s)
	}
	return n
}

// Stats describes the last Generate or Decode call on a context.
type Stats struct {
	PromptTokens            int // prompt tokens this call processed (not those already cached)
	GeneratedTokens         int
	PromptSeconds           float64
	GenerateSeconds         float64
	PromptTokensPerSecond   float64
	GenerateTokensPerSecond float64
	ActiveFraction          float64 // of all parameters, per token, from the experts that fired
	FinishReason            FinishReason

	// Time per stage, summed over the call.
	AttentionSeconds, RouterSeconds, ExpertsSeconds, HeadSeconds, SamplingSeconds float64

	ActiveParamsPerToken float64 // mean parameters touched per token
	MeanRouterEntropy    float64 // nats, per token and layer
	WeightBytesRead      int64

	ExpertCache ExpertCacheStats // what the expert cache did during the call, over all layers

	// The routing policies at work, over tokens and layers: choices an expert capacity moved to a
	// later expert or left out, weights load-aware re-weighting scaled down.
	ReroutedChoices, DroppedChoices, ReweightedChoices int64

	// What a token cost on average: weight bytes its computation touched and multiply-adds of its
	// matrix products and attention.
	WeightBytesPerToken, MultiplyAddsPerToken float64
}

// ExpertCacheStats says what the expert cache did during a call, for one layer
// (Context.ExpertLayerStats) or all of them (Stats.ExpertCache); all zero when every expert is
// resident.
type ExpertCacheStats struct {
	Hits                int64   // the call's experts found in memory (or already being read)
	Misses              int64   // the call's experts read from the model file
	BytesRead           int64   // read from the file, misses and prefetches
	ReadSeconds         float64 // time reading, on the I/O threads
	WaitSeconds         float64 // time compute waited for reads
	Prefetches          int64   // experts read ahead by pre-gating
	PrefetchHits        int64   // of those, the ones a step then used
	PrefetchWastedBytes int64   // read ahead and evicted unused
	Predicted           int64   // experts used while a guess was out for their layer
	PredictedRight      int64   // of those, the ones the guess named
	ExpertsInMemory     int     // experts in memory when the call ended
}

// HitRate is hits / (hits + misses), or 0 when there were none.
func (s ExpertCacheStats) HitRate() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// PredictionRecall is the share of the used experts that pre-gating had guessed (0: no guesses).
func (s ExpertCacheStats) PredictionRecall() float64 {
	if s.Predicted == 0 {
		return 0
	}
	return float64(s.PredictedRight) / float64(s.Predicted)
}

// Context is one conversation over a Model (KV cache and sampler). Use it from one goroutine at a
// time (a concurrent call fails with ErrBusy); Cancel and Close may be called from any goroutine.
type Context struct {
	model *Model
	h     handle[raw.NativeContext]

	routingMu   sync.Mutex
	routing     *routingBridge  // the routing func's bridge, while the native context may call it
	routingSink raw.RoutingSink // its director
}

// Model is the model the context was created from.
func (c *Context) Model() *Model { return c.model }

func (c *Context) with(f func(raw.NativeContext) error) error {
	n, err := c.h.get()
	if err != nil {
		return err
	}
	err = f(n)
	runtime.KeepAlive(c) // the finalizer must not delete n while f uses it
	return err
}

// Generate appends prompt to the context (BOS first when it is empty) and generates, calling
// onToken (may be nil) with each token and the text it completes (token -1: a final flush).
// onToken returning false stops generation (FinishCallback). A panic in onToken stops generation
// and is re-raised here. Cancel from another goroutine makes it return ErrCancelled.
func (c *Context) Generate(prompt string, opts *GenerateOptions,
	onToken func(token int32, piece string) bool) (FinishReason, error) {
	return c.run(opts, onToken, func(n raw.NativeContext, o raw.NativeGenerateOptions, s raw.TokenSink) int {
		return n.Generate(prompt, o, s)
	})
}

// GenerateTokens is Generate with prompt token ids, used exactly as given: no BOS is added, on an
// empty context too (Model.Tokenize with addBOS puts it first).
func (c *Context) GenerateTokens(prompt []int32, opts *GenerateOptions,
	onToken func(token int32, piece string) bool) (FinishReason, error) {
	return c.run(opts, onToken, func(n raw.NativeContext, o raw.NativeGenerateOptions, s raw.TokenSink) int {
		return n.GenerateTokens(prompt, o, s)
	})
}

// Complete generates and returns the whole completion.
func (c *Context) Complete(prompt string, opts *GenerateOptions) (string, error) {
	var b strings.Builder
	_, err := c.Generate(prompt, opts, func(_ int32, piece string) bool {
		b.WriteString(piece)
		return true
	})
	return b.String(), err
}

func (c *Context) run(opts *GenerateOptions, onToken func(int32, string) bool,
	f func(raw.NativeContext, raw.NativeGenerateOptions, raw.TokenSink) int) (FinishReason, error) {
	o := opts.native()
	defer raw.DeleteNativeGenerateOptions(o)
	var sink raw.TokenSink
	var bridge *tokenBridge
	if onToken != nil {
		bridge = &tokenBridge{f: onToken}
		sink = raw.NewDirectorTokenSink(bridge)
		defer raw.DeleteDirectorTokenSink(sink)
	}
	var reason int
	err := c.with(func(n raw.NativeContext) error {
		return call(func() { reason = f(n, o, sink) })
	})
	if bridge != nil && bridge.panicked != nil {
		panic(bridge.panicked)
	}
	c.repanicFromRouting()
	return FinishReason(reason), err
}

// SetRoutingFunc sets (nil: removes) the routing trace: f is told, during later Generate and
// Decode calls and on their goroutine, each processed token's experts in every MoE layer, best
// first (the model's top-k; -1 where it ran fewer, under a routing policy or with experts
// switched off), and their weights (0 for a -1) — moe_context_set_routing_callback. A step tells
// layer 0 for all its tokens, then layer 1, ...; dense layers tell nothing. The slices are f's
// to keep. A panic in f ends the telling for that call and is re-raised as the call returns.
// ErrBusy while a call runs on the context.
func (c *Context) SetRoutingFunc(f func(position, layer int, experts []int32, weights []float32)) error {
	c.routingMu.Lock()
	defer c.routingMu.Unlock()
	var next raw.RoutingSink
	var bridge *routingBridge
	if f != nil {
		bridge = &routingBridge{f: f}
		next = raw.NewDirectorRoutingSink(bridge)
	}
	if err := c.with(func(n raw.NativeContext) error {
		return call(func() { n.SetRoutingSink(next) })
	}); err != nil {
		if next != nil {
			raw.DeleteDirectorRoutingSink(next)
		}
		return err
	}
	if c.routingSink != nil {
		raw.DeleteDirectorRoutingSink(c.routingSink)
	}
	c.routing, c.routingSink = bridge, next
	return nil
}

func (c *Context) repanicFromRouting() {
	c.routingMu.Lock()
	b := c.routing
	c.routingMu.Unlock()
	if b != nil && b.panicked != nil {
		p := b.panicked
		b.panicked = nil
		panic(p)
	}
}

type routingBridge struct {
	f        func(int, int, []int32, []float32)
	panicked interface{}
}

// OnRouting is called by the native layer; a panic must not unwind through C.
func (b *routingBridge) OnRouting(e raw.RoutingEvent) {
	if b.panicked != nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			b.panicked = r
		}
	}()
	b.f(int(e.Position()), int(e.Layer()), e.Experts(), e.Weights())
}

type tokenBridge struct {
	f        func(int32, string) bool
	panicked interface{}
}

// OnToken is called by the native layer; a panic must not unwind through C.
func (b *tokenBridge) OnToken(token int, piece string) (ok bool) {
	if b.panicked != nil {
		return false
	}
	defer func() {
		if r := recover(); r != nil {
			b.panicked, ok = r, false
		}
	}()
	return b.f(int32(token), piece)
}

// Cancel asks the Generate call running on this context (in another goroutine) to stop soon; it
// then returns ErrCancelled. Tokens processed so far stay in the context. It returns at once, and
// is harmless when nothing runs or the context is closed.
func (c *Context) Cancel() {
	// The native wrapper outlives Close (only the finalizer deletes it), and cancels nothing
	// once closed.
	c.h.mu.Lock()
	n := c.h.native
	c.h.mu.Unlock()
	_ = call(n.Cancel)
	runtime.KeepAlive(c)
}

// Reset forgets everything in the context.
func (c *Context) Reset() error {
	return c.with(func(n raw.NativeContext) error { return call(n.Reset) })
}

// Truncate keeps the first keep tokens and forgets the rest.
func (c *Context) Truncate(keep int) error {
	return c.with(func(n raw.NativeContext) error { return call(func() { n.Truncate(keep) }) })
}

// Len is the number of tokens in the context (moe_context_n_past). A following Generate processes
// only its own prompt: what is already here is reused.
func (c *Context) Len() (n int, err error) {
	err = c.with(func(nc raw.NativeContext) error { return call(func() { n = nc.NPast() }) })
	return n, err
}

// Cap is the context length in tokens (moe_context_n_ctx).
func (c *Context) Cap() (n int, err error) {
	err = c.with(func(nc raw.NativeContext) error { return call(func() { n = nc.NCtx() }) })
	return n, err
}

// ExpertCounts says how many tokens chose each expert during the last Generate or Decode call,
// as counts[layer][expert]. Each processed token picks ModelInfo.ExpertsUsed experts per layer.
func (c *Context) ExpertCounts() (counts [][]int64, err error) {
	var flat []int64
	var experts int
	err = c.with(func(n raw.NativeContext) error {
		return call(func() {
			flat = n.ExpertCounts()
			experts = n.NExpert()
		})
	})
	if err != nil || experts == 0 {
		return nil, err
	}
	for layer := 0; layer+experts <= len(flat); layer += experts {
		counts = append(counts, flat[layer:layer+experts:layer+experts])
	}
	return counts, nil
}

// Decode appends tokens to the context and computes the logits of the last one: the low-level
// path, for callers that pick tokens themselves with Logits or Sample. Unlike Generate, nothing
// is added (no BOS). An id outside the vocabulary matches ErrOutOfRange; tokens that do not fit
// match ErrContextFull.
func (c *Context) Decode(tokens []int32) error {
	err := c.with(func(n raw.NativeContext) error { return call(func() { n.Decode(tokens) }) })
	c.repanicFromRouting()
	return err
}

// Logits returns a copy of the logits of the last decoded token, one per vocabulary entry (an
// error before anything was decoded).
func (c *Context) Logits() (logits []float32, err error) {
	err = c.with(func(n raw.NativeContext) error { return call(func() { logits = n.Logits() }) })
	return logits, err
}

// Sample picks a token from the current logits with the sampling fields of opts (temperature,
// top-k/p, min-p, penalties, logit bias, seed; MaxTokens, Stop and ParseSpecial do not apply);
// nil opts means the library's defaults, as for Generate. The token is not appended: Decode it
// to continue.
func (c *Context) Sample(opts *GenerateOptions) (token int32, err error) {
	o := opts.native()
	defer raw.DeleteNativeGenerateOptions(o)
	err = c.with(func(n raw.NativeContext) error {
		return call(func() { token = int32(n.Sample(o)) })
	})
	if err != nil {
		return 0, err
	}
	return token, nil
}

// Stats describes the last Generate or Decode call.
func (c *Context) Stats() (st Stats, err error) {
	err = c.with(func(n raw.NativeContext) error {
		return call(func() {
			s := n.Stats()
			defer raw.DeleteNativeStats(s)
			st = Stats{
				PromptTokens: s.GetPrompt_tokens(), GeneratedTokens: s.GetGenerated_tokens(),
				PromptSeconds: s.GetPrompt_seconds(), GenerateSeconds: s.GetGenerate_seconds(),
				PromptTokensPerSecond:   s.GetPrompt_tokens_per_second(),
				GenerateTokensPerSecond: s.GetGenerate_tokens_per_second(),
				ActiveFraction:          s.GetActive_fraction(),
				FinishReason:            FinishReason(s.GetFinish_reason()),
				AttentionSeconds:        s.GetAttention_seconds(),
				RouterSeconds:           s.GetRouter_seconds(),
				ExpertsSeconds:          s.GetExperts_seconds(),
				HeadSeconds:             s.GetHead_seconds(),
				SamplingSeconds:         s.GetSampling_seconds(),
				ActiveParamsPerToken:    s.GetActive_params_per_token(),
				MeanRouterEntropy:       s.GetMean_router_entropy(),
				WeightBytesRead:         s.GetWeight_bytes_read(),
				ExpertCache: ExpertCacheStats{
					Hits: s.GetExpert_cache_hits(), Misses: s.GetExpert_cache_misses(),
					BytesRead: s.GetExpert_bytes_read(), ReadSeconds: s.GetExpert_read_seconds(),
					WaitSeconds: s.GetExpert_wait_seconds(), Prefetches: s.GetExpert_prefetches(),
					PrefetchHits:        s.GetExpert_prefetch_hits(),
					PrefetchWastedBytes: s.GetExpert_prefetch_wasted_bytes(),
					Predicted:           s.GetExpert_predicted(),
					PredictedRight:      s.GetExpert_predicted_right(),
				},
				ReroutedChoices:      s.GetRerouted_choices(),
				DroppedChoices:       s.GetDropped_choices(),
				ReweightedChoices:    s.GetReweighted_choices(),
				WeightBytesPerToken:  s.GetWeight_bytes_per_token(),
				MultiplyAddsPerToken: s.GetMultiply_adds_per_token(),
			}
		})
	})
	if err != nil {
		return st, err
	}
	layers, err := c.ExpertLayerStats()
	for _, l := range layers {
		st.ExpertCache.ExpertsInMemory += l.ExpertsInMemory
	}
	return st, err
}

// DisableExperts switches experts of one MoE layer off for later calls: the router takes the best
// of the others. The experts replace the layer's set; none switches them all back on. Invalid
// layers, ids out of range or a set leaving the layer no expert are InvalidArgument errors.
func (c *Context) DisableExperts(layer int, experts ...int32) error {
	return c.with(func(n raw.NativeContext) error {
		return call(func() { n.DisableExperts(layer, experts) })
	})
}

// MetricsText is the last Generate or Decode call's statistics in the Prometheus text exposition
// format (tokens and speed, stage times, router entropy, expert utilisation and fairness per
// layer, active parameters, expert-cache hits), for a service's own metrics endpoint.
func (c *Context) MetricsText() (text string, err error) {
	err = c.with(func(n raw.NativeContext) error {
		return call(func() { text = n.MetricsText() })
	})
	return text, err
}

// WriteRoutingProfile writes the expert counts of the last Generate or Decode call as a routing
// profile (JSON), to warm a later load's expert cache (ModelOptions.ExpertWarmupProfile).
func (c *Context) WriteRoutingProfile(path string) error {
	return c.with(func(n raw.NativeContext) error {
		return call(func() { n.WriteRoutingProfile(path) })
	})
}

// ExpertLayerStats says what the expert cache did during the last Generate or Decode call, per
// layer.
func (c *Context) ExpertLayerStats() (layers []ExpertCacheStats, err error) {
	var flat []int64
	err = c.with(func(n raw.NativeContext) error {
		return call(func() { flat = n.ExpertLayerStats() })
	})
	fields := raw.KExpertLayerStatFields
	for b := 0; err == nil && b+fields <= len(flat); b += fields {
		row := flat[b : b+fields]
		layers = append(layers, ExpertCacheStats{
			Hits: row[raw.KLayerHits], Misses: row[raw.KLayerMisses],
			BytesRead:           row[raw.KLayerBytesRead],
			ReadSeconds:         float64(row[raw.KLayerReadNanos]) / 1e9,
			WaitSeconds:         float64(row[raw.KLayerWaitNanos]) / 1e9,
			Prefetches:          row[raw.KLayerPrefetches],
			PrefetchHits:        row[raw.KLayerPrefetchHits],
			PrefetchWastedBytes: row[raw.KLayerPrefetchWastedBytes],
			Predicted:           row[raw.KLayerPredicted],
			PredictedRight:      row[raw.KLayerPredictedRight],
			ExpertsInMemory:     int(row[raw.KLayerExpertsInMemory]),
		})
	}
	return layers, err
}

// Close releases the context. A Generate running on another goroutine is cancelled (it returns
// ErrCancelled) and Close waits for it to return; called from that Generate's own onToken, it
// returns at once and the context is released as Generate returns. Every later call, a second
// Close too, returns ErrClosed.
func (c *Context) Close() error {
	n, err := c.h.close()
	if err != nil {
		return err
	}
	err = call(n.Close)
	runtime.KeepAlive(c)
	return err
}
