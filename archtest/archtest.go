// Package archtest enforces the layout rules of docs/architecture.md on the source tree:
// which packages may import which, and that every package has its doc comment.
//
// The rules are data (Rules); Check is a pure function from import data to
// violations; Load reads that data from a tree with go/parser, ignoring build
// constraints, so that a file built only for another OS or architecture is held
// to the same rules. The test of this package runs Check on vig's own tree and on
// a fixture tree (testdata/badtree) whose deliberate violations it must report.
package archtest

import (
	"bufio"
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Module is vig's module path; the rules name vig's packages under it.
const Module = "github.com/vig-edge/vig"

// File is one Go source file as the rules see it.
type File struct {
	Name    string   // base name
	Test    bool     // a _test.go file
	Imports []string // import paths, in source order
	Doc     bool     // it carries a package doc comment
}

// Package is one directory of Go files.
type Package struct {
	Path  string // import path
	Files []File
}

// Rule forbids packages matching From to import packages matching Forbid.
// Patterns are import paths; "p/..." matches p and every path below it.
type Rule struct {
	Name   string
	Why    string // the design rule, and what to do instead
	From   []string
	Forbid []string
	// Tests applies the rule to _test.go files too.
	Tests bool
	// Transitive also forbids a non-test file to reach a Forbid package
	// through vig's own packages (through their non-test files): a platform
	// package that imports android, which imports agent/config, depends on
	// agent/ all the same. Test files are held to their direct imports (a test
	// may use a fixture such as mockbackend that is built on the core).
	// Standard-library paths are never followed (fmt imports os).
	Transitive bool
}

// Rules are vig's layout rules (docs/architecture.md, issue 10).
var Rules = []Rule{
	{
		Name: "dependencies point down",
		Why: "shmring/, netopt/, platform/, proto/ and h2/ implement what agent/ needs and import nothing of it; " +
			"put the code that joins them to the core on the core's side (agent/gateway) or in cmd/vig",
		From:       []string{Module + "/shmring/...", Module + "/netopt/...", Module + "/platform/...", Module + "/proto/...", Module + "/h2/..."},
		Forbid:     []string{Module + "/agent/..."},
		Tests:      true,
		Transitive: true,
	},
	{
		Name: "the scheduler is pure",
		Why: "agent/sched is a state machine driven by events and an injected clock: no sockets, files or syscalls, " +
			"and no knowledge of the transport; pass what it needs in as values or small interfaces",
		From: []string{Module + "/agent/sched/..."},
		Forbid: []string{"net/...", "os/...", "syscall", Module + "/platform/...", Module + "/netopt/...",
			Module + "/shmring/...", Module + "/agent/gateway/..."},
		Tests: true,
	},
	{
		Name: "the core makes no syscalls",
		Why: "agent/ talks to the OS through interfaces that platform/, netopt/ and shmring/ implement; " +
			"move the system call there and hand agent/ a function or an interface",
		From:   []string{Module + "/agent/..."},
		Forbid: []string{"syscall", "os/exec", "unsafe", "golang.org/x/sys/..."},
	},
}

// Match reports whether importPath matches pattern ("p" or "p/...").
func Match(pattern, importPath string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return importPath == base || strings.HasPrefix(importPath, base+"/")
	}
	return importPath == pattern
}

func matchAny(patterns []string, importPath string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return Match(p, importPath) })
}

// Allow exempts one package from one rule, for a violation that is known and
// being removed.
type Allow struct {
	Rule    string
	Package string // import path
	Why     string // what removes it, and where that is tracked
}

// Violation is one broken rule.
type Violation struct {
	Rule    string
	Package string
	File    string   // the file that imports (empty for a missing doc comment)
	Import  string   // the import that breaks the rule
	Via     []string // for a transitive violation: the chain after Import, ending at the forbidden package
	Why     string
	Allowed bool // exempted by an Allow entry
}

func (v Violation) String() string {
	if v.Rule == DocRule {
		return fmt.Sprintf("%s: no package doc comment (%s)", v.Package, v.Why)
	}
	s := fmt.Sprintf("%s (%s) imports %s", v.Package, v.File, v.Import)
	if len(v.Via) > 0 {
		s += ", which reaches " + strings.Join(v.Via, " → ")
	}
	return fmt.Sprintf("%s: %s [%s]", s, v.Why, v.Rule)
}

// DocRule names the doc-comment check among the violations.
const DocRule = "every package has its doc comment"

// Check applies rules to pkgs and the doc-comment rule to every package with
// non-test files. Violations of an allowed (rule, package) are returned with
// Allowed set; unused lists the Allow entries that matched nothing, so that a
// fixed violation does not stay exempt. The result is sorted.
func Check(pkgs []Package, rules []Rule, allow []Allow) (vs []Violation, unused []Allow) {
	byPath := map[string]*Package{}
	for i := range pkgs {
		byPath[pkgs[i].Path] = &pkgs[i]
	}
	// reach returns a chain of vig's packages from p (through non-test
	// imports) to a package matching forbid, or nil.
	memo := map[string][]string{}
	var reach func(p string, forbid []string, seen map[string]bool) []string
	reach = func(p string, forbid []string, seen map[string]bool) []string {
		if matchAny(forbid, p) {
			return []string{p}
		}
		pkg := byPath[p]
		if pkg == nil || seen[p] {
			return nil
		}
		if c, ok := memo[p]; ok {
			return c
		}
		seen[p] = true
		var chain []string
		for _, f := range pkg.Files {
			if f.Test {
				continue
			}
			for _, imp := range f.Imports {
				if c := reach(imp, forbid, seen); c != nil {
					chain = append([]string{p}, c...)
					break
				}
			}
			if chain != nil {
				break
			}
		}
		memo[p] = chain
		return chain
	}
	for _, r := range rules {
		clear(memo) // the memo holds chains for one rule's Forbid
		for _, pkg := range pkgs {
			if !matchAny(r.From, pkg.Path) {
				continue
			}
			for _, f := range pkg.Files {
				if f.Test && !r.Tests {
					continue
				}
				for _, imp := range f.Imports {
					v := Violation{Rule: r.Name, Package: pkg.Path, File: f.Name, Import: imp, Why: r.Why}
					switch {
					case matchAny(r.Forbid, imp):
					case r.Transitive && !f.Test && imp != pkg.Path:
						chain := reach(imp, r.Forbid, map[string]bool{pkg.Path: true})
						if chain == nil {
							continue
						}
						v.Via = chain[1:]
					default:
						continue
					}
					vs = append(vs, v)
				}
			}
		}
	}
	for _, pkg := range pkgs {
		hasCode, hasDoc := false, false
		for _, f := range pkg.Files {
			if !f.Test {
				hasCode = true
				hasDoc = hasDoc || f.Doc
			}
		}
		if hasCode && !hasDoc {
			vs = append(vs, Violation{Rule: DocRule, Package: pkg.Path,
				Why: "write one `// Package " + path.Base(pkg.Path) + " …` comment above the package clause of one non-test file (doc.go when there is a lot to say)"})
		}
	}
	used := make([]bool, len(allow))
	for i := range vs {
		for j, a := range allow {
			if a.Rule == vs[i].Rule && a.Package == vs[i].Package {
				vs[i].Allowed, used[j] = true, true
			}
		}
	}
	for j, a := range allow {
		if !used[j] {
			unused = append(unused, a)
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].String() < vs[j].String() })
	return vs, unused
}

// Load reads the Go packages of the module rooted at root (the directory of its
// go.mod), every file regardless of build constraints. It skips testdata,
// hidden and underscore directories, vendor, and nested modules.
func Load(root string) ([]Package, error) {
	mod, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	byDir := map[string]*Package{}
	var dirs []string
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p == root {
				return nil
			}
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return fmt.Errorf("archtest: %w", err)
		}
		file := File{Name: name, Test: strings.HasSuffix(name, "_test.go"), Doc: f.Doc != nil}
		for _, s := range f.Imports {
			imp, err := strconv.Unquote(s.Path.Value)
			if err != nil {
				return fmt.Errorf("archtest: %s: import %s: %w", p, s.Path.Value, err)
			}
			file.Imports = append(file.Imports, imp)
		}
		dir := filepath.Dir(p)
		pkg := byDir[dir]
		if pkg == nil {
			rel, err := filepath.Rel(root, dir)
			if err != nil {
				return err
			}
			ip := mod
			if rel != "." {
				ip = mod + "/" + filepath.ToSlash(rel)
			}
			pkg = &Package{Path: ip}
			byDir[dir] = pkg
			dirs = append(dirs, dir)
		}
		pkg.Files = append(pkg.Files, file)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(dirs)
	pkgs := make([]Package, 0, len(dirs))
	for _, d := range dirs {
		pkgs = append(pkgs, *byDir[d])
	}
	return pkgs, nil
}

// modulePath reads the module line of a go.mod file.
func modulePath(gomod string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", fmt.Errorf("archtest: %w (Load wants the directory of the module's go.mod)", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("archtest: %s has no module line", gomod)
}
