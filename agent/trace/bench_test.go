package trace

import "testing"

// BenchmarkRecord is the cost of one hook: off (one atomic load) and on (the
// copy into the ring under its lock), with a request id as Arrive carries.
func BenchmarkRecord(b *testing.B) {
	id := []byte("cam0#12345")
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			r, _ := NewRecorder(1<<16, monoClock(), nil)
			if on {
				defer r.Begin().Close()
			}
			e := Event{Kind: Arrive, Token: 1, Time: 1}
			b.ReportAllocs()
			for b.Loop() {
				if r.On() {
					r.Record(&e, id)
				}
			}
		})
	}
}
