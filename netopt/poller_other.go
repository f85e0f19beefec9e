//go:build !linux

package netopt

import (
	"errors"
	"fmt"
	"net"
)

type poller struct{ onWake func() }
type source struct{}

func newPoller() (*poller, error) {
	return nil, fmt.Errorf("netopt: event loop: %w (needs Linux epoll)", errors.ErrUnsupported)
}
func (p *poller) add(net.Conn, Handler) (*source, error) { return nil, errors.ErrUnsupported }
func (p *poller) run() error                             { return errors.ErrUnsupported }
func (p *poller) close() error                           { return nil }
func (s *source) read([]byte) (int, error)               { return 0, errors.ErrUnsupported }
func (s *source) close()                                 {}
func (s *source) poke()                                  {}
func (s *source) writev([][]byte) (int, error)           { return 0, errors.ErrUnsupported }
func (s *source) writeAll([][]byte) error                { return errors.ErrUnsupported }
