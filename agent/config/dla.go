package config

import (
	"strconv"
	"strings"
)

// DLACore reports whether accelerator name is one DLA core, and which: "dla"
// followed by the core's number in decimal without leading zeros (dla0,
// dla1, …, dla10), the number being the server's (Triton's
// secondary_devices KIND_NVDLA device_id). A DLA core runs one engine at a
// time. "dla" alone is not a core but a pool of cores with the slots the
// config declares; "dla01", "DLA0", "dla_1" and "dla-1" are no core:
// validation refuses them with the name to write (dlaFix), so that the
// scheduler, doctor and the mock backend never take one core for two.
func DLACore(name string) (core int, ok bool) {
	rest, ok := strings.CutPrefix(name, "dla")
	if !ok || rest == "" || len(rest) > 1 && rest[0] == '0' {
		return 0, false
	}
	for _, r := range rest {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(rest)
	if err != nil {
		return 0, false // more digits than an int holds
	}
	return n, true
}

// DLAName is the accelerator of DLA core n: "dla0", "dla1", ….
func DLAName(n int) string { return "dla" + strconv.Itoa(n) }

// dlaRule is how validation states DLACore's rule.
const dlaRule = "a DLA core is named dla<N> in lower case, N its device_id (0, 1, …) without leading zeros"

// dlaFix returns what to write instead of an accelerator name that reads as
// a DLA core but is not written as DLACore reads one ("write dla1" for
// dla01, DLA1, dla_1 or dla-1); "" for any other name.
func dlaFix(name string) string {
	if _, ok := DLACore(name); ok {
		return ""
	}
	rest, ok := strings.CutPrefix(strings.ToLower(name), "dla")
	if !ok {
		return ""
	}
	rest = strings.TrimLeft(rest, "_- ")
	if rest == "" || strings.Trim(rest, "0123456789") != "" {
		return ""
	}
	n, err := strconv.Atoi(rest)
	if err != nil {
		return "no device has that many cores: write dla0, dla1, …"
	}
	return "write " + DLAName(n)
}

// badDLA reports a name dlaFix has a fix for; false when it has none.
func badDLA(bad func(line int, key, format string, args ...any), line int, key, name string) bool {
	fix := dlaFix(name)
	if fix == "" {
		return false
	}
	bad(line, key, "%q: "+dlaRule+": %s", name, fix)
	return true
}
