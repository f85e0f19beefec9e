package netopt

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// LinkKind is what sort of link carries traffic to an address.
type LinkKind string

// Link kinds, from the interface's flags, name and netlink type.
const (
	LinkLoopback  LinkKind = "loopback"
	LinkUSBTether LinkKind = "USB tether"
	LinkWiFi      LinkKind = "Wi-Fi"
	LinkEthernet  LinkKind = "Ethernet"
	LinkCellular  LinkKind = "cellular"
	LinkVirtual   LinkKind = "virtual"
	LinkOther     LinkKind = "other"
)

// Route is how this machine reaches an address: the kernel's answer to
// `ip route get`, with the outgoing interface described.
type Route struct {
	Target    netip.Addr     // the address asked about (resolved when a name was given)
	Interface string         // outgoing interface
	Kind      LinkKind       // what the interface is
	Type      string         // the netlink link type ("device", "veth", "bridge", …)
	MTU       int            // the interface's MTU
	Addrs     []netip.Prefix // the interface's addresses
	Source    netip.Addr     // source address the kernel picks; zero when none
	Gateway   netip.Addr     // next hop; zero when the target is on-link
}

// Local reports whether the target is this machine: the route goes over
// loopback, so shared memory with the peer is possible.
func (r Route) Local() bool { return r.Kind == LinkLoopback }

// String is a one-line summary for logs and doctor:
// "192.168.42.129 via rndis0 (USB tether, MTU 1500, 192.168.42.1/24)".
func (r Route) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s via %s (%s", r.Target, r.Interface, r.Kind)
	if r.Type != "" && r.Type != "device" && string(r.Kind) != r.Type {
		fmt.Fprintf(&b, ", %s", r.Type)
	}
	fmt.Fprintf(&b, ", MTU %d", r.MTU)
	for _, a := range r.Addrs {
		fmt.Fprintf(&b, ", %s", a)
	}
	b.WriteString(")")
	if r.Gateway.IsValid() {
		fmt.Fprintf(&b, " through gateway %s", r.Gateway)
	}
	return b.String()
}

// ClassifyLink names the kind of an interface from its loopback flag, name and
// netlink link type. Names follow the kernel's and Android's conventions: rndis0,
// usb0, ncm0 (a phone's USB tether), l4tbr0 (the bridge over a Jetson's USB device
// mode), wlan0/wlp2s0 (Wi-Fi), eth0/enp3s0/end0/enx… (Ethernet, enx… being a USB
// adapter), rmnet*/ccmni* (cellular modems).
func ClassifyLink(name, linkType string, loopback bool) LinkKind {
	has := func(prefixes ...string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
		return false
	}
	switch {
	case loopback || name == "lo":
		return LinkLoopback
	case has("rndis", "usb", "ncm", "l4tbr"):
		return LinkUSBTether
	case has("wlan", "wlp", "wlx", "wifi"):
		return LinkWiFi
	case has("rmnet", "ccmni", "wwan", "seth_"):
		return LinkCellular
	case has("eth", "enp", "ens", "eno", "end", "enx"):
		return LinkEthernet
	}
	switch linkType {
	case "veth", "bridge", "tun", "tuntap", "wireguard", "dummy", "vxlan", "macvlan", "ipvlan":
		return LinkVirtual
	}
	return LinkOther
}

// RouteTo reports the route and interface that reach address: an IP, or a
// host:port as in vig's config (a host name is resolved first, with ctx). A Unix
// socket ("unix:…", "ring:…", a path) has no route: the peer is on this machine.
// Where netlink is unavailable the error wraps errors.ErrUnsupported.
func RouteTo(ctx context.Context, address string) (Route, error) {
	ip, err := targetAddr(ctx, address)
	if err != nil {
		return Route{}, err
	}
	return routeTo(ip)
}

// targetAddr turns a configured address into the IP to look up.
func targetAddr(ctx context.Context, address string) (netip.Addr, error) {
	if network, _ := Split(address); network == "unix" || strings.HasPrefix(address, "ring:") || strings.HasPrefix(address, "/") || strings.HasPrefix(address, "@") {
		return netip.Addr{}, fmt.Errorf("route to %q: a Unix socket is on this machine and has no network route", address)
	}
	host := address
	if h, _, err := net.SplitHostPort(address); err == nil {
		host = h
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap(), nil
	}
	if host == "" {
		return netip.Addr{}, fmt.Errorf("route to %q: no host", address)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("route to %q: resolving %s: %v (put an IP address in the config; Android has no DNS for vig)", address, host, err)
	}
	return ips[0].Unmap(), nil
}
