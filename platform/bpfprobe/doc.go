// Package bpfprobe attributes a process's kernel time with eBPF: per
// syscall counts and times, run-queue latency and off-CPU time, softirq
// time by vector, and page faults. It is the root half of vig's profiling
// mode; package proc is the half any user can run.
//
// The programs are written with cilium/ebpf's asm package at run time, so
// building vig needs no C compiler, and they attach to classic tracepoints
// whose record layouts are read from tracefs (events/<group>/<name>/format)
// when the collector starts. Neither BTF nor CO-RE is used: phone kernels
// rarely ship BTF. Tracepoints used:
//
//	raw_syscalls/sys_enter, sys_exit   count, time and max time per syscall
//	sched/sched_wakeup, wakeup_new     a thread of the target became runnable
//	sched/sched_switch                 run-queue latency, off-CPU time, switches
//	irq/softirq_entry, softirq_exit    softirq time per vector (NET_RX/NET_TX)
//
// The two syscall hooks run on every syscall of the machine, so where
// the kernel has raw tracepoints (Linux 4.17) they attach there instead:
// same programs, no trace record built first (about 90 ns less per
// syscall on a 2-vCPU VM). The classic tracepoints are the fallback, and
// Counts.SyscallProbe says which was used.
//
// Page faults come from a PERF_COUNT_SW_PAGE_FAULTS software event on each
// online CPU with a program attached (exceptions:page_fault_user exists on
// x86 only). Every program filters on the target's tgid in the kernel
// (bpf_get_current_pid_tgid), so other processes cost a compare and an
// exit. The scheduler tracepoints name threads by tid only; the collector
// keeps the target's thread ids in a map, seeded from /proc/<pid>/task and
// extended whenever one of the target's threads is switched out, so a
// thread created during the run is followed from its first switch-out on.
//
// Time spent blocked inside a syscall (a futex wait, an epoll_pwait with
// nothing ready) is measured separately from the syscall's total, so the
// report can tell kernel CPU from waiting.
//
// Maps are per-CPU where counters are updated, so programs need no atomic
// instructions: tracepoint programs do not nest on one CPU (the kernel's
// bpf_prog_active guard drops a nested run instead), and the per-thread
// maps are only written by the thread itself or at its own switch-in.
//
// The programs need Linux 4.14 (BPF_JLT/JSLT jumps, LRU hash maps,
// programs on tracepoint perf events since 4.7); one program per
// tracepoint is attached, so 4.14 kernels, which allow only one, work
// unless another tool holds the same tracepoint. The collector needs
// root, or CAP_BPF and CAP_PERFMON (Linux 5.8+; older kernels need
// CAP_SYS_ADMIN). When tracefs is not mounted it mounts it at
// /sys/kernel/tracing and leaves it mounted (another tool may be using it
// by then). Close detaches and frees everything; the kernel does the same
// if the process dies, since every attachment is a file descriptor.
package bpfprobe
