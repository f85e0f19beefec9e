package mockbackend

import (
	"slices"
	"sync"
	"time"
)

// Job is one request as the accelerator ran it, from the slot timelines: when it
// joined the slot queue (after its inputs were resolved), when it started on
// its slot (max of that and the end of the slot's previous job) and when it
// ended. Benchmarks compare Start with the previous End on the same slot to see
// the accelerator idle while work was waiting.
type Job struct {
	ID     string // the request id
	Model  string
	Stream string
	Frame  uint64
	Slot   int // numbered across accelerators, in Config order
	// Accelerator is the name of the slot's accelerator ("" without
	// Config.Accelerators).
	Accelerator string
	Queued      time.Time
	Start       time.Time
	End         time.Time
	// Execution numbers the runs on the accelerator (from 1): the requests one
	// batch ran share it, and their slot, Start and End. Rows are this
	// request's rows (1 without a batch dimension), Batch the execution's.
	Execution uint64
	Rows      int
	Batch     int
	// Interference is the factor the execution's length took because another
	// accelerator ran a job when it started (Config.Interference); 1: none.
	Interference float64
}

// timeline records jobs when Config.Timeline is set (off by default: `vig
// serve`'s embedded backend runs for days). It keeps the newest timelineMax
// jobs, so a long demo does not grow without bound.
type timeline struct {
	mu   sync.Mutex
	jobs []Job
}

const timelineMax = 1 << 18 // ~45 min of scenario B

func (t *timeline) add(j Job) {
	t.mu.Lock()
	if len(t.jobs) == timelineMax {
		t.jobs = t.jobs[:copy(t.jobs, t.jobs[timelineMax/2:])]
	}
	t.jobs = append(t.jobs, j)
	t.mu.Unlock()
}

// Timeline returns the jobs that started so far (at most the newest 2^18),
// ordered by slot and start, when the server was configured with Timeline;
// otherwise nil. Cancelled
// requests that never reached a slot are not jobs.
func (s *Server) Timeline() []Job {
	if s.timeline == nil {
		return nil
	}
	s.timeline.mu.Lock()
	jobs := slices.Clone(s.timeline.jobs)
	s.timeline.mu.Unlock()
	slices.SortFunc(jobs, func(a, b Job) int {
		if a.Slot != b.Slot {
			return a.Slot - b.Slot
		}
		return a.Start.Compare(b.Start)
	})
	return jobs
}
