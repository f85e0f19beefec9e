package sched_test

import (
	"fmt"
	"time"

	"github.com/vig-edge/vig/agent/sched"
)

// The gateway's side: one call per event under its mutex, carrying out the
// returned actions after unlocking.
func Example() {
	s, err := sched.New(sched.Config{
		Slots:        1,
		SafetyMargin: sched.DefaultMargin,
		Models: []sched.ModelSpec{
			{Name: "det", Exec: 8 * time.Millisecond},
			{Name: "vlm", Exec: 200 * time.Millisecond},
		},
		Streams: []sched.StreamSpec{
			{Name: "detector", Model: "det", Class: sched.Protected, Period: 50 * time.Millisecond, MaxAge: 50 * time.Millisecond},
			{Name: "vlm", Model: "vlm", Class: sched.BestEffort, Period: time.Second, MaxAge: 2 * time.Second},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ms := func(n int64) sched.Time { return sched.Time(n * int64(time.Millisecond)) }
	show := func(acts []sched.Action) {
		for _, a := range acts {
			switch {
			case a.Kind == sched.Dispatch && a.Queued:
				fmt.Printf("dispatch %d queued behind slot %d, predicted start %v\n", a.Token, a.Slot, time.Duration(a.Start))
			case a.Kind == sched.Dispatch:
				fmt.Printf("dispatch %d on slot %d (busy %d)\n", a.Token, a.Slot, a.Busy)
			default:
				fmt.Printf("answer %d %v: %v\n", a.Token, a.Code, a.Reason)
			}
		}
		if t, ok := s.NextWake(); ok {
			fmt.Printf("  tick at %v\n", time.Duration(t))
		}
	}
	var acts []sched.Action
	fmt.Println("0ms: detector frame 1")
	show(s.Arrive(ms(0), sched.Request{Token: 1, Stream: "detector", Model: "det"}, acts[:0]))
	// Frame 2 waits; at 6 ms (frame 1's earliest plausible end, 8 ms, minus
	// the 2 ms commit lead) the next frame is committed behind it.
	fmt.Println("5ms: detector frame 2, slot busy")
	show(s.Arrive(ms(5), sched.Request{Token: 2, Stream: "detector", Model: "det"}, acts[:0]))
	fmt.Println("6ms: detector frame 3")
	show(s.Arrive(ms(6), sched.Request{Token: 3, Stream: "detector", Model: "det"}, acts[:0]))
	fmt.Println("8ms: frame 1 done")
	show(s.Complete(ms(8), 1, true, acts[:0]))
	fmt.Println("16ms: frame 3 done")
	show(s.Complete(ms(16), 3, true, acts[:0]))
	fmt.Println("45ms: VLM request, 5 ms before the next detector frame is due")
	show(s.Arrive(ms(45), sched.Request{Token: 4, Stream: "vlm", Model: "vlm"}, acts[:0]))

	var snap sched.Snapshot
	s.Snapshot(ms(45), &snap)
	for _, st := range snap.Streams {
		fmt.Printf("%s: received %d forwarded %d superseded %d deferred %d waiting %d\n",
			st.Name, st.Received, st.Forwarded, st.Superseded, st.Deferred, st.Waiting)
	}
	// Output:
	// 0ms: detector frame 1
	// dispatch 1 on slot 0 (busy 0)
	// 5ms: detector frame 2, slot busy
	//   tick at 6ms
	// 6ms: detector frame 3
	// answer 2 ABORTED: superseded by a newer frame of the same stream
	// dispatch 3 queued behind slot 0, predicted start 8.8ms
	// 8ms: frame 1 done
	// 16ms: frame 3 done
	// 45ms: VLM request, 5 ms before the next detector frame is due
	//   tick at 91.200001ms
	// detector: received 3 forwarded 2 superseded 1 deferred 0 waiting 0
	// vlm: received 1 forwarded 0 superseded 0 deferred 1 waiting 1
}
