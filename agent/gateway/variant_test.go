package gateway_test

import (
	"fmt"
	"testing"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/platform/clock"
	pb "github.com/vig-edge/vig/proto/inference"
)

const variantConfig = `
accelerators: {gpu: 1, dla0: 1}
models:
  detector: {variants: [detector_gpu, detector_dla0]}
  detector_gpu: {exec_ms: 8, on: gpu}
  detector_dla0: {exec_ms: 14, on: dla0}
streams:
  - {name: cam, model: detector, class: high, period_ms: 1000, max_age_ms: 2000}
`

// A frame of a logical model reaches the backend under the name of the
// variant it runs as (the mock knows only the variants: an unrenamed frame
// is NOT_FOUND there), whole or large enough to be cut through otherwise;
// the answer names the variant, and vig counts it.
func TestVariantRenamedOnTheWire(t *testing.T) {
	cfg, err := config.Parse("v.yaml", []byte(variantConfig))
	if err != nil {
		t.Fatal(err)
	}
	_, err = gateway.NewGovernor(gateway.GovernorOptions{Config: cfg, Clock: clock.Monotonic})
	skipInterim(t, err, "variants:detector")
	e, _, _ := startGovernedMock(t, variantConfig, `
backend: {slots: 2}
models:
  detector_gpu: {exec_ms: 2}
  detector_dla0: {exec_ms: 2}
`)
	c := pb.NewGRPCInferenceServiceClient(e.dial(t, e.tcp))
	ctx := ctxT(t)
	ran := map[string]int{}
	for i, size := range []int{64, 64, 512 << 10} {
		r := streamRequest("cam", "detector", uint64(i), clock.Monotonic())
		r.Inputs[0].Shape = []int64{int64(size)}
		r.RawInputContents[0] = make([]byte, size)
		resp, err := c.ModelInfer(ctx, r)
		if err != nil {
			t.Fatalf("frame %d (%d bytes): %v", i, size, err)
		}
		if resp.ModelName != "detector_gpu" && resp.ModelName != "detector_dla0" {
			t.Fatalf("frame %d answered as %q, want a variant", i, resp.ModelName)
		}
		ran[resp.ModelName]++
	}
	m := scrape(t, e.reg)
	for v, n := range ran {
		key := fmt.Sprintf(`vig_variant_dispatches_total{model="detector",variant=%q}`, v)
		if m[key] != float64(n) {
			t.Errorf("%s = %v, want %d", key, m[key], n)
		}
	}
}
