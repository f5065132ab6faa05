package moe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The Go binding against the tiny-qwen2moe fixture (random weights, real tokenizer), found
// through $MOE_FIXTURES.

func fixture(t *testing.T, name string) string {
	dir := os.Getenv("MOE_FIXTURES")
	if dir == "" {
		t.Skip("MOE_FIXTURES is not set")
	}
	return filepath.Join(dir, name)
}

func readIDs(t *testing.T, name string) []int32 {
	data, err := os.ReadFile(fixture(t, name))
	if err != nil {
		t.Fatal(err)
	}
	var ids []int32
	for _, f := range strings.Fields(string(data)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, int32(n))
	}
	return ids
}

func load(t *testing.T) *Model {
	m, err := Load(fixture(t, "tiny-qwen2moe-f32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func greedy(n int) *GenerateOptions { return &GenerateOptions{MaxTokens: n, Temperature: 0} }

func generateIDs(t *testing.T, c *Context, prompt []int32, n int) []int32 {
	var got []int32
	reason, err := c.GenerateTokens(prompt, greedy(n), func(token int32, _ string) bool {
		if token >= 0 {
			got = append(got, token)
		}
		return true
	})
	if err != nil || reason != FinishMaxTokens {
		t.Fatalf("generate: %v, %v", reason, err)
	}
	return got
}

func newContext(t *testing.T, m *Model) *Context {
	c, err := m.NewContext(&ContextOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestStreamsTheReferenceGreedyTokens(t *testing.T) {
	m := load(t)
	prompt, want := readIDs(t, "p1.tokens.txt"), readIDs(t, "p1.gen_tokens.txt")
	c := newContext(t, m)
	if got := generateIDs(t, c, prompt, len(want)); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	st, err := c.Stats()
	if err != nil || st.GeneratedTokens != len(want) || st.FinishReason != FinishMaxTokens {
		t.Fatalf("stats %+v, %v", st, err)
	}
}

func TestTextRoundTrip(t *testing.T) {
	m := load(t)
	info, err := m.Info()
	if err != nil || info.Architecture != "qwen2moe" {
		t.Fatalf("info %+v, %v", info, err)
	}
	const text = "Hello, wörld 👋"
	ids, err := m.Tokenize(text, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := m.Detokenize(ids); err != nil || back != text {
		t.Fatalf("%q, %v", back, err)
	}
	if out, err := newContext(t, m).Complete("Once upon a time", greedy(4)); err != nil || out == "" {
		t.Fatalf("%q, %v", out, err)
	}
}

func TestStopFromCallback(t *testing.T) {
	m := load(t)
	calls := 0
	reason, err := newContext(t, m).GenerateTokens(readIDs(t, "p1.tokens.txt"), greedy(16),
		func(int32, string) bool { calls++; return calls < 3 })
	if err != nil || reason != FinishCallback || calls != 3 {
		t.Fatalf("%v, %v, %d calls", reason, err, calls)
	}
}

func TestErrors(t *testing.T) {
	_, err := Load("/no/such/model.moe")
	var e *Error
	if !errors.As(err, &e) || e.Status != NotFound || !errors.Is(err, ErrNotFound) ||
		!strings.Contains(e.Message, "/no/such/model.moe") {
		t.Fatalf("missing file: %v", err)
	}

	m := load(t)
	if _, err := m.Detokenize([]int32{1 << 30}); !errors.Is(err, ErrOutOfRange) &&
		!errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("out-of-range token: %v", err)
	}
	if _, err := newContext(t, m).GenerateTokens([]int32{-5}, greedy(2), nil); err == nil {
		t.Fatal("negative token id accepted")
	}
}

func TestClosedHandles(t *testing.T) {
	m := load(t)
	c, err := m.NewContext(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
	if _, err := c.Generate("x", greedy(2), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed context: %v", err)
	}
	c.Cancel() // harmless

	m2, err := Load(fixture(t, "tiny-qwen2moe-f32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	open, err := m2.NewContext(nil)
	if err != nil {
		t.Fatal(err)
	}
	m2.Close() // the open context keeps the native model alive
	if _, err := m2.Tokenize("x", false, false); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed model: %v", err)
	}
	if got := generateIDs(t, open, readIDs(t, "p1.tokens.txt"), 2); len(got) != 2 {
		t.Fatal(got)
	}
	open.Close()
}

func TestPanicInCallbackSurfaces(t *testing.T) {
	m := load(t)
	c := newContext(t, m)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v", r)
			}
		}()
		c.Generate("Hello", greedy(8), func(int32, string) bool { panic("boom") })
		t.Fatal("no panic")
	}()
	c.Reset() // still usable
	prompt, want := readIDs(t, "p1.tokens.txt"), readIDs(t, "p1.gen_tokens.txt")
	if got := generateIDs(t, c, prompt, len(want)); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
}

func TestProgress(t *testing.T) {
	path := fixture(t, "tiny-qwen2moe-f32.gguf")
	var seen []float32
	m, err := LoadWithProgress(path, func(p float32) bool { seen = append(seen, p); return true })
	if err != nil || len(seen) == 0 {
		t.Fatalf("%v, %v", seen, err)
	}
	m.Close()
	if _, err := LoadWithProgress(path, func(float32) bool { return false }); !errors.Is(err, ErrCancelled) {
		t.Fatalf("cancelled load: %v", err)
	}
}

func TestGoroutinesShareOneModel(t *testing.T) {
	m := load(t)
	prompt, want := readIDs(t, "p1.tokens.txt"), readIDs(t, "p1.gen_tokens.txt")
	var wg sync.WaitGroup
	results := make([][]int32, 2)
	errs := make([]error, 2)
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := m.NewContext(&ContextOptions{Threads: 1})
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close()
			_, errs[i] = c.GenerateTokens(prompt, greedy(len(want)), func(tok int32, _ string) bool {
				if tok >= 0 {
					results[i] = append(results[i], tok)
				}
				return true
			})
		}(i)
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil || !reflect.DeepEqual(results[i], want) {
			t.Fatalf("goroutine %d: %v, %v", i, results[i], errs[i])
		}
	}
}

func TestCancelFromAnotherGoroutine(t *testing.T) {
	m := load(t)
	c := newContext(t, m)
	started, cancelled := make(chan struct{}), make(chan struct{})
	go func() {
		<-started
		c.Cancel()
		close(cancelled)
	}()
	first := true
	_, err := c.GenerateTokens(readIDs(t, "p1.tokens.txt"), greedy(200), func(int32, string) bool {
		if first {
			first = false
			close(started)
			<-cancelled // hold the first token until Cancel has been called
		}
		return true
	})
	if !errors.Is(err, ErrCancelled) {
		t.Fatalf("got %v", err)
	}
	if n, err := c.Len(); err != nil || n == 0 {
		t.Fatalf("context after cancel: %d, %v", n, err)
	}
}

var chat = []ChatMessage{{"system", "Be brief."}, {"user", "Hi!"}}

func TestChatTemplates(t *testing.T) {
	m := load(t)
	if _, err := m.ApplyChatTemplate(chat, true); !errors.Is(err, ErrNotFound) ||
		!strings.Contains(err.Error(), "chat template") {
		t.Fatalf("model template: %v", err)
	}
	got, err := m.ApplyNamedChatTemplate("chatml", chat, true)
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n" +
		"<|im_start|>assistant\n"
	if err != nil || got != want {
		t.Fatalf("chatml: %q, %v", got, err)
	}
	if got, _ := m.ApplyNamedChatTemplate("chatml", chat, false); strings.HasSuffix(got, "assistant\n") {
		t.Fatalf("no generation prompt: %q", got)
	}
	if _, err := m.ApplyNamedChatTemplate("jinja-soup", chat, true); err == nil ||
		!strings.Contains(err.Error(), "jinja-soup") {
		t.Fatalf("unknown template: %v", err)
	}
	if _, err := m.ApplyNamedChatTemplate("chatml", []ChatMessage{{"wizard", "x"}}, true); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("unknown role: %v", err)
	}
}

func TestLowLevelGreedyLoopReproducesTheReference(t *testing.T) {
	m := load(t)
	info, _ := m.Info()
	p2, want := readIDs(t, "p2.tokens.txt"), readIDs(t, "p2.gen_tokens.txt")
	c := newContext(t, m)
	if err := c.Decode(p2); err != nil {
		t.Fatal(err)
	}
	greedy := &GenerateOptions{Temperature: 0}
	// p2's greedy margins stay above the reference's tolerance for 6 steps.
	for i := 0; i < 6; i++ {
		logits, err := c.Logits()
		if err != nil || len(logits) != info.VocabSize {
			t.Fatalf("logits: %d, %v", len(logits), err)
		}
		argmax := 0
		for tok, l := range logits {
			if l > logits[argmax] {
				argmax = tok
			}
		}
		tok, err := c.Sample(greedy)
		if err != nil || tok != want[i] || int(tok) != argmax {
			t.Fatalf("step %d: %d (argmax %d, want %d), %v", i, tok, argmax, want[i], err)
		}
		if err := c.Decode([]int32{tok}); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := c.Len(); n != len(p2)+6 {
		t.Fatalf("len %d", n)
	}
	if err := c.Decode([]int32{40000}); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("bad token: %v", err)
	}
	greedy.LogitBias = map[int32]float32{1 << 20: 1}
	if _, err := c.Sample(greedy); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("bad bias: %v", err)
	}
}

func TestLogitBiasForcesAToken(t *testing.T) {
	m := load(t)
	info, _ := m.Info()
	c := newContext(t, m)
	if _, err := c.Logits(); err == nil {
		t.Fatal("logits before any decode")
	}
	if err := c.Decode([]int32{info.BOSToken}); err != nil {
		t.Fatal(err)
	}
	opts := DefaultGenerateOptions()
	opts.LogitBias = map[int32]float32{1234: 1000}
	if tok, err := c.Sample(&opts); err != nil || tok != 1234 {
		t.Fatalf("forced: %d, %v", tok, err)
	}
	opts.FrequencyPenalty, opts.PresencePenalty, opts.PenaltyLastN = 0.5, 0.5, -1
	if tok, err := c.Sample(&opts); err != nil || tok != 1234 {
		t.Fatalf("forced with penalties: %d, %v", tok, err)
	}
	if tok, err := c.Sample(nil); err != nil || tok < 0 || int(tok) >= info.VocabSize {
		t.Fatalf("defaults: %d, %v", tok, err)
	}
	// The bias also steers Generate.
	g := greedy(3)
	g.LogitBias = map[int32]float32{1234: 1000}
	var got []int32
	if _, err := c.GenerateTokens([]int32{1}, g, func(token int32, _ string) bool {
		if token >= 0 {
			got = append(got, token)
		}
		return true
	}); err != nil || !reflect.DeepEqual(got, []int32{1234, 1234, 1234}) {
		t.Fatalf("generate: %v, %v", got, err)
	}
}

func TestFullStatsAndExpertCounts(t *testing.T) {
	m := load(t)
	info, _ := m.Info()
	prompt, want := readIDs(t, "p1.tokens.txt"), readIDs(t, "p1.gen_tokens.txt")
	c := newContext(t, m)
	generateIDs(t, c, prompt, len(want))
	s, err := c.Stats()
	if err != nil || s.PromptTokens != len(prompt) || s.FinishReason != FinishMaxTokens {
		t.Fatalf("stats: %+v, %v", s, err)
	}
	if !(s.ActiveFraction > 0 && s.ActiveFraction < 1) || s.ActiveParamsPerToken <= 0 ||
		s.MeanRouterEntropy <= 0 || s.WeightBytesRead <= 0 || s.ExpertsSeconds <= 0 ||
		s.AttentionSeconds <= 0 || s.RouterSeconds < 0 || s.HeadSeconds < 0 || s.SamplingSeconds < 0 {
		t.Fatalf("stats: %+v", s)
	}
	counts, err := c.ExpertCounts()
	if err != nil || len(counts) != info.Layers {
		t.Fatalf("counts: %v, %v", counts, err)
	}
	var total int64
	for _, layer := range counts {
		if len(layer) != info.Experts {
			t.Fatalf("layer of %d experts", len(layer))
		}
		for _, n := range layer {
			total += n
		}
	}
	// Prompt and generated tokens (the last one is fed back too) pick top-k experts per layer.
	if wantTotal := int64(len(prompt)+len(want)) * int64(info.ExpertsUsed*info.Layers); total != wantTotal {
		t.Fatalf("total %d, want %d", total, wantTotal)
	}
}

// The routing trace tells every processed token once per layer, its experts distinct and in
// range, and in sum the call's expert counts; removed, it tells nothing; a panic in it comes back
// from the call, which still completes.
func TestRoutingFuncTracesEveryToken(t *testing.T) {
	m := load(t)
	info, _ := m.Info()
	prompt, want := readIDs(t, "p1.tokens.txt"), readIDs(t, "p1.gen_tokens.txt")
	c := newContext(t, m)
	seen := make([][]int64, info.Layers)
	for l := range seen {
		seen[l] = make([]int64, info.Experts)
	}
	told := map[[2]int]bool{}
	var bad []string
	if err := c.SetRoutingFunc(func(position, layer int, experts []int32, weights []float32) {
		if told[[2]int{position, layer}] {
			bad = append(bad, fmt.Sprintf("position %d layer %d told twice", position, layer))
		}
		told[[2]int{position, layer}] = true
		distinct := map[int32]bool{}
		for i, e := range experts {
			distinct[e] = true
			if e < 0 || int(e) >= info.Experts || !(weights[i] > 0 && weights[i] <= 1) {
				bad = append(bad, fmt.Sprintf("expert %d weight %g", e, weights[i]))
				continue
			}
			seen[layer][e]++
		}
		if len(experts) != info.ExpertsUsed || len(weights) != len(experts) ||
			len(distinct) != len(experts) {
			bad = append(bad, fmt.Sprintf("experts %v weights %v", experts, weights))
		}
	}); err != nil {
		t.Fatal(err)
	}
	generateIDs(t, c, prompt, len(want))
	if len(bad) > 0 || len(told) != (len(prompt)+len(want))*info.Layers {
		t.Fatalf("told %d (position, layer) pairs; %v", len(told), bad)
	}
	if counts, err := c.ExpertCounts(); err != nil || !reflect.DeepEqual(counts, seen) {
		t.Fatalf("expert counts %v, traced %v (%v)", counts, seen, err)
	}
	if err := c.SetRoutingFunc(nil); err != nil {
		t.Fatal(err)
	}
	_ = c.Reset()
	generateIDs(t, c, prompt, 2)
	if len(told) != (len(prompt)+len(want))*info.Layers {
		t.Fatalf("told after removal: %d", len(told))
	}
	if err := c.SetRoutingFunc(func(int, int, []int32, []float32) { panic("boom") }); err != nil {
		t.Fatal(err)
	}
	_ = c.Reset()
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v", r)
			}
		}()
		_ = c.Decode(prompt[:3])
		t.Fatal("no panic")
	}()
	if n, err := c.Len(); err != nil || n != 3 {
		t.Fatalf("after the panic: %d tokens, %v", n, err)
	}
}

func TestContextManagementAndMultiTurn(t *testing.T) {
	m := load(t)
	prompt, want := readIDs(t, "p1.tokens.txt"), readIDs(t, "p1.gen_tokens.txt")
	c, err := m.NewContext(&ContextOptions{ContextLength: 128, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n, err := c.Cap(); err != nil || n != 128 {
		t.Fatalf("cap %d, %v", n, err)
	}
	generateIDs(t, c, prompt, 4)
	first, _ := c.Len()
	if first != len(prompt)+4 {
		t.Fatalf("len %d", first)
	}
	// The second turn processes only its own tokens: the first turn's stay cached.
	turn, _ := m.Tokenize(" and then", false, false)
	generateIDs(t, c, turn, 3)
	if s, _ := c.Stats(); s.PromptTokens != len(turn) {
		t.Fatalf("second turn processed %d prompt tokens, want %d", s.PromptTokens, len(turn))
	}
	if n, _ := c.Len(); n != first+len(turn)+3 {
		t.Fatalf("len %d", n)
	}
	if err := c.Truncate(len(prompt)); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Len(); n != len(prompt) {
		t.Fatalf("after truncate: %d", n)
	}
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Len(); n != 0 {
		t.Fatalf("after reset: %d", n)
	}
	if got := generateIDs(t, c, prompt, len(want)); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reset: %v", got)
	}
	c.Close()
	if _, err := c.Cap(); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
}

func TestStreamingDetokenizerMatchesDetokenize(t *testing.T) {
	m := load(t)
	ids, _ := m.Tokenize("Hello, wörld 👋 and ünïcode", false, false)
	d, err := m.NewDetokenizer()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, id := range ids {
		piece, err := d.Push(id)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(piece)
	}
	if _, err := d.Push(1 << 30); err == nil {
		t.Fatal("out-of-range token accepted")
	}
	d.Close()
	if _, err := d.Push(ids[0]); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	if want, _ := m.Detokenize(ids); b.String() != want {
		t.Fatalf("%q, want %q", b.String(), want)
	}
}

func TestTokenizeFlags(t *testing.T) {
	m := load(t)
	info, _ := m.Info()
	plain, _ := m.Tokenize("Hello", false, false)
	withBOS, _ := m.Tokenize("Hello", true, false)
	if withBOS[0] != info.BOSToken || !reflect.DeepEqual(withBOS[1:], plain) {
		t.Fatalf("%v vs %v", withBOS, plain)
	}
	// A control token's text is that token only when parseSpecial asks for it.
	bosText, _ := m.Detokenize([]int32{info.BOSToken})
	if got, _ := m.Tokenize(bosText, false, true); !reflect.DeepEqual(got, []int32{info.BOSToken}) {
		t.Fatalf("parse special: %v", got)
	}
	if got, _ := m.Tokenize(bosText, false, false); len(got) < 2 {
		t.Fatalf("literal: %v", got)
	}
}

func TestLogHandlerCanBeReplacedWhileOtherGoroutinesLoad(t *testing.T) {
	path := fixture(t, "tiny-qwen2moe-f32.gguf")
	defer SetLogHandler(LogInfo, nil)
	var mu sync.Mutex
	var lines []string
	if err := SetLogHandler(LogInfo, func(level LogLevel, msg string) {
		mu.Lock()
		lines = append(lines, level.String()+":"+msg)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	loadAndClose := func() error {
		m, err := Load(path)
		if err == nil {
			m.Close()
		}
		return err
	}
	if err := loadAndClose(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	found := false
	for _, l := range lines {
		found = found || (strings.HasPrefix(l, "info:") && strings.Contains(l, "qwen2moe"))
	}
	mu.Unlock()
	if !found {
		t.Fatalf("no load message in %q", lines)
	}
	// A handler cannot change the handler (that would deadlock the library's log lock), and a
	// panic in it is dropped.
	var inside error
	SetLogHandler(LogDebug, func(LogLevel, string) {
		if err := SetLogHandler(LogInfo, nil); err != nil && inside == nil {
			inside = err
		}
		panic("dropped, not a crash")
	})
	if err := loadAndClose(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(inside, ErrInvalidArgument) {
		t.Fatalf("inside: %v", inside)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 4; k++ {
				if err := loadAndClose(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var seen int64
	var seenMu sync.Mutex
	for k := 0; k < 200; k++ {
		var f func(LogLevel, string)
		if k%3 != 0 {
			f = func(LogLevel, string) { seenMu.Lock(); seen++; seenMu.Unlock() }
		}
		if err := SetLogHandler(LogInfo, f); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := SetLogHandler(LogInfo, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	before := len(lines)
	mu.Unlock()
	if err := loadAndClose(); err != nil { // silent again
		t.Fatal(err)
	}
	if len(lines) != before {
		t.Fatal("a removed handler still received messages")
	}
}

// slowGeneration runs a Generate slowed by its callback, so that it still runs when another
// goroutine acts; started closes at the first token, the result arrives on done.
func slowGeneration(c *Context, prompt []int32) (started chan struct{}, done chan error) {
	started, done = make(chan struct{}), make(chan error, 1)
	go func() {
		var once sync.Once
		_, err := c.GenerateTokens(prompt, greedy(200), func(int32, string) bool {
			once.Do(func() { close(started) })
			time.Sleep(10 * time.Millisecond)
			return true
		})
		done <- err
	}()
	return started, done
}

func TestCloseDuringGenerateCancelsItAndCancelReturnsAtOnce(t *testing.T) {
	m := load(t)
	prompt := readIDs(t, "p1.tokens.txt")
	for round := 0; round < 3; round++ {
		c, err := m.NewContext(nil)
		if err != nil {
			t.Fatal(err)
		}
		started, done := slowGeneration(c, prompt)
		<-started
		closed := make(chan struct{})
		go func() { c.Close(); close(closed) }()
		// Cancel from a third goroutine while Close waits: it must not queue behind Close.
		t0 := time.Now()
		c.Cancel()
		if d := time.Since(t0); d > time.Second {
			t.Fatalf("Cancel blocked for %v", d)
		}
		select {
		case <-closed:
		case <-time.After(time.Second):
			t.Fatal("Close waited for the whole generation")
		}
		if err := <-done; !errors.Is(err, ErrCancelled) {
			t.Fatalf("generation: %v, want ErrCancelled", err)
		}
		if _, err := c.Len(); !errors.Is(err, ErrClosed) {
			t.Fatalf("after Close: %v", err)
		}
	}
}

func TestCloseFromTheCallbackStopsTheCall(t *testing.T) {
	m := load(t)
	c, err := m.NewContext(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.GenerateTokens(readIDs(t, "p1.tokens.txt"), greedy(16), func(int32, string) bool {
		if err := c.Close(); err != nil {
			t.Errorf("Close inside the callback: %v", err)
		}
		return true
	})
	if !errors.Is(err, ErrCancelled) {
		t.Fatalf("generation: %v, want ErrCancelled", err)
	}
}

func TestNegativeMaxTokensIsAnErrorAndFailedSampleIsZero(t *testing.T) {
	m := load(t)
	c, err := m.NewContext(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Generate("x", &GenerateOptions{MaxTokens: -1}, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("MaxTokens -1: %v, want ErrInvalidArgument", err)
	}
	token, err := c.Sample(nil) // nothing decoded yet
	if err == nil || token != 0 {
		t.Fatalf("Sample before decoding: %d, %v; want 0 and an error", token, err)
	}
}

func TestMappedWeightsAndAnF16CacheAreReachable(t *testing.T) {
	mapped, err := LoadWithOptions(fixture(t, "tiny-qwen2moe-f32.gguf"), &ModelOptions{UseMmap: true})
	if err != nil {
		t.Fatal(err)
	}
	defer mapped.Close()
	c, err := mapped.NewContext(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := readIDs(t, "p1.gen_tokens.txt")
	if got := generateIDs(t, c, readIDs(t, "p1.tokens.txt"), len(want)); !reflect.DeepEqual(got, want) {
		t.Fatalf("mapped: %v, want %v", got, want)
	}
	f16, err := mapped.NewContext(&ContextOptions{KVType: KVF16})
	if err != nil {
		t.Fatal(err)
	}
	defer f16.Close()
	if got := generateIDs(t, f16, readIDs(t, "p1.tokens.txt"), 4); len(got) != 4 {
		t.Fatalf("f16 cache: %v", got)
	}
	// Dynamic top-k: a share of 1 is the model's top-k; a lower one still generates; values out
	// of range are refused.
	all, err := mapped.NewContext(&ContextOptions{ExpertConfidence: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	if got := generateIDs(t, all, readIDs(t, "p1.tokens.txt"), len(want)); !reflect.DeepEqual(got, want) {
		t.Fatalf("expert confidence 1: %v, want %v", got, want)
	}
	fewer, err := mapped.NewContext(&ContextOptions{ExpertConfidence: 0.5, MinExperts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer fewer.Close()
	if got := generateIDs(t, fewer, readIDs(t, "p1.tokens.txt"), 4); len(got) != 4 {
		t.Fatalf("expert confidence 0.5: %v", got)
	}
	// Router noise is reproducible from its seed; a negative scale is refused.
	noisy := &ContextOptions{RouterTemperature: 1.5, RouterNoise: RouterNoiseGumbel, RouterNoiseScale: 1, RouterNoiseSeed: 3}
	var runs [2][]int32
	for i := range runs {
		c, err := mapped.NewContext(noisy)
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = generateIDs(t, c, readIDs(t, "p1.tokens.txt"), 6)
		c.Close()
	}
	if !reflect.DeepEqual(runs[0], runs[1]) {
		t.Fatalf("router noise with one seed: %v and %v", runs[0], runs[1])
	}
	if _, err := mapped.NewContext(&ContextOptions{RouterNoise: RouterNoiseGaussian, RouterNoiseScale: -1}); !isStatus(err, InvalidArgument) {
		t.Fatalf("negative noise scale: %v, want an invalid-argument error", err)
	}
	// Switched-off experts are never chosen.
	if err := fewer.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := fewer.DisableExperts(0, 0, 1, 2); err != nil {
		t.Fatal(err)
	}
	if got := generateIDs(t, fewer, readIDs(t, "p1.tokens.txt"), 4); len(got) != 4 {
		t.Fatalf("with experts off: %v", got)
	}
	if counts, err := fewer.ExpertCounts(); err != nil || counts[0][0]+counts[0][1]+counts[0][2] != 0 {
		t.Fatalf("expert counts with 0-2 off: %v, %v", counts, err)
	}
	if err := fewer.DisableExperts(0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); !isStatus(err, InvalidArgument) {
		t.Fatalf("all experts off: %v, want an invalid-argument error", err)
	}
	// The last call's statistics as Prometheus text, per layer too.
	metrics, err := fewer.MetricsText()
	if err != nil || !strings.Contains(metrics, "# TYPE moe_experts_per_token gauge") ||
		!strings.Contains(metrics, `moe_expert_jain_fairness{layer="1"}`) {
		t.Fatalf("metrics text: %v\n%s", err, metrics)
	}
	// A capacity re-routes some of a prompt's choices, load-aware re-weighting scales weights;
	// both are counted.
	for _, policy := range []ContextOptions{{ExpertCapacityFactor: 1}, {LoadWindow: 8, LoadLimit: 1}} {
		policy := policy
		c, err := mapped.NewContext(&policy)
		if err != nil {
			t.Fatal(err)
		}
		generateIDs(t, c, readIDs(t, "p1.tokens.txt"), 2)
		st, err := c.Stats()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.MultiplyAddsPerToken <= 0 || st.WeightBytesPerToken <= 0 {
			t.Fatalf("token cost: %+v", st)
		}
		if capped := policy.ExpertCapacityFactor > 0; (capped && st.ReroutedChoices == 0) ||
			(!capped && (st.ReweightedChoices == 0 || st.ReroutedChoices != 0)) {
			t.Fatalf("%+v: rerouted %d, reweighted %d", policy, st.ReroutedChoices, st.ReweightedChoices)
		}
	}
	for _, bad := range []ContextOptions{{ExpertConfidence: 2}, {ExpertConfidence: 0.5, MinExperts: -1},
		{ExpertCapacityFactor: -1}, {LoadWindow: 8, LoadLimit: 0.5}} {
		bad := bad
		if _, err := mapped.NewContext(&bad); !isStatus(err, InvalidArgument) {
			t.Fatalf("%+v: %v, want an invalid-argument error", bad, err)
		}
	}
	info, err := mapped.Info()
	if err != nil || info.EmbeddingSize <= 0 || info.Heads <= 0 || info.KVHeads <= 0 {
		t.Fatalf("info: %+v, %v", info, err)
	}
	// Half the experts cached from disk: the same tokens.
	cached, err := LoadWithOptions(fixture(t, "tiny-qwen2moe-f32.gguf"),
		&ModelOptions{ExpertCacheFraction: 0.5, ExpertEviction: EvictLFRU, BufferedIO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cached.Close()
	cc, err := cached.NewContext(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if got := generateIDs(t, cc, readIDs(t, "p1.tokens.txt"), len(want)); !reflect.DeepEqual(got, want) {
		t.Fatalf("expert cache: %v, want %v", got, want)
	}
	if _, err := LoadWithOptions(fixture(t, "tiny-qwen2moe-f32.gguf"), &ModelOptions{ExpertCacheBytes: 10}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("tiny expert cache: %v", err)
	}
}

// Experts as placed units: a placement file, where an expert lives, pinning, the cache's
// statistics in total and per layer, and a model larger than its memory limit.
func TestExpertPlacementPinningAndStatistics(t *testing.T) {
	placement := filepath.Join(t.TempDir(), "placement.json")
	if err := os.WriteFile(placement, []byte(`{"layers": {"0": {"resident": [1]}, "1": {"pinned": [0]}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := LoadWithOptions(fixture(t, "tiny-qwen2moe-f32.gguf"),
		&ModelOptions{ExpertCacheFraction: 0.5, ExpertPlacementFile: placement})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if p, err := m.ExpertPlacement(0, 1); err != nil || p.Tier != ExpertResident || !p.InMemory || p.Bytes <= 0 || p.WeightTypes != "F32/F32/F32" {
		t.Fatalf("resident expert: %+v, %v", p, err)
	}
	if p, err := m.ExpertPlacement(1, 3); err != nil || p.Tier != ExpertCached {
		t.Fatalf("cached expert: %+v, %v", p, err)
	}
	if err := m.PinExpert(1, 3); err != nil {
		t.Fatal(err)
	}
	if p, err := m.ExpertPlacement(1, 3); err != nil || p.Tier != ExpertPinned || !p.InMemory {
		t.Fatalf("pinned expert: %+v, %v", p, err)
	}
	if err := m.UnpinExpert(0, 1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("unpinning a resident expert: %v", err)
	}
	if _, err := m.ExpertPlacement(99, 0); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("no such expert: %v", err)
	}
	c, err := m.NewContext(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := readIDs(t, "p1.gen_tokens.txt")
	if got := generateIDs(t, c, readIDs(t, "p1.tokens.txt"), len(want)); !reflect.DeepEqual(got, want) {
		t.Fatalf("with a placement: %v, want %v", got, want)
	}
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := c.ExpertLayerStats()
	if err != nil {
		t.Fatal(err)
	}
	info, _ := m.Info()
	if len(layers) != info.Layers {
		t.Fatalf("%d layers of statistics, want %d", len(layers), info.Layers)
	}
	var hits, misses int64
	for _, l := range layers {
		hits += l.Hits
		misses += l.Misses
	}
	if hits != st.ExpertCache.Hits || misses != st.ExpertCache.Misses || hits+misses == 0 {
		t.Fatalf("layers sum to %d hits %d misses, the call's totals are %+v", hits, misses, st.ExpertCache)
	}
	if st.ExpertCache.ExpertsInMemory < 2 || st.ExpertCache.HitRate() <= 0 {
		t.Fatalf("totals: %+v", st.ExpertCache)
	}
	// The call's routing as a profile warms a load.
	profile := filepath.Join(t.TempDir(), "profile.json")
	if err := c.WriteRoutingProfile(profile); err != nil {
		t.Fatal(err)
	}
	warm, err := LoadWithOptions(fixture(t, "tiny-qwen2moe-f32.gguf"),
		&ModelOptions{ExpertCacheFraction: 0.5, ExpertWarmupProfile: profile})
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Close()
	if n, err := warm.Warmup(profile); err != nil || n < 0 {
		t.Fatalf("warm-up: %d, %v", n, err)
	}
	if _, err := warm.Warmup(placement); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("warm-up from a placement file: %v", err)
	}
	if _, err := LoadWithOptions(fixture(t, "tiny-qwen2moe-f32.gguf"),
		&ModelOptions{MemoryLimitBytes: 1, MemoryFit: FitError}); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("a model larger than its memory limit: %v", err)
	}
}

// Without a GPU (CI): DeviceCUDA is an error matching ErrUnsupported with the reason; DeviceAuto
// runs on the CPU and says so. With one, the GPU tests run it.
func TestDeviceChoiceWithoutAGPU(t *testing.T) {
	path := fixture(t, "tiny-qwen2moe-f32.gguf")
	cpu, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	if d, err := cpu.Device(); err != nil || d != "cpu" {
		t.Fatalf("device %q, %v", d, err)
	}
	auto, err := LoadWithOptions(path, &ModelOptions{Device: DeviceAuto})
	if err != nil {
		t.Fatal(err)
	}
	defer auto.Close()
	d, err := auto.Device()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d, "cpu") {
		t.Skipf("a GPU is here (%s): the GPU tests run it", d)
	}
	if !strings.HasPrefix(d, "cpu (") {
		t.Fatalf("device %q: the reason is missing", d)
	}
	_, err = LoadWithOptions(path, &ModelOptions{Device: DeviceCUDA})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "a CUDA device was asked for") {
		t.Fatalf("CUDA without a GPU: %v", err)
	}
	if _, err := LoadWithOptions(path, &ModelOptions{Device: DeviceAuto, GPUMemoryBytes: -1}); err == nil {
		t.Fatal("a negative GPU memory budget was taken")
	}
}
