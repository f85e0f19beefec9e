package netopt

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestClassifyLink(t *testing.T) {
	for _, tt := range []struct {
		name, typ string
		lo        bool
		want      LinkKind
	}{
		{"lo", "device", true, LinkLoopback},
		{"rndis0", "device", false, LinkUSBTether},
		{"usb0", "device", false, LinkUSBTether},
		{"ncm0", "device", false, LinkUSBTether},
		{"l4tbr0", "bridge", false, LinkUSBTether},
		{"wlan0", "device", false, LinkWiFi},
		{"wlp2s0", "device", false, LinkWiFi},
		{"eth0", "device", false, LinkEthernet},
		{"enp3s0", "device", false, LinkEthernet},
		{"enx00e04c680001", "device", false, LinkEthernet},
		{"rmnet_data0", "rmnet", false, LinkCellular},
		{"veth1234", "veth", false, LinkVirtual},
		{"docker0", "bridge", false, LinkVirtual},
		{"tailscale0", "tuntap", false, LinkVirtual},
		{"can0", "can", false, LinkOther},
	} {
		if got := ClassifyLink(tt.name, tt.typ, tt.lo); got != tt.want {
			t.Errorf("ClassifyLink(%q, %q, %v) = %q, want %q", tt.name, tt.typ, tt.lo, got, tt.want)
		}
	}
}

func TestTargetAddr(t *testing.T) {
	ctx := context.Background()
	for in, want := range map[string]string{"127.0.0.1:8001": "127.0.0.1", "[::1]:8001": "::1", "192.0.2.7": "192.0.2.7", "[::ffff:127.0.0.1]:1": "127.0.0.1"} {
		if got, err := targetAddr(ctx, in); err != nil || got.String() != want {
			t.Errorf("targetAddr(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"unix:/run/vig/vig.sock", "ring:@npu", "@vig", "/tmp/x.sock", ":8001"} {
		if _, err := targetAddr(ctx, in); err == nil {
			t.Errorf("targetAddr(%q): want an error", in)
		}
	}
}

// Loopback needs no privilege: the kernel's answer for 127.0.0.1 is lo.
func TestRouteToLoopback(t *testing.T) {
	r, err := RouteTo(context.Background(), "127.0.0.1:8001")
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("no netlink here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	if !r.Local() || r.Interface == "" || r.MTU <= 0 || r.Gateway.IsValid() {
		t.Errorf("route to 127.0.0.1: %+v", r)
	}
	found := false
	for _, a := range r.Addrs {
		found = found || a.String() == "127.0.0.1/8"
	}
	if !found || !strings.Contains(r.String(), "(loopback, MTU ") {
		t.Errorf("route to 127.0.0.1 lacks 127.0.0.1/8: %s", r)
	}
}
