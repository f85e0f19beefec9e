package main

// vig bench overload and soak, end to end and short: vig serve runs as a child
// process (this test binary, as vig), and the report's numbers must agree with
// each other and with the run. No timing is asserted.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vig-edge/vig/bench"
)

// benchAsVig makes the benchmark's vig child this test binary running vig's
// main, and returns its path; it skips where the binary cannot be executed
// directly (arm64 under qemu-user).
func benchAsVig(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs vig for several seconds; skipped with -short")
	}
	t.Setenv(runAsVig, "1")
	if err := exec.Command(os.Args[0], "version").Run(); errors.Is(err, syscall.ENOEXEC) {
		t.Skipf("cannot execute %s as vig here: %v", os.Args[0], err)
	} else if err != nil {
		t.Fatalf("%s version: %v", os.Args[0], err)
	}
	return os.Args[0]
}

func readBench(t *testing.T, dir string) (*bench.Results, string) {
	t.Helper()
	res, err := bench.ReadResults(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	return res, string(rep)
}

// checkLoadStreams checks one run's per-stream figures against each other and
// against the run's length.
func checkLoadStreams(t *testing.T, label string, streams []bench.LoadStream, dur time.Duration, factor map[string]int) {
	t.Helper()
	if len(streams) != 4 || streams[0].Class != "protected" {
		t.Fatalf("%s: streams %+v, want scenario B's four, protected first", label, streams)
	}
	for _, s := range streams {
		if want := max(factor[s.Stream], 1); s.Factor != want {
			t.Errorf("%s %s: factor %d, want %d", label, s.Stream, s.Factor, want)
		}
		if s.Sent == 0 || s.Sent+s.Dropped != s.Scheduled {
			t.Errorf("%s %s: sent %d + client-dropped %d ≠ scheduled %d", label, s.Stream, s.Sent, s.Dropped, s.Scheduled)
		}
		if s.Answered != s.Sent || s.Delivered+s.Errors != s.Answered {
			t.Errorf("%s %s: sent %d, answered %d = delivered %d + errors %d?", label, s.Stream, s.Sent, s.Answered, s.Delivered, s.Errors)
		}
		if uint64(s.VigReceived) != s.Sent || uint64(s.VigAnswered) != s.Answered {
			t.Errorf("%s %s: vig received %v answered %v, the sensor sent %d and got %d answers", label, s.Stream, s.VigReceived, s.VigAnswered, s.Sent, s.Answered)
		}
		// What vig forwarded (the backend answered) is what the sensor received.
		if uint64(s.Outcomes["forwarded"]) != s.Delivered {
			t.Errorf("%s %s: vig forwarded %v, the sensor received %d results", label, s.Stream, s.Outcomes["forwarded"], s.Delivered)
		}
		if s.Latency.N != int(s.Delivered) {
			t.Errorf("%s %s: latency over %d results, %d delivered", label, s.Stream, s.Latency.N, s.Delivered)
		}
		// Coverage counts the run's complete period windows.
		if want := int(dur / time.Duration(s.PeriodMs*float64(time.Millisecond))); s.Windows != want || s.Covered > s.Windows {
			t.Errorf("%s %s: %d of %d windows covered, want %d windows", label, s.Stream, s.Covered, s.Windows, want)
		}
		if s.Bound != 1 || s.MaxWaiting > float64(s.Bound) {
			t.Errorf("%s %s: max waiting %v, bound %d", label, s.Stream, s.MaxWaiting, s.Bound)
		}
	}
}

func checkMemory(t *testing.T, label string, m bench.MemStats, samples int) {
	t.Helper()
	if m.Samples != samples || m.MinRSS == 0 || m.MinRSS > m.MedianRSS || m.MedianRSS > m.MaxRSS {
		t.Errorf("%s: memory %+v over %d samples", label, m, samples)
	}
	if m.Goroutines[0] <= 0 || m.FDs[0] <= 0 || m.Growth != int64(m.Last10)-int64(m.First10) {
		t.Errorf("%s: memory %+v", label, m)
	}
}

func TestBenchOverloadEndToEnd(t *testing.T) {
	vig := benchAsVig(t)
	out := t.TempDir()
	const dur = 2 * time.Second
	if code := runBench([]string{"overload", "--duration", dur.String(), "--factor", "5", "--vig", vig, "--scenarios", "../../examples/scenarios", "--out", out}); code != 0 {
		t.Fatalf("vig bench overload = %d", code)
	}
	res, rep := readBench(t, out)
	o := res.Overload
	if o == nil || o.Factor != 5 || o.Duration != dur || len(o.Cases) != 2 {
		t.Fatalf("overload results %+v", o)
	}
	every := map[string]int{"detector": 5, "pose": 5, "depth": 5, "vlm": 5}
	for i, c := range o.Cases {
		factor := every
		if i == 1 {
			factor = map[string]int{"detector": 5}
			if c.Flooder != "detector" {
				t.Errorf("second case floods %q, want the detector", c.Flooder)
			}
		}
		if len(c.Samples) != int(dur/time.Second) || c.Checks.Scrapes != len(c.Samples)+1 {
			t.Errorf("%s: %d samples, %d scrapes in a %v run sampled every second", c.Name, len(c.Samples), c.Checks.Scrapes, dur)
		}
		if !c.Checks.OK() {
			t.Errorf("%s: checks %+v", c.Name, c.Checks)
		}
		checkLoadStreams(t, c.Name, c.Streams, dur, factor)
		checkMemory(t, c.Name, c.Memory, len(c.Samples))
	}
	for _, want := range []string{"`vig bench overload --duration 2s --factor 5", "### Every sensor at 5×", "### Detector alone at 5×", "```yaml\nlisten: {grpc: \"127.0.0.1:0\", metrics: \"127.0.0.1:0\"}", "name: detector"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}

func TestBenchSoakEndToEnd(t *testing.T) {
	vig := benchAsVig(t)
	out := t.TempDir()
	const dur, row = 3 * time.Second, time.Second
	if code := runBench([]string{"soak", "--duration", dur.String(), "--row-every", row.String(), "--vig", vig, "--scenarios", "../../examples/scenarios", "--out", out}); code != 0 {
		t.Fatalf("vig bench soak = %d", code)
	}
	res, rep := readBench(t, out)
	s := res.Soak
	if s == nil || len(s.Rows) != 3 || len(s.Samples) != 3 {
		t.Fatalf("soak results: %+v", s)
	}
	if !s.Checks.OK() {
		t.Errorf("checks %+v", s.Checks)
	}
	checkLoadStreams(t, "soak", s.Streams, dur, nil)
	checkMemory(t, "soak", s.Memory, 3)
	// Every delivered result is in exactly one row.
	perStream := map[string]int{}
	for _, r := range s.Rows {
		if r.Samples != 1 || r.RSS == 0 || r.RSS != r.RSSMax || r.Heap == 0 || r.Heap > r.RSS {
			t.Errorf("row %d: %+v, want one sample", r.Row, r)
		}
		for i, l := range r.Latency {
			perStream[s.StreamNames[i]] += l.N
		}
	}
	for _, st := range s.Streams {
		if perStream[st.Stream] != int(st.Delivered) {
			t.Errorf("%s: rows hold %d results, %d delivered", st.Stream, perStream[st.Stream], st.Delivered)
		}
	}
	// The verdict is the rule applied to the rows it reports.
	if v := bench.JudgeFlat(s.Rows, bench.DefaultFlatRule); !s.Flat.Judged || v.Flat != s.Flat.Flat {
		t.Errorf("flat verdict %+v, the rows give %+v", s.Flat, v)
	}
	verdict := "Flatness: **flat**"
	if !s.Flat.Flat {
		verdict = "Flatness: **not flat**"
	}
	for _, want := range []string{verdict, s.Flat.Rule, "| 3 | 2–3 | 1 | ", "soak_p99.svg"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	for _, f := range []string{"soak_rss.svg", "soak_goroutines_fds.svg", "soak_p99.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}
