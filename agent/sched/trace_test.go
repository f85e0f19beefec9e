package sched

import "testing"

// TestDeferHook: admission that holds the VLM back for the detector's frames
// tells the hook once, naming both streams; where it is not held back (its
// own accelerator), the hook is not called.
func TestDeferHook(t *testing.T) {
	cfg := scenarioD()
	cfg.Streams[4].MinRateHz = 0
	for _, tc := range []struct {
		name     string
		cfg      Config
		deferred bool
	}{
		{"accelerators", cfg, false},
		{"one pool of 3", onePool(cfg, 3), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg)
			type call struct {
				tok       uint64
				st, forSt int
				at        Time
			}
			var calls []call
			h.s.SetOnDefer(func(now Time, tok uint64, st, forSt int) bool {
				calls = append(calls, call{tok, st, forSt, now})
				return len(calls) > 1 // the first is not recorded (recording off): told again
			})
			h.set(at(1000))
			det, _ := h.arrive("detector", 0)
			h.set(at(1012))
			h.complete(det, true)
			h.set(at(1013))
			vlm, _ := h.arrive("vlm", 0)
			h.set(at(1014))
			h.tick() // deferred again for the same stream: told again, as the first was not recorded
			h.set(at(1015))
			h.tick() // recorded at 1014: not told again
			vi, di := h.s.Route("vlm", "vlm"), h.s.Route("detector", "detector")
			if h.s.StreamName(vi) != "vlm" || h.s.StreamName(di) != "detector" || h.s.Route("nobody", "nomodel") != -1 {
				t.Fatalf("Route: vlm %d, detector %d", vi, di)
			}
			if !tc.deferred {
				if len(calls) != 0 {
					t.Fatalf("hook called %+v; the VLM was not deferred", calls)
				}
				return
			}
			if len(calls) != 2 || calls[0] != (call{vlm, vi, di, at(1013)}) || calls[1] != (call{vlm, vi, di, at(1014)}) || h.stats("vlm").Deferred != 1 {
				t.Fatalf("hook calls %+v; want {vlm %d, stream %d, for %d} at 1013 (not recorded) and again at 1014", calls, vlm, vi, di)
			}
			if waiting, jobs := h.s.Load(0); waiting != 1 || jobs != 0 {
				t.Errorf("Load: %d waiting, %d jobs; want the VLM waiting, nothing running", waiting, jobs)
			}
		})
	}
}
