package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proxyCPU is the CPU the proxy under test (vig or nginx) is pinned to with
// taskset, away from CPU 0 where the client and the mock backend mostly run. On a
// machine with one CPU nothing is pinned.
const proxyCPU = "1"

// pinned returns argv prefixed with `taskset -c <proxyCPU>` when taskset exists and
// the machine has a second CPU, and whether it did.
func pinned(argv []string) ([]string, bool) {
	if runtime.NumCPU() < 2 {
		return argv, false
	}
	ts, err := exec.LookPath("taskset")
	if err != nil {
		return argv, false
	}
	return append([]string{ts, "-c", proxyCPU}, argv...), true
}

// Proc is a process under measurement (vig or nginx).
type Proc struct {
	Name   string
	PID    int
	Pinned bool
	Addrs  map[string]string // vig: what it listens on ("grpc", "unix", "ring", "metrics", "http")
	Config string            // nginx: the configuration file it runs with

	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	stderr strings.Builder // tail of the log, for errors
}

func (p *Proc) logTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stderr.String()
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

func (p *Proc) appendLog(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stderr.Len() < 1<<20 {
		p.stderr.WriteString(line)
		p.stderr.WriteByte('\n')
	}
}

// Stop sends SIGTERM (vig drains), waits up to 5 s, then kills.
func (p *Proc) Stop() {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// StartVig runs `<bin> serve -c <dir>/vig.yaml` with the given config (whose log
// format must be json), pinned when possible, and waits until it logs that it
// serves; Addrs then holds its listeners.
func StartVig(ctx context.Context, bin, dir, configYAML string, pin bool, args ...string) (*Proc, error) {
	path := filepath.Join(dir, "vig.yaml")
	if err := os.WriteFile(path, []byte(configYAML), 0o644); err != nil {
		return nil, err
	}
	argv := append([]string{bin, "serve", "-c", path, "--log-format", "json"}, args...)
	p := &Proc{Name: "vig"}
	if pin {
		argv, p.Pinned = pinned(argv)
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), "GOTRACEBACK=all")
	errPipe, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p.PID = p.cmd.Process.Pid // taskset execs vig: the same pid
	p.done = make(chan struct{})
	ready := make(chan map[string]string, 1)
	go func() {
		sc := bufio.NewScanner(errPipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			p.appendLog(line)
			if sent {
				continue
			}
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "vig serving" {
				addrs := map[string]string{}
				for _, k := range []string{"grpc", "unix", "ring", "metrics", "http"} {
					if s, ok := rec[k].(string); ok {
						addrs[k] = s
					}
				}
				ready <- addrs
				sent = true
			}
		}
		io.Copy(io.Discard, errPipe)
	}()
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	select {
	case p.Addrs = <-ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("vig exited before serving:\n%s", p.logTail())
	case <-time.After(15 * time.Second):
		p.Stop()
		return nil, fmt.Errorf("vig did not start serving within 15 s:\n%s", p.logTail())
	case <-ctx.Done():
		p.Stop()
		return nil, ctx.Err()
	}
}

// errSkip marks a row or a proxy that cannot run here; its message says why.
var errSkip = errors.New("skipped")
