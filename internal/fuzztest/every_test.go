package fuzztest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// unbounded lists the fuzz targets in src (a _test.go file's text) whose
// f.Fuzz callback does not start with `defer fuzztest.Bound(t)()` (or, inside
// this package, `defer Bound(t)()`).
func unbounded(fset *token.FileSet, name string, src []byte) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Fuzz") || fn.Recv != nil {
			continue
		}
		bounded, fuzzes := false, false
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Fuzz" || len(call.Args) != 1 {
				return true
			}
			lit, ok := call.Args[0].(*ast.FuncLit)
			if !ok {
				return true
			}
			fuzzes = true
			bounded = len(lit.Body.List) > 0 && isBoundDefer(lit.Body.List[0])
			return false
		})
		if fuzzes && !bounded {
			bad = append(bad, fn.Name.Name)
		}
	}
	return bad, nil
}

// isBoundDefer says whether s is `defer fuzztest.Bound(x)()` or `defer Bound(x)()`.
func isBoundDefer(s ast.Stmt) bool {
	d, ok := s.(*ast.DeferStmt)
	if !ok || len(d.Call.Args) != 0 {
		return false
	}
	inner, ok := d.Call.Fun.(*ast.CallExpr)
	if !ok {
		return false
	}
	switch fun := inner.Fun.(type) {
	case *ast.SelectorExpr:
		x, ok := fun.X.(*ast.Ident)
		return ok && x.Name == "fuzztest" && fun.Sel.Name == "Bound"
	case *ast.Ident:
		return fun.Name == "Bound"
	}
	return false
}

// Every fuzz target in the module starts each call with Bound, so that no
// parser of untrusted bytes can be slow on some input without the fuzzer naming it.
func TestEveryFuzzTargetIsBounded(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	targets := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		targets += strings.Count(string(src), "(f *testing.F)")
		bad, err := unbounded(fset, path, src)
		if err != nil {
			return err
		}
		for _, name := range bad {
			t.Errorf("%s: %s does not start its f.Fuzz callback with `defer fuzztest.Bound(t)()`", path, name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if targets < 30 {
		t.Fatalf("found %d fuzz targets under %s; the walk missed the module's", targets, root)
	}
}

// The check catches a target without the bound, and one that bounds too late.
func TestUnboundedFound(t *testing.T) {
	src := `package p
func FuzzGood(f *testing.F) { f.Fuzz(func(t *testing.T, b []byte) { defer fuzztest.Bound(t)(); parse(b) }) }
func FuzzNone(f *testing.F) { f.Fuzz(func(t *testing.T, b []byte) { parse(b) }) }
func FuzzLate(f *testing.F) { f.Fuzz(func(t *testing.T, b []byte) { parse(b); defer fuzztest.Bound(t)() }) }
func FuzzNoCall(f *testing.F) { f.Fuzz(func(t *testing.T, b []byte) { defer fuzztest.Bound(t) }) }
`
	bad, err := unbounded(token.NewFileSet(), "p_test.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(bad, ",") != "FuzzNone,FuzzLate,FuzzNoCall" {
		t.Fatalf("unbounded = %v, want FuzzNone, FuzzLate, FuzzNoCall", bad)
	}
}
