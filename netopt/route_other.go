//go:build !linux

package netopt

import (
	"errors"
	"fmt"
	"net/netip"
)

func routeTo(ip netip.Addr) (Route, error) {
	return Route{}, fmt.Errorf("route to %s: %w (vig reads routes over Linux netlink)", ip, errors.ErrUnsupported)
}
