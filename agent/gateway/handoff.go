package gateway

import (
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/agent/sched"
	"github.com/vig-edge/vig/wire"
)

// Deadlines handed on: once vig dispatches a frame, the backend's own queue
// may still hold it (other clients share the server). So vig appends Triton's
// `timeout` (µs: the frame's freshness budget left at the send, its deadline −
// now) and `priority` (from its stream's class: protected 1, high 2,
// best_effort 3, at most the model's priority_levels) to the message it
// forwards, where the server's model configuration says they act
// (models.X.hand_deadline: auto), always (on) or never (off):
//
//   - timeout acts on a model whose dynamic batcher's default queue policy
//     allows a request's timeout (allow_timeout_override) and has a default
//     timeout: Triton's PriorityQueue::PolicyQueue::Enqueue
//     (triton-inference-server/core src/scheduler_utils.cc) keeps a
//     request's timeout only when it is below that default, so with no
//     default it keeps none;
//   - priority acts on a model whose dynamic batcher has priority_levels.
//
// Where the client gave its own, the stricter one stands (the smaller
// timeout, the more urgent priority): vig then appends nothing. A frame
// carrying a sequence's START or END is never given a timeout (it must run;
// see sched's Sequences). Requests under the default contract carry no
// deadline of vig's and are forwarded as their client sent them.
//
// The entries are appended after the message's last field, without
// re-encoding it: a protobuf parser merges fields in any order and keeps the
// last entry of a map key. A frame the backend then drops for that timeout
// (UNAVAILABLE "Request timeout expired", Triton's dynamic_batch_scheduler.cc)
// is answered DEADLINE_EXCEEDED and counted late_dropped, as vig's own late
// frames are (sched.CompleteLate).

// handOn is what vig may hand on to the backend with a dispatched call.
type handOn struct {
	deadline sched.Time  // the frame's freshness deadline; 0 or Never: none
	class    sched.Class // its stream's class
	pinned   bool        // carries a sequence's START or END: never a timeout
	timeout  bool        // a timeout of vig's was sent with it
	late     bool        // the backend dropped it at that timeout
}

// tritonTimeoutMsg is Triton's message for a request its queue policy
// rejected at its timeout.
const tritonTimeoutMsg = "Request timeout expired"

// classPriority is the priority vig hands on for a class: Triton's level 1 is
// its most urgent.
func classPriority(c sched.Class) uint64 { return uint64(c) + 1 }

// timeoutActs reports whether Triton honours a request's timeout for a model
// configured as mc (see above).
func timeoutActs(mc *wire.ModelConfig) bool {
	db := mc.DynamicBatching
	return db != nil && db.DefaultQueuePolicy != nil && db.DefaultQueuePolicy.AllowTimeoutOverride &&
		db.DefaultQueuePolicy.DefaultTimeoutMicroseconds > 0
}

// handParams returns the parameters entries to append to c's message, or nil
// when vig hands nothing on. They are a slice of their own, not the Call's:
// the send may still hold them when the call is answered and recycled.
func (g *Gateway) handParams(c *Call) []byte {
	h := &c.hand
	if g.gov == nil || h.deadline == 0 || h.deadline == sched.Never {
		return nil
	}
	m, ok := g.opts.Config.Models[string(c.Header.Model)]
	if !ok {
		return nil
	}
	mode := m.Hand()
	if mode == config.HandOff {
		return nil
	}
	giveTimeout, givePriority, levels := true, true, uint64(0)
	if mode == config.HandAuto {
		mc, ok := g.ServerModel(string(c.Header.Model))
		if !ok || mc.DynamicBatching == nil {
			return nil
		}
		levels = mc.DynamicBatching.PriorityLevels
		giveTimeout, givePriority = timeoutActs(mc), levels > 0
	}
	var out []byte
	if giveTimeout && !h.pinned {
		us := max(int64(h.deadline.Sub(g.gov.clock())/time.Microsecond), 1)
		if p, ok := c.Header.Param(wire.ParamTimeout); !ok || p.Kind != wire.ParamInt64 || p.Int <= 0 || p.Int > us {
			out = wire.AppendInt64Param(out, wire.ParamTimeout, us)
			h.timeout = true
		}
	}
	if givePriority {
		pr := classPriority(h.class)
		if levels > 0 {
			pr = min(pr, levels)
		}
		if own, ok := clientPriority(&c.Header); !ok || own > pr {
			out = wire.AppendUint64Param(out, wire.ParamPriority, pr)
		}
	}
	return out
}

// clientPriority is the priority the client gave, if any above 0 (0 is
// Triton's default level).
func clientPriority(h *wire.InferHeader) (uint64, bool) {
	p, ok := h.Param(wire.ParamPriority)
	switch {
	case !ok:
	case p.Kind == wire.ParamUint64 && p.Uint > 0:
		return p.Uint, true
	case p.Kind == wire.ParamInt64 && p.Int > 0:
		return uint64(p.Int), true
	}
	return 0, false
}

// withHandOff returns msg with vig's hand-off appended (a view of msg's
// buffers plus one of c's own), or msg itself when nothing is handed on.
func (g *Gateway) withHandOff(c *Call, msg mem.BufferSlice) mem.BufferSlice {
	extra := g.handParams(c)
	if extra == nil {
		return msg
	}
	return append(msg[:len(msg):len(msg)], mem.SliceBuffer(extra))
}

// lateAtBackend maps the backend's answer for a call dropped at the timeout
// vig handed on to vig's own late answer, and marks the call late.
func lateAtBackend(c *Call, err error) error {
	if err == nil || !c.hand.timeout || status.Code(err) != codes.Unavailable ||
		!strings.Contains(status.Convert(err).Message(), tritonTimeoutMsg) {
		return err
	}
	c.hand.late = true
	return status.Errorf(codes.DeadlineExceeded, "vig: %s (%s): the backend's queue held it to the deadline vig handed on",
		sched.ReasonLate, sched.LateDropped)
}

// noteHandOff says, once per read of the server's configuration, what vig
// hands on for a model under hand_deadline auto, and warns where "on" hands
// on what the server ignores.
func (g *Gateway) noteHandOff(name string, mc *wire.ModelConfig) {
	m, ok := g.opts.Config.Models[name]
	if !ok || g.gov == nil {
		return
	}
	timeout := timeoutActs(mc)
	priority := mc.DynamicBatching != nil && mc.DynamicBatching.PriorityLevels > 0
	switch m.Hand() {
	case config.HandAuto:
		if timeout || priority {
			g.log.Info("handing the frames' deadline and class on to the server", "model", name, "timeout", timeout, "priority", priority)
		}
	case config.HandOn:
		if !timeout {
			g.log.Warn("hand_deadline: on, but the server keeps no request timeout for the model: give its dynamic_batching a default_queue_policy with allow_timeout_override: true and a default_timeout_microseconds, or set hand_deadline: auto",
				"model", name)
		}
	}
}
