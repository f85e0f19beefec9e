package proc

import (
	"bytes"
	"fmt"
	"strconv"
)

// Status holds the fields vig uses from /proc/<pid>/status. The context
// switch counts of /proc/<pid>/status are those of the thread-group
// leader only; per-thread counts are in /proc/<pid>/task/<tid>/status.
type Status struct {
	Name                     string
	Tgid, Pid                int
	Threads                  int
	VoluntaryCtxtSwitches    uint64
	NonvoluntaryCtxtSwitches uint64
	CapEff                   uint64 // effective capability set
	HaveCapEff               bool   // the file had a CapEff line
	HaveCtxtSwitches         bool   // the kernel printed both ctxt switch lines
}

// ParseStatus parses the "Key:\tvalue" lines of a status file. Unknown
// keys are ignored; a known key with a malformed value is an error, and so
// is a file without Tgid and Pid.
func ParseStatus(b []byte) (Status, error) {
	var s Status
	var seen, ctxt int
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		key, val, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		val = bytes.TrimSpace(val)
		var err error
		switch string(key) {
		case "Name":
			s.Name = string(val)
		case "Tgid":
			s.Tgid, err = atoi(val)
			seen++
		case "Pid":
			s.Pid, err = atoi(val)
			seen++
		case "Threads":
			s.Threads, err = atoi(val)
		case "CapEff":
			s.CapEff, err = strconv.ParseUint(string(val), 16, 64)
			s.HaveCapEff = err == nil
		case "voluntary_ctxt_switches":
			s.VoluntaryCtxtSwitches, err = strconv.ParseUint(string(val), 10, 64)
			ctxt++
		case "nonvoluntary_ctxt_switches":
			s.NonvoluntaryCtxtSwitches, err = strconv.ParseUint(string(val), 10, 64)
			ctxt++
		}
		if err != nil {
			return s, fmt.Errorf("%w: status: %s: %q", ErrMalformed, key, val)
		}
	}
	if seen != 2 {
		return s, fmt.Errorf("%w: status: no Tgid/Pid", ErrMalformed)
	}
	s.HaveCtxtSwitches = ctxt == 2
	return s, nil
}

func atoi(b []byte) (int, error) {
	v, err := strconv.ParseUint(string(b), 10, 31)
	return int(v), err
}
