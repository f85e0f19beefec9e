// Package config decodes and validates vig's YAML configuration: where vig listens,
// which backend it governs, and the freshness contracts of the streams it schedules.
//
// Decoding is strict: an unknown key, a value of the wrong type or a contract that
// cannot be right is an error that names the key and its line, and says what would be
// accepted. Parse is pure (bytes in, Config out); reading the file is the caller's job.
package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/vig-edge/vig/agent/sched"
)

// Config is a whole vig configuration. The zero value is not useful; use Parse,
// which fills defaults.
type Config struct {
	Listen  Listen  `yaml:"listen"`
	Backend Backend `yaml:"backend"`
	// Accelerators declares a device with more than one kind of accelerator:
	// name → slots (accel.go). Absent with no model's on:, or written
	// `from_server`, the layout is derived from the server's model
	// configuration (layout.go); the server describing none: one accelerator
	// of backend.slots.
	Accelerators map[string]int `yaml:"accelerators"`
	// Interference is, per accelerator, the factor (1 to 10) by which a job
	// there takes longer while another accelerator runs one: the estimator's
	// seed (accel.go).
	Interference map[string]float64 `yaml:"interference"`
	GRPC         GRPC               `yaml:"grpc"`
	REST         REST               `yaml:"rest"` // rest.go
	Log          Log                `yaml:"log"`
	Scheduler    Scheduler          `yaml:"scheduler"`
	Models       map[string]Model   `yaml:"models"`
	Streams      []Stream           `yaml:"streams"`
	CPU          CPU                `yaml:"cpu"`
	Trace        Trace              `yaml:"trace"` // trace.go

	File string `yaml:"-"` // the name Parse was given, for errors found later (files the config names)

	accel  accelInfo
	layout *Layout        // set by Resolve: the layout vig runs (layout.go)
	lines  map[string]int // dotted key (backend.slots, streams[0].period_ms) → line, for errors
}

// Line returns the line of a key given by its dotted path (backend.slots,
// models.detector.exec_ms, streams[0].period_ms), or 0 when the file does not
// write it.
func (c *Config) Line(key string) int { return c.lines[key] }

// given reports whether the file writes the key (its value may equal the default).
func (c *Config) given(key string) bool { _, ok := c.lines[key]; return ok }

// Listen holds the addresses vig serves on. "off" turns a listener off; an absent key
// takes the default (the Unix socket is off by default).
type Listen struct {
	GRPC    string `yaml:"grpc"`    // host:port of the Triton-protocol gRPC frontend
	Unix    string `yaml:"unix"`    // path of the Unix-socket gRPC frontend ("@name": abstract)
	Metrics string `yaml:"metrics"` // host:port of the Prometheus endpoint
	// HTTP is the host:port of the Triton HTTP/REST (KServe v2) frontend, and
	// HTTPUnix the path of the same on a Unix socket ("@name": abstract); both
	// off by default.
	HTTP     string `yaml:"http"`
	HTTPUnix string `yaml:"http_unix"`
	// Ring is the Unix socket (abstract "@name" where allowed) on which sensor
	// processes attach shared-memory rings; off by default.
	Ring string `yaml:"ring"`

	// Exposure (exposure.go). A grpc or metrics address that is not loopback
	// needs TLS or Insecure; validation refuses it otherwise.
	TLS      TLS  `yaml:"tls"`      // serve the TCP listeners over TLS
	Insecure bool `yaml:"insecure"` // serve a non-loopback address in plain text anyway
	Auth     Auth `yaml:"auth"`     // bearer token for gRPC and metrics
	// AllowUIDs and AllowGIDs restrict the peers of listen.unix, listen.http_unix and listen.ring
	// (SO_PEERCRED): a peer is admitted when its uid or its gid is listed. Both
	// empty: any process that can open the socket (mode 0660).
	AllowUIDs []uint32 `yaml:"allow_uids"`
	AllowGIDs []uint32 `yaml:"allow_gids"`

	lines map[string]int // key (grpc, tls.cert_file, …) → line, for errors
}

// Backend describes the inference server vig forwards to.
type Backend struct {
	// Address is host:port or unix:PATH of the Triton-protocol backend, or ring:ADDR
	// for an on-device runtime reachable only through a shared-memory ring (then
	// only inference requests are forwarded). With Embedded, it is the address the
	// embedded mock backend listens on.
	Address string `yaml:"address"`
	// Ring sizes the shared-memory ring to a ring: backend.
	Ring BackendRing `yaml:"ring"`
	// Slots is how many jobs the accelerator runs at once: the shorthand for a
	// device with one accelerator. With accelerators declared it must be absent,
	// and Parse sets it to their total.
	Slots int `yaml:"slots"`
	// Embedded starts vig's mock backend inside the vig process, so that vig runs on a
	// machine with no inference server installed. Its models are Config.Models.
	Embedded bool `yaml:"embedded"`
	// Seed makes the embedded backend's execution times reproducible.
	Seed uint64 `yaml:"seed"`
	// StatsIntervalMs is how often vig reads the backend's ModelStatistics to correct
	// its execution-time estimates; a negative value turns the polling off.
	StatsIntervalMs int `yaml:"stats_interval_ms"`
	// Compression of inference requests and answers on the backend link: "none"
	// (the default: loopback and shared memory gain nothing from it) or "gzip"
	// (gRPC's gzip encoding, for a backend across USB or Wi-Fi).
	Compression string `yaml:"compression"`
	// CallTimeoutMs bounds how long vig waits for the backend's answer to a call
	// whose client set no deadline (grpc-timeout); a client's deadline is
	// enforced as it is. A call the backend has not answered by then is stopped
	// on the backend, its slot freed, and answered DEADLINE_EXCEEDED: a wedged
	// backend cannot hold a slot forever.
	CallTimeoutMs int `yaml:"call_timeout_ms"`
	// SequenceBatching names the models the embedded mock backend (and `vig
	// mock-backend -c`) serves behind Triton's sequence batcher. It describes
	// the mock only: vig reads a real server's batchers from its model
	// configuration.
	SequenceBatching map[string]MockSequence `yaml:"sequence_batching"`
}

// MockSequence is the mock's sequence batcher for one model.
type MockSequence struct {
	// MaxIdleMs frees the slot of a sequence idle this long
	// (max_sequence_idle_microseconds); 0: Triton's default, 1000.
	MaxIdleMs int `yaml:"max_idle_ms"`
	// Slots is how many sequences hold a slot at once; 0: 1.
	Slots int `yaml:"slots"`
}

// CallTimeout is backend.call_timeout_ms as a duration.
func (b Backend) CallTimeout() time.Duration {
	return time.Duration(b.CallTimeoutMs) * time.Millisecond
}

// BackendRing sizes the ring vig creates for a ring: backend. Zero values take the
// defaults (8 MiB request slots, 4 of them; 64 KiB response slots).
type BackendRing struct {
	SlotKiB         int `yaml:"slot_kib"`          // request slot: the largest request's tensors together
	Slots           int `yaml:"slots"`             // request slots: requests in flight
	ResponseSlotKiB int `yaml:"response_slot_kib"` // response slot: the largest answer
	// ShareFrames (default true) hands the runtime a sensor's sealed memfd
	// frame by reference (shmring's extra regions) instead of copying it into
	// vig's ring; false copies every frame, for a runtime without that extension.
	ShareFrames *bool `yaml:"share_frames"`
}

// RingBackend reports whether the backend is a ring runtime, and its address.
func (b Backend) RingBackend() (string, bool) { return strings.CutPrefix(b.Address, "ring:") }

// GRPC sizes vig's gRPC transport. Camera frames reach 6+ MB: grpc-go's defaults
// (4 MiB receive limit, 64 KiB windows grown by BDP probes) cut such a message off or
// make it cross loopback at a fraction of memory speed.
type GRPC struct {
	MaxMessageMiB  int `yaml:"max_message_mib"`  // largest message accepted or sent
	WindowMiB      int `yaml:"window_mib"`       // HTTP/2 stream and connection flow-control window
	ReadBufferKiB  int `yaml:"read_buffer_kib"`  // per-connection read buffer
	WriteBufferKiB int `yaml:"write_buffer_kib"` // per-connection write buffer (shared, released when idle)
}

// Log selects the log format and level.
type Log struct {
	Format string `yaml:"format"` // text | json
	Level  string `yaml:"level"`  // debug | info | warn | error
}

// Scheduler holds the knobs of the freshness scheduler that are not per stream.
type Scheduler struct {
	// SafetyMarginPct scales execution estimates before a deadline check:
	// 100 = none, 120 = assume jobs take 20 % longer than estimated. Never below 100.
	SafetyMarginPct int `yaml:"safety_margin_pct"`
	// UnknownStreams says what happens to a request whose stream has no contract:
	// "default" runs it best-effort (honouring Triton's priority and timeout
	// parameters), "reject" answers NOT_FOUND.
	UnknownStreams string `yaml:"unknown_streams"`
	// CaptureClock is the clock of vig_capture_ns: "monotonic" (CLOCK_MONOTONIC, the
	// same on every process of the device) or "realtime" (wall clock).
	CaptureClock string `yaml:"capture_clock"`
	// Order ranks waiting requests: "laxity" (the default: by the time each has
	// to spare before its window ends or its deadline, protected streams guarded
	// by admission) or "class_first" (class, then earliest deadline).
	Order string `yaml:"order"`
	// Pipeline commits the next job behind each running one, so the accelerator
	// does not wait for a round trip through vig (default true).
	Pipeline *bool `yaml:"pipeline"`
	// CommitLeadMs is how long before a running job's earliest plausible end the
	// next one is committed (default 2).
	CommitLeadMs float64 `yaml:"commit_lead_ms"`
}

// MaxBatch bounds a model's max_batch.
const MaxBatch = 256

// Model is the execution-time prior of one backend model.
type Model struct {
	ExecMs float64 `yaml:"exec_ms"` // prior for the execution time; refined online
	// CoRun false means the model runs alone on its accelerator (nothing beside
	// it there; other accelerators go on).
	CoRun *bool `yaml:"corun"`
	// On names the accelerator the model runs on, one of accelerators; required
	// when more than one is declared.
	On string `yaml:"on"`
	// MaxBatch is the most frames vig merges into one request of the model
	// (Triton's max_batch_size); absent, it is read from the server's model
	// configuration; 1 turns batching off.
	MaxBatch *int `yaml:"max_batch"`
	// BatchExecMs seeds the execution time per batch size (ms), e.g.
	// {1: 10, 8: 27.5}; sizes between are interpolated, and the estimator
	// learns each size online either way.
	BatchExecMs map[int]float64 `yaml:"batch_exec_ms"`
	// HandDeadline says whether vig hands each dispatched frame's remaining
	// freshness budget to the server as Triton's `timeout` (µs) and its
	// class as `priority` (protected 1, high 2, best_effort 3): auto (the
	// default) where the server's model configuration says they act (timeout:
	// a dynamic batcher whose queue policy allows a request's timeout;
	// priority: priority_levels above 0), on always, off never.
	HandDeadline string `yaml:"hand_deadline"`
	// Variants makes the model a logical one: the same network built for
	// several accelerators, each variant a model of its own; a frame of it
	// runs as the variant whose result lands first (or, when that
	// accelerator is over 85 % busy, the least busy one that still lands it
	// in time). A logical model has no
	// exec_ms, on, max_batch or instances of its own.
	Variants []string `yaml:"variants"`
	// Instances overrides how many jobs of the model its accelerator runs at
	// once (the server's instance_group count there); 0: as the layout says.
	Instances int `yaml:"instances"`
	Line      int `yaml:"-"`
}

// Logical reports whether the model is a logical one (variants).
func (m Model) Logical() bool { return len(m.Variants) > 0 }

// The values of models.X.hand_deadline.
const (
	HandAuto = "auto"
	HandOn   = "on"
	HandOff  = "off"
)

// Hand returns the model's hand_deadline, auto when absent.
func (m Model) Hand() string {
	if m.HandDeadline == "" {
		return HandAuto
	}
	return m.HandDeadline
}

// BatchFromServer is the max batch vig uses for a model whose config says cfg
// (nil: absent) whose server says max_batch_size and whether it declares a sequence batcher, and, where they
// disagree, what vig does about it and how to fix it.
func BatchFromServer(cfg *int, maxBatchSize int32, sequence bool) (n int, why string) {
	server := int(maxBatchSize)
	switch {
	case sequence && cfg != nil && *cfg > 1:
		return 1, fmt.Sprintf("the server runs the model with a sequence batcher: vig does not batch it (max_batch %d ignored); remove max_batch", *cfg)
	case sequence:
		return 1, ""
	case cfg == nil:
		return min(max(server, 1), MaxBatch), ""
	case *cfg > 1 && server == 0:
		return 1, fmt.Sprintf("max_batch %d, but the server does not batch the model (max_batch_size 0) and would refuse a batch: vig sends its frames one by one; set max_batch: 1, or give the model a max_batch_size in its config.pbtxt", *cfg)
	case *cfg > server && server > 0:
		return server, fmt.Sprintf("max_batch %d is above the server's max_batch_size %d: vig batches at most %d; set max_batch: %d", *cfg, server, server, server)
	}
	return *cfg, ""
}

// BatchCosts returns batch_exec_ms in the scheduler's terms, by size.
func (m Model) BatchCosts() []sched.BatchCost {
	out := make([]sched.BatchCost, 0, len(m.BatchExecMs))
	for size, v := range m.BatchExecMs {
		out = append(out, sched.BatchCost{Size: size, Exec: ms(v)})
	}
	slices.SortFunc(out, func(a, b sched.BatchCost) int { return a.Size - b.Size })
	return out
}

// RunsBeside reports whether the model may share the accelerator with other jobs.
func (m Model) RunsBeside() bool { return m.CoRun == nil || *m.CoRun }

// Stream is one sensor stream's freshness contract.
type Stream struct {
	Name            string  `yaml:"name"`
	Model           string  `yaml:"model"`
	Class           string  `yaml:"class"`             // protected | high | best_effort
	PeriodMs        float64 `yaml:"period_ms"`         // result period (coverage window)
	MaxAgeMs        float64 `yaml:"max_age_ms"`        // freshness bound of a result
	FrameIntervalMs float64 `yaml:"frame_interval_ms"` // how often the sensor sends; default period
	Queue           string  `yaml:"queue"`             // latest | fifo
	Capacity        int     `yaml:"capacity"`          // fifo bound (latest: always 1)
	MinRateHz       float64 `yaml:"min_rate_hz"`       // best_effort only: budgeted minimum rate
	// WindowOffsetMs tells vig the coverage grid: windows start at
	// window_offset_ms + k·period_ms on CLOCK_MONOTONIC. Absent, vig learns it:
	// every stream's windows start at the first capture it sees.
	WindowOffsetMs *float64 `yaml:"window_offset_ms"`
	Line           int      `yaml:"-"`
}

// Classes, queue kinds and the other enumerations accepted in a config.
const (
	ClassProtected  = "protected"
	ClassHigh       = "high"
	ClassBestEffort = "best_effort"

	Off = "off" // disables a listener

	QueueLatest = "latest"
	QueueFIFO   = "fifo"
)

// Defaults applied by Parse where a key is absent.
const (
	DefaultGRPCAddr        = "127.0.0.1:9001"
	DefaultMetricsAddr     = "127.0.0.1:9090"
	DefaultBackendAddr     = "127.0.0.1:8001"
	DefaultMaxMessageMiB   = 64
	DefaultWindowMiB       = 16
	DefaultReadBufferKiB   = 256
	DefaultWriteBufferKiB  = 1024
	DefaultSafetyMarginPct = 110
	DefaultStatsIntervalMs = 5000
	DefaultCallTimeoutMs   = 30000
)

// Period, MaxAge and FrameInterval return the contract's durations.
func (s Stream) Period() time.Duration        { return ms(s.PeriodMs) }
func (s Stream) MaxAge() time.Duration        { return ms(s.MaxAgeMs) }
func (s Stream) FrameInterval() time.Duration { return ms(s.FrameIntervalMs) }

// WindowOffset returns the told grid's offset within a period, and false when
// vig is to learn the grid.
func (s Stream) WindowOffset() (time.Duration, bool) {
	if s.WindowOffsetMs == nil || s.PeriodMs <= 0 {
		return 0, false
	}
	return ms(*s.WindowOffsetMs) % s.Period(), true
}

// Exec returns the model's execution-time prior.
func (m Model) Exec() time.Duration { return ms(m.ExecMs) }

func ms(v float64) time.Duration { return time.Duration(math.Round(v * float64(time.Millisecond))) }

// Error is one problem in a config file, located by line and key.
type Error struct {
	File string
	Line int    // 1-based; 0 when the problem has no single place
	Key  string // dotted path of the key, e.g. streams[1].max_age_ms
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Limits on a config, so that parsing one is bounded whatever the bytes: a config is a
// few kilobytes, and vig schedules a handful of streams. Without them a 150 KB file of
// 3,000 models and 3,000 streams that name none of them took a second to parse and
// produced a 60 MB error (each stream's error listed every model); at 1 MB, a minute.
const (
	// MaxBytes is the largest config file Parse reads.
	MaxBytes = 1 << 20
	// MaxStreams and MaxModels bound the streams and models one config declares.
	MaxStreams = 256
	MaxModels  = 256
	// MaxAccelerators bounds the accelerators one device declares (a Jetson has 3).
	MaxAccelerators = 16
	// maxErrors is how many problems one error reports; the rest are counted.
	maxErrors = 20
	// maxQuoted is how much of a value an error message quotes.
	maxQuoted = 64
)

// Parse decodes and validates a configuration. file names the source in errors. The
// error, if any, joins one *Error per problem found (errors.As finds the first), at
// most maxErrors of them and a count of the rest.
func Parse(file string, data []byte) (*Config, error) {
	if len(data) > MaxBytes {
		return nil, &Error{File: file, Msg: fmt.Sprintf("%d bytes: a config is at most %d (1 MiB); is this the right file?", len(data), MaxBytes)}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, &Error{File: file, Msg: quoteShort(strings.TrimPrefix(err.Error(), "yaml: "))}
	}
	c := Config{File: file}
	if len(root.Content) == 0 || root.Content[0].ShortTag() == "!!null" {
		return nil, &Error{File: file, Msg: "the config is empty: vig would govern nothing. " +
			"Give at least the backend, the models and the streams (a minimal config: examples/jetson.yaml; every key: docs/config.md)"}
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: doc.Line, Msg: "a config is a mapping of sections (listen:, backend:, models:, streams:, …), " +
			"not a single value or a list; see examples/jetson.yaml"}
	}
	if err := checkCounts(file, doc); err != nil {
		return nil, err
	}
	c.accel.locate(file, doc)
	if len(c.accel.onSeq) > 0 {
		errs := make([]error, len(c.accel.onSeq))
		for i, e := range c.accel.onSeq {
			errs[i] = e
		}
		return nil, errors.Join(errs...)
	}
	keys := problems{file: file, lines: map[string]int{}}
	keys.checkKeys(doc, reflect.TypeOf(c), "")
	if err := keys.err(); err != nil {
		return nil, err
	}
	c.lines = keys.lines
	if err := doc.Decode(&c); err != nil {
		return nil, typeErrors(file, err)
	}
	c.locate(doc)
	c.applyDefaults()
	return &c, c.validate(file)
}

// checkCounts refuses more than MaxStreams streams or MaxModels models before anything
// walks them (aliases make a long list cheap to write: "- *s" is four bytes).
func checkCounts(file string, doc *yaml.Node) error {
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		var n, limit int
		switch k.Value {
		case "streams":
			n, limit = len(v.Content), MaxStreams
		case "models":
			n, limit = len(v.Content)/2, MaxModels
		case "accelerators", "interference":
			n, limit = len(v.Content)/2, MaxAccelerators
		default:
			continue
		}
		if n > limit {
			return &Error{File: file, Line: k.Line, Key: k.Value,
				Msg: fmt.Sprintf("%d entries: vig takes at most %d; split the deployment across vig instances", n, limit)}
		}
	}
	return nil
}

// problems collects a parse's errors, at most maxErrors of them; past that it only
// counts, and walks stop early.
type problems struct {
	file  string
	errs  []error
	extra int
	lines map[string]int // every key walked, by dotted path → line
}

func (p *problems) add(e *Error) {
	if len(p.errs) < maxErrors {
		p.errs = append(p.errs, e)
		return
	}
	p.extra++
}

func (p *problems) full() bool { return len(p.errs) >= maxErrors }

func (p *problems) err() error { return joinErrors(p.file, p.errs, p.extra) }

// joinErrors joins at most maxErrors errors and says how many more it knows of.
func joinErrors(file string, errs []error, extra int) error {
	if len(errs) > maxErrors {
		extra += len(errs) - maxErrors
		errs = errs[:maxErrors]
	}
	if extra > 0 {
		errs = append(errs[:len(errs):len(errs)], &Error{File: file, Msg: fmt.Sprintf("more problems not shown (at least %d): fix the ones above first", extra)})
	}
	return errors.Join(errs...)
}

// quoteShort returns s, cut to maxQuoted bytes with a mark when longer, so that an
// error never echoes a megabyte of input.
func quoteShort(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(s[:maxQuoted], ""), len(s))
}

// checkKeys walks the YAML tree beside the Go type it decodes into and reports every
// mapping key that has no field, with its line and the keys that would be accepted,
// and every value whose kind does not fit its key (a string where a number of
// milliseconds goes, a mapping where a list of streams goes), in the user's terms.
// It records each key's line in p.lines. It stops once it has maxErrors problems.
// An alias is walked where it is used (its anchor's keys are checked against each
// type it lands in); checkCounts and the yaml decoder's own aliasing limit keep
// that linear in the input.
func (p *problems) checkKeys(n *yaml.Node, t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if p.full() {
		return
	}
	if n.Kind == yaml.AliasNode {
		p.checkKeys(n.Alias, t, path)
		return
	}
	if !p.fits(n, t, path, n.Line) {
		return
	}
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		fields := map[string]reflect.Type{}
		var known []string
		for i := 0; i < t.NumField(); i++ {
			tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			fields[tag] = t.Field(i).Type
			known = append(known, tag)
		}
		sort.Strings(known)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			ft, ok := fields[k.Value]
			switch {
			case !ok && p.full():
				p.extra++
				continue
			case !ok:
				p.add(&Error{File: p.file, Line: k.Line, Key: join(path, quoteShort(k.Value)),
					Msg: fmt.Sprintf("unknown key %q (known keys here: %s)", quoteShort(k.Value), strings.Join(known, ", "))})
				continue
			}
			p.lines[join(path, k.Value)] = k.Line
			if v.Kind != yaml.ScalarNode && v.Line != k.Line && !p.fits(v, ft, join(path, k.Value), k.Line) {
				continue // a block under its key: the key's line is where to look
			}
			p.checkKeys(v, ft, join(path, k.Value))
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			key := join(path, quoteShort(k.Value))
			if t.Key().Kind() == reflect.Int && k.ShortTag() != "!!int" { // batch_exec_ms
				p.add(&Error{File: p.file, Line: k.Line, Key: key, Msg: fmt.Sprintf("%q is not a batch size: %s maps whole batch sizes to milliseconds; write e.g. {1: 10, 8: 27.5}",
					quoteShort(k.Value), path[strings.LastIndexByte(path, '.')+1:])})
				continue
			}
			p.lines[key] = k.Line
			p.checkKeys(n.Content[i+1], t.Elem(), key)
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, item := range n.Content {
			key := fmt.Sprintf("%s[%d]", path, i)
			p.lines[key] = item.Line
			p.checkKeys(item, t.Elem(), key)
		}
	}
}

// fits reports whether node n can be decoded into type t, and reports the problem
// when it cannot. A null (a key written without a value) fits anything: it reads as
// absent.
func (p *problems) fits(n *yaml.Node, t reflect.Type, path string, line int) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tag := n.ShortTag()
	if tag == "!!null" {
		return true
	}
	ok := false
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		ok = n.Kind == yaml.MappingNode
	case reflect.Slice:
		ok = n.Kind == yaml.SequenceNode
	case reflect.String:
		ok = n.Kind == yaml.ScalarNode
	case reflect.Bool:
		ok = tag == "!!bool"
	case reflect.Int, reflect.Int64:
		ok = tag == "!!int"
	case reflect.Uint32, reflect.Uint64:
		ok = tag == "!!int" && !strings.HasPrefix(n.Value, "-")
	case reflect.Float64:
		ok = tag == "!!int" || tag == "!!float"
	default:
		return true // no such field in the config structs; the decoder decides
	}
	if ok {
		return true
	}
	name := path
	for strings.HasSuffix(name, "]") { // an item of a list: the list's key names it
		name = name[:strings.LastIndexByte(name, '[')]
	}
	name = name[strings.LastIndexByte(name, '.')+1:]
	want, example := expected(name, t)
	got := "a mapping"
	switch n.Kind {
	case yaml.SequenceNode:
		got = "a list"
	case yaml.ScalarNode:
		got = fmt.Sprintf("%q", quoteShort(n.Value))
		if tag == "!!int" || tag == "!!float" {
			got = quoteShort(n.Value)
		}
	}
	msg := fmt.Sprintf("%s is not %s", got, want)
	if example != "" {
		msg += "; write e.g. " + example
	}
	p.add(&Error{File: p.file, Line: line, Key: path, Msg: msg})
	return false
}

// expected says in the user's terms what a key of type t holds, and gives an
// example line; the key's name carries its unit (period_ms, window_mib).
func expected(key string, t reflect.Type) (want, example string) {
	unit := func(num string) (string, string) {
		switch {
		case strings.HasSuffix(key, "_ms"):
			return num + " of milliseconds", key + ": 50"
		case strings.HasSuffix(key, "_pct"):
			return "a whole percentage", key + ": 110"
		case strings.HasSuffix(key, "_mib"):
			return num + " of MiB", key + ": 16"
		case strings.HasSuffix(key, "_kib"):
			return num + " of KiB", key + ": 256"
		case strings.HasSuffix(key, "_hz"):
			return "a rate in Hz", key + ": 0.2"
		case key == "slots":
			return "a whole number of jobs run at once (1 or more)", "slots: 1"
		}
		return num, key + ": 1"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return unit("a whole number")
	case reflect.Uint32, reflect.Uint64:
		return "a whole number, 0 or more", key + ": [1000]"
	case reflect.Float64:
		return unit("a number")
	case reflect.Bool:
		return "true or false", key + ": true"
	case reflect.String:
		return "a single value (a name, an address or a path)", ""
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			return "a list of " + key + ", each item starting with \"- \"", key + ":\n  - {name: detector, model: detector, class: protected, period_ms: 50, max_age_ms: 50}"
		}
		return "a list", key + ": [1000, 1001]"
	case reflect.Map:
		switch key {
		case "models":
			return "a mapping of model names to their entries", "models: {detector: {exec_ms: 8}}"
		case "accelerators":
			return "a mapping of accelerator names to their slots", "accelerators: {gpu: 1, dla: 2}"
		case "batch_exec_ms":
			return "a mapping of batch sizes to milliseconds", "batch_exec_ms: {1: 10, 8: 27.5}"
		}
		return "a mapping of names to values", ""
	case reflect.Struct:
		return "a section of keys", key + ": {…} (docs/config.md lists its keys)"
	}
	return "a valid value", ""
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// typeErrors turns the decoder's "line N: cannot unmarshal ..." list into Errors.
func typeErrors(file string, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return &Error{File: file, Msg: err.Error()}
	}
	errs := make([]error, 0, min(len(te.Errors), maxErrors))
	for _, m := range te.Errors[:min(len(te.Errors), maxErrors)] {
		e := &Error{File: file, Msg: m}
		var line int
		if _, scanErr := fmt.Sscanf(m, "line %d:", &line); scanErr == nil {
			e.Line = line
			_, e.Msg, _ = strings.Cut(m, ": ")
		}
		e.Msg = "this value does not fit its key" + goTypeFree(e.Msg) + " (docs/config.md gives each key's type)"
		errs = append(errs, e)
	}
	return joinErrors(file, errs, len(te.Errors)-len(errs))
}

// goTypeFree keeps the quoted value of a decoder message ("cannot unmarshal !!str
// `x` into int": " (`x`)") and drops its Go type names.
func goTypeFree(m string) string {
	i := strings.IndexByte(m, '`')
	j := strings.LastIndexByte(m, '`')
	if i < 0 || j <= i {
		return ""
	}
	return " (" + quoteShort(m[i:j+1]) + ")"
}

// locate records the line of each stream and model so that validation can point at it.
func (c *Config) locate(doc *yaml.Node) {
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		switch k.Value {
		case "cpu":
			c.CPU.locate(v)
		case "listen":
			c.Listen.locate(v)
		case "streams":
			for j, item := range v.Content {
				if j < len(c.Streams) {
					c.Streams[j].Line = item.Line
				}
			}
		case "models":
			for j := 0; j+1 < len(v.Content); j += 2 {
				if m, ok := c.Models[v.Content[j].Value]; ok {
					m.Line = v.Content[j].Line
					c.Models[v.Content[j].Value] = m
				}
			}
		}
	}
}

func (c *Config) applyDefaults() {
	setDefault(&c.Listen.GRPC, DefaultGRPCAddr)
	setDefault(&c.Listen.Metrics, DefaultMetricsAddr)
	for _, p := range []*string{&c.Listen.GRPC, &c.Listen.Unix, &c.Listen.Metrics, &c.Listen.Ring, &c.Listen.HTTP, &c.Listen.HTTPUnix} {
		if *p == Off {
			*p = ""
		}
	}
	setDefaultInt(&c.Backend.StatsIntervalMs, DefaultStatsIntervalMs)
	setDefaultInt(&c.Backend.CallTimeoutMs, DefaultCallTimeoutMs)
	setDefault(&c.Backend.Address, DefaultBackendAddr)
	c.accel.slotsGiven = c.Backend.Slots != 0
	c.accel.gpuSlots = max(c.Backend.Slots, 1)
	if len(c.Accelerators) > 0 && !c.accel.slotsGiven {
		c.Backend.Slots = max(c.accelTotal(), 1)
	}
	if !c.given("backend.slots") { // slots: 0 is an error, not the default
		setDefaultInt(&c.Backend.Slots, 1)
	}
	setDefaultInt(&c.GRPC.MaxMessageMiB, DefaultMaxMessageMiB)
	setDefaultInt(&c.GRPC.WindowMiB, DefaultWindowMiB)
	setDefaultInt(&c.GRPC.ReadBufferKiB, DefaultReadBufferKiB)
	setDefaultInt(&c.GRPC.WriteBufferKiB, DefaultWriteBufferKiB)
	setDefault(&c.Log.Format, "text")
	setDefault(&c.Log.Level, "info")
	setDefaultInt(&c.Scheduler.SafetyMarginPct, DefaultSafetyMarginPct)
	setDefault(&c.Scheduler.UnknownStreams, "default")
	setDefault(&c.Scheduler.CaptureClock, "monotonic")
	setDefault(&c.Backend.Compression, "none")
	c.CPU.applyDefaults()
	setDefault(&c.Scheduler.Order, "laxity")
	for i := range c.Streams {
		s := &c.Streams[i]
		setDefault(&s.Queue, QueueLatest)
		if s.Queue == QueueLatest && s.Capacity == 0 {
			s.Capacity = 1
		}
		if s.FrameIntervalMs == 0 {
			s.FrameIntervalMs = s.PeriodMs
		}
	}
}

func setDefault(p *string, v string) {
	if *p == "" {
		*p = v
	}
}

func setDefaultInt(p *int, v int) {
	if *p == 0 {
		*p = v
	}
}
