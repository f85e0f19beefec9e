package gateway

import (
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/wire"
)

func TestBatchFromServer(t *testing.T) {
	i := func(n int) *int { return &n }
	for _, tc := range []struct {
		name   string
		cfg    *int
		mc     wire.ModelConfig
		want   int
		saying string // in why; "" for none
	}{
		{"absent: the server's", nil, wire.ModelConfig{MaxBatchSize: 8}, 8, ""},
		{"absent, server does not batch", nil, wire.ModelConfig{}, 1, ""},
		{"absent, huge server batch", nil, wire.ModelConfig{MaxBatchSize: 4096}, 256, ""},
		{"config within the server's", i(4), wire.ModelConfig{MaxBatchSize: 8}, 4, ""},
		{"config above the server's", i(16), wire.ModelConfig{MaxBatchSize: 8}, 8, "set max_batch: 8"},
		{"config batches, server does not", i(8), wire.ModelConfig{}, 1, "max_batch_size in its config.pbtxt"},
		{"config 1", i(1), wire.ModelConfig{MaxBatchSize: 8}, 1, ""},
		{"sequence batcher", nil, wire.ModelConfig{MaxBatchSize: 8, SequenceBatching: true}, 1, ""},
		{"sequence batcher, config batches", i(8), wire.ModelConfig{MaxBatchSize: 8, SequenceBatching: true}, 1, "sequence batcher"},
	} {
		n, why := config.BatchFromServer(tc.cfg, tc.mc.MaxBatchSize, tc.mc.SequenceBatching)
		if n != tc.want || (tc.saying == "") != (why == "") || !strings.Contains(why, tc.saying) {
			t.Errorf("%s: %d %q, want %d saying %q", tc.name, n, why, tc.want, tc.saying)
		}
	}
}
