package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// procDir is where a process's status and fd table are read; a variable for
// tests.
var procDir = "/proc"

// Metric is one series of a Prometheus text exposition.
type Metric struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// ParseMetrics parses the Prometheus text format (what vig's /metrics serves):
// comments and blank lines are skipped; a line it cannot read is an error that
// names it.
func ParseMetrics(b []byte) ([]Metric, error) {
	var out []Metric
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		m, err := parseMetricLine(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d %q: %w", n+1, line, err)
		}
		out = append(out, m)
	}
	return out, nil
}

func parseMetricLine(line string) (Metric, error) {
	m := Metric{Labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(line, "{ "); i < 0 {
		return m, fmt.Errorf("no value")
	} else if i == 0 {
		return m, fmt.Errorf("no metric name")
	} else {
		m.Name, rest = line[:i], line[i:]
	}
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return m, fmt.Errorf("malformed labels")
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			closed := false
			for i := 0; i < len(rest); i++ {
				c := rest[i]
				if c == '\\' && i+1 < len(rest) {
					i++
					switch rest[i] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[i])
					}
					continue
				}
				if c == '"' {
					rest, closed = rest[i+1:], true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return m, fmt.Errorf("unterminated label value")
			}
			m.Labels[key] = val.String()
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return m, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return m, err
	}
	m.Value = v
	return m, nil
}

// StreamCounts is one stream's counters in one scrape of vig's metrics.
type StreamCounts struct {
	Class    string             `json:"class"`
	Received float64            `json:"received"`
	Outcomes map[string]float64 `json:"outcomes"` // every outcome but received
	Waiting  float64            `json:"waiting"`
	Running  float64            `json:"running"`
	// Probes counts dispatches made despite a predicted miss, to re-measure
	// the model (vig_stream_probes_total).
	Probes float64 `json:"probes,omitempty"`
}

// Finished is the sum of the outcomes: requests vig has answered.
func (c StreamCounts) Finished() float64 {
	var s float64
	for _, v := range c.Outcomes {
		s += v
	}
	return s
}

// Balanced says whether received = Σ outcomes + in flight (waiting + running).
func (c StreamCounts) Balanced() bool { return c.Received == c.Finished()+c.Waiting+c.Running }

// Streams collects vig_stream_requests_total and vig_stream_in_flight by stream.
func Streams(ms []Metric) map[string]StreamCounts {
	out := map[string]StreamCounts{}
	get := func(m Metric) StreamCounts {
		c, ok := out[m.Labels["stream"]]
		if !ok {
			c = StreamCounts{Class: m.Labels["class"], Outcomes: map[string]float64{}}
		}
		return c
	}
	for _, m := range ms {
		switch m.Name {
		case "vig_stream_requests_total":
			c := get(m)
			if o := m.Labels["outcome"]; o == "received" {
				c.Received = m.Value
			} else {
				c.Outcomes[o] = m.Value
			}
			out[m.Labels["stream"]] = c
		case "vig_stream_probes_total":
			c := get(m)
			c.Probes = m.Value
			out[m.Labels["stream"]] = c
		case "vig_stream_in_flight":
			c := get(m)
			switch m.Labels["state"] {
			case "waiting":
				c.Waiting = m.Value
			case "running":
				c.Running = m.Value
			}
			out[m.Labels["stream"]] = c
		}
	}
	return out
}

// gauge returns the value of the first series named name, and whether there was
// one.
func gauge(ms []Metric, name string) (float64, bool) {
	for _, m := range ms {
		if m.Name == name {
			return m.Value, true
		}
	}
	return 0, false
}

// ParseVmRSS reads VmRSS from the contents of /proc/PID/status, in bytes.
func ParseVmRSS(status []byte) (uint64, error) {
	for _, line := range bytes.Split(status, []byte("\n")) {
		v, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := strings.Fields(string(v))
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmRSS line %q: want <n> kB", line)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmRSS line %q: %w", line, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no VmRSS line (a kernel thread, or a process that exited)")
}

// Sample is one reading of vig under load.
type Sample struct {
	T          float64 `json:"t_s"`       // seconds since the load started
	RSS        uint64  `json:"rss_bytes"` // VmRSS from /proc/PID/status
	Goroutines int     `json:"goroutines"`
	FDs        int     `json:"open_fds"`
	FDSource   string  `json:"fd_source,omitempty"` // "metrics" (process_open_fds) or "/proc"
	// HeapInuse and HeapObjects are the Go runtime's (go_memstats_heap_*): what
	// of RSS is live Go heap, to tell a growing heap from the runtime keeping
	// freed pages.
	HeapInuse   uint64 `json:"heap_inuse_bytes,omitempty"`
	HeapObjects uint64 `json:"heap_objects,omitempty"`
	// Load1 is the machine's 1-minute load average (/proc/loadavg): how
	// contended the CPUs were, vig and the bench included.
	Load1 float64 `json:"load1"`
	// Estimates is vig's execution-time estimate per model with no other job
	// running (vig_estimate_seconds{busy="0"}), in milliseconds: what its
	// admission decisions use.
	Estimates map[string]float64      `json:"estimate_ms,omitempty"`
	Streams   map[string]StreamCounts `json:"streams,omitempty"`
	Err       string                  `json:"error,omitempty"` // the scrape failed
}

// Unbalanced lists the streams of s whose counters do not balance.
func (s Sample) Unbalanced() []string {
	var out []string
	for name, c := range s.Streams {
		if !c.Balanced() {
			out = append(out, fmt.Sprintf("%s: received %v ≠ Σ outcomes %v + waiting %v + running %v", name, c.Received, c.Finished(), c.Waiting, c.Running))
		}
	}
	slices.Sort(out)
	return out
}

// sampler reads vig's memory from /proc and the rest from its metrics endpoint.
type sampler struct {
	pid     int
	metrics string // host:port
	client  *http.Client
}

func (sp *sampler) read(ctx context.Context, t float64) Sample {
	s := Sample{T: t}
	if b, err := os.ReadFile(loadavgPath); err == nil {
		s.Load1, _ = ParseLoad1(b) // best effort: a context column, not a measurement
	}
	st, err := os.ReadFile(fmt.Sprintf("%s/%d/status", procDir, sp.pid))
	if err == nil {
		s.RSS, err = ParseVmRSS(st)
	}
	if err != nil {
		s.Err = "rss: " + err.Error()
		return s
	}
	ms, err := sp.scrape(ctx)
	if err != nil {
		s.Err = "metrics: " + err.Error()
		return s
	}
	fromMetrics(&s, ms)
	if s.FDSource == "" {
		if ents, err := os.ReadDir(fmt.Sprintf("%s/%d/fd", procDir, sp.pid)); err == nil {
			s.FDs, s.FDSource = len(ents), "/proc"
		}
	}
	return s
}

// fromMetrics fills what s takes from a scrape of vig's metrics.
func fromMetrics(s *Sample, ms []Metric) {
	if g, ok := gauge(ms, "go_goroutines"); ok {
		s.Goroutines = int(g)
	}
	if f, ok := gauge(ms, "process_open_fds"); ok {
		s.FDs, s.FDSource = int(f), "metrics"
	}
	if h, ok := gauge(ms, "go_memstats_heap_inuse_bytes"); ok {
		s.HeapInuse = uint64(h)
	}
	if h, ok := gauge(ms, "go_memstats_heap_objects"); ok {
		s.HeapObjects = uint64(h)
	}
	for _, m := range ms {
		if m.Name == "vig_estimate_seconds" && m.Labels["busy"] == "0" {
			if s.Estimates == nil {
				s.Estimates = map[string]float64{}
			}
			s.Estimates[m.Labels["model"]] = 1000 * m.Value
		}
	}
	s.Streams = Streams(ms)
}

func (sp *sampler) scrape(ctx context.Context) ([]Metric, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+sp.metrics+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := sp.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(b)
}

// ParseLoad1 reads the 1-minute load average from the contents of /proc/loadavg.
func ParseLoad1(b []byte) (float64, error) {
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, fmt.Errorf("loadavg %q: want three averages", b)
	}
	return strconv.ParseFloat(f[0], 64)
}
