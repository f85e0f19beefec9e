package gateway

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/sched"
	pb "github.com/vig-edge/vig/proto/inference"
	"github.com/vig-edge/vig/wire"
)

func TestHandOffParams(t *testing.T) {
	const now = sched.Time(1_000_000_000)
	acting := &wire.ModelConfig{DynamicBatching: &wire.DynamicBatching{PriorityLevels: 3,
		DefaultQueuePolicy: &wire.QueuePolicy{AllowTimeoutOverride: true, DefaultTimeoutMicroseconds: 1_000_000}}}
	noOverride := &wire.ModelConfig{DynamicBatching: &wire.DynamicBatching{PriorityLevels: 2,
		DefaultQueuePolicy: &wire.QueuePolicy{DefaultTimeoutMicroseconds: 1_000_000}}}
	oneLevel := &wire.ModelConfig{DynamicBatching: &wire.DynamicBatching{PriorityLevels: 1}}
	noBatcher := &wire.ModelConfig{SequenceBatching: true}
	i64 := func(v int64) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: v}}
	}
	u64 := func(v uint64) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: v}}
	}
	for _, tc := range []struct {
		name     string
		mode     string            // models.m.hand_deadline
		server   *wire.ModelConfig // nil: not read
		params   map[string]*pb.InferParameter
		class    sched.Class
		deadline sched.Time // 0: 30 ms from now
		pinned   bool
		timeout  int64  // want: parameter timeout (0: absent)
		priority uint64 // want: parameter priority (0: absent)
		handed   bool   // want: a timeout of vig's was sent
	}{
		{name: "auto, both act", server: acting, class: sched.High, timeout: 30_000, priority: 2, handed: true},
		{name: "protected", server: acting, class: sched.Protected, timeout: 30_000, priority: 1, handed: true},
		{name: "client timeout stricter", server: acting, params: map[string]*pb.InferParameter{"timeout": i64(5_000)}, class: sched.High, timeout: 5_000, priority: 2},
		{name: "client timeout looser", server: acting, params: map[string]*pb.InferParameter{"timeout": i64(90_000)}, class: sched.High, timeout: 30_000, priority: 2, handed: true},
		{name: "client priority stricter", server: acting, params: map[string]*pb.InferParameter{"priority": u64(1)}, class: sched.BestEffort, timeout: 30_000, priority: 1, handed: true},
		{name: "client priority looser", server: acting, params: map[string]*pb.InferParameter{"priority": i64(3)}, class: sched.Protected, timeout: 30_000, priority: 1, handed: true},
		{name: "client default priority", server: acting, params: map[string]*pb.InferParameter{"priority": u64(0)}, class: sched.High, timeout: 30_000, priority: 2, handed: true},
		{name: "no timeout override", server: noOverride, class: sched.BestEffort, priority: 2},
		{name: "one priority level", server: oneLevel, class: sched.BestEffort, priority: 1},
		{name: "no dynamic batcher", server: noBatcher, class: sched.High},
		{name: "server not read", class: sched.High},
		{name: "off", mode: "off", server: acting, class: sched.High},
		{name: "on without server config", mode: "on", class: sched.BestEffort, timeout: 30_000, priority: 3, handed: true},
		{name: "sequence START", server: acting, class: sched.High, pinned: true, priority: 2},
		{name: "default contract", server: acting, class: sched.BestEffort, deadline: sched.Never},
		{name: "stale", mode: "on", class: sched.High, deadline: now - 1, timeout: 1, priority: 2, handed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse("t.yaml", []byte("models:\n  m: {exec_ms: 1, hand_deadline: "+map[bool]string{true: tc.mode, false: "auto"}[tc.mode != ""]+"}\n"))
			if err != nil {
				t.Fatal(err)
			}
			g := &Gateway{opts: Options{Config: cfg}, gov: &Governor{clock: func() sched.Time { return now }}}
			if tc.server != nil {
				g.server.models = map[string]*wire.ModelConfig{"m": tc.server}
			}
			in := &pb.ModelInferRequest{ModelName: "m", Id: "f1", Parameters: tc.params,
				Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "UINT8", Shape: []int64{3}}},
				RawInputContents: [][]byte{{1, 2, 3}}}
			b, err := proto.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			c := &Call{Msg: mem.BufferSlice{mem.SliceBuffer(b)}}
			if err := c.Header.ParseInfer(c.Msg); err != nil {
				t.Fatal(err)
			}
			c.hand = handOn{deadline: tc.deadline, class: tc.class, pinned: tc.pinned}
			if tc.deadline == 0 {
				c.hand.deadline = now.Add(30 * time.Millisecond)
			}
			sent := g.withHandOff(c, c.Msg).Materialize()
			var out pb.ModelInferRequest
			if err := proto.Unmarshal(sent, &out); err != nil {
				t.Fatalf("the forwarded message does not decode: %v", err)
			}
			if out.ModelName != "m" || out.Id != "f1" || len(out.RawInputContents) != 1 || string(out.RawInputContents[0]) != "\x01\x02\x03" || len(out.Inputs) != 1 {
				t.Fatalf("the forwarded message lost fields: %v", &out)
			}
			if got := out.Parameters["timeout"].GetInt64Param(); got != tc.timeout {
				t.Errorf("timeout = %d, want %d", got, tc.timeout)
			}
			got := out.Parameters["priority"]
			if p := got.GetUint64Param() + uint64(got.GetInt64Param()); p != tc.priority {
				t.Errorf("priority = %d, want %d", p, tc.priority)
			}
			if c.hand.timeout != tc.handed {
				t.Errorf("timeout handed on = %v, want %v", c.hand.timeout, tc.handed)
			}
			if tc.timeout == 0 && tc.priority == 0 && len(sent) != len(b) {
				t.Errorf("nothing to hand on, yet the message grew from %d to %d bytes", len(b), len(sent))
			}
		})
	}
}

// Triton's answer for a request its queue dropped at the timeout vig handed on
// becomes vig's late answer; any other UNAVAILABLE, or one for a call without
// vig's timeout, is left alone.
func TestLateAtBackend(t *testing.T) {
	drop := status.Error(codes.Unavailable, tritonTimeoutMsg)
	c := &Call{hand: handOn{timeout: true}}
	if err := lateAtBackend(c, drop); status.Code(err) != codes.DeadlineExceeded || !c.hand.late {
		t.Fatalf("dropped at the handed timeout: %v (late %v)", err, c.hand.late)
	}
	c = &Call{}
	if err := lateAtBackend(c, drop); err != drop || c.hand.late {
		t.Fatalf("no timeout of vig's: %v (late %v)", err, c.hand.late)
	}
	c = &Call{hand: handOn{timeout: true}}
	other := status.Error(codes.Unavailable, "Server is stopping")
	if err := lateAtBackend(c, other); err != other || c.hand.late {
		t.Fatalf("another UNAVAILABLE: %v (late %v)", err, c.hand.late)
	}
}
