package trace

import (
	"bufio"
	"os"
	"path/filepath"
)

// WriteFile writes win as Chrome trace-event JSON to path, whole or not at
// all (a temporary file beside it, renamed).
func WriteFile(path string, win *Window) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(tmp, 256<<10)
	err = WriteChrome(bw, win)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
