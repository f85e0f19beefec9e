// Command sizereport says what a Go binary's bytes are made of: the symbol bytes
// each package and each module contributes to the file (text, read-only data,
// data; BSS takes no room in the file and is left out). make release runs it on an
// unstripped copy of the release binary, since stripped ones have no symbols.
//
//	go run ./build/sizereport [-top 25] BINARY
package main

import (
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	top := flag.Int("top", 25, "list the `N` largest packages")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: sizereport [-top N] BINARY (an unstripped Go ELF binary)")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(os.Stdout, flag.Arg(0), *top); err != nil {
		fmt.Fprintln(os.Stderr, "sizereport:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, path string, top int) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return fmt.Errorf("%s: %w (stripped? build without -s -w for the report)", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	var sized []Symbol
	for _, s := range syms {
		if int(s.Section) <= 0 || int(s.Section) >= len(f.Sections) || f.Sections[s.Section].Type == elf.SHT_NOBITS {
			continue // undefined, absolute, or BSS: no bytes in the file
		}
		sized = append(sized, Symbol{Name: s.Name, Size: s.Size})
	}
	var pcln uint64
	if s := f.Section(".gopclntab"); s != nil {
		pcln = s.Size
	}
	pkgs := Aggregate(sized, PackageOf)
	mods := Aggregate(sized, func(n string) string { return ModuleOf(PackageOf(n)) })
	var total uint64
	for _, e := range pkgs {
		total += e.Size
	}
	fmt.Fprintf(w, "%s: %d bytes; symbols %d bytes, .gopclntab %d bytes (line tables, kept by -s -w)\n\n", path, fi.Size(), total, pcln)
	fmt.Fprintf(w, "by module:\n")
	for _, e := range mods {
		if e.Size*200 < total { // under 0.5 %
			break
		}
		fmt.Fprintf(w, "  %9d  %5.1f %%  %s\n", e.Size, 100*float64(e.Size)/float64(total), e.Name)
	}
	fmt.Fprintf(w, "\nlargest %d packages:\n", top)
	for i, e := range pkgs {
		if i == top {
			break
		}
		fmt.Fprintf(w, "  %9d  %5.1f %%  %s\n", e.Size, 100*float64(e.Size)/float64(total), e.Name)
	}
	return nil
}

// Symbol is a named run of bytes in the binary.
type Symbol struct {
	Name string
	Size uint64
}

// Entry is the bytes attributed to one name.
type Entry struct {
	Name string
	Size uint64
}

// Aggregate sums symbol sizes by key(name), largest first (ties by name).
func Aggregate(syms []Symbol, key func(string) string) []Entry {
	m := map[string]uint64{}
	for _, s := range syms {
		m[key(s.Name)] += s.Size
	}
	out := make([]Entry, 0, len(m))
	for k, v := range m {
		out = append(out, Entry{k, v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Size != out[j].Size {
			return out[i].Size > out[j].Size
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// PackageOf returns the import path a Go symbol belongs to:
// "github.com/a/b.(*T).M" → "github.com/a/b", "type:*net/http.Request" → "net/http",
// "sync/atomic.(*Pointer[go.shape.struct { x int }]).Load" → "sync/atomic".
// Linker-made symbols ("go:func.*", "runtime.text") keep a bracketed group name.
func PackageOf(name string) string {
	for _, p := range []string{"type:", "go:itab.", "go:info.", "go:cuinfo.", "gclocals·"} {
		if rest, ok := strings.CutPrefix(name, p); ok {
			if p == "type:" && (rest == "" || strings.HasPrefix(rest, ".")) {
				return "(type data)"
			}
			name = strings.TrimLeft(rest, "*[]")
			break
		}
	}
	if strings.HasPrefix(name, "go:") || strings.HasPrefix(name, "_") || name == "" {
		return "(linker: " + strings.SplitN(strings.TrimPrefix(name, "go:"), ".", 2)[0] + ")"
	}
	// Type arguments may contain anything: cut at the first '[' or '('.
	if i := strings.IndexAny(name, "[("); i >= 0 {
		name = name[:i]
	}
	slash := strings.LastIndexByte(name, '/')
	if dot := strings.IndexByte(name[slash+1:], '.'); dot >= 0 {
		name = name[:slash+1+dot]
	}
	name = strings.TrimSuffix(name, ".")
	if name == "" {
		return "(other)"
	}
	return name
}

// ModuleOf maps an import path to its module, roughly: the first three elements
// of a host-qualified path ("github.com/cilium/ebpf/asm" → "github.com/cilium/ebpf"),
// "std" for the standard library, group names unchanged.
func ModuleOf(pkg string) string {
	if strings.HasPrefix(pkg, "(") {
		return pkg
	}
	first, _, _ := strings.Cut(pkg, "/")
	if pkg == "main" {
		return "main"
	}
	if !strings.Contains(first, ".") {
		if first == "vendor" || strings.HasPrefix(pkg, "golang.org/") {
			return "std (vendored golang.org/x)"
		}
		return "std"
	}
	parts := strings.Split(pkg, "/")
	n := 3
	switch {
	case first == "google.golang.org" || first == "go.yaml.in" || first == "golang.org":
		n = 2
		if first == "golang.org" {
			n = 3 // golang.org/x/sys
		}
	}
	if len(parts) > n && strings.HasPrefix(parts[n], "v") && len(parts[n]) <= 3 {
		n++ // major version suffix: github.com/coreos/go-systemd/v22
	}
	if len(parts) < n {
		n = len(parts)
	}
	return strings.Join(parts[:n], "/")
}
