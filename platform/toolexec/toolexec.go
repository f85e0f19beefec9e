// Package toolexec runs the device's own command-line tools (dumpsys, getprop,
// nvpmodel, jetson_clocks) for the device policy packages, with a timeout and
// errors that say what was run and why it failed.
package toolexec

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Runner runs a command and returns its standard output.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// Run runs a tool with a timeout. A tool that is not installed is an error that
// wraps errors.ErrUnsupported; a failing one carries its standard error.
func Run(ctx context.Context, timeout time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if errors.Is(err, exec.ErrNotFound) {
		return nil, fmt.Errorf("%s: %w (not installed here)", name, errors.ErrUnsupported)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return out, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return out, nil
}
