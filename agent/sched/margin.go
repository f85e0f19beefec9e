package sched

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Margin is the safety margin applied to estimated execution times, as an
// integer percentage: 100 means no margin, 110 means +10 %. It is the only
// representation of the margin in vig — configuration, flags, metrics and
// doctor all speak percent — and the zero value is invalid on purpose, so an
// unset margin is an error rather than a silent default.
type Margin uint32

const (
	// NoMargin uses estimates as they are.
	NoMargin Margin = 100
	// DefaultMargin is the margin vig's configuration uses when none is
	// given.
	DefaultMargin Margin = 110
	// MaxMargin bounds the margin to a sane factor (10x).
	MaxMargin Margin = 1000
)

// ParseMargin parses a percentage such as "110" or "110%".
// Fractions ("1.1") are refused with a hint rather than guessed at.
func ParseMargin(s string) (Margin, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSpace(strings.TrimSuffix(t, "%"))
	n, err := strconv.ParseUint(t, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("safety margin %q: want an integer percentage ≥ 100 such as 110 (+10 %%); 100 means no margin", s)
	}
	m := Margin(n)
	if err := m.Validate(); err != nil {
		return 0, err
	}
	return m, nil
}

// Validate reports whether m is in [NoMargin, MaxMargin].
func (m Margin) Validate() error {
	if m < NoMargin {
		return fmt.Errorf("safety margin %d%%: must be ≥ 100%% (100 = no margin, 110 = +10 %%)", uint32(m))
	}
	if m > MaxMargin {
		return fmt.Errorf("safety margin %d%%: must be ≤ %d%%", uint32(m), uint32(MaxMargin))
	}
	return nil
}

// String formats m as ParseMargin accepts it, e.g. "110%".
func (m Margin) String() string { return strconv.FormatUint(uint64(m), 10) + "%" }

// Percent returns m as an integer percentage.
func (m Margin) Percent() int { return int(m) }

// Apply returns d scaled by the margin, rounded up to the nanosecond.
func (m Margin) Apply(d time.Duration) time.Duration {
	if m == NoMargin {
		return d
	}
	return (d*time.Duration(m) + 99) / 100
}
