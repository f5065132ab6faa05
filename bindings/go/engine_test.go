package moe

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

var enginePrompts = []string{"Hello", "The quick brown fox", "Once upon a time", "1 2 3 4 5",
	"What is a mixture of experts?", "Bonjour", "A", "Attention is all you need"}

func loneText(t *testing.T, m *Model, prompt string, n int) string {
	t.Helper()
	c, err := m.NewContext(&ContextOptions{KVType: KVF16, Threads: 2, ContextLength: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	text, err := c.Complete(prompt, greedy(n))
	if err != nil {
		t.Fatal(err)
	}
	return text
}

func TestEngineGoroutinesSubmittingAtOnceGetALoneContextsText(t *testing.T) {
	m := load(t)
	e, err := m.NewEngine(&EngineOptions{Threads: 2, ContextLength: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	texts := make([]string, len(enginePrompts))
	streamed := make([]string, len(enginePrompts))
	var wg sync.WaitGroup
	for i := range enginePrompts {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			pieces, r, err := e.Stream(context.Background(), enginePrompts[i], greedy(6+i))
			if err != nil {
				t.Error(err)
				return
			}
			var b strings.Builder
			for p := range pieces {
				b.WriteString(p)
			}
			res, err := r.Wait()
			if err != nil || res.Status != OK || res.GeneratedTokens != len(res.Tokens) {
				t.Errorf("request %d: %v %+v", i, err, res)
			}
			texts[i], streamed[i] = res.Text, b.String()
		}(i)
	}
	wg.Wait()
	for i, p := range enginePrompts {
		if want := loneText(t, m, p, 6+i); texts[i] != want || streamed[i] != want {
			t.Errorf("%q: engine %q, streamed %q, lone context %q", p, texts[i], streamed[i], want)
		}
	}
	st, err := e.Stats()
	// The fixture model has no sliding-window or convolution layers; the cache's memory is its
	// blocks'.
	if err != nil || st.Finished != int64(len(enginePrompts)) || st.KVBlocksInUse != 0 ||
		st.KVWindowBlocks != 0 || st.KVStateSlots != 0 || st.KVBytes <= 0 ||
		st.KVBytes%int64(st.KVBlocks) != 0 {
		t.Errorf("stats %+v, %v", st, err)
	}
	metrics, err := e.MetricsText()
	if want := fmt.Sprintf("moe_engine_requests_finished_total %d\n", len(enginePrompts)); err != nil || !strings.Contains(metrics, want) {
		t.Errorf("metrics text lacks %q: %v\n%s", want, err, metrics)
	}
}

func TestEngineContextCancellationEndsOnlyItsRequest(t *testing.T) {
	m := load(t)
	e, err := m.NewEngine(&EngineOptions{Threads: 2, ContextLength: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 1)
	slow, err := e.Submit(ctx, enginePrompts[0], greedy(200), func(string) bool {
		select {
		case started <- struct{}{}:
		default:
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	fine, err := e.Submit(context.Background(), enginePrompts[3], greedy(8), nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	res, _ := slow.Wait()
	if res.FinishReason != FinishCancelled || res.Status != Cancelled {
		t.Errorf("cancelled request: %+v", res)
	}
	got, _ := fine.Wait()
	if want := loneText(t, m, enginePrompts[3], 8); got.Text != want {
		t.Errorf("the other request: %q, want %q", got.Text, want)
	}
}

func TestEngineCloseFinishesWhatIsLeftAndCallerDrivenSteps(t *testing.T) {
	m := load(t)
	e, err := m.NewEngine(&EngineOptions{Threads: 2, ContextLength: 256})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Submit(context.Background(), enginePrompts[4], greedy(100000), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("Close left the request running")
	}
	if res, _ := r.Wait(); res.FinishReason != FinishCancelled && res.FinishReason != FinishContextFull {
		t.Errorf("after Close: %+v", res)
	}
	if _, err := e.Submit(context.Background(), "x", nil, nil); err != ErrClosed {
		t.Errorf("Submit after Close: %v", err)
	}

	d, err := m.NewEngine(&EngineOptions{CallerDriven: true, KVTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	q, err := d.Submit(context.Background(), enginePrompts[2], greedy(5), nil)
	if err != nil {
		t.Fatal(err)
	}
	for {
		worked, err := d.Step()
		if err != nil {
			t.Fatal(err)
		}
		if !worked {
			break
		}
	}
	if res, _ := q.Wait(); res.Text != loneText(t, m, enginePrompts[2], 5) {
		t.Errorf("caller-driven: %q", res.Text)
	}
	ids, err := m.Tokenize(enginePrompts[2], true, false)
	if err != nil {
		t.Fatal(err)
	}
	byTokens, err := d.SubmitTokens(context.Background(), ids, greedy(5), nil)
	if err != nil {
		t.Fatal(err)
	}
	for worked := true; worked; {
		if worked, err = d.Step(); err != nil {
			t.Fatal(err)
		}
	}
	if res, _ := byTokens.Wait(); res.Text != loneText(t, m, enginePrompts[2], 5) {
		t.Errorf("by tokens: %q", res.Text)
	}
	if _, err := d.Submit(context.Background(), strings.Repeat("x ", 200), nil, nil); !isStatus(err, ContextFull) {
		t.Errorf("a prompt past the cache: %v", err)
	}
	if _, err := m.NewEngine(&EngineOptions{KVBlockSize: 3}); !isStatus(err, InvalidArgument) {
		t.Errorf("block size 3: %v", err)
	}
	if _, err := m.NewEngine(&EngineOptions{ExpertConfidence: 2}); !isStatus(err, InvalidArgument) {
		t.Errorf("expert confidence 2: %v", err)
	}
	if _, err := m.NewEngine(&EngineOptions{LoadWindow: 4, LoadLimit: 0.5}); !isStatus(err, InvalidArgument) {
		t.Errorf("load limit 0.5: %v", err)
	}
	// Capacity and load-aware re-weighting, counted over the engine's steps.
	p, err := m.NewEngine(&EngineOptions{ExpertCapacityFactor: 1, LoadWindow: 8, LoadLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r, err = p.Submit(context.Background(), enginePrompts[4], greedy(3), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := r.Wait(); err != nil || res.DecodeMultiplyAddsPerToken <= 0 || res.WeightBytes <= 0 {
		t.Fatalf("request cost: %+v, %v", res, err)
	}
	if err := p.DisableExperts(0, 0, 1, 2); err != nil {
		t.Fatal(err)
	}
	if r, err = p.Submit(context.Background(), enginePrompts[1], greedy(3), nil); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Wait(); err != nil || len(res.Tokens) != 3 {
		t.Fatalf("with experts off: %+v, %v", res, err)
	}
	if err := p.DisableExperts(99, 0); !isStatus(err, InvalidArgument) {
		t.Errorf("layer 99: %v", err)
	}
	if st, err := p.Stats(); err != nil || st.ReroutedChoices == 0 || st.ReweightedChoices == 0 {
		t.Errorf("engine policy counts: %+v, %v", st, err)
	}
}

func isStatus(err error, s Status) bool {
	e, ok := err.(*Error)
	return ok && e.Status == s
}
