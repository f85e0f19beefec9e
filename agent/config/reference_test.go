package config

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// keyPaths lists every key a config may write, as docs/config.md names them:
// a dotted path, NAME for a name the user chooses (models.NAME.exec_ms) and []
// for an item of a list (streams[].period_ms).
func keyPaths(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for i := 0; i < t.NumField(); i++ {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		key := prefix + tag
		out = append(out, key)
		ft := t.Field(i).Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			out = append(out, keyPaths(ft, key+".")...)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			out = append(out, keyPaths(ft.Elem(), key+".NAME.")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, keyPaths(ft.Elem(), key+"[].")...)
		}
	}
	return out
}

// sections are the keys that only group others; their rows are optional.
var sections = map[string]bool{"listen": true, "listen.tls": true, "listen.auth": true, "backend": true, "backend.ring": true,
	"grpc": true, "log": true, "scheduler": true, "cpu": true, "cpu.gc": true, "trace": true}

// docKeyRow matches a key row of docs/config.md's tables: | `key` | …
var docKeyRow = regexp.MustCompile("(?m)^\\| `([A-Za-z0-9_.\\[\\]]+)` \\|")

// TestConfigReference: docs/config.md documents every key of the config structs
// (type, unit, default, allowed values) and names no key that does not exist.
func TestConfigReference(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range docKeyRow.FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
	}
	keys := keyPaths(reflect.TypeOf(Config{}), "")
	sort.Strings(keys)
	if len(keys) < 60 {
		t.Fatalf("found only %d keys in the config structs: %v", len(keys), keys)
	}
	for _, k := range keys {
		if !slices.Contains(documented, k) && !sections[k] {
			t.Errorf("docs/config.md lacks a row for `%s`", k)
		}
	}
	for _, k := range documented {
		if !slices.Contains(keys, k) {
			t.Errorf("docs/config.md documents `%s`, which is no config key", k)
		}
	}
	// Each row has its four cells filled: key, type, default, meaning; a default
	// written as a value is the one Parse applies.
	defaults, err := Parse("defaults.yaml", []byte("log: {level: info}\n"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, line := range strings.Split(string(doc), "\n") {
		if !docKeyRow.MatchString(line) {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 4 || slices.ContainsFunc(cells, func(c string) bool { return strings.TrimSpace(c) == "" }) {
			t.Errorf("row %q: want | key | type | default | meaning |", line)
			continue
		}
		key, def := strings.Trim(strings.TrimSpace(cells[0]), "`"), strings.TrimSpace(cells[2])
		v, ok := valueAt(reflect.ValueOf(*defaults), key)
		if !ok || !strings.HasPrefix(def, "`") || v.IsZero() {
			continue // a section, a list, a default applied later (nil or 0 here), or one in words
		}
		want := strings.Trim(strings.Fields(def)[0], "`")
		if got := fmt.Sprint(v.Interface()); got != want {
			t.Errorf("docs/config.md: `%s` defaults to %s, Parse gives %s", key, want, got)
		}
		checked++
	}
	if checked < 15 {
		t.Errorf("only %d defaults compared with Parse's", checked)
	}
}

// valueAt follows a dotted key through struct fields by their yaml tags; false
// for keys under a map or a list, and for sections.
func valueAt(v reflect.Value, key string) (reflect.Value, bool) {
	for _, part := range strings.Split(key, ".") {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return v, false
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return v, false
		}
		found := false
		for i := 0; i < v.NumField(); i++ {
			if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ","); tag == part {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return v, false
		}
	}
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return v, false
		}
		v = v.Elem()
	}
	k := v.Kind()
	return v, k != reflect.Struct && k != reflect.Map && k != reflect.Slice
}
