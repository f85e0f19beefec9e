// Package doctor says, before vig serves, whether the configured freshness contracts
// can hold at all and whether the device is set up so that vig can keep them.
//
// The static half (Analyze) is pure arithmetic over a parsed config: utilization of
// the protected contracts per slot, a non-preemptive response-time analysis with
// blocking that checks every job of the busy period, the sensors' per-frame demand,
// and best-effort streams that admission would never start. Every Finding carries a
// stable code, a severity, its numbers, the formula that produced them and a remedy.
//
// The device half (Run with Options.Device) asks the OS, through platform/cpu,
// platform/shmprobe, netopt, android and jetson, whether shared memory, TCP_NODELAY,
// the CPU governor, the clock source, Doze, thermal state, nvpmodel and eBPF are as
// vig needs them. A check that cannot run says why (needs root, not Android, not
// supported here) instead of passing silently.
//
// Priorities used by the analysis: class first (protected, then high, then
// best_effort); within a class the shorter max_age goes first (deadline-monotonic),
// then the shorter period, then the name, so the order is total and stable.
package doctor
