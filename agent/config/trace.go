package config

// Trace sizes the trace recorder (docs/trace.md).
type Trace struct {
	// BufferEvents is the recorder's ring, in events (some 140 bytes each);
	// 0: the recorder's default, 65536. A window longer than the ring keeps
	// its newest events.
	BufferEvents int `yaml:"buffer_events"`
}

// Bounds of trace.buffer_events (trace.NewRecorder enforces the same).
const (
	MinTraceEvents = 512
	MaxTraceEvents = 1 << 24
)

func (t *Trace) validate(bad func(line int, key, format string, args ...any)) {
	if n := t.BufferEvents; n != 0 && (n < MinTraceEvents || n > MaxTraceEvents) {
		bad(0, "trace.buffer_events", "%d: give between %d and %d events (about 140 bytes each), or leave the key out for 65536", n, MinTraceEvents, MaxTraceEvents)
	}
}
