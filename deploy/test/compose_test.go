package test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/vig-edge/vig/agent/config"
)

// The compose file for balena and Mender loads and validates against the
// Compose specification (compose-go, as docker compose loads it), and puts vig
// beside Triton as the chart does: host network and IPC, vig's configuration
// pointing at Triton's gRPC port, and vig.service's restrictions.
func TestComposeFile(t *testing.T) {
	dir := filepath.Join(deploy, "compose")
	file := filepath.Join(dir, "docker-compose.yml")
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  abs,
		ConfigFiles: []types.ConfigFile{{Filename: file}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("vig", true) })
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	triton, err := p.GetService("triton")
	if err != nil {
		t.Fatal(err)
	}
	vig, err := p.GetService("vig")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []types.ServiceConfig{triton, vig} {
		if s.NetworkMode != "host" || s.Ipc != "host" {
			t.Errorf("service %s: network_mode %q, ipc %q; want host and host (loopback and /dev/shm shared)", s.Name, s.NetworkMode, s.Ipc)
		}
	}
	if vig.User != "65532:65532" || !vig.ReadOnly || !slices.Equal(vig.CapDrop, []string{"ALL"}) || len(vig.CapAdd) != 0 ||
		!slices.Contains(vig.SecurityOpt, "no-new-privileges:true") || !slices.Contains(vig.Tmpfs, "/tmp") {
		t.Errorf("vig: user %q, read_only %v, cap_drop %v, cap_add %v, security_opt %v, tmpfs %v; want vig.service's restrictions",
			vig.User, vig.ReadOnly, vig.CapDrop, vig.CapAdd, vig.SecurityOpt, vig.Tmpfs)
	}
	if vig.StopSignal != "SIGTERM" || vig.StopGracePeriod == nil {
		t.Errorf("vig: stop_signal %q, stop_grace_period %v; want SIGTERM and time to drain", vig.StopSignal, vig.StopGracePeriod)
	}
	if _, ok := vig.DependsOn["triton"]; !ok {
		t.Error("vig does not start after triton")
	}

	// vig's image, with this device's configuration copied in.
	if vig.Build == nil {
		t.Fatal("vig has no build: (its Dockerfile puts the device's vig.yaml into vig's image)")
	}
	df, err := os.ReadFile(filepath.Join(vig.Build.Context, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(df), "\nCOPY vig.yaml /etc/vig/vig.yaml\n") || !strings.Contains(string(df), "\nFROM ghcr.io/vig-edge/vig:") {
		t.Errorf("vig's Dockerfile does not copy vig.yaml over vig's image's /etc/vig/vig.yaml:\n%s", df)
	}
	b, err := os.ReadFile(filepath.Join(vig.Build.Context, "vig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("vig.yaml", b)
	if err != nil {
		t.Fatalf("vig refuses the compose file's configuration: %v", err)
	}
	_, grpcPort := hostPort(t, "backend.address", cfg.Backend.Address)
	want := "--grpc-port=" + strconv.Itoa(grpcPort)
	if !slices.Contains(triton.Command, want) || !config.Loopback(cfg.Backend.Address) {
		t.Errorf("vig governs %s, but Triton runs %q (want %s on the shared loopback)", cfg.Backend.Address, triton.Command, want)
	}
}
