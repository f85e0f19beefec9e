package cpu

import (
	"compress/gzip"
	"io"
	"os"
)

func readConfigGz() ([]byte, error) {
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(z)
}
