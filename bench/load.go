package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
)

// loadDepth is how many calls each sensor of the overload and soak benchmarks
// keeps in flight at most, as TestOverloadTenTimes does: a frame that finds four
// of its stream outstanding is dropped at the client (and counted).
const loadDepth = 4

// ServeConfig rewrites a scenario's YAML for `vig serve` as a child process of the
// benchmark: listeners and the embedded backend on ephemeral loopback ports,
// everything else as the scenario says. It returns the YAML vig runs with.
func ServeConfig(scenario []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(scenario, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("scenario is not a YAML mapping")
	}
	top := doc.Content[0]
	set := func(m *yaml.Node, key, value string) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				m.Content[i+1] = &yaml.Node{Kind: yaml.ScalarNode, Value: value, Style: yaml.DoubleQuotedStyle}
				return
			}
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key},
			&yaml.Node{Kind: yaml.ScalarNode, Value: value, Style: yaml.DoubleQuotedStyle})
	}
	child := func(key string) *yaml.Node {
		for i := 0; i+1 < len(top.Content); i += 2 {
			if top.Content[i].Value == key && top.Content[i+1].Kind == yaml.MappingNode {
				return top.Content[i+1]
			}
		}
		m := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
		top.Content = append([]*yaml.Node{{Kind: yaml.ScalarNode, Value: key}, m}, top.Content...)
		return m
	}
	listen := child("listen")
	set(listen, "grpc", "127.0.0.1:0")
	set(listen, "metrics", "127.0.0.1:0")
	backend := child("backend")
	set(backend, "address", "127.0.0.1:0")
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return out.Bytes(), enc.Close()
}

// loadOptions configures one run of sensors against a vig child process.
type loadOptions struct {
	VigBinary string
	Scenario  []byte         // the scenario's YAML (examples/scenarios/b.yaml)
	Factor    map[string]int // stream → multiple of its contracted frame rate; missing = 1
	Duration  time.Duration  // of the load
	Every     time.Duration  // sampling interval, default 1 s
	TempDir   string
	OnSample  func(Sample) // called after every sample, from the sampling goroutine
}

// loadStream is what one stream's sensor did and what vig said about it.
type loadStream struct {
	Stream     config.Stream
	Interval   time.Duration // the sensor's frame interval
	Factor     int
	Stats      SensorStats
	Deliveries []sched.Delivery
	Errors     uint64
}

// loadRun is one run: the config vig ran with, its samples, the streams, and a
// final scrape after every call returned.
type loadRun struct {
	ConfigYAML string
	Start, End int64 // CLOCK_MONOTONIC ns: the sensors' schedule
	Samples    []Sample
	Final      Sample
	Streams    []loadStream
}

// runLoad starts vig with the scenario, drives its sensors open loop for
// o.Duration at their factor × contracted rate (loadDepth calls in flight each at
// most), samples vig every o.Every, waits for every call to return and scrapes
// once more.
func runLoad(ctx context.Context, o loadOptions) (*loadRun, error) {
	if o.Every <= 0 {
		o.Every = time.Second
	}
	yml, err := ServeConfig(o.Scenario)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Parse("vig.yaml", yml)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	dir, err := os.MkdirTemp(o.TempDir, "vigbench-load-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	vig, err := StartVig(ctx, o.VigBinary, dir, string(yml), false)
	if err != nil {
		return nil, err
	}
	defer vig.Stop()
	if vig.Addrs["grpc"] == "" || vig.Addrs["metrics"] == "" {
		return nil, fmt.Errorf("vig did not log its gRPC and metrics addresses (got %v)", vig.Addrs)
	}
	run := &loadRun{ConfigYAML: string(yml)}
	sp := &sampler{pid: vig.PID, metrics: vig.Addrs["metrics"], client: &http.Client{}}

	cc, err := dial(vig.Addrs["grpc"])
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	client := pb.NewGRPCInferenceServiceClient(cc)
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	for { // the embedded backend connects in the background
		r, err := client.ServerReady(rctx, &pb.ServerReadyRequest{})
		if err != nil {
			return nil, fmt.Errorf("vig not ready: %w", err)
		}
		if r.Ready {
			break
		}
		if err := sleepCtx(rctx, 5*time.Millisecond); err != nil {
			return nil, fmt.Errorf("vig not ready: %w", err)
		}
	}

	type state struct {
		mu sync.Mutex
		loadStream
	}
	states := make([]state, len(cfg.Streams))
	payload := make([]byte, wirePayload)
	sensors := make([]*Sensor, len(cfg.Streams))
	for i, s := range cfg.Streams {
		st := &states[i]
		f := max(o.Factor[s.Name], 1)
		st.Stream, st.Factor, st.Interval = s, f, s.FrameInterval()/time.Duration(f)
		model, name := s.Model, s.Name
		sensors[i] = &Sensor{Interval: st.Interval, Offset: streamOffset(i), Depth: loadDepth, Clock: Monotonic,
			Send: func(_ context.Context, frame uint64, capture int64) error {
				// The sensors' own deadline is far: a call that ends is ended
				// by vig, and every call is answered before the run ends.
				cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, err := client.ModelInfer(cctx, frameRequest(model, name, frame, capture, payload))
				return err
			},
			OnResult: func(_ uint64, capture, at int64, err error) {
				st.mu.Lock()
				defer st.mu.Unlock()
				if err != nil {
					st.Errors++
					return
				}
				st.Deliveries = append(st.Deliveries, sched.Delivery{At: sched.Time(at), Capture: sched.Time(capture)})
			}}
	}

	run.Start = clock.Monotonic() + int64(50*time.Millisecond)
	run.End = run.Start + int64(o.Duration)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	timer := time.AfterFunc(time.Duration(run.End-clock.Monotonic()), stop)
	defer timer.Stop()
	var wg sync.WaitGroup
	for i := range sensors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := sensors[i].Run(sctx, run.Start)
			states[i].mu.Lock()
			states[i].Stats = st
			states[i].mu.Unlock()
		}()
	}

	// Sample on the sensors' clock: sample k at start + k·Every, the last at the
	// end of the run. The sleeps wait on ctx, not on the sensors' context, so
	// that the timer ending the sensors does not race the last sample away.
	for k := int64(1); ; k++ {
		at := run.Start + k*int64(o.Every)
		if at > run.End {
			break
		}
		if err := Monotonic.SleepUntil(ctx, at); err != nil {
			break
		}
		s := sp.read(ctx, float64(at-run.Start)/1e9)
		run.Samples = append(run.Samples, s)
		if o.OnSample != nil {
			o.OnSample(s)
		}
	}
	wg.Wait() // every call the sensors made has returned
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	run.Final = sp.read(ctx, float64(clock.Monotonic()-run.Start)/1e9)
	if run.Final.Err != "" {
		return nil, fmt.Errorf("final scrape: %s", run.Final.Err)
	}
	for i := range states {
		states[i].mu.Lock()
		run.Streams = append(run.Streams, states[i].loadStream)
		states[i].mu.Unlock()
	}
	return run, nil
}

// scenarioStreams lists the stream names of a scenario's YAML.
func scenarioStreams(scenario []byte) ([]string, error) {
	cfg, err := config.Parse("scenario", scenario)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	var out []string
	for _, s := range cfg.Streams {
		out = append(out, s.Name)
	}
	return out, nil
}
