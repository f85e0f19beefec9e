// Command image builds vig's container image without a container engine: one OCI
// image index holding a linux/arm64 and a linux/amd64 image, each made of the
// static vig binary and a small base layer (CA certificates, a non-root user, the
// default configuration for a Triton beside vig). It writes an OCI image layout
// directory and, optionally, that directory as a tar archive (what `skopeo copy
// oci-archive:…` reads).
//
//	go run . -version v0.3.0 -arm64 ../../dist/vig-v0.3.0-linux-arm64 \
//	    -amd64 ../../dist/vig-v0.3.0-linux-amd64 -config ../../deploy/vig.yaml \
//	    -out ../../dist/image -archive ../../dist/vig-image-v0.3.0.tar
//
// The output is reproducible: every file and the image's creation time carry
// -epoch (SOURCE_DATE_EPOCH, e.g. the commit's time), so the same inputs give the
// same digests.
//
// It lives in a Go module of its own so that vig's go.mod does not carry
// go-containerregistry.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: a fixed non-root uid/gid, so a pod's securityContext
// (runAsUser, fsGroup) and a host's file permissions can name it.
const (
	UID = 65532
	GID = 65532
)

// Paths inside the image.
const (
	BinaryPath = "/usr/local/bin/vig"
	ConfigPath = "/etc/vig/vig.yaml"
	CertsPath  = "/etc/ssl/certs/ca-certificates.crt"
)

// RefAnnotation names an entry of an OCI layout's index.json.
const RefAnnotation = "org.opencontainers.image.ref.name"

// Options says what to build from.
type Options struct {
	Version  string            // the image's tag and org.opencontainers.image.version
	Revision string            // the source commit (org.opencontainers.image.revision); optional
	Binaries map[string]string // GOARCH → static linux binary
	Config   string            // the default vig configuration
	Certs    string            // a PEM bundle of CA certificates
	Epoch    time.Time         // modification and creation time of everything
}

func main() {
	var o Options
	var arm64, amd64, out, archive string
	var epoch int64
	flag.StringVar(&o.Version, "version", "", "image version (tag and label), e.g. v0.3.0")
	flag.StringVar(&o.Revision, "revision", "", "source commit for the org.opencontainers.image.revision label")
	flag.StringVar(&arm64, "arm64", "", "static linux/arm64 vig binary")
	flag.StringVar(&amd64, "amd64", "", "static linux/amd64 vig binary")
	flag.StringVar(&o.Config, "config", "", "default vig configuration, installed as "+ConfigPath)
	flag.StringVar(&o.Certs, "certs", CertsPath, "PEM bundle of CA certificates (Debian: apt-get install -y ca-certificates)")
	flag.Int64Var(&epoch, "epoch", envEpoch(), "time stamp of every file and of the image, in seconds since 1970 (default $SOURCE_DATE_EPOCH, else 0)")
	flag.StringVar(&out, "out", "", "OCI image layout directory to write (replaced if it exists)")
	flag.StringVar(&archive, "archive", "", "also write the layout as this tar archive")
	flag.Parse()
	o.Binaries = map[string]string{"arm64": arm64, "amd64": amd64}
	o.Epoch = time.Unix(epoch, 0).UTC()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments %q: every input is a flag (-h lists them)", flag.Args()))
	}
	if out == "" {
		fail(errors.New("-out is required: the OCI layout directory to write, e.g. dist/image"))
	}
	idx, err := Build(o)
	if err != nil {
		fail(err)
	}
	if err := WriteLayout(out, o.Version, idx); err != nil {
		fail(err)
	}
	d, _ := idx.Digest()
	fmt.Printf("%s: OCI layout, index %s (linux/arm64, linux/amd64), tag %s\n", out, d, o.Version)
	if archive != "" {
		if err := TarDir(out, archive, o.Epoch); err != nil {
			fail(err)
		}
		fmt.Printf("%s: the layout as a tar archive\n", archive)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "image:", err)
	os.Exit(1)
}

func envEpoch() int64 {
	n, _ := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64) // absent or malformed: 0
	return n
}

// Build returns the image index: one image per architecture in Options.Binaries,
// arm64 first.
func Build(o Options) (v1.ImageIndex, error) {
	if o.Version == "" {
		return nil, errors.New("-version is required (the Makefile passes VERSION)")
	}
	cfg, err := os.ReadFile(o.Config)
	if err != nil {
		return nil, fmt.Errorf("-config: %w (the default configuration: deploy/vig.yaml)", err)
	}
	certs, err := os.ReadFile(o.Certs)
	if err != nil {
		return nil, fmt.Errorf("-certs: %w (on Debian: apt-get install -y ca-certificates)", err)
	}
	if !bytes.Contains(certs, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("-certs %s holds no PEM certificate", o.Certs)
	}
	base, err := layer(o.Epoch, baseFiles(cfg, certs))
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "vig",
		"org.opencontainers.image.description": "vig, an inference governor in front of Triton: freshness scheduling of sensor streams",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.source":      "https://github.com/vig-edge/vig",
		"org.opencontainers.image.created":     o.Epoch.Format(time.RFC3339),
	}
	if o.Revision != "" {
		labels["org.opencontainers.image.revision"] = o.Revision
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range []string{"arm64", "amd64"} {
		path := o.Binaries[arch]
		if path == "" {
			return nil, fmt.Errorf("-%s is required: the static linux/%s vig binary (make release builds it in dist/)", arch, arch)
		}
		bin, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("-%s: %w", arch, err)
		}
		if err := checkELF(bin, arch); err != nil {
			return nil, fmt.Errorf("-%s %s: %w", arch, path, err)
		}
		binLayer, err := layer(o.Epoch, []file{
			{name: "usr/", mode: 0o755, dir: true},
			{name: "usr/local/", mode: 0o755, dir: true},
			{name: "usr/local/bin/", mode: 0o755, dir: true},
			{name: BinaryPath[1:], mode: 0o755, data: bin},
		})
		if err != nil {
			return nil, err
		}
		img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		img, err = mutate.Append(img,
			mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: o.Epoch}, CreatedBy: "vig build/image: CA certificates, user vig, " + ConfigPath}},
			mutate.Addendum{Layer: binLayer, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: o.Epoch}, CreatedBy: "vig build/image: " + BinaryPath + " (static, linux/" + arch + ")"}})
		if err != nil {
			return nil, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture = "linux", arch
		cf.Created = v1.Time{Time: o.Epoch}
		cf.Config = v1.Config{
			User:       strconv.Itoa(UID) + ":" + strconv.Itoa(GID),
			Entrypoint: []string{BinaryPath},
			Cmd:        []string{"serve", "-c", ConfigPath},
			WorkingDir: "/var/lib/vig",
			Env:        []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + CertsPath},
			// 9001: Triton-protocol gRPC; 9090: Prometheus metrics.
			ExposedPorts: map[string]struct{}{"9001/tcp": {}, "9090/tcp": {}},
			Labels:       labels,
			StopSignal:   "SIGTERM", // vig drains: answers every accepted request, then exits 0
		}
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: plainImage{img},
			Descriptor: v1.Descriptor{
				MediaType: types.OCIManifestSchema1,
				Platform:  &v1.Platform{OS: "linux", Architecture: arch},
			},
		})
	}
	anns := map[string]string{}
	for _, k := range []string{"org.opencontainers.image.version", "org.opencontainers.image.source", "org.opencontainers.image.created", "org.opencontainers.image.revision"} {
		if v, ok := labels[k]; ok {
			anns[k] = v
		}
	}
	return mutate.Annotations(idx, anns).(v1.ImageIndex), nil
}

// plainImage is an image whose descriptor carries no artifactType: it is an
// image, not an OCI 1.1 artifact, and the index then reads the same to runtimes
// that predate the field.
type plainImage struct{ v1.Image }

func (plainImage) ArtifactType() (string, error) { return "", nil }

// WriteLayout writes idx as an OCI image layout at dir: index.json names the
// index as tag, and each architecture's image as tag-linux-ARCH too, for tools
// that unpack one image (umoci).
func WriteLayout(dir, tag string, idx v1.ImageIndex) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{RefAnnotation: tag})); err != nil {
		return err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range im.Manifests {
		d.Annotations = map[string]string{RefAnnotation: tag + "-linux-" + d.Platform.Architecture}
		if err := p.AppendDescriptor(d); err != nil {
			return err
		}
	}
	return nil
}

// file is one entry of a layer.
type file struct {
	name     string // relative, "/"-separated; a directory's ends in "/"
	mode     int64
	uid, gid int
	dir      bool
	data     []byte
}

func baseFiles(cfg, certs []byte) []file {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nvig:x:%d:%d:vig:/var/lib/vig:/sbin/nologin\n", UID, GID)
	group := fmt.Sprintf("root:x:0:\nvig:x:%d:\n", GID)
	return []file{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: CertsPath[1:], mode: 0o644, data: certs},
		{name: "etc/vig/", mode: 0o755, dir: true},
		{name: ConfigPath[1:], mode: 0o644, data: cfg},
		// A writable /tmp for a container run without a tmpfs there (a Unix
		// socket, a profile); the Helm chart mounts an emptyDir over it.
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "var/", mode: 0o755, dir: true},
		{name: "var/lib/", mode: 0o755, dir: true},
		{name: "var/lib/vig/", mode: 0o700, uid: UID, gid: GID, dir: true},
	}
}

// layer makes a gzipped OCI layer of files, in the given order, all stamped
// with t.
func layer(t time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: t, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if f.uid == UID {
			h.Uname, h.Gname = "vig", "vig"
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// checkELF refuses what is not a static ELF executable for arch: the image has
// no dynamic loader or C library.
func checkELF(b []byte, arch string) error {
	machine := map[string]uint16{"amd64": 62, "arm64": 183}[arch]
	if len(b) < 20 || string(b[:4]) != "\x7fELF" || b[4] != 2 || b[5] != 1 {
		return errors.New("not a 64-bit little-endian ELF file")
	}
	if got := uint16(b[18]) | uint16(b[19])<<8; got != machine {
		return fmt.Errorf("ELF machine %d, want %d (linux/%s): build with GOOS=linux GOARCH=%s", got, machine, arch, arch)
	}
	if bytes.Contains(b, []byte("/lib/ld-linux")) || bytes.Contains(b, []byte("/lib64/ld-linux")) {
		return errors.New("dynamically linked: build with CGO_ENABLED=0 (the image has no C library)")
	}
	return nil
}

// TarDir writes the files under dir to a tar archive at out, in name order,
// stamped with t.
func TarDir(dir, out string, t time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		names = append(names, p)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, p := range names {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: t, Format: tar.FormatPAX}
		if fi.IsDir() {
			h.Name += "/"
			h.Mode, h.Typeflag = 0o755, tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if _, err := tw.Write(b); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
