package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeQuickstart returns the shell block of the README's "Put it in front of
// your Triton" section.
func readmeQuickstart(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i := strings.Index(readme, "## Put it in front of your Triton")
	if i < 0 {
		t.Fatal("README.md has no section \"Put it in front of your Triton\"")
	}
	start := strings.Index(readme[i:], "```sh\n")
	if start < 0 {
		t.Fatal("the section has no ```sh block")
	}
	block := readme[i+start+len("```sh\n"):]
	end := strings.Index(block, "\n```\n")
	if end < 0 {
		t.Fatal("the ```sh block does not end")
	}
	return block[:end+1]
}

// TestReadmeQuickstart runs the README's quickstart commands as written, in an
// empty directory, with vig on PATH and the four loopback ports it names replaced
// by free ones: vig mock-backend stands in for Triton, vig doctor and vig serve
// read the config the README writes, and the client call must come back with the
// backend's answer, counted forwarded for the stream, then drain.
func TestReadmeQuickstart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts vig and its mock backend as processes")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the quickstart needs %s: %v", tool, err)
		}
	}
	script := readmeQuickstart(t)
	ports := regexp.MustCompile(`127\.0\.0\.1:(\d+)`).FindAllStringSubmatch(script, -1)
	seen := map[string]bool{}
	for _, m := range ports {
		if !seen[m[1]] {
			seen[m[1]] = true
			script = strings.ReplaceAll(script, "127.0.0.1:"+m[1], freePort(t))
		}
	}
	if len(seen) != 4 {
		t.Fatalf("the quickstart names ports %v: want Triton's 8001 and vig's gRPC, HTTP and metrics ports, each written out", seen)
	}
	if n := strings.Count(script, "\nvig ") + strings.Count(script, "\ncurl ") + strings.Count(script, "\ncat "); n > 9 {
		t.Errorf("the quickstart takes %d commands; the README promises a governed answer in under ten", n)
	}

	// vig on PATH is this test binary running vig's main.
	dir, bin := t.TempDir(), t.TempDir()
	probe := exec.Command(os.Args[0], "version")
	probe.Env = append(os.Environ(), runAsVig+"=1")
	if err := probe.Run(); errors.Is(err, syscall.ENOEXEC) {
		t.Skipf("cannot execute %s from a shell here (qemu-user without binfmt_misc): %v", os.Args[0], err)
	}
	wrapper := "#!/bin/sh\n" + runAsVig + "=1 exec '" + os.Args[0] + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "vig"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	// After the README's commands: stop vig (SIGTERM: it drains) and the mock.
	cleanup := "\nkill -TERM %2; wait %2; kill -TERM %1; wait\n"
	cmd := exec.Command("bash", "-c", "set -m\n"+script+cleanup)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("the quickstart did not finish within 60 s:\n%s", out)
	}
	log := string(out)
	for _, want := range []string{
		"vig doctor: vig.yaml",                   // doctor read the README's config
		`"model_name":"detector"`,                // the backend's answer came back through vig
		`outcome="forwarded",stream="camera"} 1`, // governed: counted for the stream's contract
		"drained: ",                              // vig answered everything it accepted
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the quickstart's output lacks %q (exit: %v):\n%s", want, err, log)
		}
	}
	if strings.Contains(log, "invalid config") || strings.Contains(log, "address already in use") {
		t.Errorf("the quickstart failed:\n%s", log)
	}
}
