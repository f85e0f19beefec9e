package gateway_test

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/vig-edge/vig/agent/gateway/ringfront"
	"github.com/vig-edge/vig/shmring"
	"github.com/vig-edge/vig/shmring/client"
)

// Ring frames of six cameras join one batch (their messages built on
// arrival), and each client gets its own frame's answer on its ring.
func TestBatchRingFrames(t *testing.T) {
	if _, err := shmring.Probe(); err != nil {
		t.Skipf("no shared memory for rings on this machine: %v", err)
	}
	rb := &rowBackend{hold: make(chan struct{}), entered: make(chan int, 16)}
	addr, _ := startRowBackend(t, rb)
	e, _, _ := governedAt(t, batchYAML, addr)
	ln, err := shmring.Listen(fmt.Sprintf("@vig-batch-ring-test-%d", os.Getpid()), shmring.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	fe := ringfront.New(ln, e.gw, ringfront.Options{})
	go fe.Serve()
	t.Cleanup(fe.Close)

	clients := make([]*client.Client, 6)
	inputs := make([][]byte, 6)
	for cam := range clients {
		c, err := client.Dial(ln.Addr(), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients[cam] = c
	}
	submit := func(cam int) {
		c := clients[cam]
		f, err := c.Loan()
		if err != nil {
			t.Error(err)
			return
		}
		inputs[cam] = frameRequest(cam, 0).RawInputContents[0]
		copy(f.Bytes(), inputs[cam])
		req := client.Request{Stream: fmt.Sprintf("cam%d", cam), Model: "det", Len: 64, NumTensors: 1}
		req.Tensors[0] = shmring.Tensor{Name: "IN", Datatype: "UINT8", Rank: 2, Dims: [shmring.MaxRank]int64{1, 64}, Length: 64}
		if _, err := c.Submit(f, &req); err != nil {
			t.Error(err)
		}
	}
	submit(0)
	if n := <-rb.entered; n != 1 {
		t.Fatalf("first request of %d rows", n)
	}
	for cam := 1; cam < 6; cam++ {
		submit(cam)
	}
	eventuallyWaiting(t, e, 5)
	rb.hold <- struct{}{}
	if n := <-rb.entered; n != 5 {
		t.Fatalf("batch of %d ring frames, want 5", n)
	}
	rb.hold <- struct{}{}
	for cam, c := range clients {
		var res client.Result
		if err := c.Next(&res); err != nil {
			t.Fatal(err)
		}
		if err := res.Err(); err != nil {
			t.Fatalf("cam%d: %v", cam, err)
		}
		want := bytes.Clone(inputs[cam])
		for i := range want {
			want[i] ^= 0x5a
		}
		o, p := res.Output(0)
		if res.NumOutputs() != 1 || o.Name != "OUT" || fmt.Sprint(o.Shape()) != "[1 64]" || !bytes.Equal(p, want) {
			t.Errorf("cam%d got another's answer: %+v", cam, o)
		}
		c.Release(&res)
	}
	drained(t, e.gw)
}
