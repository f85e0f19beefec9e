package bpfprobe

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/vig-edge/vig/internal/fuzztest"
)

func TestParseFormatFixtures(t *testing.T) {
	tests := []struct {
		file  string
		name  string
		id    uint32
		field string
		want  Field
	}{
		{"sys_enter.amd64", "sys_enter", 443, "id", Field{Name: "id", Type: "long", Offset: 8, Size: 8, Signed: true}},
		{"sys_enter.amd64", "sys_enter", 443, "args", Field{Name: "args", Type: "unsigned long", Offset: 16, Size: 48}},
		{"sched_switch.amd64", "sched_switch", 372, "prev_state", Field{Name: "prev_state", Type: "long", Offset: 32, Size: 8, Signed: true}},
		{"sched_switch.amd64", "sched_switch", 372, "next_pid", Field{Name: "next_pid", Type: "pid_t", Offset: 56, Size: 4, Signed: true}},
		{"sched_switch.arm64-4.14", "sched_switch", 241, "prev_state", Field{Name: "prev_state", Type: "long", Offset: 32, Size: 8, Signed: true}},
		{"sched_wakeup.arm64-4.9", "sched_wakeup", 236, "pid", Field{Name: "pid", Type: "pid_t", Offset: 24, Size: 4, Signed: true}},
		{"sched_wakeup.arm64-4.9", "sched_wakeup", 236, "target_cpu", Field{Name: "target_cpu", Type: "int", Offset: 36, Size: 4, Signed: true}},
		{"softirq_entry.arm64", "softirq_entry", 120, "vec", Field{Name: "vec", Type: "unsigned int", Offset: 8, Size: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.file+"/"+tt.field, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			f, err := ParseFormat(b)
			if err != nil {
				t.Fatal(err)
			}
			if f.Name != tt.name || f.ID != tt.id {
				t.Errorf("name %q id %d", f.Name, f.ID)
			}
			got, ok := f.Field(tt.field)
			if !ok || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("field %q = %+v (%v), want %+v", tt.field, got, ok, tt.want)
			}
			if f.Fields[0].Name != "common_type" {
				t.Errorf("first field %+v", f.Fields[0])
			}
		})
	}
}

func TestParseFormatErrors(t *testing.T) {
	for _, in := range []string{
		"",
		"name: x\nformat:\n",
		"name: x\nID: 1\n", // no fields
		"name: x\nID: -1\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:1;\n",
		"ID: 1\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:1;\n", // no name
		"name: x\nID: 1\n\tfield:int a;\tsize:4;\tsigned:1;\n",   // no offset
		"name: x\nID: 1\n\tfield:int a;\toffset:0;\tsize:0;\n",   // zero size
		"name: x\nID: 1\n\tfield:int a;\toffset:x;\tsize:4;\n",
		"name: x\nID: 1\n\tfield:a;\toffset:0;\tsize:4;\n", // no type
		"name: x\nID: 1\n\tfield:int ;\toffset:0;\tsize:4;\n",
		"name: x\nID: 1\n\tfield:int a\n",
	} {
		if f, err := ParseFormat([]byte(in)); !errors.Is(err, ErrFormat) {
			t.Errorf("ParseFormat(%q) = %+v, %v; want ErrFormat", in, f, err)
		}
	}
}

func TestIntField(t *testing.T) {
	f := &Format{Name: "t", ID: 1, Fields: []Field{
		{Name: "a", Offset: 8, Size: 8}, {Name: "b", Offset: 12, Size: 4}, {Name: "c", Offset: 6, Size: 4}, {Name: "d", Offset: 8, Size: 2},
	}}
	if _, err := f.intField("a", 8); err != nil {
		t.Error(err)
	}
	if _, err := f.intField("b", 4, 8); err != nil {
		t.Error(err)
	}
	for _, name := range []string{"c", "d", "missing"} {
		if _, err := f.intField(name, 4, 8); !errors.Is(err, ErrFormat) {
			t.Errorf("intField(%q): %v", name, err)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	tests := map[string][]int{
		"0\n":         {0},
		"0-1\n":       {0, 1},
		"0-3,6,8-9\n": {0, 1, 2, 3, 6, 8, 9},
	}
	for in, want := range tests {
		if got, err := ParseCPUList([]byte(in)); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseCPUList(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "\n", "a", "3-1", "1-", "-1", "0-65535,0-65535"} {
		if got, err := ParseCPUList([]byte(in)); err == nil {
			t.Errorf("ParseCPUList(%q) = %v, want error", in, got)
		}
	}
}

func TestSyscallName(t *testing.T) {
	tests := []struct {
		arch string
		nr   int
		want string
	}{
		{"amd64", 0, "read"}, {"amd64", 1, "write"}, {"amd64", 202, "futex"}, {"amd64", 281, "epoll_pwait"},
		{"amd64", 35, "nanosleep"}, {"amd64", 47, "recvmsg"}, {"amd64", 46, "sendmsg"}, {"amd64", 110, "getppid"},
		{"arm64", 63, "read"}, {"arm64", 64, "write"}, {"arm64", 98, "futex"}, {"arm64", 22, "epoll_pwait"},
		{"arm64", 101, "nanosleep"}, {"arm64", 212, "recvmsg"}, {"arm64", 211, "sendmsg"}, {"arm64", 173, "getppid"},
		{"amd64", 9999, "sys_9999"}, {"arm64", -1, "sys_-1"}, {"riscv64", 1, "sys_1"},
	}
	for _, tt := range tests {
		if got := SyscallName(tt.arch, tt.nr); got != tt.want {
			t.Errorf("SyscallName(%s, %d) = %q, want %q", tt.arch, tt.nr, got, tt.want)
		}
	}
}

func TestSoftirqName(t *testing.T) {
	if SoftirqName(3) != "NET_RX" || SoftirqName(2) != "NET_TX" || SoftirqName(12) != "vec_12" {
		t.Error(SoftirqName(3), SoftirqName(2), SoftirqName(12))
	}
}

func FuzzParseFormat(f *testing.F) {
	ents, _ := os.ReadDir("testdata")
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join("testdata", e.Name())); err == nil && !e.IsDir() {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		fm, err := ParseFormat(b)
		if err != nil {
			return
		}
		for _, fl := range fm.Fields {
			if fl.Name == "" || fl.Offset < 0 || fl.Offset > 1<<15 || fl.Size <= 0 {
				t.Fatalf("bad field %+v from %q", fl, b)
			}
		}
	})
}

func FuzzParseCPUList(f *testing.F) {
	f.Add([]byte("0-3,6,8-9\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		cpus, err := ParseCPUList(b)
		if err == nil && (len(cpus) == 0 || len(cpus) > 1<<12+1) {
			t.Fatalf("%q gave %d cpus", b, len(cpus))
		}
	})
}
