package moe

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
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
	c.Close()
	c.Close() // idempotent
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
