package moe

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/libmoe/moe/internal/raw"
)

// EngineOptions says how to create an Engine; the zero value is the library's defaults.
type EngineOptions struct {
	Threads          int    // 0: one per core
	KVType           KVType // element type of the KV cache; the zero value is KVF32, as for a Context
	KVBlockSize      int    // positions per KV block, a power of two; 0: 32
	ContextLength    int    // the most tokens one request holds; 0: the model's, at most 4096
	KVTokens         int64  // the KV cache's size in tokens; 0: 16384, or ContextLength if larger
	KVBytes          int64  // the KV cache's size in bytes instead (0: by tokens)
	MaxSequences     int    // requests running at once; 0: 16
	MaxStepTokens    int    // tokens one step computes, decode tokens first; 0: 256
	NoPrefixSharing  bool   // prompts do not reuse the KV blocks of a prefix computed before
	FinishWhenKVFull bool   // a request that cannot grow finishes (default: the youngest is preempted)
	CallerDriven     bool   // nothing runs until the caller calls Step (default: the engine's thread)
	Seed             int64  // added to every request's sampling seed
	// Every request's dynamic top-k: a token keeps its best routed experts until they hold this
	// share of its top-k router scores, in [0, 1]; 0: always the model's top-k.
	ExpertConfidence float32
	MinExperts       int // with ExpertConfidence: at least this many experts per token; 0: 1
	// Every request's router temperature (0: 1) and noise, as ContextOptions'.
	RouterTemperature float32
	RouterNoise       RouterNoise
	RouterNoiseScale  float32
	RouterNoiseSeed   int64
	// Capacity with re-routing, as ContextOptions', over all the requests of each step.
	ExpertCapacityFactor float32
	// Load-aware re-weighting over each request's own tokens, as ContextOptions' (LoadLimit 0:
	// 2); it turns prefix sharing off, as cached blocks do not keep the routing.
	LoadWindow int
	LoadLimit  float32
}

// RequestResult is what an Engine request produced, and how it went.
type RequestResult struct {
	Text                  string
	Tokens                []int32
	FinishReason          FinishReason
	Status                Status // OK, Cancelled, or why its step failed
	Message               string
	PromptTokens          int
	PrefixTokensReused    int // prompt positions taken from KV blocks an earlier request computed
	GeneratedTokens       int
	Preemptions           int
	QueueSeconds          float64 // from submission until first scheduled
	FirstTokenSeconds     float64 // from submission until the first token
	TotalSeconds          float64
	DecodeTokensPerSecond float64 // after the first token
	// What its tokens cost: weight bytes their computation touched (dense matrices, the routed
	// experts each chose, the head where logits were computed) and multiply-adds of the matrix
	// products and attention, over every token computed, and per generated token.
	WeightBytes, MultiplyAdds                             int64
	DecodeWeightBytesPerToken, DecodeMultiplyAddsPerToken float64
}

// EngineStats says what an Engine has done.
type EngineStats struct {
	Submitted, Finished, Running, Waiting, Steps, Tokens, DecodeTokens int64
	PrefixTokensReused, Preemptions                                    int64
	KVBlocks, KVBlocksInUse, KVBlocksCached, KVBlockSize               int
	StepSeconds, MeanSequencesPerStep, MeanTokensPerStep               float64
	MeanExpertsPerStep                                                 float64 // per layer
	// The routing policies at work over every step: choices a capacity re-routed or dropped,
	// weights load-aware re-weighting scaled down.
	ReroutedChoices, DroppedChoices, ReweightedChoices int64
	// The sliding-window layers' own blocks (0 when no layer slides), which hold only each
	// request's window (KVBlocks counts the other layers'): in all, held by running requests,
	// and kept with cached prefixes.
	KVWindowBlocks, KVWindowBlocksInUse, KVWindowBlocksCached int
	KVBytes                                                   int64 // the paged KV cache's memory
	// The convolution layers' slots (0 when no layer convolves), each their last inputs and
	// recurrent state: in all, held by running requests, and kept at the ends of cached prefixes.
	KVStateSlots, KVStateSlotsInUse, KVStateSlotsCached int
}

// Engine serves many requests at once over one Model: each step runs the new tokens of every
// running request in one batched pass, so an expert that several requests chose is read once for
// all, and prompts that start alike share their KV cache. Any goroutine may submit at any time.
// Close it when done: what is still running finishes as FinishCancelled.
type Engine struct {
	model *Model
	h     handle[raw.NativeEngine]
	mu    sync.Mutex
	// Sinks the native side may still call; deleted once a later step has completed (by then
	// the native side has returned from their last call) or when the engine closes.
	sinks     []*requestBridge
	inHandler atomic.Int32 // piece handlers running now
}

// Request is one request submitted to an Engine.
type Request struct {
	ID     int64
	engine *Engine
	done   chan struct{}
	result RequestResult
	err    error // a panic in the request's piece handler, re-raised by Wait
}

// NewEngine creates an engine over the model (opts may be nil: the defaults).
func (m *Model) NewEngine(opts *EngineOptions) (*Engine, error) {
	if opts == nil {
		opts = &EngineOptions{}
	}
	o := raw.NewNativeEngineOptions()
	defer raw.DeleteNativeEngineOptions(o)
	o.SetThreads(opts.Threads)
	o.SetKv_type(int(opts.KVType))
	if opts.KVBlockSize != 0 {
		o.SetKv_block_size(opts.KVBlockSize)
	}
	o.SetN_ctx(opts.ContextLength)
	o.SetKv_tokens(opts.KVTokens)
	o.SetKv_bytes(opts.KVBytes)
	if opts.MaxSequences != 0 {
		o.SetMax_sequences(opts.MaxSequences)
	}
	if opts.MaxStepTokens != 0 {
		o.SetMax_step_tokens(opts.MaxStepTokens)
	}
	o.SetPrefix_sharing(!opts.NoPrefixSharing)
	if opts.FinishWhenKVFull {
		o.SetWhen_kv_full(1)
	}
	o.SetOwn_thread(!opts.CallerDriven)
	o.SetSeed(opts.Seed)
	o.SetExpert_confidence(opts.ExpertConfidence)
	if opts.MinExperts != 0 {
		o.SetMin_experts(opts.MinExperts)
	}
	if opts.RouterTemperature != 0 {
		o.SetRouter_temperature(opts.RouterTemperature)
	}
	o.SetRouter_noise(int(opts.RouterNoise))
	o.SetRouter_noise_scale(opts.RouterNoiseScale)
	o.SetRouter_noise_seed(opts.RouterNoiseSeed)
	o.SetExpert_capacity_factor(opts.ExpertCapacityFactor)
	o.SetLoad_window(opts.LoadWindow)
	if opts.LoadLimit != 0 {
		o.SetLoad_limit(opts.LoadLimit)
	}
	e := &Engine{model: m}
	var native raw.NativeEngine
	err := m.with(func(n raw.NativeModel) error {
		return call(func() { native = raw.NewNativeEngine(n, o) })
	})
	if err != nil {
		if native != nil {
			raw.DeleteNativeEngine(native)
		}
		return nil, err
	}
	e.h.native = native
	runtime.SetFinalizer(e, func(e *Engine) { _ = e.Close() })
	return e, nil
}

// Submit queues a request for prompt (BOS first as the vocabulary wants) with opts (may be nil).
// onPiece (may be nil) gets each piece of text as it comes, on the engine's thread: keep it short;
// returning false ends this request. Cancelling ctx cancels the request. Errors: bad options, a
// prompt that can never fit (ErrContextFull).
func (e *Engine) Submit(ctx context.Context, prompt string, opts *GenerateOptions,
	onPiece func(piece string) bool) (*Request, error) {
	return e.submit(ctx, opts, onPiece, func(n raw.NativeEngine, o raw.NativeGenerateOptions,
		s raw.RequestSink) int64 {
		return n.Submit(prompt, o, s)
	})
}

// SubmitTokens is Submit with the prompt as token ids, used exactly as given (no BOS is added:
// Model.Tokenize with addBOS puts it first).
func (e *Engine) SubmitTokens(ctx context.Context, prompt []int32, opts *GenerateOptions,
	onPiece func(piece string) bool) (*Request, error) {
	return e.submit(ctx, opts, onPiece, func(n raw.NativeEngine, o raw.NativeGenerateOptions,
		s raw.RequestSink) int64 {
		return n.SubmitTokens(prompt, o, s)
	})
}

func (e *Engine) submit(ctx context.Context, opts *GenerateOptions, onPiece func(string) bool,
	f func(raw.NativeEngine, raw.NativeGenerateOptions, raw.RequestSink) int64) (*Request, error) {
	n, err := e.h.get()
	if err != nil {
		return nil, err
	}
	r := &Request{engine: e, done: make(chan struct{})}
	b := &requestBridge{engine: e, request: r, onPiece: onPiece}
	b.finishedAt.Store(-1)
	b.sink = raw.NewDirectorRequestSink(b)
	o := opts.native()
	defer raw.DeleteNativeGenerateOptions(o)
	e.prune()
	var id int64
	err = call(func() { id = f(n, o, b.sink) })
	runtime.KeepAlive(e)
	if err != nil {
		raw.DeleteDirectorRequestSink(b.sink)
		return nil, err
	}
	r.ID = id
	e.mu.Lock()
	e.sinks = append(e.sinks, b)
	e.mu.Unlock()
	if ctx != nil && ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				r.Cancel()
			case <-r.done:
			}
		}()
	}
	return r, nil
}

// Stream submits a request and returns a channel of its pieces of text, closed when it ends
// (Wait then gives the result). Read the channel to its end or cancel ctx: the pieces are queued
// for the reader, never dropped, and the engine never waits for a slow reader.
func (e *Engine) Stream(ctx context.Context, prompt string, opts *GenerateOptions) (<-chan string,
	*Request, error) {
	q := &pieceQueue{}
	q.cond = sync.NewCond(&q.mu)
	r, err := e.Submit(ctx, prompt, opts, func(piece string) bool {
		if piece != "" {
			q.push(piece)
		}
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	out := make(chan string)
	go func() {
		<-r.done
		q.close()
	}()
	go func() {
		defer close(out)
		for {
			piece, ok := q.pop()
			if !ok {
				return
			}
			select {
			case out <- piece:
			case <-ctxDone(ctx):
				r.Cancel()
				return
			}
		}
	}()
	return out, r, nil
}

func ctxDone(ctx context.Context) <-chan struct{} {
	if ctx == nil {
		return nil
	}
	return ctx.Done()
}

// Complete generates and waits for the whole completion.
func (e *Engine) Complete(prompt string, opts *GenerateOptions) (string, error) {
	r, err := e.Submit(context.Background(), prompt, opts, nil)
	if err != nil {
		return "", err
	}
	res, err := r.Wait()
	return res.Text, err
}

// Wait blocks until the request has ended and returns its result (a cancelled request is a
// result too: FinishCancelled). A panic in its piece handler is re-raised here.
func (r *Request) Wait() (RequestResult, error) {
	<-r.done
	if p, ok := r.err.(*panicError); ok {
		panic(p.value)
	}
	return r.result, nil
}

// Done is closed when the request has ended.
func (r *Request) Done() <-chan struct{} { return r.done }

// Cancel ends the request soon; nothing happens once it has finished or the engine is closed.
func (r *Request) Cancel() {
	if n, err := r.engine.h.get(); err == nil {
		_ = call(func() { n.Cancel(r.ID) })
		runtime.KeepAlive(r.engine)
	}
}

// Step runs one step in this goroutine, for engines made with CallerDriven; false when there was
// nothing to do.
func (e *Engine) Step() (bool, error) {
	n, err := e.h.get()
	if err != nil {
		return false, err
	}
	var worked bool
	err = call(func() { worked = n.Step() })
	runtime.KeepAlive(e)
	e.prune()
	return worked, err
}

// DisableExperts switches experts of one MoE layer off for every request from the engine's next
// step on: the router takes the best of the others. The experts replace the layer's set; none
// switches them all back on. Invalid layers, ids out of range or a set leaving the layer no
// expert are InvalidArgument errors.
func (e *Engine) DisableExperts(layer int, experts ...int32) error {
	n, err := e.h.get()
	if err != nil {
		return err
	}
	err = call(func() { n.DisableExperts(layer, experts) })
	runtime.KeepAlive(e)
	return err
}

// MetricsText is what the engine has done so far in the Prometheus text exposition format
// (request and token counters, running and waiting requests, KV blocks by state, step averages),
// for a service's own metrics endpoint.
func (e *Engine) MetricsText() (string, error) {
	n, err := e.h.get()
	if err != nil {
		return "", err
	}
	var text string
	if err := call(func() { text = n.MetricsText() }); err != nil {
		return "", err
	}
	runtime.KeepAlive(e)
	return text, nil
}

// Stats says what the engine has done so far.
func (e *Engine) Stats() (EngineStats, error) {
	n, err := e.h.get()
	if err != nil {
		return EngineStats{}, err
	}
	var s raw.NativeEngineStats
	if err := call(func() { s = n.Stats() }); err != nil {
		return EngineStats{}, err
	}
	defer raw.DeleteNativeEngineStats(s)
	runtime.KeepAlive(e)
	return EngineStats{
		Submitted: s.GetSubmitted(), Finished: s.GetFinished(), Running: s.GetRunning(),
		Waiting: s.GetWaiting(), Steps: s.GetSteps(), Tokens: s.GetTokens(),
		DecodeTokens: s.GetDecode_tokens(), PrefixTokensReused: s.GetPrefix_tokens_reused(),
		Preemptions: s.GetPreemptions(), KVBlocks: s.GetKv_blocks(),
		KVBlocksInUse: s.GetKv_blocks_in_use(), KVBlocksCached: s.GetKv_blocks_cached(),
		KVBlockSize: s.GetKv_block_size(), StepSeconds: s.GetStep_seconds(),
		MeanSequencesPerStep: s.GetMean_sequences_per_step(),
		MeanTokensPerStep:    s.GetMean_tokens_per_step(),
		MeanExpertsPerStep:   s.GetMean_experts_per_step(),
		ReroutedChoices:      s.GetRerouted_choices(),
		DroppedChoices:       s.GetDropped_choices(),
		ReweightedChoices:    s.GetReweighted_choices(),
		KVWindowBlocks:       int(s.GetKv_window_blocks()),
		KVWindowBlocksInUse:  int(s.GetKv_window_blocks_in_use()),
		KVWindowBlocksCached: int(s.GetKv_window_blocks_cached()),
		KVBytes:              s.GetKv_bytes(),
		KVStateSlots:         int(s.GetKv_state_slots()),
		KVStateSlotsInUse:    int(s.GetKv_state_slots_in_use()),
		KVStateSlotsCached:   int(s.GetKv_state_slots_cached()),
	}, nil
}

// Close finishes what is still running as cancelled (each Wait returns), stops the engine's
// thread and releases it. A second Close returns ErrClosed.
func (e *Engine) Close() error {
	n, err := e.h.close()
	if err != nil {
		return err
	}
	err = call(n.Close)
	e.mu.Lock()
	sinks := e.sinks
	e.sinks = nil
	e.mu.Unlock()
	if e.inHandler.Load() == 0 {
		// Closed for good (not deferred from inside a piece handler, where the native side
		// finishes closing once the handler returns): no sink can be called any more.
		for _, b := range sinks {
			raw.DeleteDirectorRequestSink(b.sink)
		}
	}
	runtime.SetFinalizer(e, nil)
	return err
}

// prune deletes the sinks of requests that ended before the last completed step: the native side
// has returned from their last call by then.
func (e *Engine) prune() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.sinks) == 0 {
		return
	}
	steps := e.completedSteps()
	if steps < 0 {
		return
	}
	kept := e.sinks[:0]
	for _, b := range e.sinks {
		if b.finishedAt.Load() >= 0 && b.finishedAt.Load() < steps {
			raw.DeleteDirectorRequestSink(b.sink)
		} else {
			kept = append(kept, b)
		}
	}
	e.sinks = kept
}

// completedSteps is the engine's step count, or -1 once it is closed.
func (e *Engine) completedSteps() int64 {
	s, err := e.Stats()
	if err != nil {
		return -1
	}
	return s.Steps
}

type requestBridge struct {
	engine     *Engine
	request    *Request
	onPiece    func(string) bool
	sink       raw.RequestSink
	finishedAt atomic.Int64 // the engine's step count when the last event came; -1 before
	panicked   interface{}
}

// OnToken is called by the native layer; a panic must not unwind through C.
func (b *requestBridge) OnToken(_ int64, _ int, piece string) (ok bool) {
	if b.panicked != nil {
		return false
	}
	if b.onPiece == nil {
		return true
	}
	b.engine.inHandler.Add(1)
	defer b.engine.inHandler.Add(-1)
	defer func() {
		if r := recover(); r != nil {
			b.panicked, ok = r, false
		}
	}()
	return b.onPiece(piece)
}

// OnFinish is the request's last event: the result is copied out, then Wait returns.
func (b *requestBridge) OnFinish(_ int64, res raw.NativeRequestResult) {
	r := b.request
	r.result = RequestResult{
		Text: res.Text(), Tokens: res.Tokens(), FinishReason: FinishReason(res.GetFinish_reason()),
		Status: Status(res.GetStatus()), Message: res.Message(),
		PromptTokens: int(res.GetPrompt_tokens()), PrefixTokensReused: int(res.GetPrefix_tokens_reused()),
		GeneratedTokens: int(res.GetGenerated_tokens()), Preemptions: int(res.GetPreemptions()),
		QueueSeconds: res.GetQueue_seconds(), FirstTokenSeconds: res.GetFirst_token_seconds(),
		TotalSeconds: res.GetTotal_seconds(), DecodeTokensPerSecond: res.GetDecode_tokens_per_second(),
		WeightBytes: res.GetWeight_bytes(), MultiplyAdds: res.GetMultiply_adds(),
		DecodeWeightBytesPerToken:  res.GetDecode_weight_bytes_per_token(),
		DecodeMultiplyAddsPerToken: res.GetDecode_multiply_adds_per_token(),
	}
	if b.panicked != nil {
		r.err = &panicError{b.panicked}
	}
	steps := b.engine.completedSteps()
	if steps < 0 {
		steps = 1 << 62 // closing: Close deletes the sink
	}
	b.finishedAt.Store(steps)
	close(r.done)
}

// panicError carries what a piece handler panicked with to Wait, which re-raises it.
type panicError struct{ value interface{} }

func (p *panicError) Error() string { return "a piece handler panicked" }

// pieceQueue holds pieces for a Stream reader, so the engine's thread never waits for it.
type pieceQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []string
	closed bool
}

func (q *pieceQueue) push(s string) {
	q.mu.Lock()
	q.items = append(q.items, s)
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *pieceQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Signal()
}

// pop waits for the next piece; false once the queue is closed and empty.
func (q *pieceQueue) pop() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return "", false
	}
	s := q.items[0]
	q.items = q.items[1:]
	return s, true
}
