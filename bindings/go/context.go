package moe

import (
	"runtime"
	"strings"
	"sync"

	"github.com/libmoe/moe/internal/raw"
)

// GenerateOptions says how to generate. Start from DefaultGenerateOptions() (the library's
// defaults) or set every field you care about: the zero value means greedy decoding with
// no length limit of its own (MaxTokens 0 uses the library default of 256).
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
	}
}

func (o *GenerateOptions) native() raw.NativeGenerateOptions {
	n := raw.NewNativeGenerateOptions()
	if o == nil {
		return n
	}
	if o.MaxTokens > 0 {
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
	n.SetSeed(o.Seed)
	n.SetParse_special(o.ParseSpecial)
	for _, s := range o.Stop {
		n.AddStop(s)
	}
	return n
}

// Stats describes the last Generate call on a context.
type Stats struct {
	PromptTokens, GeneratedTokens                  int
	PromptSeconds, GenerateSeconds                 float64
	PromptTokensPerSecond, GenerateTokensPerSecond float64
	ActiveFraction                                 float64
	FinishReason                                   FinishReason
}

// Context is one conversation over a Model (KV cache and sampler). Use it from one goroutine at a
// time (a concurrent call fails with ErrBusy); Cancel may be called from any goroutine.
type Context struct {
	model  *Model
	mu     sync.RWMutex // Close takes it exclusively; calls and Cancel share it
	native raw.NativeContext
}

// Model is the model the context was created from.
func (c *Context) Model() *Model { return c.model }

func (c *Context) with(f func(raw.NativeContext) error) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.native == nil {
		return ErrClosed
	}
	return f(c.native)
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

// GenerateTokens is Generate with prompt token ids (see Model.Tokenize).
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
	return FinishReason(reason), err
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
// then returns ErrCancelled. Tokens processed so far stay in the context. Harmless when nothing
// runs or the context is closed.
func (c *Context) Cancel() {
	_ = c.with(func(n raw.NativeContext) error { return call(n.Cancel) })
}

// Reset forgets everything in the context.
func (c *Context) Reset() error {
	return c.with(func(n raw.NativeContext) error { return call(n.Reset) })
}

// Truncate keeps the first keep tokens and forgets the rest.
func (c *Context) Truncate(keep int) error {
	return c.with(func(n raw.NativeContext) error { return call(func() { n.Truncate(keep) }) })
}

// Len is the number of tokens in the context.
func (c *Context) Len() (n int, err error) {
	err = c.with(func(nc raw.NativeContext) error { return call(func() { n = nc.NPast() }) })
	return n, err
}

// Stats describes the last Generate call.
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
			}
		})
	})
	return st, err
}

// Close releases the context; it waits for a running Generate to return (cancel it first).
// It is idempotent; later calls return ErrClosed.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.native != nil {
		raw.DeleteNativeContext(c.native)
		c.native = nil
		runtime.SetFinalizer(c, nil)
	}
	return nil
}
