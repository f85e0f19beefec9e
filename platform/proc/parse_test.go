package proc

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseStatFixtures(t *testing.T) {
	tests := []struct {
		file    string
		want    Stat
		kthread bool
	}{
		{
			file: "stat/amd64-weird-comm",
			want: Stat{PID: 10014, Comm: "my (weird) proc", State: 'S', PPID: 10012, Flags: 4194304,
				MinFlt: 2873, MajFlt: 1, UTime: 15, STime: 2, NumThreads: 3, StartTime: 32785, Processor: 0},
		},
		{
			file: "stat/arm64-android",
			want: Stat{PID: 4321, Comm: "vig", State: 'S', PPID: 1, Flags: 4194560,
				MinFlt: 1532, MajFlt: 3, UTime: 241, STime: 523, NumThreads: 3, StartTime: 104857, Processor: 6},
		},
		{
			file:    "stat/kthreadd",
			want:    Stat{PID: 2, Comm: "kthreadd", State: 'S', Flags: 2129984, NumThreads: 1, StartTime: 26, Processor: 1},
			kthread: true,
		},
		{
			file:    "stat/kworker",
			want:    Stat{PID: 10, Comm: "kworker/0:0H-kblockd", State: 'I', PPID: 2, Flags: 69238880, STime: 2, NumThreads: 1, StartTime: 26, Processor: 0},
			kthread: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := ParseStat(readFixture(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			if got.KernelThread() != tt.kthread {
				t.Errorf("KernelThread() = %v, want %v", got.KernelThread(), tt.kthread)
			}
		})
	}
}

func TestParseStatEdgeCases(t *testing.T) {
	full := "1 (a) R 0 1 1 0 -1 0 7 0 8 0 3 4 0 0 20 0 2 0 99 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 5 0 0"
	tests := []struct {
		name    string
		in      string
		comm    string
		cpu     int
		wantErr bool
	}{
		{name: "full", in: full, comm: "a", cpu: 5},
		{name: "comm with fake fields", in: "1 (a) R 9 9 9 (b) " + full[6:], comm: "a) R 9 9 9 (b", cpu: 5},
		{name: "comm with spaces and newline", in: "1 (x y\nz) " + full[6:], comm: "x y\nz", cpu: 5},
		{name: "empty comm", in: "1 () " + full[6:], comm: "", cpu: 5},
		{name: "no processor field (old kernel)", in: full[:len(full)-len(" 17 5 0 0")], comm: "a", cpu: -1},
		{name: "empty", in: "", wantErr: true},
		{name: "no parens", in: "1 a R 0", wantErr: true},
		{name: "no closing paren", in: "1 (a R 0 1 1", wantErr: true},
		{name: "no pid", in: "(a) R 0", wantErr: true},
		{name: "negative pid", in: "-1 (a) " + full[6:], wantErr: true},
		{name: "truncated after comm", in: "1 (a)", wantErr: true},
		{name: "truncated in the middle", in: full[:40], wantErr: true},
		{name: "state too long", in: "1 (a) RS " + full[8:], wantErr: true},
		{name: "non-numeric utime", in: "1 (a) R 0 1 1 0 -1 0 7 0 8 0 x 4 0 0 20 0 2 0 99", wantErr: true},
		{name: "negative minflt", in: "1 (a) R 0 1 1 0 -1 0 -7 0 8 0 3 4 0 0 20 0 2 0 99", wantErr: true},
		{name: "bad processor", in: full[:len(full)-len("5 0 0")] + "x 0 0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseStat([]byte(tt.in))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("no error, got %+v", s)
				}
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("error %v does not wrap ErrMalformed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Comm != tt.comm || s.Processor != tt.cpu || s.UTime != 3 || s.STime != 4 || s.MinFlt != 7 || s.MajFlt != 8 || s.NumThreads != 2 {
				t.Errorf("got %+v", s)
			}
		})
	}
}

func TestParseSchedStat(t *testing.T) {
	tests := []struct {
		in      string
		want    SchedStat
		wantErr bool
	}{
		{in: "179139493 667146 28\n", want: SchedStat{OnCPU: 179139493, RunQueueWait: 667146, Timeslices: 28}},
		{in: "0 0 0", want: SchedStat{}},
		{in: "", wantErr: true},
		{in: "1 2\n", wantErr: true},
		{in: "1 2 3 4\n", wantErr: true},
		{in: "1 -2 3\n", wantErr: true},
		{in: "1 2 x\n", wantErr: true},
		{in: "99999999999999999999 0 0", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseSchedStat([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSchedStat(%q) = %+v, %v; want %+v, err %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseStatus(t *testing.T) {
	s, err := ParseStatus(readFixture(t, "arm64/4321/status"))
	if err != nil {
		t.Fatal(err)
	}
	want := Status{Name: "vig", Tgid: 4321, Pid: 4321, Threads: 3, VoluntaryCtxtSwitches: 1520,
		NonvoluntaryCtxtSwitches: 88, HaveCapEff: true, HaveCtxtSwitches: true}
	if s != want {
		t.Errorf("got  %+v\nwant %+v", s, want)
	}
	s, err = ParseStatus(readFixture(t, "amd64/10014/status"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "my (weird) proc" || s.Tgid != 10014 || s.Threads != 3 || !s.HaveCtxtSwitches || s.CapEff == 0 || !s.HaveCapEff {
		t.Errorf("amd64 status: %+v", s)
	}

	// doctor's eBPF check needs to tell "no capabilities" from "no CapEff line".
	if s, err := ParseStatus([]byte("Tgid:\t1\nPid:\t1\n")); err != nil || s.HaveCapEff {
		t.Errorf("no CapEff line: %+v, %v", s, err)
	}

	bad := []string{
		"",
		"Name:\tx\n",                        // no Tgid/Pid
		"Tgid:\t1\nPid:\tx\n",               // bad Pid
		"Tgid:\t1\nPid:\t1\nCapEff:\tzz\n",  // bad hex
		"Tgid:\t1\nPid:\t1\nThreads:\t-3\n", // negative
		"Tgid:\t1\nPid:\t1\nvoluntary_ctxt_switches:\t1 2\n",
	}
	for _, in := range bad {
		if s, err := ParseStatus([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseStatus(%q) = %+v, %v; want ErrMalformed", in, s, err)
		}
	}
	// Truncated mid-file: fields before the cut are kept, missing ones are flagged.
	full := readFixture(t, "arm64/4321/status")
	cut := full[:bytes.Index(full, []byte("nonvoluntary"))]
	s, err = ParseStatus(cut)
	if err != nil || s.HaveCtxtSwitches || s.VoluntaryCtxtSwitches != 1520 {
		t.Errorf("truncated status: %+v, %v", s, err)
	}
}

func TestParseParanoid(t *testing.T) {
	for in, want := range map[string]int{"2\n": 2, "-1\n": -1, "3": 3, " 4 \n": 4} {
		if got, err := ParseParanoid([]byte(in)); err != nil || got != want {
			t.Errorf("ParseParanoid(%q) = %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "x", "1 2"} {
		if _, err := ParseParanoid([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseParanoid(%q): err %v", in, err)
		}
	}
}

func TestPerfPolicy(t *testing.T) {
	tests := []struct {
		level               int
		privileged, android bool
		userOnly            bool
		denied              string
	}{
		{level: -1},
		{level: 1},
		{level: 2, userOnly: true},
		{level: 2, privileged: true},
		{level: 3, privileged: true},
		{level: 3, denied: "sysctl kernel.perf_event_paranoid"},
		{level: 3, android: true, denied: "security.perf_harden"},
	}
	for _, tt := range tests {
		userOnly, err := perfPolicy(tt.level, tt.privileged, tt.android)
		if tt.denied != "" {
			if !errors.Is(err, ErrPerfDenied) || !errors.Is(err, os.ErrPermission) || !bytes.Contains([]byte(err.Error()), []byte(tt.denied)) {
				t.Errorf("%+v: err %v, want denial mentioning %q", tt, err, tt.denied)
			}
			continue
		}
		if err != nil || userOnly != tt.userOnly {
			t.Errorf("%+v: userOnly=%v err=%v", tt, userOnly, err)
		}
	}
}

func TestTicks(t *testing.T) {
	if got := TicksToDuration(241); got != 2410*time.Millisecond {
		t.Errorf("241 ticks = %v", got)
	}
}
