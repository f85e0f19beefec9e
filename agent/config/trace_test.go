package config

import (
	"strings"
	"testing"
)

// TestTraceBufferEvents: the ring's size is bounded, and a bad one names the key and the range.
func TestTraceBufferEvents(t *testing.T) {
	for _, n := range []string{"100", "-1", "16777217"} {
		_, err := Parse("t.yaml", []byte("trace: {buffer_events: "+n+"}\n"))
		if err == nil || !strings.Contains(err.Error(), "trace.buffer_events") || !strings.Contains(err.Error(), "between 512 and 16777216") {
			t.Errorf("buffer_events %s: %v", n, err)
		}
	}
	c, err := Parse("t.yaml", []byte("trace: {buffer_events: 4096}\n"))
	if err != nil || c.Trace.BufferEvents != 4096 {
		t.Errorf("buffer_events 4096: %v %+v", err, c)
	}
}
