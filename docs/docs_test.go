// Tests that hold vig's documentation to the tree: links resolve, the benchmark
// results kept are the ones the docs cite, and every metric vig exports is described.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository, seen from this directory.
const root = ".."

// pages are the Markdown files a user reads: the README, the top-level guides and docs/.
func pages(t *testing.T) []string {
	t.Helper()
	ps := []string{"README.md", "CONTRIBUTING.md", "SECURITY.md"}
	ds, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(ds) < 8 {
		t.Fatalf("docs/*.md: %v %v", ds, err)
	}
	for _, d := range ds {
		ps = append(ps, filepath.Join("docs", filepath.Base(d)))
	}
	return ps
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsLinks: every relative link of the README and the docs names a file or
// folder that exists (an anchor is not checked, the file is).
func TestDocsLinks(t *testing.T) {
	for _, p := range pages(t) {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(root, filepath.Dir(p), target)); err != nil {
				t.Errorf("%s links %s, which does not exist", p, m[1])
			}
		}
	}
}

// TestBenchResultsCited: bench/results keeps only what the docs (or a comment in
// the code) cite; git keeps the rest.
func TestBenchResultsCited(t *testing.T) {
	dirs, err := os.ReadDir(filepath.Join(root, "bench", "results"))
	if err != nil {
		t.Fatal(err)
	}
	var cited strings.Builder
	for _, p := range pages(t) {
		b, _ := os.ReadFile(filepath.Join(root, p))
		cited.Write(b)
	}
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == "results" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			b, _ := os.ReadFile(path)
			cited.Write(b)
		}
		return nil
	})
	for _, d := range dirs {
		name := regexp.MustCompile(`bench/results/` + regexp.QuoteMeta(d.Name()) + "([^A-Za-z0-9_.-]|$)")
		if d.IsDir() && d.Name() != "tmp" && !name.MatchString(cited.String()) {
			t.Errorf("bench/results/%s is cited by no doc or code comment: remove it (git keeps it) or cite it", d.Name())
		}
	}
}

// metricName matches a metric name written out in vig's code.
var metricName = regexp.MustCompile(`"(vig_[a-z0-9_]+)"`)

// notMetrics are vig_ strings of the code that name something else.
var notMetrics = []string{"vig_stream", "vig_capture_ns"}

// TestMetricsDocumented: docs/metrics.md describes every metric the code
// registers (names written out, and the per-protocol frontend families).
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	family := regexp.MustCompile(`"vig_" \+ proto \+ "(_[a-z_]+)"`)
	protos := regexp.MustCompile(`newFamily\("([a-z]+)"`)
	for _, dir := range []string{"agent", "jetson", "android", "cmd"} {
		filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range metricName.FindAllStringSubmatch(string(b), -1) {
				if !slices.Contains(notMetrics, m[1]) && !slices.Contains(names, m[1]) {
					names = append(names, m[1])
				}
			}
			for _, f := range family.FindAllStringSubmatch(string(b), -1) {
				for _, p := range protos.FindAllStringSubmatch(string(b), -1) {
					names = append(names, "vig_"+p[1]+f[1])
				}
			}
			return nil
		})
	}
	if len(names) < 40 {
		t.Fatalf("found only %d metric names in the code: %v", len(names), names)
	}
	for _, n := range names {
		if !strings.Contains(string(doc), "| `"+n+"` |") {
			t.Errorf("docs/metrics.md does not describe %s", n)
		}
	}
}
