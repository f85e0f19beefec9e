package netopt

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// routeTo asks the kernel (RTM_GETROUTE, as `ip route get`) in the calling
// thread's network namespace.
func routeTo(ip netip.Addr) (Route, error) { return routeVia(nil, ip) }

// routeVia asks through h; nil is the package's handle (this network namespace).
// Tests pass a handle opened in a namespace of their own.
func routeVia(h *netlink.Handle, ip netip.Addr) (Route, error) {
	if h == nil {
		h = &netlink.Handle{}
	}
	rs, err := h.RouteGet(net.IP(ip.AsSlice()))
	if err != nil {
		if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT) {
			// No NETLINK_ROUTE here (a sandbox, an emulator).
			return Route{}, fmt.Errorf("route to %s: netlink: %w (%v)", ip, errors.ErrUnsupported, err)
		}
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			return Route{}, fmt.Errorf("route to %s: netlink: %w (a sandbox forbids RTM_GETROUTE; systemd units need RestrictAddressFamilies=AF_NETLINK)", ip, err)
		}
		return Route{}, fmt.Errorf("route to %s: %w (ip route get %s says the same)", ip, err, ip)
	}
	if len(rs) == 0 {
		return Route{}, fmt.Errorf("route to %s: the kernel returned none", ip)
	}
	r := rs[0]
	link, err := h.LinkByIndex(r.LinkIndex)
	if err != nil {
		return Route{}, fmt.Errorf("route to %s: interface %d: %w", ip, r.LinkIndex, err)
	}
	a := link.Attrs()
	out := Route{
		Target:    ip,
		Interface: a.Name,
		Type:      link.Type(),
		MTU:       a.MTU,
		Kind:      ClassifyLink(a.Name, link.Type(), a.Flags&net.FlagLoopback != 0),
	}
	if s, ok := netip.AddrFromSlice(r.Src); ok {
		out.Source = s.Unmap()
	}
	if g, ok := netip.AddrFromSlice(r.Gw); ok {
		out.Gateway = g.Unmap()
	}
	addrs, err := h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return Route{}, fmt.Errorf("route to %s: addresses of %s: %w", ip, a.Name, err)
	}
	for _, ad := range addrs {
		if p, ok := netip.AddrFromSlice(ad.IP); ok {
			ones, _ := ad.Mask.Size()
			out.Addrs = append(out.Addrs, netip.PrefixFrom(p.Unmap(), ones))
		}
	}
	sort.Slice(out.Addrs, func(i, j int) bool { return out.Addrs[i].Addr().Less(out.Addrs[j].Addr()) })
	return out, nil
}
