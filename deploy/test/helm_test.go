package test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/vig-edge/vig/agent/config"
)

var (
	deploy = filepath.Join("..")
	chart  = filepath.Join(deploy, "helm", "vig")
	plain  = filepath.Join(deploy, "kubernetes", "vig.yaml")
)

// helm returns the helm binary, or skips the test saying how to install it.
func helm(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		if p := filepath.Join(home, "go", "bin", "helm"); fileExists(p) {
			return p
		}
	}
	t.Skip("helm is not installed: go install helm.sh/helm/v4/cmd/helm@v4.3.2 (.ci/run does)")
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// template renders the chart with the given --set values.
func template(t *testing.T, set ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", "vig", chart, "--namespace", "vig", "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(helm(t), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm %s: %v: %s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}

// objects are the rendered manifests, decoded strictly.
type objects struct {
	daemonSets     []appsv1.DaemonSet
	configMaps     []corev1.ConfigMap
	services       []corev1.Service
	serviceMonitor []monitoringv1.ServiceMonitor
}

// decode splits a YAML stream into documents and decodes each into its
// Kubernetes API type, refusing unknown fields and unknown kinds.
func decode(t *testing.T, stream []byte) objects {
	t.Helper()
	var o objects
	for i, doc := range bytes.Split(stream, []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var err error
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 DaemonSet":
			var x appsv1.DaemonSet
			err = yaml.UnmarshalStrict(doc, &x)
			o.daemonSets = append(o.daemonSets, x)
		case "v1 ConfigMap":
			var x corev1.ConfigMap
			err = yaml.UnmarshalStrict(doc, &x)
			o.configMaps = append(o.configMaps, x)
		case "v1 Service":
			var x corev1.Service
			err = yaml.UnmarshalStrict(doc, &x)
			o.services = append(o.services, x)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			var x monitoringv1.ServiceMonitor
			err = yaml.UnmarshalStrict(doc, &x)
			o.serviceMonitor = append(o.serviceMonitor, x)
		default:
			t.Fatalf("document %d: %s %s: a kind this test does not know; add its API type to decode", i, head.APIVersion, head.Kind)
		}
		if err != nil {
			t.Fatalf("document %d (%s) does not decode strictly: %v\n%s", i, head.Kind, err, doc)
		}
	}
	return o
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

func TestHelmLint(t *testing.T) {
	out, err := exec.Command(helm(t), "lint", "--strict", chart).CombinedOutput()
	if err != nil {
		t.Fatalf("helm lint --strict: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("0 chart(s) failed")) {
		t.Errorf("helm lint said:\n%s", out)
	}
}

// Each way of deploying renders manifests that decode into the Kubernetes types
// and hold together: vig's configuration parses, the probes and the Service use
// the ports vig listens on, and the security context is as strict as
// vig.service.
func TestRenderedManifests(t *testing.T) {
	for _, tc := range []struct {
		name        string
		set         []string
		node        map[string]string
		hostNetwork bool
		shm         string
		profiler    bool
	}{
		{"default: Jetsons, host network and IPC", nil, map[string]string{"kubernetes.io/arch": "arm64", "nvidia.com/gpu.present": "true"}, true, "host", false},
		{"any node", []string{"nodes=any"}, map[string]string{"kubernetes.io/os": "linux"}, true, "host", false},
		{"Triton in the pod, memory-backed /dev/shm", []string{"hostNetwork=false", "shm.mode=memory"}, map[string]string{"kubernetes.io/arch": "arm64", "nvidia.com/gpu.present": "true"}, false, "memory", false},
		{"eBPF profiler", []string{"profiler.enabled=true", "metrics.port=9100", "probe.port=9102"}, map[string]string{"kubernetes.io/arch": "arm64", "nvidia.com/gpu.present": "true"}, true, "host", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := template(t, tc.set...)
			if err != nil {
				t.Fatal(err)
			}
			o := decode(t, out)
			if len(o.daemonSets) != 1 || len(o.configMaps) != 1 || len(o.services) != 1 || len(o.serviceMonitor) != 1 {
				t.Fatalf("rendered %d DaemonSets, %d ConfigMaps, %d Services, %d ServiceMonitors; want one each",
					len(o.daemonSets), len(o.configMaps), len(o.services), len(o.serviceMonitor))
			}
			checkObjects(t, o, tc.node, tc.hostNetwork, tc.shm, tc.profiler)
		})
	}
}

func checkObjects(t *testing.T, o objects, node map[string]string, hostNetwork bool, shm string, profiler bool) {
	t.Helper()
	ds, cm, svc, sm := o.daemonSets[0], o.configMaps[0], o.services[0], o.serviceMonitor[0]
	pod := ds.Spec.Template.Spec
	if fmt.Sprint(pod.NodeSelector) != fmt.Sprint(node) {
		t.Errorf("nodeSelector %v, want %v", pod.NodeSelector, node)
	}
	if pod.HostNetwork != hostNetwork || pod.HostIPC != (shm == "host") {
		t.Errorf("hostNetwork %v, hostIPC %v; want %v, %v", pod.HostNetwork, pod.HostIPC, hostNetwork, shm == "host")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token: vig calls no Kubernetes API")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want vig alone", len(pod.Containers))
	}
	c := pod.Containers[0]

	// vig's configuration, as vig parses it.
	text, ok := cm.Data["vig.yaml"]
	if !ok {
		t.Fatalf("ConfigMap %s has no vig.yaml", cm.Name)
	}
	cfg, err := config.Parse("vig.yaml", []byte(text))
	if err != nil {
		t.Fatalf("vig refuses the chart's configuration: %v\n%s", err, text)
	}
	var mounted bool
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			for _, m := range c.VolumeMounts {
				mounted = mounted || (m.Name == v.Name && m.MountPath == "/etc/vig")
			}
		}
	}
	if !mounted || !slices.Equal(c.Args[:3], []string{"serve", "-c", "/etc/vig/vig.yaml"}) {
		t.Errorf("vig runs %q; want serve -c /etc/vig/vig.yaml with ConfigMap %s mounted at /etc/vig", c.Args, cm.Name)
	}

	// Ports: the metrics port vig listens on is the container's, the Service's
	// and the liveness probe's; the readiness probe calls listen.http.
	metricsPort := port(t, "listen.metrics", cfg.Listen.Metrics)
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || int(c.Ports[0].ContainerPort) != metricsPort {
		t.Errorf("container ports %v, want metrics %d", c.Ports, metricsPort)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "metrics" || svc.Spec.ClusterIP != "None" {
		t.Errorf("Service %v: want one headless port targeting metrics", svc.Spec)
	}
	for k, v := range svc.Spec.Selector {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("Service selects %s=%s, which the pods lack", k, v)
		}
	}
	live, ready := c.LivenessProbe, c.ReadinessProbe
	if live == nil || live.HTTPGet == nil || live.HTTPGet.Path != "/metrics" || live.HTTPGet.Port.String() != "metrics" {
		t.Errorf("liveness probe %+v, want GET /metrics on the metrics port", live)
	}
	httpHost, httpPort := hostPort(t, "listen.http", cfg.Listen.HTTP)
	if ready == nil || ready.HTTPGet == nil || ready.HTTPGet.Path != "/v2/health/ready" || ready.HTTPGet.Port.IntValue() != httpPort {
		t.Errorf("readiness probe %+v, want GET /v2/health/ready on listen.http's port %d", ready, httpPort)
	} else if want := map[bool]string{true: "127.0.0.1", false: ""}[hostNetwork]; ready.HTTPGet.Host != want || (hostNetwork && httpHost != "127.0.0.1") {
		t.Errorf("readiness probe host %q and listen.http %s with hostNetwork %v: the kubelet must reach it", ready.HTTPGet.Host, cfg.Listen.HTTP, hostNetwork)
	}
	if !config.Loopback(cfg.Listen.GRPC) {
		t.Errorf("listen.grpc %s is not loopback: the inference port is for the node's sensors", cfg.Listen.GRPC)
	}

	// Security: vig.service's rules.
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || sc == nil {
		t.Fatal("no security context")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Privileged == nil || *sc.Privileged || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security context %+v, pod %+v: want no privilege escalation, a read-only root, RuntimeDefault seccomp", sc, psc)
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities %+v: want every one dropped", sc.Capabilities)
	}
	wantAdd := []corev1.Capability(nil)
	if profiler {
		wantAdd = []corev1.Capability{"BPF", "PERFMON"}
		if psc.RunAsUser == nil || *psc.RunAsUser != 0 || !slices.Contains(c.Args, "--profile") {
			t.Errorf("profiler: runAsUser %v, args %q; want uid 0 (the only way a container process holds the two capabilities) and --profile", psc.RunAsUser, c.Args)
		}
	} else if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
		t.Errorf("pod security context %+v: want non-root uid 65532 (the image's user vig)", psc)
	}
	if sc.Capabilities != nil && !slices.Equal(sc.Capabilities.Add, wantAdd) {
		t.Errorf("capabilities added %v, want %v", sc.Capabilities.Add, wantAdd)
	}

	// Shared memory and writable paths.
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	if v, ok := vols[mounts["/tmp"]]; !ok || v.EmptyDir == nil {
		t.Error("no emptyDir at /tmp under a read-only root")
	}
	shmVol, hasShm := vols[mounts["/dev/shm"]]
	switch shm {
	case "memory":
		if !hasShm || shmVol.EmptyDir == nil || shmVol.EmptyDir.Medium != corev1.StorageMediumMemory || shmVol.EmptyDir.SizeLimit == nil {
			t.Errorf("shm.mode memory: /dev/shm is %+v, want a memory-backed emptyDir with a size limit", shmVol)
		}
	case "host":
		if hasShm {
			t.Errorf("shm.mode host: a volume %+v hides the node's /dev/shm", shmVol)
		}
	}

	// Resources: a request to schedule by and a memory limit above vig's own
	// soft limit.
	req, lim := c.Resources.Requests, c.Resources.Limits
	if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() {
		t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
	}
	if soft := cfg.CPU.GC.MemoryLimitMiB; soft == nil || int64(*soft)<<20 >= lim.Memory().Value() {
		t.Errorf("cpu.gc.memory_limit_mib %v is not below the container's memory limit %s", soft, lim.Memory())
	}

	// The ServiceMonitor scrapes the Service's metrics port, job "vig".
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name || sm.Spec.JobLabel != "app.kubernetes.io/name" || svc.Labels[sm.Spec.JobLabel] != "vig" {
		t.Errorf("ServiceMonitor %+v does not scrape Service %s's port %s as job vig", sm.Spec, svc.Name, svc.Spec.Ports[0].Name)
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, which Service %s lacks", k, v, svc.Name)
		}
	}
}

func hostPort(t *testing.T, key, addr string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", key, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s %q: %v", key, addr, err)
	}
	return h, n
}

func port(t *testing.T, key, addr string) int {
	_, p := hostPort(t, key, addr)
	return p
}

// Values that cannot work are refused with the fix.
func TestBadValuesRefused(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"nodes=moon", `nodes: "moon" is not a key of nodeSelectors (any, jetson)`},
		{"shm.mode=disk", `shm.mode: "disk"; want host`},
		{"config.listen.grpc=0.0.0.0:9001", "config.listen: set the listen addresses with values listen"},
	} {
		_, err := template(t, tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: %v, want an error containing %q", tc.set, err, tc.want)
		}
	}
}

// deploy/kubernetes/vig.yaml is the chart rendered with its defaults, for users
// without Helm: it must be what the chart renders now, and decode like it.
func TestPlainManifests(t *testing.T) {
	want, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(helm(t), "template", "vig", chart, "--namespace", "vig")
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v: %s", err, stderr.Bytes())
	}
	// The file is a header of comment lines, then the rendering.
	body := want
	for bytes.HasPrefix(body, []byte("#")) {
		_, body, _ = bytes.Cut(body, []byte("\n"))
	}
	if !bytes.Equal(body, got) {
		t.Fatalf("%s is not the chart's rendering: regenerate it with the command at its top", plain)
	}
	o := decode(t, body)
	if len(o.daemonSets) != 1 || len(o.configMaps) != 1 || len(o.services) != 1 || len(o.serviceMonitor) != 0 {
		t.Fatalf("plain manifests hold %d DaemonSets, %d ConfigMaps, %d Services, %d ServiceMonitors; want 1, 1, 1 and none (users without Helm rarely run the Prometheus Operator)",
			len(o.daemonSets), len(o.configMaps), len(o.services), len(o.serviceMonitor))
	}
	if _, err := config.Parse("vig.yaml", []byte(o.configMaps[0].Data["vig.yaml"])); err != nil {
		t.Errorf("vig refuses the plain manifests' configuration: %v", err)
	}
}
