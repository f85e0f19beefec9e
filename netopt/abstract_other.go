//go:build !linux

package netopt

import (
	"errors"
	"fmt"
	"net"
)

func listenAbstract(name string) (net.Listener, error) {
	return nil, fmt.Errorf("netopt: abstract socket %q: %w (Linux only; use a filesystem path)", name, errors.ErrUnsupported)
}
