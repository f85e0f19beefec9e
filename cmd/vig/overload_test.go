package main

// Overload (issue 15, item 3), the short CI version: scenario B's sensors at ten
// times their contracted frame rate against vig serve with its embedded backend.

import (
	"context"
	"io"
	"net/http"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/bench"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
)

// scrapeStreams reads vig's metrics endpoint and returns each stream's counters
// (the parsing is vig bench's, which samples the same series).
func scrapeStreams(t *testing.T, addr string) map[string]bench.StreamCounts {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := bench.ParseMetrics(b)
	if err != nil {
		t.Fatal(err)
	}
	return bench.Streams(ms)
}

// vmRSS reads this process's resident set from /proc/self/status (bytes).
func vmRSS(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	rss, err := bench.ParseVmRSS(b)
	if err != nil {
		t.Fatal(err)
	}
	return rss
}

// Scenario B's four sensors send ten frames per contracted frame interval, open
// loop, with up to four calls each in flight, for a few seconds. No queue of vig
// holds more than its bound at any scrape (LATEST: 1 waiting per stream); every
// scrape balances (received = Σ outcomes + in flight); every frame a sensor sent
// is answered once, and vig's count of what it received equals the sensors';
// the process's memory stays bounded; the protected detector keeps being served;
// and with the detector alone at 10×, pose and depth, within their contracts,
// keep being served too: the scheduler guarantees a stream one result per window
// of its period_ms, and ranks the frames beyond it as best effort (agent/sched
// doc.go, Extra frames), so the flooding detector no longer takes the slot from
// them. Coverage and RSS are logged; RSS has a loose ceiling, pose and depth a
// loose coverage floor checked only when the detector was served, and the
// detector's own coverage (wall-clock freshness) no floor: that is vig bench
// wire's to measure.
func TestOverloadTenTimes(t *testing.T) {
	if testing.Short() {
		t.Skip("overload runs for several seconds; skipped with -short")
	}
	for _, tc := range []struct {
		name    string
		flooder string // the one stream at 10×; "" = every stream
	}{{"every sensor", ""}, {"the detector alone", "detector"}} {
		t.Run(tc.name, func(t *testing.T) { overload(t, tc.flooder) })
	}
}

func overload(t *testing.T, flooder string) {
	data, err := os.ReadFile("../../examples/scenarios/b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("b.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen = config.Listen{GRPC: "127.0.0.1:0", Metrics: "127.0.0.1:0"}
	cfg.Backend.Address, cfg.Backend.StatsIntervalMs = "127.0.0.1:0", -1
	addrs, _ := startServeConfig(t, cfg)

	cc, err := grpc.NewClient("passthrough:///"+addrs["grpc"], append(gateway.DialOptions(cfg.GRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := pb.NewGRPCInferenceServiceClient(cc)
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	for { // the embedded backend connects in the background
		r, err := client.ServerReady(rctx, &pb.ServerReadyRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Ready {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	rcancel()

	const factor, depth, run = 10, 4, 4 * time.Second
	type result struct {
		mu         sync.Mutex
		deliveries []sched.Delivery
		errors     uint64
		stats      bench.SensorStats
	}
	results := make([]result, len(cfg.Streams))
	payload := make([]byte, 1024)
	start := clock.Monotonic() + int64(50*time.Millisecond)
	end := start + int64(run)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	timer := time.AfterFunc(time.Duration(end-clock.Monotonic()), stop)
	defer timer.Stop()
	var wg sync.WaitGroup
	for i, s := range cfg.Streams {
		res := &results[i]
		interval := s.FrameInterval()
		if flooder == "" || flooder == s.Name {
			interval /= factor
		}
		sensor := &bench.Sensor{Interval: interval, Offset: time.Duration(i) * 7 * time.Millisecond, Depth: depth, Clock: bench.Monotonic,
			Send: func(ctx context.Context, frame uint64, capture int64) error {
				r := frameRequest(s.Name, s.Model, frame)
				r.Parameters["vig_capture_ns"].ParameterChoice = &pb.InferParameter_Int64Param{Int64Param: capture}
				r.Inputs = []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{int64(len(payload))}}}
				r.RawInputContents = [][]byte{payload}
				// The sensors' own deadline is far: a call that ends is ended by vig.
				cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, err := client.ModelInfer(cctx, r)
				return err
			},
			OnResult: func(_ uint64, capture, at int64, err error) {
				res.mu.Lock()
				defer res.mu.Unlock()
				if err != nil {
					res.errors++
					return
				}
				res.deliveries = append(res.deliveries, sched.Delivery{At: sched.Time(at), Capture: sched.Time(capture)})
			}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := sensor.Run(ctx, start)
			res.mu.Lock()
			res.stats = st
			res.mu.Unlock()
		}()
	}

	// Sample while the overload runs.
	var rssFirst, rssPeak uint64
	var goroutinesPeak, scrapes int
	for tick := time.NewTicker(250 * time.Millisecond); ctx.Err() == nil; <-tick.C {
		m := scrapeStreams(t, addrs["metrics"])
		scrapes++
		for _, s := range cfg.Streams {
			if waiting := m[s.Name].Waiting; waiting > float64(s.Capacity) {
				t.Errorf("stream %s: %v requests waiting in vig, its queue holds %d", s.Name, waiting, s.Capacity)
			}
			checkStreamBalance(t, m, s)
		}
		rss := vmRSS(t)
		if rssFirst == 0 {
			rssFirst = rss
		}
		rssPeak = max(rssPeak, rss)
		goroutinesPeak = max(goroutinesPeak, runtime.NumGoroutine())
	}
	wg.Wait() // every call the sensors made has returned

	m := scrapeStreams(t, addrs["metrics"])
	var sent, answered uint64
	covs := map[string]float64{}
	for i, s := range cfg.Streams {
		r := &results[i]
		got := uint64(len(r.deliveries)) + r.errors
		if got != r.stats.Sent {
			t.Errorf("stream %s: %d frames sent, %d answered", s.Name, r.stats.Sent, got)
		}
		if recv := m[s.Name].Received; uint64(recv) != r.stats.Sent {
			t.Errorf("stream %s: vig received %v, the sensor sent %d", s.Name, recv, r.stats.Sent)
		}
		checkStreamBalance(t, m, s)
		if w := m[s.Name].Waiting + m[s.Name].Running; w != 0 {
			t.Errorf("stream %s: %v still in flight after every call returned", s.Name, w)
		}
		cov := sched.Coverage(sched.Time(start), sched.Time(end), s.Period(), s.MaxAge(), r.deliveries)
		t.Logf("%-8s %-11s sent %5d (%d/s) delivered %5d errors %5d client-dropped %4d coverage %5.1f%%",
			s.Name, s.Class, r.stats.Sent, int(float64(r.stats.Sent)/run.Seconds()), len(r.deliveries), r.errors, r.stats.Dropped, 100*cov.Ratio())
		// Coverage is a wall-clock figure (a delivery counts only if younger
		// than max_age, 50 ms for the detector): it is logged, and freshness
		// is measured by `vig bench wire` (which has targets for it). Asserted
		// here is only that the protected stream is served at all: on a loaded
		// machine, and under qemu, round trips alone approach or exceed 50 ms
		// (coverage fell to 37 % beside another race suite, 4 % under qemu).
		if s.Class == config.ClassProtected && len(r.deliveries) == 0 {
			t.Errorf("protected stream %s: nothing delivered under 10× overload", s.Name)
		}
		covs[s.Name] = cov.Ratio()
		sent += r.stats.Sent
		answered += got
	}
	// A floor, not a benchmark figure, checked when one stream floods and was
	// served (it covered ≥ 90 % of its windows): the failure it guards against,
	// a flooder taking the slot, leaves the flooder at ~100 % and the others
	// near 0 %. On a box too busy to serve the detector every stream falls
	// together (with -race at load averages 10–15 on 2 vCPUs, pose fell to
	// 2.5 % beside a detector at 61 %; with no sensor flooding at all, pose and
	// depth covered 12–60 %): that is the box, not the policy.
	// Measured on a 2-vCPU VM shared with other builds (load average 5–15),
	// runs in which the detector covered ≥ 90 %: pose and depth 44–87 % with
	// -race, 74–100 % without.
	const highFloor = 0.10
	if flooder != "" && covs[flooder] >= 0.9 {
		for _, s := range cfg.Streams {
			if s.Name != flooder && s.Class == config.ClassHigh && covs[s.Name] < highFloor {
				t.Errorf("high stream %s: coverage %.1f%% with %s at 10× its contract", s.Name, 100*covs[s.Name], flooder)
			}
		}
	}
	t.Logf("%d scrapes; RSS %d MiB at the first, %d MiB peak; %d goroutines peak; %d calls answered of %d sent",
		scrapes, rssFirst>>20, rssPeak>>20, goroutinesPeak, answered, sent)
	// Bounded memory: the queues are bounded, so the process must not keep
	// growing with the number of frames (a loose ceiling for a noisy machine).
	if rssPeak > rssFirst+128<<20 {
		t.Errorf("RSS grew from %d MiB to %d MiB during the overload", rssFirst>>20, rssPeak>>20)
	}
}

// checkStreamBalance asserts received = Σ outcomes + in flight for one stream in
// one scrape, and that vig reports the stream at all.
func checkStreamBalance(t *testing.T, m map[string]bench.StreamCounts, s config.Stream) {
	t.Helper()
	c, ok := m[s.Name]
	if !ok {
		t.Errorf("stream %s: not in vig's metrics", s.Name)
		return
	}
	if !c.Balanced() {
		t.Errorf("stream %s: received %v != outcomes %v + in flight %v", s.Name, c.Received, c.Finished(), c.Waiting+c.Running)
	}
}
