package main

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/vig-edge/vig/bench"
	"github.com/vig-edge/vig/shmring"
)

func TestBenchUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{nil, 2},
		{[]string{"everything"}, 2},
		{[]string{"wire", "extra"}, 2},
		{[]string{"--quick"}, 2},
		{[]string{"--bogus"}, 2},
		{[]string{"--help"}, 0},
		{[]string{"wire", "-h"}, 0},
	} {
		if got := runBench(tc.args); got != tc.code {
			t.Errorf("vig bench %q = %d, want %d", tc.args, got, tc.code)
		}
	}
}

// A missing scenario directory is reported (exit 1) before anything runs.
func TestBenchMissingScenarios(t *testing.T) {
	if got := runBench([]string{"wire", "--quick", "--scenarios", t.TempDir(), "--out", t.TempDir()}); got != 1 {
		t.Errorf("vig bench wire with an empty scenario dir = %d, want 1", got)
	}
}

// Bad flags of overload and soak exit 2 before anything runs.
func TestBenchLoadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"overload", "--factor", "0"},
		{"overload", "--duration", "500ms"},
		{"overload", "--quick"},
		{"overload", "--row-every", "10s"},
		{"soak", "--duration", "2m"}, // 2 rows of 1 min: too few to judge
		{"soak", "--duration", "1m", "--row-every", "500ms"},
		{"soak", "--factor", "10"},
		{"wire", "--duration", "500ms"},
		{"idle", "--http-streams", "detector"},
		{"wire", "--rounds", "0"},
		{"wire", "--quick", "--rounds", "6"}, // rounds under 1 s
		{"datapath", "--rounds", "2"},
		{"datapath", "--runs", "0"},
		{"wire", "--runs", "5"},
		{"datapath", "--policies", "vig"},
		{"idle", "--factor", "2"},
	} {
		if got := runBench(append(args, "--out", t.TempDir())); got != 2 {
			t.Errorf("vig bench %q = %d, want 2", args, got)
		}
	}
	if msg := checkLoadFlagsFor(t, "soak", "--duration", "2m"); !strings.Contains(msg, "--duration 3m0s or more") {
		t.Errorf("soak --duration 2m: %q does not say the fix", msg)
	}
}

func checkLoadFlagsFor(t *testing.T, which string, args ...string) string {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	d := fs.Duration("duration", 0, "")
	f := fs.Int("factor", 0, "")
	r := fs.Duration("row-every", 0, "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return checkLoadFlags(fs, which, *d, *f, *r)
}

// The shmring-runtime row runs Android's path end to end: a memfd sensor in
// front of vig, and a ring runtime behind it. Every answer is checked to be the
// runtime's for its frame (bench's ring sensor does), and vig opens no gRPC
// connection to the backend: both legs are rings.
func TestDatapathRingRuntime(t *testing.T) {
	if _, err := shmring.Probe(); err != nil {
		t.Skipf("no shared-memory ring on this machine: %v", err)
	}
	vig := benchAsVig(t) // the bench starts this binary as vig serve
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := bench.RunDatapath(ctx, bench.DatapathOptions{VigBinary: vig, Paths: []string{bench.PathShmringRuntime},
		Payloads: []int{64, 1 << 20}, Warmup: 2, Rounds: 8, Runs: 1, Exec: time.Millisecond, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 {
		t.Fatalf("rows %+v, want one per payload", res.Rows)
	}
	for _, row := range res.Rows {
		if row.Skipped != "" || len(row.Runs) != 1 || row.Runs[0].Via.N != 8 || row.Runs[0].Direct.N != 8 {
			t.Errorf("%d B row %+v: want one run of 8 measured rounds", row.Payload, row)
		}
		if row.BackendConns != 0 {
			t.Errorf("%d B: vig opened %d gRPC connections to the backend; its backend is the runtime's ring", row.Payload, row.BackendConns)
		}
		if row.Cost == nil || row.Cost.CPUus <= 0 {
			t.Errorf("%d B: no cost figures for vig: %+v", row.Payload, row.Cost)
		}
	}
}
