package gateway_test

import (
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/sched"
)

// vig reads the server's max_batch_size when it connects: a model the config
// gives no max_batch batches as the server allows, and a max_batch above the
// server's is lowered to it.
func TestMaxBatchFromServer(t *testing.T) {
	const mock = `
backend: {slots: 1}
models:
  det: {exec_ms: 5, max_batch: 8}
  depth: {exec_ms: 5}
`
	for _, tc := range []struct{ vig string }{
		{"{exec_ms: 10}"},
		{"{exec_ms: 10, max_batch: 16}"},
	} {
		yaml := strings.Replace(batchYAML, "{exec_ms: 10, max_batch: 8, batch_exec_ms: {1: 10, 8: 20}}", tc.vig, 1)
		e, gov, _ := startGovernedMock(t, yaml, mock)
		eventually(t, "the server's max_batch_size read", func() bool {
			mc, ok := e.gw.ServerModel("det")
			return ok && mc.MaxBatchSize == 8
		})
		eventually(t, "det batching at 8", func() bool {
			var snap sched.Snapshot
			gov.Snapshot(&snap)
			return len(snap.Batches) == 1 && snap.Batches[0].Model == "det" && snap.Batches[0].MaxBatch == 8
		})
	}
}
