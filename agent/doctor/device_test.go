package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/vig-edge/vig/jetson"
	"github.com/vig-edge/vig/proto/inference"
)

// overlay layers fixture trees: the first that has a file wins.
type overlay []fs.FS

func (o overlay) Open(name string) (fs.File, error) {
	for _, f := range o {
		if fh, err := f.Open(name); err == nil {
			return fh, nil
		}
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

// fixtureExec answers a command with <dir>/cmd/<name>_<args…>, and as a missing
// tool when there is none.
func fixtureExec(dir string) func(context.Context, string, ...string) ([]byte, error) {
	return func(_ context.Context, name string, args ...string) ([]byte, error) {
		if dir == "" {
			return nil, fmt.Errorf("%s: %w (not installed here)", name, errors.ErrUnsupported)
		}
		b, err := os.ReadFile(filepath.Join(dir, "cmd", strings.Join(append([]string{name}, args...), "_")))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w (not installed here)", name, errors.ErrUnsupported)
		}
		return b, err
	}
}

func procStatus(capEff string) fstest.MapFS {
	return fstest.MapFS{"proc/self/status": {Data: []byte("Name:\tvig\nTgid:\t4242\nPid:\t4242\nUid:\t0\t0\t0\t0\nCapInh:\t0000000000000000\nCapPrm:\t" + capEff + "\nCapEff:\t" + capEff + "\n")}}
}

// fixtureHost builds a Host from fixture trees; the live probes report what such a
// device would (Android has no /dev/shm).
func fixtureHost(t *testing.T, euid int, capEff, cmdDir string, noDevShm bool, roots ...string) *Host {
	t.Helper()
	layers := overlay{procStatus(capEff)}
	for _, r := range roots {
		if _, err := os.Stat(r); err != nil {
			t.Fatal(err)
		}
		layers = append(layers, os.DirFS(r))
	}
	h := &Host{
		Root: layers, Getenv: func(string) string { return "" }, Exec: fixtureExec(cmdDir), EUID: euid,
		DevShm:  func() error { return nil },
		Memfd:   func() error { return nil },
		NoDelay: func(context.Context) error { return nil },
		DialBackend: func(context.Context, string) (inference.GRPCInferenceServiceClient, func(), error) {
			return nil, nil, errors.New("fixture hosts have no backend")
		},
		Since: func(time.Time) time.Duration { return 0 },
		BPF:   func() error { return nil },
	}
	if noDevShm {
		h.DevShm = func() error {
			return fmt.Errorf("/dev/shm: %w (no POSIX shared memory here, as on Android)", errors.ErrUnsupported)
		}
	}
	return h
}

func statuses(cs []Check) map[string]Status {
	m := map[string]Status{}
	for _, c := range cs {
		m[c.Name] = c.Status
	}
	return m
}

func TestDeviceFixtures(t *testing.T) {
	const (
		cpuTD     = "../../platform/cpu/testdata/"
		androidTD = "../../android/testdata/"
		jetsonTD  = "../../jetson/testdata/"
		rootCaps  = "000001ffffffffff"
	)
	tracefs := fstest.MapFS{"sys/kernel/tracing/events/raw_syscalls/sys_enter/format": {Data: []byte("name: sys_enter\n")}}
	tests := []struct {
		machine string
		host    func(t *testing.T) *Host
		want    map[string]Status
		details map[string]string // substrings of details
	}{
		{
			machine: "laptop-x86",
			host: func(t *testing.T) *Host {
				return fixtureHost(t, 1000, "0000000000000000", "", false, cpuTD+"laptop-x86")
			},
			want: map[string]Status{
				"backend": Skipped, "tcp_nodelay": OK, "shm /dev/shm": OK, "shm memfd": OK,
				"cpu topology": OK, "governor cpu0-7": OK, "clocksource": OK,
				"android": Skipped, "jetson": Skipped, "ebpf": Skipped,
			},
			details: map[string]string{
				"governor cpu0-7": "powersave (intel_pstate)", "ebpf": "needs root", "android": "not Android",
				"jetson": "not a Jetson", "cpu topology": "8 CPUs",
			},
		},
		{
			machine: "phone-arm64",
			host: func(t *testing.T) *Host {
				return fixtureHost(t, 2000, "0000000000000000", androidTD+"phone-awake", true, cpuTD+"phone-arm64", androidTD+"phone-awake")
			},
			want: map[string]Status{
				"backend": Skipped, "tcp_nodelay": OK, "shm /dev/shm": Skipped, "shm memfd": OK,
				"cpu topology": OK, "governor cpu0-1,3": OK, "governor cpu4-6": OK, "governor cpu7": OK, "clocksource": OK,
				"android": OK, "android doze": OK, "android wakefulness": OK, "android thermal": OK, "android perf_harden": Warn,
				"jetson": Skipped, "ebpf": Skipped,
			},
			details: map[string]string{
				"cpu topology": "little cpu0-1,3 (capacity 261, 1.80 GHz, schedutil); mid cpu4-6 (capacity 871, 2.42 GHz, schedutil); big cpu7 (capacity 1024, 2.84 GHz, schedutil); cpu2 offline", "shm /dev/shm": "vig's ring uses memfd instead",
				"android": "linker64", "android perf_harden": "setprop security.perf_harden 0", "android doze": "ACTIVE",
			},
		},
		{
			machine: "phone-arm64 dozing and hot",
			host: func(t *testing.T) *Host {
				h := fixtureHost(t, 2000, "0000000000000000", androidTD+"phone-doze", true, cpuTD+"phone-arm64")
				h.Getenv = func(k string) string {
					if k == "ANDROID_ROOT" {
						return "/system"
					}
					return ""
				}
				return h
			},
			want: map[string]Status{
				"android": OK, "android doze": Warn, "android wakefulness": Warn, "android thermal": Warn, "android perf_harden": OK,
			},
			details: map[string]string{"android doze": "svc power stayon usb", "android thermal": "SEVERE", "android": "ANDROID_ROOT=/system"},
		},
		{
			machine: "jetson-orin",
			host: func(t *testing.T) *Host {
				h := fixtureHost(t, 0, rootCaps, jetsonTD+"orin-nx", false, cpuTD+"jetson-orin", jetsonTD+"orin-nx")
				h.Root = append(h.Root.(overlay), tracefs)
				return h
			},
			want: map[string]Status{
				"backend": Skipped, "tcp_nodelay": OK, "shm /dev/shm": OK, "shm memfd": OK,
				"cpu topology": OK, "governor cpu0-3": OK, "governor cpu4-7": OK, "clocksource": OK,
				"android": Skipped, "jetson": OK, "jetson nvpmodel": OK, "jetson_clocks": OK, "jetson gpu load": OK, "jetson load": Skipped, "ebpf": OK,
			},
			details: map[string]string{
				"jetson": "L4T R36.3.0", "jetson nvpmodel": "MAXN", "jetson_clocks": "active", "jetson gpu load": "12.3 %",
				"ebpf": "no BTF", "cpu topology": "pinned at max",
			},
		},
		{
			machine: "jetson orin nano, not root",
			host: func(t *testing.T) *Host {
				h := fixtureHost(t, 1000, "0000000000000000", jetsonTD+"orin-nano", false, jetsonTD+"orin-nano")
				exec := h.Exec
				h.Exec = func(ctx context.Context, name string, args ...string) ([]byte, error) {
					if name == "jetson_clocks" {
						return nil, errors.New("jetson_clocks --show: exit status 1: Error: Run this script as a root user")
					}
					if name == "sh" && len(args) == 2 && args[1] == jetson.TegrastatsScript {
						return exec(ctx, "tegrastats")
					}
					return exec(ctx, name, args...)
				}
				return h
			},
			want:    map[string]Status{"jetson": OK, "jetson nvpmodel": OK, "jetson_clocks": Warn, "jetson gpu load": Warn, "jetson load": Warn, "ebpf": Skipped},
			details: map[string]string{"jetson_clocks": "from sysfs", "jetson nvpmodel": "15W", "jetson gpu load": "another process", "jetson load": "EMC 86 %@2133 MHz"},
		},
	}
	cfg := loadScenario(t, "b.yaml")
	for _, tt := range tests {
		t.Run(tt.machine, func(t *testing.T) {
			cs := DeviceChecks(context.Background(), cfg, tt.host(t))
			got := statuses(cs)
			for name, want := range tt.want {
				if st, ok := got[name]; !ok || st != want {
					t.Errorf("check %q: %v (present %v), want %v", name, st, ok, want)
				}
			}
			for _, c := range cs {
				t.Logf("%-8s %-20s %s", c.Status, c.Name, c.Detail)
				if c.Detail == "" {
					t.Errorf("check %q has no detail", c.Name)
				}
				if sub, ok := tt.details[c.Name]; ok && !strings.Contains(c.Detail, sub) {
					t.Errorf("check %q: detail %q lacks %q", c.Name, c.Detail, sub)
				}
			}
		})
	}
}

func TestShmNeitherPath(t *testing.T) {
	h := fixtureHost(t, 0, "0", "", true)
	h.Memfd = func() error {
		return fmt.Errorf("memfd sealing: %w (kernel 3.10.0; needs 3.17)", errors.ErrUnsupported)
	}
	cs := shmChecks(h)
	if cs[0].Status != Skipped || cs[1].Status != Warn || !strings.Contains(cs[1].Detail, "only the copy path") {
		t.Errorf("%+v", cs)
	}
	h.Memfd = func() error { return errors.New("sealed memfd grew: seals are not enforced") }
	h.DevShm = func() error { return nil }
	if cs := shmChecks(h); cs[1].Status != Warn || cs[0].Status != OK {
		t.Errorf("broken memfd must not pass or skip: %+v", cs)
	}
}
