package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestTopologyCommand(t *testing.T) {
	root := os.DirFS("../../platform/cpu/testdata/phone-arm64")
	var out, errb bytes.Buffer
	if code := topologyCmd(nil, root, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"7 CPUs online", "offline: cpu2",
		"little cpu0-1,3 (capacity 261, 1.80 GHz, schedutil)",
		"big cpu7 (capacity 1024, 2.84 GHz, schedutil)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	// One row per online CPU, with its kind and frequencies.
	var rows []string
	_, table, _ := strings.Cut(out.String(), "max MHz\n")
	for _, l := range strings.Split(strings.TrimSpace(table), "\n") {
		if f := strings.Fields(l); len(f) == 7 {
			rows = append(rows, f[0]+" "+f[1]+" "+f[5]+" "+f[6])
		}
	}
	if want := []string{"0 little 1113 1804", "1 little 1113 1804", "3 little 1113 1804", "4 mid 1881 2419",
		"5 mid 1881 2419", "6 mid 1881 2419", "7 big 844 2841"}; !slices.Equal(rows, want) {
		t.Errorf("rows %q", rows)
	}

	out.Reset()
	if code := topologyCmd([]string{"--json"}, root, &out, &errb); code != 0 {
		t.Fatalf("--json exit %d: %s", code, errb.String())
	}
	var v struct {
		CPUs     []struct{ ID int }
		Clusters []struct {
			Kind string
			CPUs []int
		}
		Offline []int
		Allowed string
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.CPUs) != 7 || len(v.Clusters) != 3 || v.Clusters[2].Kind != "big" || !slices.Equal(v.Offline, []int{2}) || v.Allowed == "" {
		t.Errorf("json %+v", v)
	}

	if code := topologyCmd([]string{"extra"}, root, &out, &errb); code != 2 {
		t.Errorf("extra argument: exit %d, want 2", code)
	}
	out.Reset()
	if code := topologyCmd([]string{"--help"}, root, &out, &errb); code != 0 || !strings.Contains(out.String(), "Usage: vig topology") {
		t.Errorf("--help: exit %d, %q", code, out.String())
	}
}
