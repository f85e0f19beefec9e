package config

import (
	"fmt"
	"math"
	"net"
	"sort"
	"strings"

	"github.com/vig-edge/vig/agent/sched"
)

// validate reports every problem at once, each with its line and a fix.
func (c *Config) validate(file string) error {
	var errs []error
	bad := func(line int, key, format string, args ...any) {
		for i, a := range args { // values from the file are quoted short
			if s, ok := a.(string); ok {
				args[i] = quoteShort(s)
			}
		}
		if line == 0 {
			line = c.keyLine(key)
		}
		errs = append(errs, &Error{File: file, Line: line, Key: quoteShort(key), Msg: fmt.Sprintf(format, args...)})
	}
	for key, addr := range map[string]string{"listen.grpc": c.Listen.GRPC, "listen.metrics": c.Listen.Metrics, "listen.http": c.Listen.HTTP} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad(c.Listen.Line(strings.TrimPrefix(key, "listen.")), key, "%q is not host:port (e.g. 127.0.0.1:9001), or \"off\"", addr)
		}
	}
	c.Listen.validate(bad)
	if c.Listen.GRPC == "" && c.Listen.Unix == "" && c.Listen.HTTP == "" && c.Listen.HTTPUnix == "" {
		bad(0, "listen", "listen.grpc, listen.unix, listen.http and listen.http_unix are all off: vig would accept no requests")
	}
	if ring, ok := c.Backend.RingBackend(); ok {
		if ring == "" {
			bad(0, "backend.address", "ring: needs the runtime's socket, e.g. ring:@npu-runtime")
		}
		if c.Backend.Embedded {
			bad(0, "backend.embedded", "the embedded mock backend speaks gRPC; drop embedded or use a host:port address")
		}
	} else if a := c.Backend.Address; !strings.HasPrefix(a, "unix:") {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad(0, "backend.address", "%q is neither host:port, unix:/path nor ring:ADDR", a)
		}
	}
	for key, v := range map[string]int{"backend.ring.slot_kib": c.Backend.Ring.SlotKiB, "backend.ring.slots": c.Backend.Ring.Slots,
		"backend.ring.response_slot_kib": c.Backend.Ring.ResponseSlotKiB} {
		if v < 0 {
			bad(0, key, "%d must not be negative (0 = default)", v)
		}
	}
	switch c.Backend.Compression {
	case "none":
	case "gzip":
		if _, ring := c.Backend.RingBackend(); ring {
			bad(0, "backend.compression", "gzip compresses the gRPC link; a ring backend shares memory: set compression: none")
		}
	default:
		bad(0, "backend.compression", "%q is not one of none, gzip", c.Backend.Compression)
	}
	if c.Backend.CallTimeoutMs < 0 {
		bad(0, "backend.call_timeout_ms", "%d must be positive: how long vig waits for the backend to answer a call whose client set no deadline (0 = default, %d)",
			c.Backend.CallTimeoutMs, DefaultCallTimeoutMs)
	} else {
		for _, name := range c.ModelNames() {
			if m := c.Models[name]; m.ExecMs >= float64(c.Backend.CallTimeoutMs) {
				bad(0, "backend.call_timeout_ms", "%d ms is not above model %s's exec_ms (%g): every such call would be given up on; raise call_timeout_ms",
					c.Backend.CallTimeoutMs, name, m.ExecMs)
			}
		}
	}
	if c.Backend.Slots < 1 {
		bad(0, "backend.slots", "%d: the accelerator runs at least 1 job at once; write slots: 1 (a GPU without MPS), or leave the key out for 1", c.Backend.Slots)
	} else if len(c.Accelerators) == 0 && c.Backend.Slots > 256 {
		bad(0, "backend.slots", "%d: an accelerator runs 1 to 256 jobs at once (a GPU without MPS: 1)", c.Backend.Slots)
	}
	c.validateAccelerators(bad)
	c.REST.validate(bad)
	for key, v := range map[string]int{"grpc.max_message_mib": c.GRPC.MaxMessageMiB, "grpc.window_mib": c.GRPC.WindowMiB,
		"grpc.read_buffer_kib": c.GRPC.ReadBufferKiB, "grpc.write_buffer_kib": c.GRPC.WriteBufferKiB} {
		if v < 1 {
			bad(0, key, "%d must be positive", v)
		}
	}
	if c.GRPC.MaxMessageMiB > 2047 {
		bad(0, "grpc.max_message_mib", "%d exceeds gRPC's 2 GiB message limit", c.GRPC.MaxMessageMiB)
	}
	if c.GRPC.WindowMiB > 1024 {
		bad(0, "grpc.window_mib", "%d: HTTP/2 windows are below 2 GiB; 16 is plenty for 6 MB frames", c.GRPC.WindowMiB)
	}
	if !oneOf(c.Log.Format, "text", "json") {
		bad(0, "log.format", "%q is not one of text, json", c.Log.Format)
	}
	if !oneOf(c.Log.Level, "debug", "info", "warn", "error") {
		bad(0, "log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	if err := sched.Margin(c.Scheduler.SafetyMarginPct).Validate(); err != nil || c.Scheduler.SafetyMarginPct < 0 {
		bad(0, "scheduler.safety_margin_pct", "%d is outside 100..1000 (a whole percentage: 100 = no margin, 120 = +20 %%)", c.Scheduler.SafetyMarginPct)
	}
	if !oneOf(c.Scheduler.UnknownStreams, "default", "reject") {
		bad(0, "scheduler.unknown_streams", "%q is not one of default, reject", c.Scheduler.UnknownStreams)
	}
	if !oneOf(c.Scheduler.CaptureClock, "monotonic", "realtime") {
		bad(0, "scheduler.capture_clock", "%q is not one of monotonic, realtime", c.Scheduler.CaptureClock)
	}
	if !oneOf(c.Scheduler.Order, "laxity", "class_first") {
		bad(0, "scheduler.order", "%q is not one of laxity, class_first", c.Scheduler.Order)
	}
	if c.Scheduler.CommitLeadMs < 0 {
		bad(0, "scheduler.commit_lead_ms", "%g must not be negative", c.Scheduler.CommitLeadMs)
	}
	for name, sq := range c.Backend.SequenceBatching {
		key := "backend.sequence_batching." + name
		if _, ok := c.Models[name]; !ok {
			bad(0, key, "unknown model %q: name one of models (known: %s)", name, listShort(c.ModelNames()))
		}
		if sq.MaxIdleMs < 0 || sq.Slots < 0 {
			bad(0, key, "max_idle_ms %d, slots %d: give 0 (the default) or more", sq.MaxIdleMs, sq.Slots)
		}
	}
	for name, m := range c.Models {
		key := "models." + name
		if name == "" {
			bad(m.Line, key, "a model needs a name")
		}
		if m.Logical() {
			c.validateVariants(bad, name, m)
			continue
		}
		if m.ExecMs <= 0 {
			bad(m.Line, key+".exec_ms", "%g: give the model's typical execution time in ms (a prior; vig refines it online)", m.ExecMs)
		}
		if m.MaxBatch != nil && (*m.MaxBatch < 1 || *m.MaxBatch > MaxBatch) {
			bad(m.Line, key+".max_batch", "%d: give the most frames one request of the model may carry, 1 to %d (Triton's max_batch_size; 1 turns batching off)", *m.MaxBatch, MaxBatch)
		}
		if !oneOf(m.Hand(), HandAuto, HandOn, HandOff) {
			bad(m.Line, key+".hand_deadline", "%q is not one of auto, on, off (auto: hand the deadline and class on where the server's model configuration says they act)", m.HandDeadline)
		}
		for size, v := range m.BatchExecMs {
			limit := MaxBatch
			if m.MaxBatch != nil {
				limit = *m.MaxBatch
			}
			if size < 1 || size > limit {
				bad(m.Line, key+".batch_exec_ms", "batch size %d: sizes run from 1 to max_batch (%d)", size, limit)
			} else if !(v > 0) || math.IsInf(v, 0) {
				bad(m.Line, key+".batch_exec_ms", "%g ms for a batch of %d: give the execution time of such a batch in ms, above 0", v, size)
			}
		}
	}
	seen := map[string]int{}
	knownModels := listShort(c.ModelNames())
	for i, s := range c.Streams {
		key := fmt.Sprintf("streams[%d]", i)
		if s.Name != "" {
			key = fmt.Sprintf("streams[%d] (%s)", i, s.Name)
		}
		switch {
		case s.Name == "":
			bad(s.Line, key+".name", "a stream needs a name (requests select it with the vig_stream parameter)")
		case seen[s.Name] > 0:
			bad(s.Line, key+".name", "duplicate stream %q (first defined on line %d)", s.Name, seen[s.Name])
		default:
			seen[s.Name] = s.Line
		}
		m, ok := c.Models[s.Model]
		switch {
		case s.Model == "":
			bad(s.Line, key+".model", "a stream needs the model it runs")
		case !ok:
			bad(s.Line, key+".model", "unknown model %q: add it under models: with its exec_ms (known: %s)", s.Model, knownModels)
		}
		if s.Class == "" {
			bad(s.Line, key+".class", "missing: give the stream's class, one of protected (guaranteed), high, best_effort")
		} else if !oneOf(s.Class, ClassProtected, ClassHigh, ClassBestEffort) {
			bad(s.Line, key+".class", "%q is not one of protected, high, best_effort", s.Class)
		}
		if s.PeriodMs <= 0 {
			bad(s.Line, key+".period_ms", "%g: the result period must be positive", s.PeriodMs)
		}
		if s.MaxAgeMs <= 0 {
			bad(s.Line, key+".max_age_ms", "%g: the freshness bound must be positive", s.MaxAgeMs)
		} else if exec := c.fastestExec(m); ok && exec > 0 && s.MaxAgeMs < exec {
			bad(s.Line, key+".max_age_ms", "%g ms is below the execution time of %s (%g ms): no result can ever be fresh; raise max_age_ms", s.MaxAgeMs, s.Model, exec)
		}
		if c.given(fmt.Sprintf("streams[%d].frame_interval_ms", i)) && s.FrameIntervalMs < 0 { // absent, it is period_ms, checked above
			bad(s.Line, key+".frame_interval_ms", "%g must not be negative", s.FrameIntervalMs)
		}
		switch s.Queue {
		case QueueLatest:
			if s.Capacity != 1 {
				bad(s.Line, key+".capacity", "a latest queue holds exactly 1 request; drop capacity or use queue: fifo")
			}
		case QueueFIFO:
			if s.Capacity < 1 {
				bad(s.Line, key+".capacity", "a fifo queue needs a bound: capacity >= 1")
			}
		default:
			bad(s.Line, key+".queue", "%q is not one of latest, fifo", s.Queue)
		}
		if s.WindowOffsetMs != nil {
			switch {
			case *s.WindowOffsetMs < 0:
				bad(s.Line, key+".window_offset_ms", "%g must not be negative", *s.WindowOffsetMs)
			case c.Scheduler.CaptureClock == "realtime":
				bad(s.Line, key+".window_offset_ms", "the told grid is on CLOCK_MONOTONIC; with capture_clock: realtime drop it and let vig learn the grid")
			}
		}
		if s.MinRateHz < 0 {
			bad(s.Line, key+".min_rate_hz", "%g must not be negative", s.MinRateHz)
		} else if s.MinRateHz > 0 && s.Class != ClassBestEffort {
			bad(s.Line, key+".min_rate_hz", "only best_effort streams take a budgeted minimum rate; %s streams are scheduled by contract", s.Class)
		}
	}
	c.CPU.validate(bad)
	// Map iteration above is unordered; report in file order.
	sort.SliceStable(errs, func(i, j int) bool {
		a, b := errs[i].(*Error), errs[j].(*Error)
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Key < b.Key
	})
	return joinErrors(file, errs, 0)
}

// validateVariants checks a logical model: its variants are configured models
// of their own, and it has none of a model's own keys.
func (c *Config) validateVariants(bad func(line int, key, format string, args ...any), name string, m Model) {
	key := "models." + name
	for k, given := range map[string]bool{"exec_ms": m.ExecMs != 0, "on": m.On != "", "max_batch": m.MaxBatch != nil,
		"batch_exec_ms": len(m.BatchExecMs) > 0, "instances": m.Instances != 0, "corun": m.CoRun != nil, "hand_deadline": m.HandDeadline != ""} {
		if given {
			bad(m.Line, key+"."+k, "%s is a logical model (variants): it runs as its variants, so %s belongs to each variant; move it there", name, k)
		}
	}
	seen := map[string]bool{}
	for i, v := range m.Variants {
		vkey := fmt.Sprintf("%s.variants[%d]", key, i)
		vm, ok := c.Models[v]
		switch {
		case v == name:
			bad(m.Line, vkey, "%q is the logical model itself: a variant is another model, e.g. %s_gpu", v, name)
		case seen[v]:
			bad(m.Line, vkey, "%q is listed twice: give each variant once", v)
		case !ok:
			bad(m.Line, vkey, "unknown model %q: add it under models: with its exec_ms (each variant is a model of the server's)", v)
		case vm.Logical():
			bad(m.Line, vkey, "%q is itself a logical model: a variant is a model the server runs; list its variants here instead", v)
		}
		seen[v] = true
	}
	if _, ok := c.Backend.SequenceBatching[name]; ok {
		bad(m.Line, key, "a logical model cannot be behind a sequence batcher (a sequence must stay on one model instance): remove it from backend.sequence_batching")
	}
}

// fastestExec is a model's exec_ms, or for a logical model its fastest
// variant's: the soonest a result of it can be there.
func (c *Config) fastestExec(m Model) float64 {
	if !m.Logical() {
		return m.ExecMs
	}
	best := 0.0
	for _, v := range m.Variants {
		if e := c.Models[v].ExecMs; e > 0 && (best == 0 || e < best) {
			best = e
		}
	}
	return best
}

// keyLine returns the line of a key as validate names it: a dotted path, where a
// stream's name may follow its index ("streams[1] (pose).max_age_ms"); 0 when
// the file does not write the key.
func (c *Config) keyLine(key string) int {
	if i := strings.Index(key, " ("); i >= 0 {
		if j := strings.Index(key[i:], ")"); j >= 0 {
			key = key[:i] + key[i+j+1:]
		}
	}
	return c.lines[key]
}

// shortList is a list already cut for an error message (bad quotes it whole).
type shortList string

// listShort joins names for an error message, the first few of them, each quoted short.
func listShort(names []string) shortList {
	const most = 8
	n := min(len(names), most)
	cut := make([]string, n)
	for i, name := range names[:n] {
		cut[i] = quoteShort(name)
	}
	if len(names) <= most {
		return shortList(strings.Join(cut, ", "))
	}
	return shortList(fmt.Sprintf("%s and %d more", strings.Join(cut, ", "), len(names)-most))
}

// ModelNames returns the configured model names, sorted.
func (c *Config) ModelNames() []string {
	names := make([]string, 0, len(c.Models))
	for n := range c.Models {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func oneOf(v string, allowed ...string) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}
