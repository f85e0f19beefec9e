package proc

import (
	"os"
	"testing"
	"time"
)

func withRoot(t *testing.T, root string) {
	t.Helper()
	old := Root
	Root = root
	t.Cleanup(func() { Root = old })
}

func TestReadSampleFixtures(t *testing.T) {
	tests := []struct {
		root     string
		pid      int
		tids     []int
		onCPU    time.Duration
		rq       time.Duration
		slices   uint64
		vol, inv uint64
	}{
		{root: "testdata/arm64", pid: 4321, tids: []int{4321, 4323, 4327},
			onCPU: 2410000000 + 1830000000 + 190000000, rq: 55000000 + 31000000 + 4000000, slices: 960 + 610 + 27,
			vol: 900 + 600 + 20, inv: 60 + 20 + 8},
		{root: "testdata/amd64", pid: 10014, tids: []int{10014, 10055, 10056},
			onCPU: 179139493 + 119317 + 149105, rq: 667146 + 2694 + 0, slices: 28 + 2 + 1},
	}
	for _, tt := range tests {
		t.Run(tt.root, func(t *testing.T) {
			withRoot(t, tt.root)
			s, err := ReadSample(tt.pid)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Threads) != len(tt.tids) {
				t.Fatalf("%d threads, want %d", len(s.Threads), len(tt.tids))
			}
			for i, th := range s.Threads {
				if th.TID != tt.tids[i] || th.Stat.PID != th.TID || !th.HaveSched || th.Status.Pid != th.TID {
					t.Errorf("thread %d: %+v", i, th)
				}
			}
			// Delta from an empty sample is the whole life of the threads.
			empty := &Sample{PID: tt.pid, Taken: s.Taken.Add(-time.Second)}
			u := Delta(empty, s)
			if u.OnCPU != tt.onCPU || u.RunQueueWait != tt.rq || u.Timeslices != tt.slices || !u.HaveSched {
				t.Errorf("usage %+v", u)
			}
			if tt.vol != 0 && (u.Voluntary != tt.vol || u.Involuntary != tt.inv) {
				t.Errorf("ctxt switches %d/%d, want %d/%d", u.Voluntary, u.Involuntary, tt.vol, tt.inv)
			}
			if u.User != TicksToDuration(s.Process.UTime) || u.System != TicksToDuration(s.Process.STime) || u.Elapsed != time.Second {
				t.Errorf("usage times %+v", u)
			}
		})
	}
}

func TestReadSampleMissing(t *testing.T) {
	withRoot(t, "testdata/arm64")
	if _, err := ReadSample(1); !os.IsNotExist(errUnwrapAll(err)) {
		t.Errorf("missing process: %v", err)
	}
}

func errUnwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

func TestDelta(t *testing.T) {
	t0 := time.Unix(1000, 0)
	th := func(tid int, start, cpu, rq, slices, vol, inv uint64) Thread {
		return Thread{TID: tid, HaveSched: true,
			Stat:   Stat{PID: tid, StartTime: start},
			Sched:  SchedStat{OnCPU: time.Duration(cpu), RunQueueWait: time.Duration(rq), Timeslices: slices},
			Status: Status{VoluntaryCtxtSwitches: vol, NonvoluntaryCtxtSwitches: inv}}
	}
	before := &Sample{Taken: t0, Process: Stat{UTime: 100, STime: 50, MinFlt: 10, MajFlt: 1},
		Threads: []Thread{th(1, 5, 1000, 100, 10, 5, 1), th(2, 6, 500, 50, 5, 2, 0), th(3, 7, 9, 9, 9, 9, 9)}}
	after := &Sample{Taken: t0.Add(2 * time.Second), Process: Stat{UTime: 130, STime: 90, MinFlt: 25, MajFlt: 1},
		Threads: []Thread{
			th(1, 5, 1600, 180, 14, 9, 2), // continued
			th(2, 8, 70, 7, 1, 1, 1),      // tid 2 reused by a new thread: counts from zero
			th(4, 9, 300, 30, 3, 3, 0),    // new thread
		}}
	u := Delta(before, after)
	want := Usage{Elapsed: 2 * time.Second, User: 300 * time.Millisecond, System: 400 * time.Millisecond,
		MinFlt: 15, OnCPU: 600 + 70 + 300, RunQueueWait: 80 + 7 + 30, Timeslices: 4 + 1 + 3, HaveSched: true,
		Voluntary: 4 + 1 + 3, Involuntary: 1 + 1, Threads: 3, ThreadsExited: 1}
	if u != want {
		t.Errorf("got  %+v\nwant %+v", u, want)
	}
}
