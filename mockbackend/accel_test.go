package mockbackend

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Each accelerator has its own slots and FIFO, and a model runs only on its
// own: with the GPU's slot held, a DLA job runs while a GPU job queues.
func TestAcceleratorsOwnSlotsAndQueues(t *testing.T) {
	cfg := Config{
		Accelerators: []Accelerator{{Name: "gpu", Slots: 1}, {Name: "dla", Slots: 2}},
		Models:       []Model{{Name: "pose", Exec: time.Millisecond, On: "gpu"}, {Name: "detector", Exec: time.Millisecond, On: "dla"}},
		Timeline:     true,
	}
	r, c, _ := serve(t, "127.0.0.1:0", cfg)
	gpu, dla := r.pools[0], r.pools[1]
	if r.slots != gpu || len(r.pools) != 2 {
		t.Fatalf("pools %d", len(r.pools))
	}
	held, err := gpu.acquire(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	poseDone := make(chan error, 1)
	go func() {
		_, err := c.ModelInfer(context.Background(), rawRequest("pose", FrameID("pose", 1), []byte{1}))
		poseDone <- err
	}()
	waitQueued(t, gpu, 1)
	for i := range 3 {
		if _, err := c.ModelInfer(context.Background(), rawRequest("detector", FrameID("detector", uint64(i)), []byte{1})); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-poseDone:
		t.Fatalf("pose ran on a held GPU (err %v)", err)
	default:
	}
	if dla.waiting() != 0 || gpu.waiting() != 1 {
		t.Fatalf("waiting: dla %d, gpu %d", dla.waiting(), gpu.waiting())
	}
	gpu.release(held.slot, time.Now())
	if err := <-poseDone; err != nil {
		t.Fatal(err)
	}
	for _, j := range r.Timeline() {
		want := map[string]string{"pose": "gpu", "detector": "dla"}[j.Model]
		if j.Accelerator != want || (want == "gpu") != (j.Slot == 0) || j.Slot > 2 {
			t.Errorf("job %s on %q slot %d", j.ID, j.Accelerator, j.Slot)
		}
	}
}

func TestAcceleratorConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Accelerators: []Accelerator{{Name: "gpu", Slots: 1}}, Models: []Model{{Name: "m", On: "dla"}}}, `accelerator "dla" is not configured`},
		{Config{Slots: 2, Accelerators: []Accelerator{{Name: "gpu", Slots: 1}}}, "both slots"},
		{Config{Accelerators: []Accelerator{{Name: "gpu", Slots: 0}}}, "need at least 1"},
		{Config{Accelerators: []Accelerator{{Name: "gpu", Slots: 1}, {Name: "gpu", Slots: 1}}}, "listed twice"},
		{Config{Models: []Model{{Name: "m", On: "gpu"}}}, `accelerator "gpu" is not configured`},
	} {
		tc.cfg.Spin = -1
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
