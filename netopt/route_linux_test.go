package netopt

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestRouteInNamespace builds two network namespaces joined by veth pairs and asks
// for routes from the first: a phone-like USB tether (rndis0, MTU 1400), a Wi-Fi
// link (wlan0), a gateway route, loopback, and an unreachable address. Every
// target is an address of the test's own namespaces; no packet is sent (a route
// lookup only). Needs root and iproute2.
func TestRouteInNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces (sudo go test -run RouteInNamespace ./netopt)")
	}
	ipCmd, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("needs iproute2's ip (apt-get install -y iproute2)")
	}
	a, b := fmt.Sprintf("vig-rt-a-%d", os.Getpid()), fmt.Sprintf("vig-rt-b-%d", os.Getpid())
	ip := func(args ...string) error {
		out, err := exec.Command(ipCmd, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := ip("netns", "add", a); err != nil {
		t.Skipf("cannot create a network namespace here (a container without CAP_SYS_ADMIN, or qemu-user): %v", err)
	}
	t.Cleanup(func() { ip("netns", "del", a) })
	if err := ip("netns", "add", b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ip("netns", "del", b) })
	for _, step := range [][]string{
		{"link", "add", "rndis0", "netns", a, "type", "veth", "peer", "name", "host-usb", "netns", b},
		{"link", "add", "wlan0", "netns", a, "type", "veth", "peer", "name", "host-wifi", "netns", b},
		{"-n", a, "link", "set", "lo", "up"},
		{"-n", a, "link", "set", "rndis0", "mtu", "1400", "up"},
		{"-n", a, "link", "set", "wlan0", "up"},
		{"-n", a, "addr", "add", "192.0.2.1/24", "dev", "rndis0"},
		{"-n", a, "addr", "add", "2001:db8::1/64", "dev", "rndis0", "nodad"},
		{"-n", a, "addr", "add", "203.0.113.1/24", "dev", "wlan0"},
		{"-n", b, "link", "set", "lo", "up"},
		{"-n", b, "link", "set", "host-usb", "mtu", "1400", "up"},
		{"-n", b, "link", "set", "host-wifi", "up"},
		{"-n", b, "addr", "add", "192.0.2.2/24", "dev", "host-usb"},
		{"-n", b, "addr", "add", "203.0.113.2/24", "dev", "host-wifi"},
		{"-n", b, "addr", "add", "198.51.100.7/32", "dev", "lo"},
	} {
		if err := ip(step...); err != nil {
			t.Fatal(err)
		}
	}
	ns, err := netns.GetFromName(a)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE) // only rtnetlink: qemu-user translates no other family
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	get := func(target string) (Route, error) { return routeVia(h, netip.MustParseAddr(target)) }

	// B's loopback address before A has a route to it: unreachable, said so.
	if r, err := get("198.51.100.7"); err == nil {
		t.Errorf("no route yet, got %s", r)
	}
	if err := ip("-n", a, "route", "add", "198.51.100.0/24", "via", "192.0.2.2"); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		target, iface string
		kind          LinkKind
		mtu           int
		addrs         []string
		gateway       string
	}{
		{"192.0.2.2", "rndis0", LinkUSBTether, 1400, []string{"192.0.2.1/24", "2001:db8::1/64"}, ""},
		{"198.51.100.7", "rndis0", LinkUSBTether, 1400, []string{"192.0.2.1/24"}, "192.0.2.2"},
		{"203.0.113.2", "wlan0", LinkWiFi, 1500, []string{"203.0.113.1/24"}, ""},
		{"127.0.0.1", "lo", LinkLoopback, 65536, []string{"127.0.0.1/8"}, ""},
		{"192.0.2.1", "lo", LinkLoopback, 65536, nil, ""}, // its own address: local
	}
	for _, tt := range tests {
		r, err := get(tt.target)
		if err != nil {
			t.Errorf("%s: %v", tt.target, err)
			continue
		}
		t.Logf("%s", r)
		if r.Interface != tt.iface || r.Kind != tt.kind || r.MTU != tt.mtu || r.Local() != (tt.kind == LinkLoopback) {
			t.Errorf("%s: %s (%+v), want %s %s MTU %d", tt.target, r, r, tt.iface, tt.kind, tt.mtu)
		}
		if (tt.gateway == "") != !r.Gateway.IsValid() || (tt.gateway != "" && r.Gateway.String() != tt.gateway) {
			t.Errorf("%s: gateway %v, want %q", tt.target, r.Gateway, tt.gateway)
		}
		var have []string
		for _, p := range r.Addrs {
			have = append(have, p.String())
		}
		for _, w := range tt.addrs {
			if !slices.Contains(have, w) {
				t.Errorf("%s: addresses %v lack %s", tt.target, have, w)
			}
		}
		if tt.kind != LinkLoopback && r.Type != "veth" {
			t.Errorf("%s: link type %q, want veth", tt.target, r.Type)
		}
	}
}
