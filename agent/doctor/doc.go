// Package doctor says, before vig serves, whether the configured freshness contracts
// can hold at all and whether the device is set up so that vig can keep them.
//
// The static half (Analyze) is pure arithmetic over a parsed config: utilization of
// the protected contracts per slot, a non-preemptive response-time analysis with
// blocking that checks every job of the busy period, the sensors' per-frame demand,
// and best_effort or high streams that admission would never start. Every Finding
// carries a stable code, a severity, its numbers, the formula that produced them and
// a remedy. Each accelerator is analysed on its own, its jobs slowed by its
// interference factor while another has work; remedies stay within the device's
// accelerators (Profile: a Jetson's DLA cores, a phone's NPU).
//
// The device half (Run with Options.Device) asks whether shared memory, TCP_NODELAY,
// the CPU governor, the clock source, Doze, thermal state, nvpmodel and eBPF are as
// vig needs them. It sees the machine only through a Host (a root fs.FS, a command
// runner and probe functions), so the same checks run on fixture trees of a laptop,
// a phone and a Jetson in tests. cmd/vig assembles the Host of the real machine
// from the probes of platform/shmprobe and platform/deviceprobe (netopt,
// cilium/ebpf's feature probes); this package names no OS facility itself. A check that cannot run says why (needs root, not
// Android, not supported here) instead of passing silently.
//
// Priorities used by the analysis: class first (protected, then high, then
// best_effort); within a class the shorter max_age goes first (deadline-monotonic),
// then the shorter period, then the name, so the order is total and stable. vig
// itself ranks by laxity against each stream's window (agent/sched) and keeps
// protected streams by admission rather than by running them first; that is
// still bounded by this order: a lower-class job is never let delay a protected
// frame past min(capture + max_age, its window's end), so the protected bound is
// the response time without blocking (PROTECTED_GUARANTEE states it with its
// formula), and LONG_JOB_BLOCKS_PROTECTED names the jobs admission will defer.
package doctor
