package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/mockbackend"
	pb "github.com/vig-edge/vig/proto/inference"
)

func TestScenarioEPhases(t *testing.T) {
	for _, name := range []string{"e", "e-linear"} {
		sc := loadScenario(t, name)
		want := map[string]time.Duration{"cam0": 0, "cam1": 5500 * time.Microsecond, "cam2": 11 * time.Millisecond,
			"cam3": 16500 * time.Microsecond, "cam4": 22 * time.Millisecond, "cam5": 27500 * time.Microsecond, "depth": 3 * time.Millisecond}
		off := sc.offsets()
		for i, s := range sc.Config.Streams {
			if off[i] != want[s.Name] {
				t.Errorf("%s: %s starts at %v, want %v", sc.Name, s.Name, off[i], want[s.Name])
			}
		}
		if len(off) != len(want) {
			t.Errorf("%s: %d streams, want %d", sc.Name, len(off), len(want))
		}
		ps := PoliciesFor(sc.Config)
		if strings.Join(ps, ",") != "direct,triton-policy,vig,vig-unbatched,vig-learnt" {
			t.Errorf("%s: policies %v", sc.Name, ps)
		}
	}
	if sc := loadScenario(t, "b"); sc.Phases != nil || sc.offsets()[1] != 7*time.Millisecond || len(PoliciesFor(sc.Config)) != 3 {
		t.Errorf("B: phases %v, offsets %v, policies %v: want A–D as they were", sc.Phases, sc.offsets(), PoliciesFor(sc.Config))
	}
}

func TestSensorsFileErrors(t *testing.T) {
	cfg, err := config.Parse("e.yaml", mustRead(t, filepath.Join("..", "examples", "scenarios", "e.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	all := "cam0: 0, cam1: 5.5, cam2: 11, cam3: 16.5, cam4: 22, cam5: 27.5, depth: 3"
	for _, tc := range []struct{ in, want string }{
		{"phase_ms: {cam0: 0}", "no phase for stream cam1"},
		{"phase_ms: {" + all + ", cam9: 1}", "phase_ms.cam9: the scenario has no such stream"},
		{"phase_ms: {" + strings.Replace(all, "cam1: 5.5", "cam1: 40", 1) + "}", "phase_ms.cam1: 40: give a phase from 0 to below"},
		{"phase_ms: {" + strings.Replace(all, "cam1: 5.5", "cam1: -1", 1) + "}", "phase_ms.cam1: -1"},
		{"phases: {}", "field phases not found"},
	} {
		_, err := parsePhases("e.sensors.yaml", []byte(tc.in), cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.in, err, tc.want)
		}
	}
	if _, err := parsePhases("e.sensors.yaml", []byte("phase_ms: {"+all+"}"), cfg); err != nil {
		t.Error(err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOwnAnswer: the check a sensor makes catches another frame's row or id.
func TestOwnAnswer(t *testing.T) {
	row, other := framePayload("cam0", 7), framePayload("cam1", 7)
	if bytes.Equal(row, other) || bytes.Equal(row, framePayload("cam0", 8)) {
		t.Fatal("two frames carry the same content")
	}
	answer := func(id string, r []byte) *pb.ModelInferResponse {
		return &pb.ModelInferResponse{Id: id, Outputs: []*pb.ModelInferResponse_InferOutputTensor{{Name: mockbackend.OutputName, Datatype: "UINT8", Shape: []int64{1, mockbackend.RowBytes}}},
			RawOutputContents: [][]byte{mockbackend.RowOutput([][]byte{r})}}
	}
	if !ownAnswer(answer("cam0#7", row), "cam0", 7, row) {
		t.Error("its own answer is not recognised")
	}
	if ownAnswer(answer("cam0#7", other), "cam0", 7, row) || ownAnswer(answer("cam1#7", row), "cam0", 7, row) {
		t.Error("another frame's row or id passes")
	}
}

// TestWireScenarioE runs scenario E for a few seconds under direct (the mock's
// dynamic batcher) and vig with batching: every answer is checked against its
// frame's row and none is another's; the backend ran batches of both, never
// more than 8 rows and never of depth. It asserts counts, not timing.
func TestWireScenarioE(t *testing.T) {
	if testing.Short() {
		t.Skip("runs scenario E's sensors against the mock backend for a few seconds")
	}
	sc := loadScenario(t, "e")
	res, err := RunWire(context.Background(), WireOptions{Scenarios: []Scenario{*sc}, Depths: []int{1},
		Duration: 1500 * time.Millisecond, Policies: []string{PolicyDirect, PolicyVig}})
	if err != nil {
		t.Fatal(err)
	}
	ws := res.Scenarios[0]
	for _, r := range ws.Runs {
		for _, s := range r.Streams {
			if s.Sent != s.Delivered+s.Errors+s.Mixed {
				t.Errorf("%s/%s: sent %d != delivered %d + errors %d + mixed %d", r.Policy, s.Stream, s.Sent, s.Delivered, s.Errors, s.Mixed)
			}
			if s.Mixed != 0 {
				t.Errorf("%s/%s: %d of %d answers were another frame's", r.Policy, s.Stream, s.Mixed, s.Checked)
			}
			if strings.HasPrefix(s.Stream, "cam") && s.Checked == 0 {
				t.Errorf("%s/%s: no answer checked", r.Policy, s.Stream)
			}
			if s.Stream == "depth" && s.Checked != 0 {
				t.Errorf("%s/depth: %d answers checked as rows; depth does not batch", r.Policy, s.Checked)
			}
		}
	}
	for _, p := range []string{PolicyDirect, PolicyVig} {
		sizes := ws.Batches[p]["detector"]
		batched := 0
		for size, n := range sizes {
			if size > 1 {
				batched += n
			}
			if size > 8 {
				t.Errorf("%s: the backend ran a batch of %d (max 8)", p, size)
			}
		}
		if batched == 0 {
			t.Errorf("%s: the backend never batched six cameras' frames on one slot (%v)", p, sizes)
		}
		for size := range ws.Batches[p]["depth"] {
			if size > 1 {
				t.Errorf("%s: depth ran a batch of %d", p, size)
			}
		}
	}
}

// TestScenarioETargets judges made-up results: each target fails on the
// stream that misses it and holds otherwise; the report shows the batches.
func TestScenarioETargets(t *testing.T) {
	streams := func(cov map[string]float64, checked, mixed uint64) []StreamResult {
		var out []StreamResult
		for _, n := range []string{"cam0", "cam1", "cam2", "cam3", "cam4", "cam5", "depth"} {
			out = append(out, StreamResult{Stream: n, Coverage: cov[n], Checked: checked, Mixed: mixed})
		}
		return out
	}
	good := map[string]float64{"cam0": 1, "cam1": 0.995, "cam2": 0.98, "cam3": 0.98, "cam4": 0.975, "cam5": 0.97, "depth": 0.99}
	direct := map[string]float64{"cam0": 0.93, "cam1": 0.78, "cam2": 0.89, "cam3": 0.975, "cam4": 0.96, "cam5": 0.92, "depth": 0.985}
	short := func(m map[string]float64, stream string, by float64) map[string]float64 {
		c := map[string]float64{}
		for k, v := range m {
			c[k] = v
		}
		c[stream] -= by
		return c
	}
	results := func(vig, learnt, linVig, linUnb map[string]float64, mixed uint64) *Results {
		e := WireScenario{Name: "E", Policies: PoliciesFor(loadScenario(t, "e").Config), Best: map[string][]StreamResult{
			PolicyDirect: streams(direct, 0, 0), PolicyVig: streams(vig, 0, 0), PolicyVigLearnt: streams(learnt, 0, 0)},
			Runs:    []WireRun{{Policy: PolicyVig, Streams: streams(vig, 100, mixed)}},
			Streams: []StreamSpec{{Name: "cam0", Model: "detector", MaxBatch: 8, BatchExecMs: map[int]float64{1: 10, 8: 27.5}}},
			Batches: map[string]map[string]map[int]int{PolicyDirect: {"detector": {1: 3, 4: 5}}}}
		el := WireScenario{Name: "E-linear", Best: map[string][]StreamResult{PolicyVig: streams(linVig, 0, 0), PolicyVigUnbatched: streams(linUnb, 0, 0)}}
		return &Results{Wire: &WireResult{Scenarios: []WireScenario{e, el}}}
	}
	status := func(r *Results) []string {
		var out []string
		for _, tg := range scenarioETargets(r) {
			out = append(out, tg.Status)
		}
		return out
	}
	all := []string{Holds, Holds, Holds, Holds}
	if got := status(results(good, short(good, "cam2", 0.015), good, short(good, "depth", 0.005), 0)); !slicesEqual(got, all) {
		t.Errorf("good results: %v, want all to hold", got)
	}
	for _, tc := range []struct {
		name string
		r    *Results
		fail int
	}{
		{"cam1 below 99 %", results(short(good, "cam1", 0.01), good, good, good, 0), 0},
		{"cam3 below direct", results(short(good, "cam3", 0.006), good, good, good, 0), 0},
		{"learnt 3 points short", results(good, short(good, "cam4", 0.03), good, good, 0), 1},
		{"E-linear batching worse", results(good, good, short(good, "cam5", 0.02), good, 0), 2},
		{"a mixed-up answer", results(good, good, good, good, 1), 3},
	} {
		got := status(tc.r)
		for i, st := range got {
			want := Holds
			if i == tc.fail {
				want = Fails
			}
			if st != want {
				t.Errorf("%s: target %d %s, want %s", tc.name, i, st, want)
			}
		}
	}
	b := &Results{Wire: &WireResult{Scenarios: []WireScenario{{Name: "B", Best: map[string][]StreamResult{PolicyVig: streams(good, 0, 0)}}}}}
	if strings.Contains(Report(b, nil), "Batches the backend ran") {
		t.Error("a scenario without a batching model reports batches")
	}
	rep := Report(results(good, good, good, good, 0), nil)
	for _, want := range []string{"`batch_exec_ms: {1: 10, 8: 27.5}`", "| direct | `detector` 1: 3, 4: 5 | 2.88 | 0 | 0 |", "| vig | `detector` no batch above 1 | 1.00 | 700 | 0 |"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// TestExecutions: a batch's requests count as one execution, its oldest
// request standing for it; jobs of executions of their own stay.
func TestExecutions(t *testing.T) {
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	jobs := []mockbackend.Job{
		{ID: "a", Execution: 1, Queued: at(1), Start: at(2), End: at(5), Batch: 1, Rows: 1},
		{ID: "c", Execution: 2, Queued: at(4), Start: at(5), End: at(9), Batch: 3, Rows: 1},
		{ID: "b", Execution: 2, Queued: at(3), Start: at(5), End: at(9), Batch: 3, Rows: 2},
		{ID: "d", Execution: 3, Queued: at(6), Start: at(9), End: at(10), Batch: 1, Rows: 1},
		// Another accelerator numbers its executions from 1 too.
		{ID: "e", Accelerator: "dla", Slot: 1, Execution: 1, Queued: at(1), Start: at(2), End: at(4), Batch: 1, Rows: 1},
	}
	got := executions(jobs)
	var ids []string
	for _, j := range got {
		ids = append(ids, j.ID)
	}
	if strings.Join(ids, ",") != "a,b,d,e" {
		t.Errorf("executions %v, want a,b,d,e (b queued before c in their batch; e another accelerator's)", ids)
	}
	got = got[:3]
	mono := func(t time.Time) int64 { return t.UnixNano() }
	counts := batchCounts(got, mono, at(0).UnixNano(), at(20).UnixNano())
	if counts["m"] != nil || counts[""][1] != 2 || counts[""][3] != 1 {
		t.Errorf("batch counts %v, want 2 of 1 row and 1 of 3", counts)
	}
	if busy := busyShare(got, mono, at(0).UnixNano(), at(10).UnixNano(), []config.Accelerator{{Name: "", Slots: 1}}); busy[""] != 80 {
		t.Errorf("busy %v %%, want 80 (the batch counted once)", busy[""])
	}
}
