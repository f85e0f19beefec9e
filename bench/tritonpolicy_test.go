package bench

import (
	"context"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/wire"
)

const tpConfig = `
backend: {address: "127.0.0.1:1", slots: 1}
models:
  m: {exec_ms: 5}
  tiny: {exec_ms: 0.5}
streams:
  - {name: detector, model: m, class: protected, period_ms: 50, max_age_ms: 60000}
  - {name: pose, model: m, class: high, period_ms: 50, max_age_ms: 60000}
  - {name: vlm, model: m, class: best_effort, period_ms: 1000, max_age_ms: 60000}
  - {name: hasty, model: tiny, class: high, period_ms: 50, max_age_ms: 1}
`

func parseConfig(t *testing.T, y string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func hdr(stream string) *wire.InferHeader { return &wire.InferHeader{Stream: []byte(stream)} }

type admitted struct {
	stream string
	done   func(error)
	err    error
}

// waitQueued spins until n requests wait in the emulation's queue, yielding
// so that the admitting goroutines run on a loaded machine.
func waitQueued(t *testing.T, p *TritonPolicy, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); runtime.Gosched() {
		p.mu.Lock()
		q := 0
		for _, pool := range p.pools {
			q += pool.queued()
		}
		p.mu.Unlock()
		if q == n {
			return
		}
	}
	t.Fatalf("queue never reached %d", n)
}

func TestTritonPolicyPriorityAndQueueFull(t *testing.T) {
	p := NewTritonPolicy(parseConfig(t, tpConfig))
	ctx := context.Background()
	first, err := p.Admit(ctx, hdr("vlm"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan admitted, 8)
	admit := func(s string) {
		done, err := p.Admit(ctx, hdr(s))
		got <- admitted{s, done, err}
	}
	go admit("vlm")
	waitQueued(t, p, 1)
	// The best_effort level holds one request: the next is rejected at once.
	if _, err := p.Admit(ctx, hdr("vlm")); status.Code(err) != codes.Unavailable {
		t.Fatalf("third vlm: %v, want UNAVAILABLE (queue full)", err)
	}
	go admit("pose")
	waitQueued(t, p, 2)
	go admit("detector")
	waitQueued(t, p, 3)

	// Each freed slot goes to the best level: detector, pose, then vlm.
	prev := first
	for _, want := range []string{"detector", "pose", "vlm"} {
		prev(nil)
		a := <-got
		if a.err != nil || a.stream != want {
			t.Fatalf("slot went to %s (err %v), want %s", a.stream, a.err, want)
		}
		prev = a.done
	}
	prev(nil)
	st := p.Stats()
	if v := st["vlm"]; v.Received != 3 || v.Forwarded != 2 || v.QueueFull != 1 {
		t.Errorf("vlm stats %+v", v)
	}
	if p.pools[0].free != 1 {
		t.Errorf("free slots %d after all released, want 1", p.pools[0].free)
	}
}

// A request still waiting when its stream's max_age has passed is rejected.
func TestTritonPolicyTimeout(t *testing.T) {
	p := NewTritonPolicy(parseConfig(t, tpConfig))
	ctx := context.Background()
	hold, err := p.Admit(ctx, hdr("detector"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Admit(ctx, hdr("hasty")); status.Code(err) != codes.Unavailable {
		t.Fatalf("hasty: %v, want UNAVAILABLE (queue timeout)", err)
	}
	hold(nil)
	if st := p.Stats()["hasty"]; st.TimedOut != 1 || st.Forwarded != 0 {
		t.Errorf("hasty stats %+v", st)
	}
	if p.pools[0].queued() != 0 || p.pools[0].free != 1 {
		t.Errorf("queued %d free %d", p.pools[0].queued(), p.pools[0].free)
	}
}

// With accelerators, each has its own slots and levels: a DLA request is not
// held behind the GPU's.
func TestTritonPolicyPerAccelerator(t *testing.T) {
	p := NewTritonPolicy(parseConfig(t, `
accelerators: {gpu: 1, dla: 1}
models:
  pose: {exec_ms: 5, on: gpu}
  det: {exec_ms: 5, on: dla}
streams:
  - {name: pose, model: pose, class: high, period_ms: 50, max_age_ms: 60000}
  - {name: detector, model: det, class: protected, period_ms: 50, max_age_ms: 60000}
`))
	ctx := context.Background()
	gpu, err := p.Admit(ctx, &wire.InferHeader{Stream: []byte("pose"), Model: []byte("pose")})
	if err != nil {
		t.Fatal(err)
	}
	dla, err := p.Admit(ctx, &wire.InferHeader{Stream: []byte("detector"), Model: []byte("det")})
	if err != nil {
		t.Fatalf("detector held behind the GPU's job: %v", err)
	}
	if p.pools[0].free != 0 || p.pools[1].free != 0 {
		t.Fatalf("free: gpu %d, dla %d", p.pools[0].free, p.pools[1].free)
	}
	gpu(nil)
	dla(nil)
	if p.pools[0].free != 1 || p.pools[1].free != 1 {
		t.Fatalf("after release: gpu %d, dla %d", p.pools[0].free, p.pools[1].free)
	}
}
