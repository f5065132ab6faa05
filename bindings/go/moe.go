// Package moe runs Mixture-of-Experts language models with libmoe.
//
// Load a model once, share it between goroutines, and give each goroutine its own Context:
//
//	model, err := moe.Load("model.moe")
//	if err != nil {
//		return err // errors.Is(err, moe.ErrNotFound) for a missing file
//	}
//	defer model.Close()
//	ctx, err := model.NewContext(nil)
//	if err != nil {
//		return err
//	}
//	defer ctx.Close()
//	_, err = ctx.Generate("Once upon a time", &moe.GenerateOptions{MaxTokens: 32, Temperature: 0.8},
//		func(token int32, piece string) bool {
//			fmt.Print(piece)
//			return true // false stops generation
//		})
//
// Close is the rule for Model and Context; finalizers only catch what was forgotten. The package
// needs libmoe installed (its cgo flags come from pkg-config: moe).
package moe

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/libmoe/moe/internal/raw"
)

// Status is a libmoe status code (moe_status); the numbers never change.
type Status int

const (
	OK Status = iota
	InvalidArgument
	NotFound
	IO
	CorruptModel
	Unsupported
	OutOfRange
	ContextFull
	Cancelled
	OutOfMemory
	BufferTooSmall
	Busy
	Internal
	NotReady // an engine request has not finished yet
	Timeout  // a wait ran out before the request finished
)

// String is the library's text for the status ("not found", ...).
func (s Status) String() string { return raw.StatusString(int(s)) }

// Error is a failed libmoe call: its status and the library's detailed message.
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("moe: %s (%s)", e.Message, e.Status) }

// Is makes errors.Is(err, moe.ErrNotFound) and the like match on the status.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Status == e.Status
}

// Sentinels for errors.Is.
var (
	ErrInvalidArgument = &Error{Status: InvalidArgument}
	ErrNotFound        = &Error{Status: NotFound}
	ErrCorruptModel    = &Error{Status: CorruptModel}
	ErrUnsupported     = &Error{Status: Unsupported}
	ErrOutOfRange      = &Error{Status: OutOfRange}
	ErrContextFull     = &Error{Status: ContextFull}
	ErrOutOfMemory     = &Error{Status: OutOfMemory}
	ErrCancelled       = &Error{Status: Cancelled}
	ErrBusy            = &Error{Status: Busy}
	ErrClosed          = &Error{Status: InvalidArgument, Message: "use of a closed Model or Context"}
)

// call runs one native call and returns its error. The error is kept per OS thread, so the
// goroutine stays on its thread from the call until the error has been collected.
func call(f func()) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f()
	switch s := raw.TakeErrorStatus(); s {
	case 0:
		return nil
	case closedStatus:
		return ErrClosed
	default:
		return &Error{Status: Status(s), Message: raw.ErrorMessage()}
	}
}

// closedStatus is the native layer's "the handle is closed" (moe_swig::kClosedStatus).
const closedStatus = -1

// handle holds a native object that goroutines may call while another closes it. No lock is
// held during a call: the native layer keeps what a running call uses (closing a context cancels
// its running call and waits for it), so Close and Cancel never wait behind a long Generate. The
// native wrapper itself is deleted by a finalizer, once nothing can call it any more.
type handle[T any] struct {
	mu     sync.Mutex
	native T
	closed bool
}

// get returns the native object, or ErrClosed.
func (h *handle[T]) get() (T, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		var zero T
		return zero, ErrClosed
	}
	return h.native, nil
}

// close marks the handle closed and returns the native object to close; ErrClosed the second
// time.
func (h *handle[T]) close() (T, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		var zero T
		return zero, ErrClosed
	}
	h.closed = true
	return h.native, nil
}

// Version is the library's version ("0.1.0").
func Version() string { return raw.VersionString() }

// FinishReason says why generation stopped (moe_finish_reason).
type FinishReason int

const (
	FinishNone FinishReason = iota
	FinishEndOfGeneration
	FinishMaxTokens
	FinishStopString
	FinishCallback
	FinishContextFull
	FinishCancelled // an Engine request: cancelled, or the engine was closed
	FinishError     // an Engine request: its step failed (RequestResult.Status says why)
)

// Model is a loaded model (.moe or GGUF). It is immutable and safe to share between goroutines;
// contexts still open keep the native model alive after Close.
type Model struct {
	h handle[raw.NativeModel]
}

// Load loads a model. A missing file is an error matching ErrNotFound.
func Load(path string) (*Model, error) { return LoadWithOptions(path, nil) }

// LoadWithProgress loads a model, calling progress with values in [0, 1]; progress returning
// false cancels the load (ErrCancelled). A panic in progress cancels the load and is re-raised.
func LoadWithProgress(path string, progress func(float32) bool) (*Model, error) {
	return LoadWithOptions(path, &ModelOptions{Progress: progress})
}

// ModelOptions configures LoadWithOptions; the zero value means the defaults.
type ModelOptions struct {
	// UseMmap leaves the weights in the memory-mapped file instead of copying them into memory:
	// instant start and pages shared between processes, but reads through a cold or crowded
	// page cache are slower (moe_model_params.use_mmap).
	UseMmap bool
	// Progress, when set, is called with values in [0, 1]; returning false cancels the load.
	Progress func(float32) bool
	// ExpertCacheBytes or ExpertCacheFraction (0 < f <= 1 of all expert bytes) read the routed
	// experts from the model file on demand into a cache of that size instead of loading them
	// all; outputs are the same. 0 and 0: all resident. .moe and GGUF files, and Hugging Face
	// checkpoints whose experts are stored one matrix per expert.
	ExpertCacheBytes    int64
	ExpertCacheFraction float64
	ExpertEviction      ExpertEviction
	// BufferedIO reads experts through the page cache even where direct I/O works.
	BufferedIO bool
	// ExpertPlacementFile is a placement file (JSON; see the README): experts resident or
	// pinned, the others cached. "" means none; a file turns the expert cache on by itself.
	ExpertPlacementFile string
	// ExpertWarmupProfile is a routing profile (Context.WriteRoutingProfile or moe-cli profile):
	// its most chosen experts are read into the cache at load. "" means none.
	ExpertWarmupProfile string
	// NoPrefetch reads only what steps ask for (no pre-gating read-ahead).
	NoPrefetch bool
	// MemoryLimitBytes is the memory the model may take (0: what the system has available); a
	// model that does not fit is handled as MemoryFit says.
	MemoryLimitBytes int64
	MemoryFit        MemoryFit
	// Device is where the model runs (DeviceCPU by default). The CUDA path has been compiled but
	// not yet run on a GPU: see the README.
	Device Device
	// GPUIndex is which CUDA device (default 0).
	GPUIndex int
	// GPUMemoryBytes is the device memory the weights may take (0: the free memory less a
	// reserve); routed experts beyond it stay in host memory and run on the CPU.
	GPUMemoryBytes int64
}

// Device says where a model runs (moe_device).
type Device int

const (
	DeviceCPU Device = iota // the CPU (the default)
	// DeviceCUDA is a CUDA GPU; the load fails with an error matching ErrUnsupported, with the
	// reason, when none can be used.
	DeviceCUDA
	DeviceAuto // a CUDA GPU when one can be used, the CPU otherwise (Model.Device says which)
)

// MemoryFit says what a load does when the weights copied into memory would not fit
// (moe_memory_fit).
type MemoryFit int

const (
	// FitCacheExperts keeps the routed experts in the file behind an expert cache sized to fit
	// (the default).
	FitCacheExperts MemoryFit = iota
	// FitError fails the load with an error matching ErrOutOfMemory, naming the bytes needed.
	FitError
)

// ExpertTier says where an expert lives (moe_expert_tier).
type ExpertTier int

const (
	ExpertResident ExpertTier = iota // loaded with the model, always in memory
	ExpertCached                     // read from the model file into the expert cache as needed
	ExpertPinned                     // in the expert cache and never evicted
)

// ExpertPlacement says where one expert lives (moe_expert_placement).
type ExpertPlacement struct {
	Tier        ExpertTier
	InMemory    bool   // its weights are in memory now
	Bytes       int64  // its gate, up and down matrices as the model file stores them
	WeightTypes string // their types as stored, "gate/up/down", e.g. "Q4_K/Q4_K/Q6_K"
}

// ExpertEviction says which cached expert makes room (moe_expert_eviction).
type ExpertEviction int

const (
	EvictLRU  ExpertEviction = iota // the least recently used (the default)
	EvictLFRU                       // the least frequently used (counts age), then the least recent
)

// LoadWithOptions loads a model; opts may be nil.
func LoadWithOptions(path string, opts *ModelOptions) (*Model, error) {
	if opts == nil {
		opts = &ModelOptions{}
	}
	progress := opts.Progress
	var sink raw.ProgressSink
	var bridge *progressBridge
	if progress != nil {
		bridge = &progressBridge{f: progress}
		sink = raw.NewDirectorProgressSink(bridge)
		defer raw.DeleteDirectorProgressSink(sink)
	}
	var native raw.NativeModel
	err := call(func() {
		native = raw.NativeModelLoad(path, opts.UseMmap, sink, opts.ExpertCacheBytes,
			opts.ExpertCacheFraction, int(opts.ExpertEviction), !opts.BufferedIO,
			opts.ExpertPlacementFile, !opts.NoPrefetch, opts.MemoryLimitBytes, int(opts.MemoryFit),
			opts.ExpertWarmupProfile, int(opts.Device), int(int32(opts.GPUIndex)),
			opts.GPUMemoryBytes)
	})
	if bridge != nil && bridge.panicked != nil {
		if err == nil {
			raw.DeleteNativeModel(native)
		}
		panic(bridge.panicked)
	}
	if err != nil {
		return nil, err
	}
	m := &Model{h: handle[raw.NativeModel]{native: native}}
	runtime.SetFinalizer(m, func(m *Model) { raw.DeleteNativeModel(m.h.native) })
	return m, nil
}

type progressBridge struct {
	f        func(float32) bool
	panicked interface{}
}

// OnProgress is called by the native layer; a panic must not unwind through C.
func (b *progressBridge) OnProgress(p float32) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			b.panicked, ok = r, false
		}
	}()
	return b.f(p)
}

// Close releases the model; contexts and detokenizers made from it stay usable and keep its
// weights until they are closed. A call running on another goroutine finishes first. Every later
// call, a second Close too, returns ErrClosed.
func (m *Model) Close() error {
	n, err := m.h.close()
	if err != nil {
		return err
	}
	err = call(n.Close)
	runtime.KeepAlive(m)
	return err
}

// with runs f on the open native model, or returns ErrClosed.
func (m *Model) with(f func(raw.NativeModel) error) error {
	n, err := m.h.get()
	if err != nil {
		return err
	}
	err = f(n)
	runtime.KeepAlive(m) // the finalizer must not delete n while f uses it
	return err
}

// ModelInfo holds a model's hyper-parameters and vocabulary facts.
type ModelInfo struct {
	Architecture, Name                      string
	Layers, Experts, ExpertsUsed, VocabSize int
	EmbeddingSize, Heads, KVHeads           int // n_embd, attention heads, key/value heads
	TrainedContextLength                    int
	TotalParameters, ActiveParameters       int64
	BOSToken, EOSToken, EOTToken            int32
	HasTokenizer, HasChatTemplate           bool
}

// Info describes the model.
func (m *Model) Info() (info ModelInfo, err error) {
	err = m.with(func(n raw.NativeModel) error {
		return call(func() {
			i := n.Info()
			defer raw.DeleteNativeModelInfo(i)
			info = ModelInfo{
				Architecture: n.Architecture(), Name: n.Name(), Layers: i.GetN_layer(),
				Experts: i.GetN_expert(), ExpertsUsed: i.GetN_expert_used(),
				EmbeddingSize: i.GetN_embd(), Heads: i.GetN_head(), KVHeads: i.GetN_head_kv(),
				VocabSize: i.GetN_vocab(), TrainedContextLength: i.GetN_ctx_train(),
				TotalParameters: i.GetN_params_total(), ActiveParameters: i.GetN_params_active(),
				BOSToken: int32(i.GetBos_token()), EOSToken: int32(i.GetEos_token()),
				EOTToken: int32(i.GetEot_token()), HasTokenizer: i.GetHas_tokenizer(),
				HasChatTemplate: i.GetHas_chat_template(),
			}
		})
	})
	return info, err
}

// Device says where the forward passes run: "cpu", "cpu (why no GPU)" after DeviceAuto, or
// "cuda:N NAME (what it holds)".
func (m *Model) Device() (device string, err error) {
	err = m.with(func(n raw.NativeModel) error {
		return call(func() { device = n.Device() })
	})
	return device, err
}

// ExpertPlacement says where expert `expert` of layer `layer` lives; an expert the model does not
// have is an error matching ErrOutOfRange.
func (m *Model) ExpertPlacement(layer, expert int) (p ExpertPlacement, err error) {
	err = m.with(func(n raw.NativeModel) error {
		return call(func() {
			x := n.ExpertPlacement(int(int32(layer)), int(int32(expert)))
			defer raw.DeleteNativeExpertPlacement(x)
			p = ExpertPlacement{Tier: ExpertTier(x.GetTier()), InMemory: x.GetIn_memory(),
				Bytes: x.GetBytes(), WeightTypes: x.WeightTypes()}
		})
	})
	return p, err
}

// PinExpert keeps a cached expert in memory (reading it now) until UnpinExpert; it counts against
// the cache's budget, which keeps room for one step besides (else an error matching
// ErrOutOfMemory).
func (m *Model) PinExpert(layer, expert int) error {
	return m.with(func(n raw.NativeModel) error {
		return call(func() { n.PinExpert(int(int32(layer)), int(int32(expert))) })
	})
}

// UnpinExpert makes a pinned expert cached again; a resident one is an error matching
// ErrInvalidArgument.
func (m *Model) UnpinExpert(layer, expert int) error {
	return m.with(func(n raw.NativeModel) error {
		return call(func() { n.UnpinExpert(int(int32(layer)), int(int32(expert))) })
	})
}

// Warmup fills the expert cache's free slots with the most chosen experts of a routing profile
// and says how many were read (0 when every expert is resident).
func (m *Model) Warmup(profilePath string) (n int64, err error) {
	err = m.with(func(nm raw.NativeModel) error {
		return call(func() { n = nm.Warmup(profilePath) })
	})
	return n, err
}

// Tokenize returns the token ids of text. addBOS prepends BOS when the vocabulary uses one;
// parseSpecial recognises control-token markup (leave it off for user text).
func (m *Model) Tokenize(text string, addBOS, parseSpecial bool) (ids []int32, err error) {
	err = m.with(func(n raw.NativeModel) error {
		return call(func() { ids = n.Tokenize(text, addBOS, parseSpecial) })
	})
	return ids, err
}

// Detokenize returns the text of tokens; an id outside the vocabulary is an error.
func (m *Model) Detokenize(tokens []int32) (text string, err error) {
	err = m.with(func(n raw.NativeModel) error {
		return call(func() { text = n.Detokenize(tokens) })
	})
	return text, err
}

// ContextOptions configures NewContext; the zero value means the defaults.
type ContextOptions struct {
	ContextLength int    // tokens; 0: the model's, at most 4096
	Threads       int    // 0: one per core
	Seed          int64  // base seed of the samplers
	KVType        KVType // element type of the KV cache; the zero value is KVF32
	// Dynamic top-k: each token keeps its best routed experts until they hold this share of its
	// top-k router scores, in [0, 1]; 0: always the model's top-k.
	ExpertConfidence float32
	MinExperts       int // with ExpertConfidence: at least this many experts per token; 0: 1
	// RouterTemperature divides the router's logits before gating; 0: 1 (as the model routes).
	RouterTemperature float32
	// RouterNoise adds noise of RouterNoiseScale to the logits that choose experts (not to those
	// that weight them); a token's noise depends on RouterNoiseSeed, the layer, position and expert.
	RouterNoise      RouterNoise
	RouterNoiseScale float32
	RouterNoiseSeed  int64
	// ExpertCapacityFactor caps, in one forward step of n tokens (a prompt chunk; one decode token
	// is never capped), each expert at ceil(factor x n x k / experts) tokens; a token whose choice
	// is full takes its next best expert with room. 0: no cap.
	ExpertCapacityFactor float32
	// Load-aware re-weighting: over LoadWindow tokens before each one, an expert that took more
	// than LoadLimit x its fair share of a layer's choices has its weight scaled down by the
	// excess, the token's other experts' up. LoadWindow 0: off; LoadLimit 0: 2 (else >= 1).
	LoadWindow int
	LoadLimit  float32
}

// RouterNoise is the noise on the router's logits that choose experts (moe_router_noise).
type RouterNoise int

const (
	RouterNoiseNone     RouterNoise = iota // none (the default)
	RouterNoiseGaussian                    // Gaussian, of standard deviation RouterNoiseScale
	RouterNoiseGumbel                      // Gumbel of scale RouterNoiseScale: at 1, top-k draws by probability
)

// KVType is the element type of a context's KV cache (moe_kv_type).
type KVType int

const (
	KVF32  KVType = iota // 32-bit floats (the default)
	KVF16                // 16-bit floats: half the memory, a little rounding
	KVQ8_0               // 8-bit blocks with a scale per 32 values: a quarter of F32's memory
)

// NewContext creates a conversation over the model; opts may be nil.
func (m *Model) NewContext(opts *ContextOptions) (*Context, error) {
	if opts == nil {
		opts = &ContextOptions{}
	}
	c := &Context{model: m}
	var native raw.NativeContext
	err := m.with(func(n raw.NativeModel) error {
		return call(func() {
			minExperts := opts.MinExperts
			if minExperts == 0 {
				minExperts = 1
			}
			temperature := opts.RouterTemperature
			if temperature == 0 {
				temperature = 1
			}
			loadLimit := opts.LoadLimit
			if loadLimit == 0 {
				loadLimit = 2
			}
			native = raw.NewNativeContext(n, opts.ContextLength, opts.Threads, opts.Seed,
				int(opts.KVType), opts.ExpertConfidence, minExperts, temperature,
				int(opts.RouterNoise), opts.RouterNoiseScale, opts.RouterNoiseSeed,
				opts.ExpertCapacityFactor, opts.LoadWindow, loadLimit)
		})
	})
	if err != nil {
		if native != nil {
			raw.DeleteNativeContext(native)
		}
		return nil, err
	}
	c.h.native = native
	// Deleting the wrapper closes the native context too, for a Context never closed.
	// The routing sink goes after it: no call can tell it anything then.
	runtime.SetFinalizer(c, func(c *Context) {
		raw.DeleteNativeContext(c.h.native)
		if c.routingSink != nil {
			raw.DeleteDirectorRoutingSink(c.routingSink)
		}
	})
	return c, nil
}
