package bench

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readTraceFile reads a trace file's event count (otherData.events) and its
// trace events.
func readTraceFile(t *testing.T, path string) (events float64, traceEvents int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OtherData   map[string]any   `json:"otherData"`
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	n, _ := doc.OtherData["events"].(float64)
	return n, len(doc.TraceEvents)
}

// TestWireTrace: with a trace directory, each run of vig's governor (and only
// those) leaves its trace there, with the run's events in it.
func TestWireTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the mock backend for a second")
	}
	sc := loadScenario(t, "b")
	dir := filepath.Join(t.TempDir(), "traces")
	_, err := RunWire(context.Background(), WireOptions{Scenarios: []Scenario{*sc}, Depths: []int{1}, Duration: 500 * time.Millisecond,
		Policies: []string{PolicyDirect, PolicyVig}, TraceDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 1 || filepath.Base(files[0]) != "wire-b-vig-d1.trace.json" {
		t.Fatalf("trace files %v; want one, of the vig run", files)
	}
	if n, te := readTraceFile(t, files[0]); n < 20 || te < 20 {
		t.Errorf("%s: %v events recorded, %d trace events", files[0], n, te)
	}
}

// TestDemoTrace: vig demo --trace writes the run's trace when it ends.
func TestDemoTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for a second")
	}
	sc := loadScenario(t, "b")
	path := filepath.Join(t.TempDir(), "demo.trace.json")
	if err := Demo(context.Background(), DemoOptions{Config: sc.Config, Duration: time.Second, Refresh: time.Second, Out: io.Discard, Trace: path}); err != nil {
		t.Fatal(err)
	}
	if n, te := readTraceFile(t, path); n < 20 || te < 20 {
		t.Errorf("%s: %v events recorded, %d trace events", path, n, te)
	}
}

// TestTraceCostTarget: the recorder's cost is judged at the smallest payload
// on a quiet machine, and only reported on a busy one.
func TestTraceCostTarget(t *testing.T) {
	row := func(path string, payload int, cpu float64) DatapathRow {
		return DatapathRow{Path: path, Payload: payload, Cost: &ProxyCost{CPUus: cpu}}
	}
	for _, tc := range []struct {
		name, load string
		on         float64
		want       string
	}{
		{"holds", "0.40 0.3 0.2 1/100 1", 102, Holds},
		{"too dear", "0.40 0.3 0.2 1/100 1", 104, Fails},
		{"busy", "3.10 2.0 1.0 1/100 1", 102, NotMeasured},
	} {
		r := &Results{LoadStart: tc.load, Datapath: &DatapathResult{Payload: []int{1_200_000, 0},
			Rows: []DatapathRow{row(PathTCP, 0, 100), row(PathTCPTraced, 0, tc.on), row(PathTCP, 1_200_000, 900), row(PathTCPTraced, 1_200_000, 990)}}}
		got := traceCostTarget(r)
		if got.Status != tc.want || !strings.Contains(got.Detail, "0 B") {
			t.Errorf("%s: %s (%s), want %s", tc.name, got.Status, got.Detail, tc.want)
		}
	}
	if got := traceCostTarget(&Results{}); got.Status != NotMeasured {
		t.Errorf("no datapath: %s", got.Status)
	}
}
