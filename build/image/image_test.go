package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const tag = "v0.0.0-imagetest"

// The repository's root, from build/image.
var root = filepath.Join("..", "..")

// binDir holds the binaries the tests build; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "vig-image-bin"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// binaries builds the static vig binaries as build/image.sh does (once per test
// binary: the tests share them).
var binaries = sync.OnceValues(func() (map[string]string, error) {
	dir := binDir
	out := map[string]string{}
	for _, arch := range []string{"arm64", "amd64"} {
		p := filepath.Join(dir, "vig-linux-"+arch)
		cmd := exec.Command(goTool(), "build", "-trimpath", "-buildvcs=false", "-tags", "grpcnotrace",
			"-ldflags", "-s -w -buildid= -X github.com/vig-edge/vig/build/version.version="+tag, "-o", p, "./cmd/vig")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build linux/%s: %v\n%s", arch, err, b)
		}
		out[arch] = p
	}
	return out, nil
})

func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func options(t *testing.T) Options {
	t.Helper()
	bins, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	certs := CertsPath
	if !fileExists(certs) {
		t.Skipf("no CA bundle at %s to put in the image: apt-get install -y ca-certificates", certs)
	}
	return Options{Version: tag, Revision: "0123456789abcdef", Binaries: bins, Config: filepath.Join(root, "deploy", "vig.yaml"),
		Certs: certs, Epoch: time.Unix(1700000000, 0).UTC()}
}

// need skips the test when a tool is not installed, naming the package.
func need(t *testing.T, tool, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Skipf("%s is not installed (Debian: apt-get install -y %s)", tool, pkg)
	}
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

// The same inputs give the same index digest: every time stamp is the epoch.
func TestReproducible(t *testing.T) {
	o := options(t)
	a, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("two builds of the same inputs: %s and %s", da, db)
	}
	o.Epoch = o.Epoch.Add(time.Second)
	c, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if dc, _ := c.Digest(); dc == da {
		t.Errorf("a different epoch gave the same digest %s", dc)
	}
}

// Bad input is refused with the fix.
func TestRefusesBadInput(t *testing.T) {
	o := options(t)
	for _, tc := range []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"arm64 binary for amd64", func(o *Options) {
			o.Binaries = map[string]string{"arm64": o.Binaries["arm64"], "amd64": o.Binaries["arm64"]}
		}, "GOARCH=amd64"},
		{"not an ELF file", func(o *Options) { o.Binaries = map[string]string{"arm64": o.Config, "amd64": o.Binaries["amd64"]} }, "not a 64-bit"},
		{"missing binary", func(o *Options) { o.Binaries = map[string]string{"arm64": o.Binaries["arm64"]} }, "make release"},
		{"no version", func(o *Options) { o.Version = "" }, "-version is required"},
		{"no certificates", func(o *Options) { o.Certs = o.Config }, "no PEM certificate"},
		{"missing config", func(o *Options) { o.Config = filepath.Join(t.TempDir(), "none.yaml") }, "deploy/vig.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := o
			tc.change(&bad)
			_, err := Build(bad)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Build: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// layoutDir builds the image into a fresh OCI layout and archive.
func layoutDir(t *testing.T) (dir, archive string) {
	t.Helper()
	o := options(t)
	idx, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	dir, archive = filepath.Join(tmp, "image"), filepath.Join(tmp, "vig-image.tar")
	if err := WriteLayout(dir, tag, idx); err != nil {
		t.Fatal(err)
	}
	if err := TarDir(dir, archive, o.Epoch); err != nil {
		t.Fatal(err)
	}
	return dir, archive
}

// skopeo reads the index from the layout and from the archive, and each
// architecture's image with its labels and runtime settings.
func TestSkopeoInspect(t *testing.T) {
	need(t, "skopeo", "skopeo")
	dir, archive := layoutDir(t)
	var idx struct {
		MediaType string
		Manifests []struct {
			Platform struct{ OS, Architecture string }
		}
		Annotations map[string]string
	}
	if err := json.Unmarshal(run(t, "skopeo", "inspect", "--raw", "oci:"+dir+":"+tag), &idx); err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, m := range idx.Manifests {
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	if idx.MediaType != "application/vnd.oci.image.index.v1+json" || strings.Join(platforms, " ") != "linux/arm64 linux/amd64" {
		t.Errorf("index %s with %v, want an OCI index of linux/arm64 and linux/amd64", idx.MediaType, platforms)
	}
	if idx.Annotations["org.opencontainers.image.version"] != tag {
		t.Errorf("index annotations %v lack the version %s", idx.Annotations, tag)
	}
	for _, ref := range []string{"oci:" + dir + ":" + tag, "oci-archive:" + archive + ":" + tag} {
		for _, arch := range []string{"arm64", "amd64"} {
			var img struct {
				Architecture, Os string
				Labels           map[string]string
				Layers           []string
			}
			if err := json.Unmarshal(run(t, "skopeo", "inspect", "--override-os", "linux", "--override-arch", arch, ref), &img); err != nil {
				t.Fatal(err)
			}
			if img.Architecture != arch || img.Os != "linux" || img.Labels["org.opencontainers.image.version"] != tag || len(img.Layers) != 2 {
				t.Errorf("%s %s: %s/%s, labels %v, %d layers; want linux/%s, version %s, 2 layers", ref, arch, img.Os, img.Architecture, img.Labels, len(img.Layers), arch, tag)
			}
			var cfg struct {
				Config struct {
					User       string
					Entrypoint []string
					Cmd        []string
				}
			}
			if err := json.Unmarshal(run(t, "skopeo", "inspect", "--config", "--override-os", "linux", "--override-arch", arch, ref), &cfg); err != nil {
				t.Fatal(err)
			}
			c := cfg.Config
			if c.User != "65532:65532" || strings.Join(append(c.Entrypoint, c.Cmd...), " ") != BinaryPath+" serve -c "+ConfigPath {
				t.Errorf("%s %s: user %q, command %q %q; want 65532:65532 running %s serve -c %s", ref, arch, c.User, c.Entrypoint, c.Cmd, BinaryPath, ConfigPath)
			}
		}
	}
}

// umoci unpacks each architecture's image: the binary is the one given, the
// configuration is deploy/vig.yaml, the user is vig (non-root) and CA
// certificates are in place. The arm64 binary from the image then serves a
// governed request under qemu-aarch64, with the image's configuration pointed
// at a mock Triton (the amd64 binary from the image).
func TestUnpackAndServe(t *testing.T) {
	need(t, "umoci", "umoci")
	dir, _ := layoutDir(t)
	bins, _ := binaries()
	rootfs := map[string]string{}
	for _, arch := range []string{"arm64", "amd64"} {
		bundle := filepath.Join(t.TempDir(), "bundle")
		run(t, "umoci", "unpack", "--rootless", "--image", dir+":"+tag+"-linux-"+arch, bundle)
		rootfs[arch] = filepath.Join(bundle, "rootfs")
		same(t, filepath.Join(rootfs[arch], BinaryPath), bins[arch])
		same(t, filepath.Join(rootfs[arch], ConfigPath), filepath.Join(root, "deploy", "vig.yaml"))
		same(t, filepath.Join(rootfs[arch], CertsPath), CertsPath)
		passwd, err := os.ReadFile(filepath.Join(rootfs[arch], "etc", "passwd"))
		if err != nil || !bytes.Contains(passwd, []byte("\nvig:x:65532:65532:")) {
			t.Errorf("%s: /etc/passwd %q (%v) lacks user vig 65532", arch, passwd, err)
		}
		var spec struct {
			Process struct {
				User struct{ UID, GID int }
				Args []string
			}
		}
		b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &spec); err != nil {
			t.Fatal(err)
		}
		if p := spec.Process; p.User.UID != UID || p.User.GID != GID || strings.Join(p.Args, " ") != BinaryPath+" serve -c "+ConfigPath {
			t.Errorf("%s: runtime spec runs %q as %d:%d, want %s serve -c %s as %d:%d", arch, p.Args, p.User.UID, p.User.GID, BinaryPath, ConfigPath, UID, GID)
		}
	}
	if t.Failed() {
		return
	}
	need(t, "qemu-aarch64", "qemu-user")
	serveGoverned(t, filepath.Join(rootfs["arm64"], BinaryPath), filepath.Join(rootfs["amd64"], BinaryPath), filepath.Join(rootfs["arm64"], ConfigPath))
}

func same(t *testing.T, got, want string) {
	t.Helper()
	a, err := os.ReadFile(got)
	if err != nil {
		t.Errorf("the image lacks %s: %v", got, err)
		return
	}
	b, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s in the image (%d bytes) differs from %s (%d bytes)", got, len(a), want, len(b))
	}
}

// serveGoverned runs arm64vig under qemu-aarch64 with the image's config, its
// addresses changed to ephemeral loopback ports and a mock backend (mockvig,
// run natively), sends one inference request of the config's protected stream
// over HTTP/REST and checks vig scheduled and forwarded it, then drains it.
func serveGoverned(t *testing.T, arm64vig, mockvig, configPath string) {
	tmp := t.TempDir()
	sock := filepath.Join(tmp, "triton.sock")
	cfg, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(cfg)
	for _, r := range [][2]string{
		{`grpc: "127.0.0.1:9001"`, `grpc: "127.0.0.1:0"` + "\n  http: \"127.0.0.1:0\""},
		{`metrics: "0.0.0.0:9090"`, `metrics: "127.0.0.1:0"`},
		{`address: "127.0.0.1:8001"`, `address: "unix:` + sock + `"`},
	} {
		if !strings.Contains(text, r[0]) {
			t.Fatalf("deploy/vig.yaml no longer holds %s: update this test's substitutions with it", r[0])
		}
		text = strings.Replace(text, r[0], r[1], 1)
	}
	cfgPath := filepath.Join(tmp, "vig.yaml")
	if err := os.WriteFile(cfgPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mock := exec.CommandContext(ctx, mockvig, "mock-backend", "-c", cfgPath, "--listen", "unix:"+sock)
	mock.Stderr = io.Discard
	if err := mock.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { mock.Process.Signal(syscall.SIGTERM); mock.Wait() }()

	vig := exec.CommandContext(ctx, "qemu-aarch64", arm64vig, "serve", "-c", cfgPath)
	stderr, err := vig.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := vig.Start(); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	addrs := make(chan map[string]string, 1)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		serving := regexp.MustCompile(`msg="vig serving".* http=(\S+) .*metrics=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				addrs <- map[string]string{"http": m[1], "metrics": m[2]}
			}
		}
	}()
	stopped := false
	defer func() {
		if !stopped {
			vig.Process.Kill()
			<-logDone
			vig.Wait()
			t.Logf("vig's log:\n%s", log.String())
		}
	}()
	var a map[string]string
	select {
	case a = <-addrs:
	case <-ctx.Done():
		t.Fatal("vig (arm64, qemu) did not start serving")
	}

	client := &http.Client{Timeout: time.Minute}
	body := `{"id":"detector#1","parameters":{"vig_stream":"detector"},"inputs":[{"name":"INPUT0","datatype":"UINT8","shape":[4],"data":[1,2,3,4]}]}`
	// Until one is answered 200: a request before Triton is up is answered
	// UNAVAILABLE (503), and one vig predicts cannot be fresh in time on a
	// loaded machine DEADLINE_EXCEEDED; each is answered at once.
	sent, code := 0, 0
	var answer []byte
	for sent < 30 && code != http.StatusOK {
		resp, err := client.Post("http://"+a["http"]+"/v2/models/detector/infer", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		sent++
		answer, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if code = resp.StatusCode; code != http.StatusOK {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if code != http.StatusOK {
		t.Fatalf("infer: %d requests, the last answered HTTP %d %s; want 200", sent, code, answer)
	}
	resp, err := client.Get("http://" + a["metrics"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	scrape, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for outcome, want := range map[string]string{"received": strconv.Itoa(sent), "forwarded": "1"} {
		line := `vig_stream_requests_total{class="protected",outcome="` + outcome + `",stream="detector"} ` + want + "\n"
		if !bytes.Contains(scrape, []byte(line)) {
			t.Errorf("vig's metrics lack %s", strings.TrimSpace(line))
		}
	}
	if err := vig.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-logDone
	err = vig.Wait()
	stopped = true
	if err != nil || !strings.Contains(log.String(), " answered, 0 lost") || !strings.Contains(log.String(), "version="+tag) {
		t.Errorf("vig exited with %v; want exit 0 after \"drained: N answered, 0 lost\" from the build stamped %s; log:\n%s", err, tag, log.String())
	}
}
