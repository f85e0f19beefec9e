package test

import (
	"bufio"
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
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

var (
	rulesFile     = filepath.Join(deploy, "prometheus", "vig-rules.yaml")
	rulesTestFile = filepath.Join(deploy, "prometheus", "vig-rules.test.yaml")
	dashboardFile = filepath.Join(deploy, "grafana", "vig-dashboard.json")
	alertsDoc     = filepath.Join(deploy, "..", "docs", "alerts.md")
)

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: apt-get install -y prometheus)")
	}
	return p
}

func TestPromtoolCheckRules(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "rules", rulesFile).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

func TestPromtoolTestRules(t *testing.T) {
	cmd := exec.Command(promtool(t), "test", "rules", filepath.Base(rulesTestFile))
	cmd.Dir = filepath.Dir(rulesTestFile)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Alert, Record, Expr, For string
			Labels, Annotations      map[string]string
		}
	}
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return f
}

// The alerts the fleet needs exist; each has a promtool test in which it fires
// and one in which it stays silent, and a runbook entry its runbook_url names.
func TestEveryAlertTestedAndDocumented(t *testing.T) {
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		}
	}
	b, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	doc, err := os.ReadFile(alertsDoc)
	if err != nil {
		t.Fatalf("the runbook: %v", err)
	}
	var alerts []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			if !fires[r.Alert] || !silent[r.Alert] {
				t.Errorf("%s: tested firing %v, tested silent %v; want both in %s", r.Alert, fires[r.Alert], silent[r.Alert], rulesTestFile)
			}
			if r.Labels["severity"] == "" {
				t.Errorf("%s has no severity label", r.Alert)
			}
			anchor := strings.ToLower(r.Alert)
			if want := "https://github.com/vig-edge/vig/blob/main/docs/alerts.md#" + anchor; r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !regexp.MustCompile(`(?m)^## ` + r.Alert + `$`).Match(doc) {
				t.Errorf("%s has no runbook entry (a heading \"## %s\") in docs/alerts.md", r.Alert, r.Alert)
			}
		}
	}
	for _, want := range []string{"VigProtectedCoverageLow", "VigBackendDown", "VigFramesAnsweredLate", "VigRestarting"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s in %s", want, rulesFile)
		}
	}
}

// dashboard is the part of Grafana's dashboard model this test reads.
type dashboard struct {
	Title      string
	UID        string
	Templating struct {
		List []struct {
			Name, Type string
			Definition string
		}
	}
	Panels []struct {
		ID         int
		Type       string
		Title      string
		Datasource struct{ Type, UID string }
		GridPos    struct{ H, W, X, Y int }
		Targets    []struct {
			Expr  string
			RefID string
		}
	}
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// grafanaVars stand in for the dashboard's variables so that its queries parse
// as PromQL: every job, instance and stream.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$job", ".*", "$instance", ".*", "$stream", ".*")

var labelValues = regexp.MustCompile(`^label_values\((.*), *\w+\)$`)

// queries returns every PromQL expression of the dashboard (panels and the
// selectors of its label_values variables), by where it is.
func (d dashboard) queries(t *testing.T) map[string]string {
	t.Helper()
	q := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Fatalf("variable %s: %q is not label_values(SELECTOR, LABEL)", v.Name, v.Definition)
		}
		q["variable "+v.Name] = grafanaVars.Replace(m[1])
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			q[fmt.Sprintf("panel %q %s", p.Title, tg.RefID)] = grafanaVars.Replace(tg.Expr)
		}
	}
	return q
}

// An importable dashboard: its panels have unique ids, fit the grid, query the
// datasource variable and hold queries that parse; it shows what an operator of
// a fleet looks at.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: Grafana needs both to import and link the dashboard", d.Title, d.UID)
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q at %+v: outside Grafana's 24-column grid", p.Title, g)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v, %d queries; want ${datasource} and at least one query", p.Title, p.Datasource, len(p.Targets))
		}
	}
	named := map[string]bool{}
	for where, q := range d.queries(t) {
		for _, s := range selectors(t, where, q) {
			named[s.Name] = true
		}
	}
	for what, metric := range map[string]string{
		"coverage per stream": "vig_stream_coverage_ratio", "AoI per stream": "vig_stream_aoi_seconds",
		"outcomes": "vig_stream_requests_total", "slot busy per accelerator": "vig_accelerator_busy_seconds_total",
		"queue depth": "vig_stream_in_flight", "backend health": "vig_scheduler_backend_down",
		"vig's CPU": "process_cpu_seconds_total", "vig's memory": "process_resident_memory_bytes",
	} {
		if !named[metric] {
			t.Errorf("the dashboard shows no %s (%s)", what, metric)
		}
	}
}

// selectors parses a PromQL expression and returns its series selectors.
func selectors(t *testing.T, where, expr string) []*parser.VectorSelector {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Fatalf("%s: %q does not parse: %v", where, expr, err)
	}
	var out []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	if len(out) == 0 {
		t.Errorf("%s: %q selects no series", where, expr)
	}
	return out
}

// Every series the dashboard and the alert rules select exists in a running
// vig's /metrics: a vig serving scenario-B-like streams on its embedded mock
// backend, after a few requests of each stream. A selector matches when some
// scraped series has its name and satisfies its label matchers (job and
// instance, which Prometheus adds, aside).
func TestNamedMetricsExist(t *testing.T) {
	fams := scrapeRunningVig(t)
	queries := readDashboard(t).queries(t)
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			queries["alert "+r.Alert] = r.Expr
		}
	}
	var names []string
	seen := map[string]bool{}
	for where, q := range queries {
		for _, s := range selectors(t, where, q) {
			if !matchesScrape(s, fams) {
				t.Errorf("%s selects %s, which vig's /metrics does not have", where, s)
			}
			if !seen[s.Name] {
				seen[s.Name] = true
				names = append(names, s.Name)
			}
		}
	}
	sort.Strings(names)
	t.Logf("%d metrics named by the dashboard and the rules, each found in a scrape of %d families: %s", len(names), len(fams), strings.Join(names, " "))
}

func matchesScrape(s *parser.VectorSelector, fams map[string]*dto.MetricFamily) bool {
	name := s.Name
	f := fams[name]
	if f == nil {
		// A histogram's _bucket, _sum and _count series belong to its family.
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && fams[base] != nil && fams[base].GetType() == dto.MetricType_HISTOGRAM {
				f = fams[base]
			}
		}
	}
	if f == nil {
		return false
	}
	for _, m := range f.Metric {
		values := map[string]string{}
		for _, lp := range m.Label {
			values[lp.GetName()] = lp.GetValue()
		}
		if f.GetType() == dto.MetricType_HISTOGRAM && strings.HasSuffix(name, "_bucket") {
			values["le"] = "+Inf"
		}
		if all(s.LabelMatchers, func(lm *labels.Matcher) bool {
			switch lm.Name {
			case labels.MetricName, "job", "instance":
				return true
			}
			return lm.Matches(values[lm.Name])
		}) {
			return true
		}
	}
	return false
}

func all[T any](xs []T, f func(T) bool) bool {
	for _, x := range xs {
		if !f(x) {
			return false
		}
	}
	return true
}

// scrapeRunningVig builds vig, serves three streams (protected, high,
// best-effort) on the embedded mock backend, sends each a few requests over
// HTTP/REST and returns one scrape of /metrics.
func scrapeRunningVig(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "vig")
	build := exec.Command(goTool(), "build", "-tags", "grpcnotrace", "-o", bin, "./cmd/vig")
	build.Dir = filepath.Join(deploy, "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/vig: %v\n%s", err, out)
	}
	cfg := `listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", metrics: "127.0.0.1:0"}
backend: {address: "unix:` + filepath.Join(tmp, "mock.sock") + `", slots: 1, embedded: true, seed: 1}
models:
  detector: {exec_ms: 2}
  pose: {exec_ms: 2}
  vlm: {exec_ms: 5, corun: false}
streams:
  - {name: detector, model: detector, class: protected, period_ms: 50, max_age_ms: 50}
  - {name: pose, model: pose, class: high, period_ms: 33, max_age_ms: 66}
  - {name: vlm, model: vlm, class: best_effort, period_ms: 1000, max_age_ms: 2000}
`
	cfgPath := filepath.Join(tmp, "vig.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vig := exec.CommandContext(ctx, bin, "serve", "-c", cfgPath)
	stderr, err := vig.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := vig.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	addrs := make(chan [2]string, 1)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		serving := regexp.MustCompile(`msg="vig serving".* http=(\S+) .*metrics=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				addrs <- [2]string{m[1], m[2]}
			}
		}
	}()
	defer func() {
		vig.Process.Signal(syscall.SIGTERM)
		<-logDone
		if err := vig.Wait(); err != nil {
			t.Errorf("vig serve: %v\n%s", err, log.String())
		}
	}()
	var a [2]string
	select {
	case a = <-addrs:
	case <-ctx.Done():
		t.Fatalf("vig did not start serving:\n%s", log.String())
	}
	client := &http.Client{Timeout: 30 * time.Second}
	// Three answered requests per stream; one that vig answers otherwise (a
	// frame it predicts cannot be fresh in time on a loaded machine) is
	// counted too, and another is sent.
	for _, stream := range []string{"detector", "pose", "vlm"} {
		ok := 0
		var last string
		for i := 0; i < 20 && ok < 3; i++ {
			body := fmt.Sprintf(`{"id":"%s#%d","parameters":{"vig_stream":"%s"},"inputs":[{"name":"INPUT0","datatype":"UINT8","shape":[4],"data":[1,2,3,4]}]}`, stream, i, stream)
			resp, err := client.Post("http://"+a[0]+"/v2/models/"+stream+"/infer", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok++
			} else {
				last = fmt.Sprintf("HTTP %d %s", resp.StatusCode, b)
			}
		}
		if ok == 0 {
			t.Fatalf("%s: no request answered 200 of 20; the last: %s", stream, last)
		}
	}
	// A stream's coverage gauge exists once one of its windows has ended:
	// wait out the longest contracted period (pose 33 ms, detector 50 ms).
	time.Sleep(100 * time.Millisecond)
	resp, err := client.Get("http://" + a[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing vig's /metrics: %v", err)
	}
	return fams
}

func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}
