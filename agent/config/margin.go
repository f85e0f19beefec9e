package config

import (
	"fmt"
	"strconv"
	"strings"
)

// The safety margin is a whole percentage everywhere in vig: in the YAML file, in the
// scheduler, in metrics and in logs. 100 means no margin (estimates are used as they
// are); 120 means jobs are assumed to take 20 % longer. Values below 100 would make the
// scheduler start work it predicts to be late, so they are refused, never clamped.

// ParseMargin parses a safety margin written as "120" or "120%".
func ParseMargin(s string) (int, error) {
	v, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(s), "%"))
	if err != nil {
		return 0, fmt.Errorf("safety margin %q is not a whole percentage (100 = none, 120 = +20 %%)", s)
	}
	if v < 100 || v > 1000 {
		return 0, fmt.Errorf("safety margin %d%% is outside 100..1000 (100 = none, 120 = +20 %%)", v)
	}
	return v, nil
}

// FormatMargin writes a margin the way ParseMargin reads it.
func FormatMargin(pct int) string { return strconv.Itoa(pct) + "%" }
