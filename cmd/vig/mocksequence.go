package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/wire"
)

// mockSequenceFlags collects repeated --sequence NAME[=MAX_IDLE_MS[,SLOTS]].
type mockSequenceFlags map[string]mockbackend.SequenceBatching

func (m mockSequenceFlags) String() string {
	var parts []string
	for name, s := range m {
		parts = append(parts, fmt.Sprintf("%s=%d,%d", name, s.MaxIdle.Milliseconds(), s.Slots))
	}
	return strings.Join(parts, " ")
}

func (m mockSequenceFlags) Set(v string) error {
	name, rest, _ := strings.Cut(v, "=")
	if name == "" {
		return fmt.Errorf("%q: want NAME[=MAX_IDLE_MS[,SLOTS]], e.g. tracker=1000,4", v)
	}
	var s mockbackend.SequenceBatching
	if rest != "" {
		idle, slots, _ := strings.Cut(rest, ",")
		ms, err := strconv.Atoi(idle)
		if err != nil || ms < 0 {
			return fmt.Errorf("%q: MAX_IDLE_MS must be a whole number of milliseconds, 0 or more (0: Triton's default, 1000)", v)
		}
		s.MaxIdle = time.Duration(ms) * time.Millisecond
		if slots != "" {
			if s.Slots, err = strconv.Atoi(slots); err != nil || s.Slots < 1 {
				return fmt.Errorf("%q: SLOTS must be a whole number, 1 or more (sequences holding a slot at once)", v)
			}
		}
	}
	m[name] = s
	return nil
}

// mockQueueFlags collects repeated --queue-timeout NAME=DEFAULT_TIMEOUT_MS[,PRIORITY_LEVELS].
type mockQueueFlags map[string]*wire.DynamicBatching

func (m mockQueueFlags) String() string {
	var parts []string
	for name, q := range m {
		parts = append(parts, fmt.Sprintf("%s=%d,%d", name, q.DefaultQueuePolicy.DefaultTimeoutMicroseconds/1000, q.PriorityLevels))
	}
	return strings.Join(parts, " ")
}

func (m mockQueueFlags) Set(v string) error {
	name, rest, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q: want NAME=DEFAULT_TIMEOUT_MS[,PRIORITY_LEVELS], e.g. detector=1000,3", v)
	}
	timeout, levels, _ := strings.Cut(rest, ",")
	ms, err := strconv.ParseUint(timeout, 10, 32)
	if err != nil || ms == 0 {
		return fmt.Errorf("%q: DEFAULT_TIMEOUT_MS must be a whole number of milliseconds above 0 (Triton keeps a request's timeout only below it)", v)
	}
	q := &wire.DynamicBatching{DefaultQueuePolicy: &wire.QueuePolicy{AllowTimeoutOverride: true, DefaultTimeoutMicroseconds: ms * 1000}}
	if levels != "" {
		if q.PriorityLevels, err = strconv.ParseUint(levels, 10, 32); err != nil {
			return fmt.Errorf("%q: PRIORITY_LEVELS must be a whole number, 0 or more", v)
		}
	}
	m[name] = q
	return nil
}

// applyMockModelFlags gives the named models their sequence batcher and queue
// policy; a name that is not a model is an error.
func applyMockModelFlags(models []mockbackend.Model, seqs mockSequenceFlags, queues mockQueueFlags) error {
	byName := map[string]*mockbackend.Model{}
	for i := range models {
		byName[models[i].Name] = &models[i]
	}
	for name, s := range seqs {
		m := byName[name]
		if m == nil {
			return fmt.Errorf("--sequence %s: no such model: give it with --model %s=EXEC_MS or in -c FILE", name, name)
		}
		m.Sequence = &s
	}
	for name, q := range queues {
		m := byName[name]
		if m == nil {
			return fmt.Errorf("--queue-timeout %s: no such model: give it with --model %s=EXEC_MS or in -c FILE", name, name)
		}
		m.Queue = q
	}
	return nil
}
