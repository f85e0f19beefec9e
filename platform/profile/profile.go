// Package profile answers where a process's time goes, vig's own above
// all: user against kernel time, and the kernel part split into syscalls
// by name, run-queue waits, softirqs and page faults, per request when a
// request count is known.
//
// It combines two collectors. Package proc needs no privilege: CPU times,
// faults and context switches from /proc, scheduler statistics from
// schedstat, and perf_event software counters where perf_event_paranoid
// allows. Package bpfprobe needs root (or CAP_BPF+CAP_PERFMON) and adds
// the per-syscall, run-queue, softirq and page-fault attribution. With
// EBPF set to Auto the eBPF part is used when it can be and the report
// says why not otherwise.
//
// Run profiles for a fixed duration (vig profile); Start and Stop bracket
// an arbitrary stretch (vig serve --profile, vig bench).
package profile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vig-edge/vig/platform/bpfprobe"
	"github.com/vig-edge/vig/platform/proc"
)

// Mode selects the eBPF collector.
type Mode int

const (
	Auto Mode = iota // use eBPF when available, say why not otherwise
	On               // require eBPF: fail when it cannot run
	Off              // /proc and perf counters only
)

var modeNames = [...]string{Auto: "auto", On: "on", Off: "off"}

func (m Mode) String() string {
	if m >= 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "auto", "on" or "off".
func ParseMode(s string) (Mode, error) {
	for m, n := range modeNames {
		if n == s {
			return Mode(m), nil
		}
	}
	return Auto, fmt.Errorf("eBPF mode %q: want auto, on or off", s)
}

// Set implements flag.Value.
func (m *Mode) Set(s string) error {
	v, err := ParseMode(s)
	if err == nil {
		*m = v
	}
	return err
}

// MarshalText implements encoding.TextMarshaler.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// Options say what to profile and how.
type Options struct {
	PID      int
	Duration time.Duration // for Run; Start/Stop ignore it
	EBPF     Mode
	Requests uint64 // requests served in the window, when known: adds per-request figures
}

// Session is a profile in progress. It holds open counters and, with
// eBPF, loaded programs: Stop (or Close) must be called. Not safe for
// concurrent use.
type Session struct {
	opts   Options
	before *proc.Sample
	perf   *proc.Counters
	bpf    *bpfprobe.Collector

	perfErr, bpfErr error
}

// Start begins profiling opts.PID.
func Start(opts Options) (_ *Session, err error) {
	if opts.PID <= 0 {
		return nil, fmt.Errorf("profile: invalid pid %d", opts.PID)
	}
	s := &Session{opts: opts}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	// The process must exist before anything is loaded for it.
	if _, err := proc.ReadStat(opts.PID); err != nil {
		return nil, fmt.Errorf("profile: process %d: %w", opts.PID, err)
	}
	switch opts.EBPF {
	case Off:
	case Auto, On:
		s.bpf, s.bpfErr = bpfprobe.Start(bpfprobe.Options{PID: opts.PID})
		if s.bpfErr != nil && opts.EBPF == On {
			return nil, fmt.Errorf("profile: --ebpf on: %w", s.bpfErr)
		}
	default:
		return nil, fmt.Errorf("profile: %v", opts.EBPF)
	}
	s.perf, s.perfErr = proc.OpenCounters(opts.PID)
	// The /proc sample is taken last so that the window it opens is
	// covered by every collector.
	if s.before, err = proc.ReadSample(opts.PID); err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	return s, nil
}

// Stop ends the profile, releases everything and returns the report.
func (s *Session) Stop() (*Report, error) {
	defer s.Close()
	after, err := proc.ReadSample(s.opts.PID)
	if err != nil {
		return nil, fmt.Errorf("profile: process %d at the end of the window (did it exit?): %w", s.opts.PID, err)
	}
	r := newReport(s.opts, s.before, after)
	switch {
	case s.perf != nil:
		p, err := s.perf.Read()
		if err != nil {
			r.PerfError = err.Error()
		} else {
			r.Perf = &p
		}
	case s.perfErr != nil:
		r.PerfError = s.perfErr.Error()
	}
	switch {
	case s.opts.EBPF == Off:
		r.EBPFError = "disabled (--ebpf off)"
	case s.bpf != nil:
		// Stop counting before reading, or the reads count themselves
		// when a process profiles itself.
		err := s.bpf.Detach()
		c, rerr := s.bpf.Read()
		err = errors.Join(err, rerr)
		if err != nil {
			r.EBPFError = err.Error()
		} else {
			r.EBPF = c
		}
	case s.bpfErr != nil:
		r.EBPFError = s.bpfErr.Error()
	}
	r.CPUTime, r.CPUSource = r.CPU()
	r.SetRequests(s.opts.Requests)
	return r, nil
}

// Close releases counters and programs without a report. It is safe to
// call after Stop and more than once.
func (s *Session) Close() error {
	var errs []error
	if s.perf != nil {
		errs = append(errs, s.perf.Close())
		s.perf = nil
	}
	if s.bpf != nil {
		errs = append(errs, s.bpf.Close())
		s.bpf = nil
	}
	return errors.Join(errs...)
}

// Run profiles for opts.Duration, or until ctx is done (SIGINT): then the
// report covers the shorter window and says it was interrupted. Programs
// and counters are released on every path.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Duration <= 0 {
		return nil, fmt.Errorf("profile: duration %v must be positive", opts.Duration)
	}
	s, err := Start(opts)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(opts.Duration)
	defer t.Stop()
	interrupted := false
	select {
	case <-t.C:
	case <-ctx.Done():
		interrupted = true
	}
	r, err := s.Stop()
	if r != nil {
		r.Interrupted = interrupted
	}
	return r, err
}
