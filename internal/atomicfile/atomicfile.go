// Package atomicfile writes a file whole or not at all: into a temporary file
// beside it, renamed over it once complete, so that a reader never sees a
// half-written file and a failed write leaves the old one.
package atomicfile

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
)

// Write creates path (mode 0644) with what write puts into it, through a
// buffer. On any error, path is untouched and the temporary file removed.
func Write(path string, write func(w io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(tmp, 256<<10)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync() // whole after a power cut too, before the rename makes it the file
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
