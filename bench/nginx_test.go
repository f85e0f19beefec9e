package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vig-edge/vig/agent/gateway"
	"github.com/vig-edge/vig/mockbackend"
	"github.com/vig-edge/vig/netopt"
	pb "github.com/vig-edge/vig/proto/inference"
)

// nginx starts with the generated configuration without a warning, proxies gRPC
// (unary inference, a camera-sized frame included) to the mock backend, and does
// it over its upstream keepalive pool: the backend accepts one connection for all
// the calls, not one per call (the unfair peer vig bench used to measure).
func TestNginxProxies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := nginxBinary(); errors.Is(err, errSkip) {
		t.Skip(err)
	}
	var st netopt.Stats
	mb, err := mockbackend.Start(ctx, "127.0.0.1:0", mockbackend.Config{Models: []mockbackend.Model{{Name: "m", Exec: time.Millisecond}}},
		gateway.ServerOptions(defaultGRPC()), &st)
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Stop()
	dir := t.TempDir()
	p, addr, err := StartNginx(ctx, dir, mb.Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	cc, err := dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := pb.NewGRPCInferenceServiceClient(cc)
	if r, err := c.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !r.Live {
		t.Fatalf("ServerLive through nginx: %v %v", r, err)
	}
	// Sizes on both sides of nginx's preread window and body buffer.
	sizes := []int{0, 6_200_000, 150_000, 1_200_000}
	const calls = 40
	for i := range calls {
		size := sizes[i%len(sizes)]
		frame := uint64(i)
		resp, err := c.ModelInfer(ctx, frameRequest("m", "cam", frame, 1, make([]byte, size)))
		if err != nil {
			t.Fatalf("ModelInfer %d B through nginx: %v", size, err)
		}
		if resp.Id != mockbackend.FrameID("cam", frame) || len(resp.RawOutputContents) != 1 {
			t.Fatalf("response %v", resp)
		}
	}
	if st, err := mb.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "m"}); err != nil || st.ModelStats[0].InferenceCount != calls {
		t.Fatalf("backend saw %v (%v), want %d inferences", st, err, calls)
	}
	// One call in flight at a time: one pooled connection serves them all.
	if n := st.TCPAccepted.Load(); n != 1 {
		t.Errorf("the backend accepted %d connections for %d calls through nginx, want 1: the upstream keepalive pool is not used (nginx.conf: upstream { keepalive }, grpc_pass grpc://%s)",
			n, calls+1, nginxUpstream)
	}
	p.Stop()
	log, err := os.ReadFile(filepath.Join(dir, "error.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "[warn]") || strings.Contains(line, "[emerg]") || strings.Contains(line, "[error]") {
			// nginx warns when a directive is obsolete and when it spills a
			// request body to a temp file ("buffered to a temporary file").
			t.Errorf("nginx logged (fix the generated config): %s", line)
		}
	}
}

// The listen line follows the nginx version: `http2 on;` from 1.25.1, where
// `listen … http2` is deprecated (and warned about), the listen parameter before.
func TestNginxVersion(t *testing.T) {
	for _, tc := range []struct {
		out     string
		newForm bool
		bad     bool
	}{
		{out: "nginx version: nginx/1.22.1\n", newForm: false},
		{out: "nginx version: nginx/1.25.0", newForm: false},
		{out: "nginx version: nginx/1.25.1", newForm: true},
		{out: "nginx version: nginx/1.27.4 (Ubuntu)", newForm: true},
		{out: "nginx version: nginx/2.0.0", newForm: true},
		{out: "nginx version: openresty/1.21.4.1", bad: true},
		{out: "", bad: true},
	} {
		ma, mi, pa, err := nginxVersion(tc.out)
		if tc.bad {
			if err == nil {
				t.Errorf("nginxVersion(%q) = %d.%d.%d, want an error", tc.out, ma, mi, pa)
			}
			continue
		}
		if err != nil {
			t.Errorf("nginxVersion(%q): %v", tc.out, err)
			continue
		}
		if got := usesHTTP2Directive(ma, mi, pa); got != tc.newForm {
			t.Errorf("%q: http2 directive %v, want %v", tc.out, got, tc.newForm)
		}
		conf := nginxConfig("/d", "127.0.0.1:1", "127.0.0.1:2", tc.newForm)
		if strings.Contains(conf, "http2 on;") != tc.newForm || strings.Contains(conf, "listen 127.0.0.1:1 http2;") == tc.newForm {
			t.Errorf("%q: config's listen lines do not match the version:\n%s", tc.out, conf)
		}
	}
}
