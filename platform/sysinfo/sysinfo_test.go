package sysinfo

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/vig-edge/vig/internal/fuzztest"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		rel        string
		maj, min   int
		ok, ge3_17 bool
	}{
		{"6.1.0-18-arm64", 6, 1, true, true},
		{"3.17.0", 3, 17, true, true},
		{"3.16.7-ckt", 3, 16, true, false},
		{"4.14.190-perf+", 4, 14, true, true},
		{"4.4.302-perf+", 4, 4, true, true},
		{"3.18", 3, 18, true, true},
		{"2.6.32-754.el6.x86_64", 2, 6, true, false},
		{"5.10.43+", 5, 10, true, true},
		{"6.18.44-fc-v1045", 6, 18, true, true},
		{"garbage", 0, 0, false, false},
		{"", 0, 0, false, false},
		{"-1.2", 0, 0, false, false},
	}
	for _, tt := range tests {
		ma, mi, ok := ParseVersion(tt.rel)
		if ok != tt.ok || ma != tt.maj || mi != tt.min {
			t.Errorf("ParseVersion(%q) = %d, %d, %v", tt.rel, ma, mi, ok)
		}
		if got := AtLeast(tt.rel, 3, 17); got != tt.ge3_17 {
			t.Errorf("AtLeast(%q, 3.17) = %v", tt.rel, got)
		}
	}
}

func FuzzAtLeast(f *testing.F) {
	f.Add("6.1.0-18-arm64")
	f.Add("3.17")
	f.Fuzz(func(t *testing.T, rel string) {
		defer fuzztest.Bound(t)()
		if AtLeast(rel, 3, 17) && !AtLeast(rel, 3, 0) {
			t.Fatalf("%q: ≥ 3.17 but not ≥ 3.0", rel)
		}
	})
}

func TestDetectAndroid(t *testing.T) {
	none := func(string) string { return "" }
	phone := fstest.MapFS{"system/bin/linker64": {}}
	if ok, why := DetectAndroid(phone, none); !ok || !strings.Contains(why, "linker64") {
		t.Errorf("linker64: %v %q", ok, why)
	}
	if ok, why := DetectAndroid(fstest.MapFS{}, func(k string) string {
		if k == "ANDROID_ROOT" {
			return "/system"
		}
		return ""
	}); !ok || why != "ANDROID_ROOT=/system" {
		t.Errorf("ANDROID_ROOT: %v %q", ok, why)
	}
	if ok, _ := DetectAndroid(fstest.MapFS{"etc/debian_version": {}}, none); ok {
		t.Error("a Debian root detected as Android")
	}
}

// TestThisMachine checks the cached readers agree with the system they run on.
func TestThisMachine(t *testing.T) {
	rel := Release()
	if runtime.GOOS == "linux" {
		if _, _, ok := ParseVersion(rel); !ok {
			t.Errorf("this kernel's release %q does not parse", rel)
		}
	}
	_, err := os.Stat(LinkerPath)
	if IsAndroid() != (err == nil || os.Getenv("ANDROID_ROOT") != "") {
		t.Errorf("IsAndroid %v, but stat %s: %v", IsAndroid(), LinkerPath, err)
	}
}
