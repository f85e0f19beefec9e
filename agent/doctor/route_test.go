package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/netopt"
)

func TestRouteCheck(t *testing.T) {
	lo := netopt.Route{Target: netip.MustParseAddr("127.0.0.1"), Interface: "lo", Kind: netopt.LinkLoopback, MTU: 65536,
		Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}}
	usb := netopt.Route{Target: netip.MustParseAddr("192.168.42.129"), Interface: "rndis0", Kind: netopt.LinkUSBTether, MTU: 1500,
		Addrs: []netip.Prefix{netip.MustParsePrefix("192.168.42.1/24")}}
	tests := []struct {
		name, backend string
		route         netopt.Route
		err           error
		status        Status
		detail        string
	}{
		{"loopback", `{address: "127.0.0.1:8001"}`, lo, nil, OK, "127.0.0.1 via lo (loopback, MTU 65536, 127.0.0.1/8): on this machine"},
		{"usb tether", `{address: "192.168.42.129:8001"}`, usb, nil, Warn, "over USB tether, so shared memory with it is impossible"},
		{"unix", `{address: "unix:/run/triton.sock"}`, netopt.Route{}, errors.New("not asked"), OK, "a Unix socket"},
		{"ring", `{address: "ring:@npu"}`, netopt.Route{}, errors.New("not asked"), OK, "a Unix socket"},
		{"embedded", `{address: "127.0.0.1:0", embedded: true}`, netopt.Route{}, errors.New("not asked"), Skipped, "embedded"},
		{"no netlink", `{address: "10.0.0.2:8001"}`, netopt.Route{}, fmt.Errorf("netlink: %w", errors.ErrUnsupported), Skipped, "netlink"},
		{"broken", `{address: "10.0.0.2:8001"}`, netopt.Route{}, errors.New("network is unreachable"), Warn, "unreachable"},
	}
	for _, tt := range tests {
		cfg, err := config.Parse("r.yaml", []byte("backend: "+tt.backend+"\nmodels: {m: {exec_ms: 1}}\n"))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		asked := ""
		h := &Host{Route: func(_ context.Context, a string) (netopt.Route, error) { asked = a; return tt.route, tt.err }}
		c := routeCheck(context.Background(), cfg, h)
		if c.Status != tt.status || !strings.Contains(c.Detail, tt.detail) {
			t.Errorf("%s: %v %q, want %v with %q", tt.name, c.Status, c.Detail, tt.status, tt.detail)
		}
		if tt.err != nil && tt.err.Error() == "not asked" && asked != "" {
			t.Errorf("%s: looked up a route to %q", tt.name, asked)
		}
	}
	cfg, _ := config.Parse("r.yaml", []byte("backend: {address: \"127.0.0.1:8001\"}\nmodels: {m: {exec_ms: 1}}\n"))
	if c := routeCheck(context.Background(), cfg, &Host{}); c.Status != Skipped {
		t.Errorf("no Route func: %+v", c)
	}
}
