package cpu

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Sampler records, for the hot thread, which CPU it runs on (getcpu) and that
// CPU's current frequency (scaling_cur_freq): the two observations that show a
// burst running on a mid core at a third of its clock instead of on a big core
// at full speed.
//
// It has no goroutine and no ticker. The hot loop calls Observe; while the
// sampler is disabled (the default) Observe is one atomic load. Enabled, it takes
// at most one sample per interval, so the samples are spread over the time the
// loop runs and their shares per cluster are shares of its busy time; an idle
// vig takes none.
type Sampler struct {
	on       atomic.Bool
	interval atomic.Int64 // ns between samples
	// last is when the last sample was taken (ns since base). Checked before the
	// lock so that a call inside the interval costs a clock read and two loads.
	last atomic.Int64
	base time.Time

	topo Topology

	mu      sync.Mutex // guards everything below; Observe and Stats take it
	total   uint64
	per     []uint64 // samples per cluster of topo; the last entry counts CPUs in none
	mhz     []uint32 // the last len(mhz) frequencies, a ring
	next    int
	files   map[int]*os.File // scaling_cur_freq per CPU, opened on first use
	freqErr string           // why no frequency was read, when none was
	buf     [32]byte
}

// SampleWindow is how many recent frequency samples the median is taken over.
const SampleWindow = 1024

// NewSampler returns a disabled sampler for the CPUs of topo.
func NewSampler(topo Topology) *Sampler {
	return &Sampler{base: time.Now(), topo: topo, per: make([]uint64, len(topo.Clusters)+1), mhz: make([]uint32, 0, SampleWindow), files: map[int]*os.File{}}
}

// Enable starts sampling, at most once per interval (≥ 1 µs).
func (s *Sampler) Enable(interval time.Duration) {
	s.interval.Store(int64(max(interval, time.Microsecond)))
	s.on.Store(true)
}

// Disable stops sampling and closes the frequency files. The counts stay.
func (s *Sampler) Disable() {
	s.on.Store(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, f := range s.files {
		f.Close()
		delete(s.files, id)
	}
}

// Enabled reports whether the sampler samples.
func (s *Sampler) Enabled() bool { return s.on.Load() }

// Observe takes a sample of the calling thread if the sampler is enabled and the
// interval has passed. Call it from the hot thread (its CPU is the one sampled).
func (s *Sampler) Observe() {
	if !s.on.Load() {
		return
	}
	now := int64(time.Since(s.base)) + 1 // > 0: last == 0 means no sample yet
	if last := s.last.Load(); last != 0 && now-last < s.interval.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last.Store(now)
	cpu, err := CurrentCPU()
	if err != nil {
		s.freqErr = err.Error()
		return
	}
	s.observe(cpu, s.readFreq(cpu))
}

// observe records one sample: cpu, and its frequency in kHz (0 = unknown).
func (s *Sampler) observe(cpu, khz int) {
	s.total++
	i := s.topo.ClusterOf(cpu)
	if i < 0 {
		i = len(s.per) - 1
	}
	s.per[i]++
	if khz <= 0 {
		return
	}
	v := uint32(khz / 1000)
	if len(s.mhz) < cap(s.mhz) {
		s.mhz = append(s.mhz, v)
	} else {
		s.mhz[s.next] = v
	}
	s.next = (s.next + 1) % cap(s.mhz)
}

// readFreq reads cpu's scaling_cur_freq with one pread on a file kept open.
func (s *Sampler) readFreq(cpu int) int {
	f, ok := s.files[cpu]
	if !ok {
		var err error
		f, err = os.Open(filepath.Join(SysCPU, "cpu"+strconv.Itoa(cpu), "cpufreq", "scaling_cur_freq"))
		if err != nil {
			s.freqErr = fmt.Sprintf("no cpufreq for cpu%d (%v)", cpu, err)
			f = nil
		}
		s.files[cpu] = f // nil: known to be absent, not retried
	}
	if f == nil {
		return 0
	}
	n, err := f.ReadAt(s.buf[:], 0)
	if n == 0 {
		s.freqErr = fmt.Sprintf("reading %s: %v", f.Name(), err)
		return 0
	}
	khz, err := ParseFreq(s.buf[:n])
	if err != nil {
		s.freqErr = err.Error()
		return 0
	}
	return khz
}

// ParseFreq parses a cpufreq frequency file (kHz, one number).
func ParseFreq(b []byte) (int, error) {
	v, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil || v < 0 {
		return 0, fmt.Errorf("cpufreq: %q is not a frequency in kHz", bytes.TrimSpace(b))
	}
	return v, nil
}

// ClusterSamples is the hot thread's presence on one cluster.
type ClusterSamples struct {
	Kind    string  `json:"kind,omitempty"`
	CPUs    string  `json:"cpus"` // kernel list, e.g. "4-6"; "other" for CPUs in no known cluster
	Samples uint64  `json:"samples"`
	Share   float64 `json:"share"` // of all samples, 0–1
}

// SampleStats summarises the samples taken so far.
type SampleStats struct {
	Enabled  bool             `json:"enabled"`
	Samples  uint64           `json:"samples"`
	Clusters []ClusterSamples `json:"clusters"`
	// MedianMHz is the median frequency of the last SampleWindow samples; 0 when
	// none was read (FreqUnavailable says why: no cpufreq in a VM, for one).
	MedianMHz       float64 `json:"median_mhz"`
	FreqUnavailable string  `json:"freq_unavailable,omitempty"`
}

// Stats returns the samples so far.
func (s *Sampler) Stats() SampleStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := SampleStats{Enabled: s.on.Load(), Samples: s.total}
	for i, n := range s.per {
		cs := ClusterSamples{CPUs: "other", Samples: n}
		if i < len(s.topo.Clusters) {
			cs.Kind, cs.CPUs = s.topo.Clusters[i].Kind, FormatList(s.topo.Clusters[i].CPUs)
		} else if n == 0 {
			continue
		}
		if s.total > 0 {
			cs.Share = float64(n) / float64(s.total)
		}
		st.Clusters = append(st.Clusters, cs)
	}
	if len(s.mhz) > 0 {
		m := slices.Clone(s.mhz)
		slices.Sort(m)
		if len(m)%2 == 1 {
			st.MedianMHz = float64(m[len(m)/2])
		} else {
			st.MedianMHz = (float64(m[len(m)/2-1]) + float64(m[len(m)/2])) / 2
		}
	} else if s.total > 0 {
		st.FreqUnavailable = s.freqErr
	}
	return st
}
