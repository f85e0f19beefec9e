package trace

import (
	"io"

	"github.com/vig-edge/vig/internal/atomicfile"
)

// WriteFile writes win as Chrome trace-event JSON to path, whole or not at
// all.
func WriteFile(path string, win *Window) error {
	return atomicfile.Write(path, func(w io.Writer) error { return WriteChrome(w, win) })
}
