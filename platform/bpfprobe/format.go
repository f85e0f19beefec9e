package bpfprobe

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Field is one field of a tracepoint record.
type Field struct {
	Name   string
	Type   string // the C declaration without the name, e.g. "unsigned long"
	Offset int
	Size   int
	Signed bool
}

// Format is a parsed tracefs events/<group>/<name>/format file.
type Format struct {
	Name   string
	ID     uint32
	Fields []Field
}

// ErrFormat is wrapped by errors about a malformed or unexpected format file.
var ErrFormat = errors.New("tracepoint format")

// ParseFormat parses a tracepoint format file, e.g.
//
//	name: sys_enter
//	ID: 443
//	format:
//		field:unsigned short common_type;	offset:0;	size:2;	signed:0;
//		field:long id;	offset:8;	size:8;	signed:1;
func ParseFormat(b []byte) (*Format, error) {
	f := &Format{}
	var haveID bool
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		s := strings.TrimSpace(string(line))
		switch {
		case strings.HasPrefix(s, "name:"):
			f.Name = strings.TrimSpace(s[len("name:"):])
		case strings.HasPrefix(s, "ID:"):
			id, err := strconv.ParseUint(strings.TrimSpace(s[len("ID:"):]), 10, 32)
			if err != nil {
				return nil, fmt.Errorf("%w: bad ID line %q", ErrFormat, s)
			}
			f.ID, haveID = uint32(id), true
		case strings.HasPrefix(s, "field:"):
			fl, err := parseField(s)
			if err != nil {
				return nil, err
			}
			f.Fields = append(f.Fields, fl)
		}
	}
	if !haveID || f.Name == "" || len(f.Fields) == 0 {
		return nil, fmt.Errorf("%w: missing name, ID or fields", ErrFormat)
	}
	return f, nil
}

// parseField parses "field:<decl>;\toffset:N;\tsize:N;\tsigned:N;".
func parseField(s string) (Field, error) {
	var fl Field
	parts := strings.Split(s, ";")
	bad := func() (Field, error) { return Field{}, fmt.Errorf("%w: bad field line %q", ErrFormat, s) }
	if len(parts) < 3 {
		return bad()
	}
	decl := strings.TrimSpace(strings.TrimPrefix(parts[0], "field:"))
	if i := strings.IndexByte(decl, '['); i >= 0 {
		decl = strings.TrimSpace(decl[:i]) // "unsigned long args[6]", "char comm[16]"
	}
	sp := strings.LastIndexAny(decl, " \t*")
	if sp < 0 || sp == len(decl)-1 {
		return bad()
	}
	fl.Name, fl.Type = decl[sp+1:], strings.TrimSpace(decl[:sp+1])
	var haveOff, haveSize bool
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(p), ":")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		switch k {
		case "offset":
			fl.Offset, haveOff = n, err == nil && n >= 0
		case "size":
			fl.Size, haveSize = n, err == nil && n > 0
		case "signed":
			fl.Signed = n == 1
		}
	}
	if !haveOff || !haveSize || fl.Offset > 1<<15 {
		return bad()
	}
	return fl, nil
}

// Field returns the named field.
func (f *Format) Field(name string) (Field, bool) {
	for _, fl := range f.Fields {
		if fl.Name == name {
			return fl, true
		}
	}
	return Field{}, false
}

// intField returns the offset and size of an integer field whose size is
// one the programs can load (4 or 8 bytes) and whose offset is aligned for it.
func (f *Format) intField(name string, sizes ...int) (Field, error) {
	fl, ok := f.Field(name)
	if !ok {
		return fl, fmt.Errorf("%w: %s has no field %q", ErrFormat, f.Name, name)
	}
	for _, s := range sizes {
		if fl.Size == s && fl.Offset%s == 0 {
			return fl, nil
		}
	}
	return fl, fmt.Errorf("%w: %s.%s is %d bytes at offset %d, want one of %v bytes, aligned",
		ErrFormat, f.Name, name, fl.Size, fl.Offset, sizes)
}

// ParseCPUList parses a kernel CPU list such as "0-3,6,8-9\n".
func ParseCPUList(b []byte) ([]int, error) {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil, fmt.Errorf("empty cpu list")
	}
	var cpus []int
	for _, r := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, err := strconv.ParseUint(lo, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("bad cpu list %q", s)
		}
		z := a
		if isRange {
			if z, err = strconv.ParseUint(hi, 10, 16); err != nil || z < a {
				return nil, fmt.Errorf("bad cpu list %q", s)
			}
		}
		if len(cpus)+int(z-a) > 1<<12 {
			return nil, fmt.Errorf("cpu list %q too long", s)
		}
		for c := a; c <= z; c++ {
			cpus = append(cpus, int(c))
		}
	}
	return cpus, nil
}
