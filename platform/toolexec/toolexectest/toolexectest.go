// Package toolexectest fakes the device's command-line tools for tests of the
// device policy packages: recorded outputs instead of dumpsys, getprop or nvpmodel.
package toolexectest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vig-edge/vig/platform/toolexec"
)

// FixtureRunner answers a command with the file dir/cmd/<name>_<args…> (words joined
// by '_'), and like a tool that is not installed when there is no such file.
func FixtureRunner(dir string) toolexec.Runner {
	return func(_ context.Context, name string, args ...string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, "cmd", strings.Join(append([]string{name}, args...), "_")))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w (not installed here)", name, errors.ErrUnsupported)
		}
		return b, err
	}
}
