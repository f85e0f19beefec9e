package bpfprobe

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/vig-edge/vig/platform/proc"
	"github.com/vig-edge/vig/platform/sysinfo"
)

// Sizes of the maps.
const (
	maxSyscallNr  = 1024 // syscalls[maxSyscallNr-1] collects larger numbers
	maxThreads    = 16384
	histBuckets   = 64
	softirqSlots  = 16 // vectors 0..15; [16, 32) are the same in the target's context
	numStats      = 8
	statRQCount   = 0
	statRQTotal   = 1
	statRQMax     = 2
	statOffCount  = 3
	statOffTotal  = 4
	statVoluntary = 5
	statInvol     = 6
	statFaults    = 7
)

// sysVal is the per-CPU value of the syscalls map.
type sysVal struct{ Count, Total, Max, Blocked uint64 }

// sirqVal is the per-CPU value of the softirq map.
type sirqVal struct{ Count, Total uint64 }

// OnlineCPUsPath lists the online CPUs (one page-fault event each).
var OnlineCPUsPath = "/sys/devices/system/cpu/online"

// Collector is a running eBPF collector. Its methods are not safe for
// concurrent use.
type Collector struct {
	pid       int
	maps      collectorMaps
	progs     []*ebpf.Program
	attached  []io.Closer // perf event fds and links; closing one detaches its program
	faultsErr error
	rawSys    bool // syscalls are hooked with raw tracepoints
}

type collectorMaps struct {
	tids, start, wake, offStart         *ebpf.Map
	syscalls, stats, hist, sirq, sirqAt *ebpf.Map
}

func (m *collectorMaps) all() []*ebpf.Map {
	return []*ebpf.Map{m.tids, m.start, m.wake, m.offStart, m.syscalls, m.stats, m.hist, m.sirq, m.sirqAt}
}

// Available reports whether this process may load and attach the
// collector's programs, and if not, why and what to do.
func Available() error {
	self, err := proc.ReadStatus(os.Getpid())
	if err != nil {
		return fmt.Errorf("eBPF: reading own capabilities: %w", err)
	}
	if !privileged(self.CapEff) {
		return fmt.Errorf("eBPF profiling needs root or CAP_BPF+CAP_PERFMON (have CapEff=%#x): "+
			"run as root, or `setcap cap_bpf,cap_perfmon+ep vig` (Linux 5.8+): %w", self.CapEff, os.ErrPermission)
	}
	// An invalid command tells ENOSYS (no bpf(2) at all) from EINVAL.
	if _, _, errno := unix.Syscall(unix.SYS_BPF, ^uintptr(0)>>1, 0, 0); errno == unix.ENOSYS {
		return fmt.Errorf("eBPF: %w: bpf(2) not implemented (kernel without CONFIG_BPF_SYSCALL, or an emulator such as qemu-user)", errors.ErrUnsupported)
	}
	return nil
}

func privileged(capEff uint64) bool {
	return proc.HasCap(capEff, proc.CapSysAdmin) ||
		(proc.HasCap(capEff, proc.CapBPF) && proc.HasCap(capEff, proc.CapPerfmon))
}

// Start loads the programs, attaches them and begins counting for
// opts.PID. On error nothing stays loaded or attached.
func Start(opts Options) (_ *Collector, err error) {
	if opts.PID <= 0 || opts.PID > 1<<22 {
		return nil, fmt.Errorf("eBPF: invalid pid %d", opts.PID)
	}
	if err := Available(); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("eBPF: raising RLIMIT_MEMLOCK (needed before Linux 5.11): %w", err)
	}
	root, err := tracefsRoot()
	if err != nil {
		return nil, err
	}
	tps, err := readFormats(root)
	if err != nil {
		return nil, err
	}
	c := &Collector{pid: opts.PID}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if err := c.createMaps(); err != nil {
		return nil, err
	}
	tids, err := proc.Tasks(opts.PID)
	if err != nil {
		return nil, fmt.Errorf("eBPF: process %d: %w", opts.PID, err)
	}
	for _, tid := range tids {
		if err := c.maps.tids.Put(uint32(tid), uint32(1)); err != nil {
			return nil, fmt.Errorf("eBPF: seeding thread ids: %w", err)
		}
	}
	// The syscall hooks run on every syscall of the machine: raw
	// tracepoints (Linux 4.17) cost less than classic ones, which build a
	// trace record first. Classic ones are the fallback.
	c.rawSys = rawSyscalls
	progs, err := c.programs(tps, c.rawSys)
	if err != nil {
		return nil, err
	}
	if err := c.loadAttach(progs[:2]); err != nil {
		if !c.rawSys {
			return nil, err
		}
		rawErr := err
		c.rawSys = false
		if progs, err = c.programs(tps, false); err != nil {
			return nil, err
		}
		if err := c.loadAttach(progs[:2]); err != nil {
			return nil, fmt.Errorf("%w (and with raw tracepoints: %v)", err, rawErr)
		}
	}
	if err := c.loadAttach(progs[2:]); err != nil {
		return nil, err
	}
	// Page faults are best effort: the tracepoints above are the core.
	c.faultsErr = c.attachPageFaults()
	return c, nil
}

// rawSyscalls selects raw tracepoints for the syscall hooks when the
// kernel has them; tests turn it off to exercise the classic path.
var rawSyscalls = true

// perfFD is a perf event file descriptor with a program attached.
type perfFD int

func (fd perfFD) Close() error { return unix.Close(int(fd)) }

// loadAttach loads and attaches programs. On error, what it loaded and
// attached is released again, so the caller may retry differently.
func (c *Collector) loadAttach(ps []program) (err error) {
	nprogs, nattached := len(c.progs), len(c.attached)
	defer func() {
		if err == nil {
			return
		}
		for _, a := range c.attached[nattached:] {
			a.Close() // detaching what failed half-way; the load error is the one to report
		}
		for _, p := range c.progs[nprogs:] {
			p.Close()
		}
		c.attached, c.progs = c.attached[:nattached], c.progs[:nprogs]
	}()
	for _, p := range ps {
		prog, err := load(p.name, p.typ, p.insns)
		if err != nil {
			return err
		}
		c.progs = append(c.progs, prog)
		if p.raw != "" {
			l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: p.raw, Program: prog})
			if err != nil {
				return fmt.Errorf("eBPF: attaching to raw tracepoint %s: %w", p.raw, err)
			}
			c.attached = append(c.attached, l)
			continue
		}
		if err := c.attachTracepoint(p.format, prog); err != nil {
			return err
		}
	}
	return nil
}

// load verifies and loads one program, with the verifier's log on error.
func load(name string, typ ebpf.ProgramType, insns asm.Instructions) (*ebpf.Program, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         name,
		Type:         typ,
		Instructions: insns,
		License:      "Dual MIT/GPL",
	})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("eBPF: loading %s: %+v", name, ve)
		}
		return nil, fmt.Errorf("eBPF: loading %s: %w", name, err)
	}
	return prog, nil
}

// tracefsRoot finds tracefs, mounting it at sysinfo.TracefsDirs[0] when it is
// not mounted anywhere (common on minimal systems and in containers).
func tracefsRoot() (string, error) {
	probe := "events/raw_syscalls/sys_enter/format"
	for _, r := range sysinfo.TracefsDirs {
		if _, err := os.Stat(filepath.Join(r, probe)); err == nil {
			return r, nil
		}
	}
	r := sysinfo.TracefsDirs[0]
	if err := unix.Mount("tracefs", r, "tracefs", 0, ""); err != nil {
		return "", fmt.Errorf("eBPF: tracefs not mounted at %v and mounting it at %s failed (%v): "+
			"`mount -t tracefs tracefs %s`: %w", sysinfo.TracefsDirs, r, err, r, errors.ErrUnsupported)
	}
	if _, err := os.Stat(filepath.Join(r, probe)); err != nil {
		return "", fmt.Errorf("eBPF: tracepoint raw_syscalls/sys_enter missing (kernel without CONFIG_FTRACE_SYSCALLS?): %w", errors.ErrUnsupported)
	}
	return r, nil
}

type tracepoints struct {
	sysEnter, sysExit, wakeup, wakeupNew, switch_, sirqEntry, sirqExit *Format
}

func readFormats(root string) (*tracepoints, error) {
	read := func(group, name string) (*Format, error) {
		path := filepath.Join(root, "events", group, name, "format")
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("eBPF: tracepoint %s/%s missing: %w", group, name, errors.ErrUnsupported)
		}
		if err != nil {
			return nil, fmt.Errorf("eBPF: %w", err)
		}
		f, err := ParseFormat(b)
		if err != nil {
			return nil, fmt.Errorf("eBPF: %s: %w", path, err)
		}
		return f, nil
	}
	var t tracepoints
	var err error
	for _, tp := range []struct {
		dst         **Format
		group, name string
	}{
		{&t.sysEnter, "raw_syscalls", "sys_enter"},
		{&t.sysExit, "raw_syscalls", "sys_exit"},
		{&t.wakeup, "sched", "sched_wakeup"},
		{&t.wakeupNew, "sched", "sched_wakeup_new"},
		{&t.switch_, "sched", "sched_switch"},
		{&t.sirqEntry, "irq", "softirq_entry"},
		{&t.sirqExit, "irq", "softirq_exit"},
	} {
		if *tp.dst, err = read(tp.group, tp.name); err != nil {
			return nil, err
		}
	}
	return &t, nil
}

func (c *Collector) createMaps() error {
	specs := []struct {
		dst  **ebpf.Map
		spec ebpf.MapSpec
	}{
		{&c.maps.tids, ebpf.MapSpec{Name: "vig_tids", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: maxThreads}},
		{&c.maps.start, ebpf.MapSpec{Name: "vig_sys_start", Type: ebpf.LRUHash, KeySize: 4, ValueSize: 24, MaxEntries: maxThreads}},
		{&c.maps.wake, ebpf.MapSpec{Name: "vig_wake", Type: ebpf.LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: maxThreads}},
		{&c.maps.offStart, ebpf.MapSpec{Name: "vig_off_start", Type: ebpf.LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: maxThreads}},
		{&c.maps.syscalls, ebpf.MapSpec{Name: "vig_syscalls", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: uint32(unsafe.Sizeof(sysVal{})), MaxEntries: maxSyscallNr}},
		{&c.maps.stats, ebpf.MapSpec{Name: "vig_stats", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: numStats}},
		{&c.maps.hist, ebpf.MapSpec{Name: "vig_rq_hist", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: histBuckets}},
		{&c.maps.sirq, ebpf.MapSpec{Name: "vig_softirq", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: uint32(unsafe.Sizeof(sirqVal{})), MaxEntries: 2 * softirqSlots}},
		{&c.maps.sirqAt, ebpf.MapSpec{Name: "vig_softirq_at", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 16, MaxEntries: 1}},
	}
	for _, s := range specs {
		m, err := ebpf.NewMap(&s.spec)
		if err != nil {
			return fmt.Errorf("eBPF: creating map %s: %w", s.spec.Name, err)
		}
		*s.dst = m
	}
	return nil
}

type program struct {
	name   string
	typ    ebpf.ProgramType
	format *Format // classic tracepoint to attach to, or
	raw    string  // raw tracepoint to attach to
	insns  asm.Instructions
}

// programs builds the programs for the record layouts found: the two
// syscall hooks first (raw tracepoints or classic ones), then the rest.
func (c *Collector) programs(tp *tracepoints, rawSys bool) ([]program, error) {
	tgid := int32(c.pid)
	m := &c.maps
	// The syscall number: a field of the classic record, or the second
	// argument of the raw tracepoint (sys_enter(struct pt_regs *, long id)),
	// whose context is an array of u64 arguments.
	enterID := int16(8)
	sysType := ebpf.RawTracepoint
	if !rawSys {
		f, err := tp.sysEnter.intField("id", 8)
		if err != nil {
			return nil, err
		}
		enterID, sysType = int16(f.Offset), ebpf.TracePoint
	}
	wakePID, err := tp.wakeup.intField("pid", 4)
	if err != nil {
		return nil, err
	}
	wakeNewPID, err := tp.wakeupNew.intField("pid", 4)
	if err != nil {
		return nil, err
	}
	prevPID, err := tp.switch_.intField("prev_pid", 4)
	if err != nil {
		return nil, err
	}
	prevState, err := tp.switch_.intField("prev_state", 4, 8)
	if err != nil {
		return nil, err
	}
	nextPID, err := tp.switch_.intField("next_pid", 4)
	if err != nil {
		return nil, err
	}
	entryVec, err := tp.sirqEntry.intField("vec", 4)
	if err != nil {
		return nil, err
	}
	exitVec, err := tp.sirqExit.intField("vec", 4)
	if err != nil {
		return nil, err
	}

	// The per-thread entry of the start map is {entry time, time blocked
	// since, syscall number}; entry time 0 means "not in a syscall".
	// sys_enter: start[tid] = {now, 0, nr}; syscalls[nr].Count++.
	// Counting at entry also counts calls that never return (exit_group).
	// The entry is rewritten in place when it exists: a lookup is much
	// cheaper than an update, and this runs on every syscall.
	var enter builder
	fresh, count, inRange := enter.newLabel(), enter.newLabel(), enter.newLabel()
	enter.emit(asm.Mov.Reg(asm.R6, asm.R1))
	enter.call(asm.FnGetCurrentPidTgid)
	enter.emit(
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.RSh.Imm(asm.R0, 32),
		asm.JNE.Imm(asm.R0, tgid, labelExit),
		// R9 = syscall number, clamped; negative ids are not syscalls.
		asm.LoadMem(asm.R9, asm.R6, enterID, asm.DWord),
		asm.JSLT.Imm(asm.R9, 0, labelExit),
		asm.JLT.Imm(asm.R9, maxSyscallNr-1, inRange),
		asm.Mov.Imm(asm.R9, maxSyscallNr-1),
	)
	enter.mark(inRange)
	enter.call(asm.FnKtimeGetNs)
	enter.emit(
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.StoreMem(asm.RFP, slotTID, asm.R7, asm.Word),
	)
	enter.lookup(m.start, slotTID)
	enter.emit(
		asm.JEq.Imm(asm.R0, 0, fresh),
		asm.StoreMem(asm.R0, 0, asm.R8, asm.DWord),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.R0, 8, asm.R1, asm.DWord),
		asm.StoreMem(asm.R0, 16, asm.R9, asm.DWord),
		asm.Ja.Label(count),
	)
	enter.mark(fresh)
	enter.emit(
		asm.StoreMem(asm.RFP, slotVal, asm.R8, asm.DWord),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, slotVal1, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, slotVal2, asm.R9, asm.DWord),
	)
	enter.update(m.start, slotTID, slotVal)
	enter.mark(count)
	enter.emit(asm.StoreMem(asm.RFP, slotIdx, asm.R9, asm.Word))
	enter.lookup(m.syscalls, slotIdx)
	enter.emit(
		asm.JEq.Imm(asm.R0, 0, labelExit),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
	)

	// sys_exit: d = now - start[tid].ts; syscalls[start[tid].nr] +=
	// {total d, max d, blocked start[tid].blocked}; start[tid].ts = 0.
	// The number comes from the entry, so the exit program reads nothing
	// from its context (the raw tracepoint's arguments lack it).
	var exit builder
	exit.call(asm.FnGetCurrentPidTgid)
	exit.emit(
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.RSh.Imm(asm.R0, 32),
		asm.JNE.Imm(asm.R0, tgid, labelExit),
		asm.StoreMem(asm.RFP, slotTID, asm.R7, asm.Word),
	)
	exit.lookup(m.start, slotTID)
	exit.emit(
		asm.JEq.Imm(asm.R0, 0, labelExit),
		asm.LoadMem(asm.R8, asm.R0, 0, asm.DWord),
		// ts 0: the entry was not seen (the syscall began before Start).
		asm.JEq.Imm(asm.R8, 0, labelExit),
		asm.LoadMem(asm.R9, asm.R0, 8, asm.DWord),
		asm.LoadMem(asm.R1, asm.R0, 16, asm.DWord),
		asm.StoreMem(asm.RFP, slotIdx, asm.R1, asm.Word),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord), // out of the syscall
	)
	exit.call(asm.FnKtimeGetNs)
	exit.emit(
		asm.Sub.Reg(asm.R0, asm.R8),
		asm.Mov.Reg(asm.R8, asm.R0),
	)
	exit.lookup(m.syscalls, slotIdx)
	noMax := exit.newLabel()
	exit.emit(
		asm.JEq.Imm(asm.R0, 0, labelExit),
		asm.LoadMem(asm.R1, asm.R0, 8, asm.DWord),
		asm.Add.Reg(asm.R1, asm.R8),
		asm.StoreMem(asm.R0, 8, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.R0, 16, asm.DWord),
		asm.JGE.Reg(asm.R1, asm.R8, noMax),
		asm.StoreMem(asm.R0, 16, asm.R8, asm.DWord),
	)
	exit.mark(noMax)
	exit.emit(
		asm.LoadMem(asm.R1, asm.R0, 24, asm.DWord),
		asm.Add.Reg(asm.R1, asm.R9),
		asm.StoreMem(asm.R0, 24, asm.R1, asm.DWord),
	)

	// sched_wakeup(_new): wake[pid] = now for the target's threads.
	wakeProg := func(pid Field) asm.Instructions {
		var b builder
		b.emit(
			asm.LoadMem(asm.R1, asm.R1, int16(pid.Offset), asm.Word),
			asm.StoreMem(asm.RFP, slotTID, asm.R1, asm.Word),
		)
		b.lookup(m.tids, slotTID)
		b.emit(asm.JEq.Imm(asm.R0, 0, labelExit))
		b.call(asm.FnKtimeGetNs)
		b.emit(asm.StoreMem(asm.RFP, slotVal, asm.R0, asm.DWord))
		b.update(m.wake, slotTID, slotVal)
		return b.finish()
	}

	// sched_switch, running as prev on the CPU that switches to next.
	var sw builder
	next, known, sleeping, off := sw.newLabel(), sw.newLabel(), sw.newLabel(), sw.newLabel()
	sw.emit(asm.Mov.Reg(asm.R6, asm.R1))
	sw.call(asm.FnKtimeGetNs)
	sw.emit(asm.Mov.Reg(asm.R7, asm.R0))
	sw.filterTgid(tgid, next)
	// prev is the target's: remember the thread, start its off-CPU time,
	// and if it is still runnable (preempted) its run-queue wait.
	sw.emit(
		asm.LoadMem(asm.R1, asm.R6, int16(prevPID.Offset), asm.Word),
		asm.StoreMem(asm.RFP, slotTID, asm.R1, asm.Word),
	)
	sw.lookup(m.tids, slotTID)
	sw.emit(
		asm.JNE.Imm(asm.R0, 0, known),
		asm.StoreImm(asm.RFP, slotIdx, 1, asm.Word),
	)
	sw.update(m.tids, slotTID, slotIdx)
	sw.mark(known)
	sw.emit(asm.StoreMem(asm.RFP, slotVal, asm.R7, asm.DWord))
	sw.update(m.offStart, slotTID, slotVal)
	// prev_state's low byte is 0 for a runnable task; preemption sets a
	// bit above it (TASK_REPORT_MAX on 4.14+, TASK_STATE_MAX before).
	sw.emit(
		asm.LoadMem(asm.R1, asm.R6, int16(prevState.Offset), loadSize(prevState.Size)),
		asm.And.Imm(asm.R1, 0xff),
		asm.JNE.Imm(asm.R1, 0, sleeping),
	)
	sw.update(m.wake, slotTID, slotVal)
	sw.addStat(m.stats, statInvol, asm.RFP, 1)
	sw.emit(asm.Ja.Label(next))
	sw.mark(sleeping)
	sw.del(m.wake, slotTID) // a wakeup that raced with going to sleep is stale
	sw.addStat(m.stats, statVoluntary, asm.RFP, 1)
	// next: if it is the target's, end its run-queue wait and off-CPU time.
	sw.mark(next)
	sw.emit(
		asm.LoadMem(asm.R1, asm.R6, int16(nextPID.Offset), asm.Word),
		asm.StoreMem(asm.RFP, slotTID, asm.R1, asm.Word),
	)
	sw.lookup(m.tids, slotTID)
	sw.emit(asm.JEq.Imm(asm.R0, 0, labelExit))
	sw.lookup(m.wake, slotTID)
	sw.emit(
		asm.JEq.Imm(asm.R0, 0, off),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Mov.Reg(asm.R8, asm.R7),
		asm.Sub.Reg(asm.R8, asm.R1),
	)
	sw.del(m.wake, slotTID)
	sw.addStat(m.stats, statRQCount, asm.RFP, 1)
	sw.addStat(m.stats, statRQTotal, asm.R8, 0)
	sw.maxStat(m.stats, statRQMax, asm.R8)
	sw.log2(asm.R9, asm.R8)
	sw.emit(asm.StoreMem(asm.RFP, slotIdx, asm.R9, asm.Word))
	sw.lookup(m.hist, slotIdx)
	sw.emit(
		asm.JEq.Imm(asm.R0, 0, off),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
	)
	sw.mark(off)
	sw.lookup(m.offStart, slotTID)
	sw.emit(
		asm.JEq.Imm(asm.R0, 0, labelExit),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Mov.Reg(asm.R8, asm.R7),
		asm.Sub.Reg(asm.R8, asm.R1),
	)
	sw.del(m.offStart, slotTID)
	sw.addStat(m.stats, statOffCount, asm.RFP, 1)
	sw.addStat(m.stats, statOffTotal, asm.R8, 0)
	// Off-CPU time inside a syscall is that syscall's blocked time.
	sw.lookup(m.start, slotTID)
	sw.emit(
		asm.JEq.Imm(asm.R0, 0, labelExit),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.JEq.Imm(asm.R1, 0, labelExit), // not in a syscall
		asm.LoadMem(asm.R1, asm.R0, 8, asm.DWord),
		asm.Add.Reg(asm.R1, asm.R8),
		asm.StoreMem(asm.R0, 8, asm.R1, asm.DWord),
	)

	// softirq_entry: sirqAt = {now, vec} on this CPU.
	var se builder
	se.emit(asm.LoadMem(asm.R6, asm.R1, int16(entryVec.Offset), asm.Word))
	se.call(asm.FnKtimeGetNs)
	se.emit(
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.StoreImm(asm.RFP, slotIdx, 0, asm.Word),
	)
	se.lookup(m.sirqAt, slotIdx)
	se.emit(
		asm.JEq.Imm(asm.R0, 0, labelExit),
		asm.StoreMem(asm.R0, 0, asm.R7, asm.DWord),
		asm.StoreMem(asm.R0, 8, asm.R6, asm.DWord),
	)

	// softirq_exit: add now - sirqAt.ts to the vector, system-wide and,
	// when the target's thread is current, to the target's share.
	var sx builder
	target := sx.newLabel()
	sx.emit(asm.LoadMem(asm.R6, asm.R1, int16(exitVec.Offset), asm.Word))
	sx.call(asm.FnKtimeGetNs)
	sx.emit(
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.StoreImm(asm.RFP, slotIdx, 0, asm.Word),
	)
	sx.lookup(m.sirqAt, slotIdx)
	sx.emit(
		asm.JEq.Imm(asm.R0, 0, labelExit),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		// No entry seen (the entry program was skipped or started
		// mid-softirq): nothing to measure.
		asm.JEq.Imm(asm.R1, 0, labelExit),
		asm.LoadMem(asm.R2, asm.R0, 8, asm.DWord),
		asm.JNE.Reg(asm.R2, asm.R6, labelExit),
		asm.Mov.Imm(asm.R3, 0),
		asm.StoreMem(asm.R0, 0, asm.R3, asm.DWord),
		asm.Sub.Reg(asm.R7, asm.R1),
		asm.JGE.Imm(asm.R6, softirqSlots, labelExit),
		asm.StoreMem(asm.RFP, slotIdx, asm.R6, asm.Word),
	)
	addSirq := func(b *builder, skip string) {
		b.lookup(m.sirq, slotIdx)
		b.emit(
			asm.JEq.Imm(asm.R0, 0, skip),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
			asm.Add.Imm(asm.R1, 1),
			asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
			asm.LoadMem(asm.R1, asm.R0, 8, asm.DWord),
			asm.Add.Reg(asm.R1, asm.R7),
			asm.StoreMem(asm.R0, 8, asm.R1, asm.DWord),
		)
	}
	addSirq(&sx, target)
	sx.mark(target)
	sx.filterTgid(tgid, labelExit)
	sx.emit(
		asm.Add.Imm(asm.R6, softirqSlots),
		asm.StoreMem(asm.RFP, slotIdx, asm.R6, asm.Word),
	)
	addSirq(&sx, labelExit)

	sysEnter := program{name: "vig_sys_enter", typ: sysType, format: tp.sysEnter, insns: enter.finish()}
	sysExit := program{name: "vig_sys_exit", typ: sysType, format: tp.sysExit, insns: exit.finish()}
	if rawSys {
		sysEnter.format, sysEnter.raw = nil, "sys_enter"
		sysExit.format, sysExit.raw = nil, "sys_exit"
	}
	return []program{
		sysEnter,
		sysExit,
		{name: "vig_wakeup", typ: ebpf.TracePoint, format: tp.wakeup, insns: wakeProg(wakePID)},
		{name: "vig_wakeup_new", typ: ebpf.TracePoint, format: tp.wakeupNew, insns: wakeProg(wakeNewPID)},
		{name: "vig_switch", typ: ebpf.TracePoint, format: tp.switch_, insns: sw.finish()},
		{name: "vig_sirq_entry", typ: ebpf.TracePoint, format: tp.sirqEntry, insns: se.finish()},
		{name: "vig_sirq_exit", typ: ebpf.TracePoint, format: tp.sirqExit, insns: sx.finish()},
	}, nil
}

// attachTracepoint opens the tracepoint as a perf event and attaches prog
// to it (PERF_EVENT_IOC_SET_BPF, Linux 4.7). One event on CPU 0 suffices:
// the kernel runs a tracepoint's programs on every CPU.
func (c *Collector) attachTracepoint(f *Format, prog *ebpf.Program) error {
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_TRACEPOINT,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Config:      uint64(f.ID),
		Sample_type: unix.PERF_SAMPLE_RAW,
		Sample:      1,
		Wakeup:      1,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("eBPF: opening tracepoint %s: %w", f.Name, err)
	}
	c.attached = append(c.attached, perfFD(fd))
	return attachToEvent(fd, prog, f.Name)
}

func attachToEvent(fd int, prog *ebpf.Program, what string) error {
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()); err != nil {
		return fmt.Errorf("eBPF: attaching to %s: %w", what, err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return fmt.Errorf("eBPF: enabling %s: %w", what, err)
	}
	return nil
}

// attachPageFaults counts the target's page faults with a program on a
// PERF_COUNT_SW_PAGE_FAULTS event on each online CPU. The program returns
// 0, so no sample is ever written: the event is only a hook.
func (c *Collector) attachPageFaults() error {
	b, err := os.ReadFile(OnlineCPUsPath)
	if err != nil {
		return fmt.Errorf("page faults: %w", err)
	}
	cpus, err := ParseCPUList(b)
	if err != nil {
		return fmt.Errorf("page faults: %s: %w", OnlineCPUsPath, err)
	}
	var pf builder
	pf.filterTgid(int32(c.pid), labelExit)
	pf.addStat(c.maps.stats, statFaults, asm.RFP, 1)
	prog, err := load("vig_page_fault", ebpf.PerfEvent, pf.finish())
	if err != nil {
		return fmt.Errorf("page faults: %w", err)
	}
	c.progs = append(c.progs, prog)
	for _, cpu := range cpus {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Config: unix.PERF_COUNT_SW_PAGE_FAULTS,
			Sample: 1, // every fault runs the program
			Bits:   unix.PerfBitDisabled,
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return fmt.Errorf("page faults: perf event on cpu %d: %w", cpu, err)
		}
		c.attached = append(c.attached, perfFD(fd))
		if err := attachToEvent(fd, prog, "page-faults cpu "+strconv.Itoa(cpu)); err != nil {
			return fmt.Errorf("page faults: %w", err)
		}
	}
	return nil
}

// Read returns the counts since Start.
func (c *Collector) Read() (*Counts, error) {
	if c.maps.syscalls == nil {
		return nil, errors.New("eBPF: collector closed")
	}
	out := &Counts{}
	var sv []sysVal
	for nr := 0; nr < maxSyscallNr; nr++ {
		if err := c.maps.syscalls.Lookup(uint32(nr), &sv); err != nil {
			return nil, fmt.Errorf("eBPF: reading syscalls: %w", err)
		}
		var s Syscall
		for _, v := range sv {
			s.Count += v.Count
			s.Total += time.Duration(v.Total)
			s.Blocked += time.Duration(v.Blocked)
			s.Max = max(s.Max, time.Duration(v.Max))
		}
		if s.Count == 0 && s.Total == 0 {
			continue
		}
		s.Nr, s.Name = nr, SyscallName(hostArch, nr)
		if nr == maxSyscallNr-1 {
			s.Name = fmt.Sprintf("sys_%d+", nr)
		}
		// Blocked time is added at switch-in and can include a
		// stretch before the syscall when the thread was switched out
		// across its entry; never report more blocked than total.
		s.Blocked = min(s.Blocked, s.Total)
		out.Syscalls = append(out.Syscalls, s)
	}
	sortSyscalls(out.Syscalls)

	var stats [numStats]uint64
	var pc []uint64
	for i := range stats {
		if err := c.maps.stats.Lookup(uint32(i), &pc); err != nil {
			return nil, fmt.Errorf("eBPF: reading stats: %w", err)
		}
		for _, v := range pc {
			if i == statRQMax {
				stats[i] = max(stats[i], v)
			} else {
				stats[i] += v
			}
		}
	}
	out.RunQueueCount = stats[statRQCount]
	out.RunQueueTotal = time.Duration(stats[statRQTotal])
	out.RunQueueMax = time.Duration(stats[statRQMax])
	out.OffCPUCount = stats[statOffCount]
	out.OffCPUTotal = time.Duration(stats[statOffTotal])
	out.Voluntary = stats[statVoluntary]
	out.Involuntary = stats[statInvol]
	out.PageFaults = stats[statFaults]
	if c.faultsErr != nil {
		out.PageFaultsError = c.faultsErr.Error()
	}
	out.SyscallProbe = "tracepoint"
	if c.rawSys {
		out.SyscallProbe = "raw_tracepoint"
	}

	for i := 0; i < histBuckets; i++ {
		if err := c.maps.hist.Lookup(uint32(i), &pc); err != nil {
			return nil, fmt.Errorf("eBPF: reading histogram: %w", err)
		}
		var n uint64
		for _, v := range pc {
			n += v
		}
		if n > 0 {
			out.RunQueueHist = append(out.RunQueueHist, histBucket(i, n))
		}
	}

	var sq []sirqVal
	for vec := 0; vec < softirqSlots; vec++ {
		s := Softirq{Vector: vec, Name: SoftirqName(vec)}
		for k, dst := range []struct {
			n *uint64
			t *time.Duration
		}{{&s.SystemCount, &s.SystemTime}, {&s.Count, &s.Time}} {
			if err := c.maps.sirq.Lookup(uint32(vec+k*softirqSlots), &sq); err != nil {
				return nil, fmt.Errorf("eBPF: reading softirqs: %w", err)
			}
			for _, v := range sq {
				*dst.n += v.Count
				*dst.t += time.Duration(v.Total)
			}
		}
		if s.SystemCount > 0 {
			out.Softirqs = append(out.Softirqs, s)
		}
	}

	var key, val uint32
	it := c.maps.tids.Iterate()
	for it.Next(&key, &val) {
		out.Threads++
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("eBPF: reading thread ids: %w", err)
	}
	return out, nil
}

// histBucket is bucket i of the log2 histogram: values v with
// floor(log2(v)) == i, i.e. [2^i, 2^(i+1)) ns (bucket 0 also holds 0).
func histBucket(i int, n uint64) Bucket {
	lo := time.Duration(1) << i
	if i == 0 {
		lo = 0
	}
	hi := time.Duration(1) << (i + 1)
	if i >= 62 {
		hi = time.Duration(1<<63 - 1)
	}
	return Bucket{Low: lo, High: hi, Count: n}
}

// Detach stops counting: it detaches every program but keeps the maps,
// so Read still returns the totals of the window. A process profiling
// itself calls it before Read, so that reading the maps (a thousand bpf
// syscalls) is not counted.
func (c *Collector) Detach() error {
	var errs []error
	for _, a := range c.attached {
		errs = append(errs, a.Close())
	}
	c.attached = nil
	return errors.Join(errs...)
}

// Close detaches every program and frees programs and maps. It is safe
// to call more than once and after a failed Start.
func (c *Collector) Close() error {
	// Detaching first: a program stays loaded while attached.
	errs := []error{c.Detach()}
	for _, p := range c.progs {
		errs = append(errs, p.Close())
	}
	c.progs = nil
	for _, m := range c.maps.all() {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	c.maps = collectorMaps{}
	return errors.Join(errs...)
}
