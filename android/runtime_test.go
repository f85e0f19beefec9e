package android

import (
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"testing"
)

func facts(env map[string]string, memfd, devShm error, writable ...string) Facts {
	return Facts{
		Getenv: func(k string) string { return env[k] },
		Memfd:  memfd, DevShm: devShm,
		Writable: func(d string) error {
			for _, w := range writable {
				if d == w {
					return nil
				}
			}
			return fmt.Errorf("%s: %w", d, fs.ErrNotExist)
		},
	}
}

var noDevShm = fmt.Errorf("/dev/shm: %w", errors.ErrUnsupported)

func TestChoose(t *testing.T) {
	phoneAddrs := map[string]string{
		"listen.grpc": "127.0.0.1:9001", "listen.metrics": ":9090", "listen.unix": "/data/local/tmp/vig.sock",
		"listen.ring": "@vig-ring", "backend.address": "[::1]:8001",
	}
	tests := []struct {
		name     string
		f        Facts
		addrs    map[string]string
		ring     string
		tempDir  string
		problems []string // substrings, in order
	}{
		{"phone", facts(nil, nil, noDevShm, "/data/local/tmp"), phoneAddrs,
			"sealed memfd (there is no /dev/shm)", "/data/local/tmp", nil},
		{"TMPDIR honoured", facts(map[string]string{"TMPDIR": "/data/local/tmp/vig"}, nil, noDevShm, "/data/local/tmp", "/data/local/tmp/vig"), nil,
			"sealed memfd (there is no /dev/shm)", "/data/local/tmp/vig", nil},
		{"unwritable TMPDIR", facts(map[string]string{"TMPDIR": "/tmp"}, nil, noDevShm, "/data/local/tmp"), nil,
			"sealed memfd (there is no /dev/shm)", "/data/local/tmp", nil},
		{"linux-style config on a phone", facts(nil, nil, noDevShm, "/data/local/tmp"),
			map[string]string{"listen.unix": "/tmp/vig.sock", "backend.address": "triton.local:8001", "listen.grpc": "localhost:9001"},
			"sealed memfd (there is no /dev/shm)", "/data/local/tmp",
			[]string{`backend.address: "triton.local" names a host`, "listen.grpc: \"localhost\" names a host", "listen.unix: /tmp/vig.sock cannot be created", "use /data/local/tmp/vig.sock or an abstract name"}},
		{"old kernel with /dev/shm", facts(nil, errors.New("kernel 3.10"), nil, "/data/local/tmp"), nil,
			"/dev/shm files under a fault guard (memfd: kernel 3.10)", "/data/local/tmp", nil},
		{"nothing", facts(nil, errors.New("ENOSYS"), noDevShm), map[string]string{"listen.unix": "/tmp/x.sock"},
			"none: only the copy path works", "",
			[]string{"no shared memory for rings", "no writable directory", "listen.unix: /tmp/x.sock cannot be created", "use an abstract name (@vig)"}},
	}
	for _, tt := range tests {
		p := Choose(tt.f, tt.addrs)
		if p.Ring != tt.ring || p.TempDir != tt.tempDir {
			t.Errorf("%s: ring %q temp %q, want %q %q", tt.name, p.Ring, p.TempDir, tt.ring, tt.tempDir)
		}
		all := strings.Join(p.Problems, "\n")
		at := 0
		for _, w := range tt.problems {
			i := strings.Index(all[at:], w)
			if i < 0 {
				t.Errorf("%s: problems lack %q (in order):\n%s", tt.name, w, all)
				break
			}
			at += i + len(w)
		}
		if len(tt.problems) == 0 && len(p.Problems) != 0 {
			t.Errorf("%s: unexpected problems %q", tt.name, p.Problems)
		}
	}
	// Deterministic order whatever the map's.
	a := Choose(facts(nil, nil, noDevShm), map[string]string{"b": "x.y:1", "a": "z.w:1", "c": "/nope/s"})
	for i := 0; i < 20; i++ {
		if b := Choose(facts(nil, nil, noDevShm), map[string]string{"b": "x.y:1", "a": "z.w:1", "c": "/nope/s"}); !reflect.DeepEqual(a, b) {
			t.Fatal("problems in map order")
		}
	}
}
