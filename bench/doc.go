// Package bench measures vig the way docs/benchmarks.md says it must be measured, and
// writes what it measured as results.json, report.md and hand-written SVG plots.
//
// Three benchmarks, each runnable alone (`vig bench datapath|wire|idle|all`),
// and two runs of vig under sustained load (`vig bench overload|soak`):
//
//   - Datapath: what one request costs through vig compared with going to the
//     backend directly, and compared with nginx as an operator configures it as a
//     gRPC proxy (grpc_pass through an upstream keepalive pool; the report
//     reproduces its nginx.conf). A client
//     alternates DIRECT and VIA on every round (one call in flight), against a mock
//     backend with 5 ms compute, for payloads from 0 B to 6.2 MB, on the gRPC copy
//     path over TCP and over a Unix socket, on the Triton system-shm path, and on
//     vig's shared-memory ring (a shmring/client sensor attached to vig's ring
//     frontend; vig forwards the frame to the backend over gRPC). vig and nginx
//     run as their own processes in their default configuration (no taskset), so
//     that the CPU time, context switches and syscalls read for each
//     (platform/profile: /proc, schedstat and eBPF, filtered by the proxy's pid)
//     are its alone; the TCP comparison is repeated with both pinned to one CPU.
//   - Wire: the workloads of docs/benchmarks.md (examples/scenarios/{a,b,c}.yaml) driven
//     by open-loop sensors (Sensor) against three policies in the same run: direct
//     (FIFO in the backend), an emulation of Triton's queue policy (TritonPolicy)
//     and vig's governor. Coverage and age of information come from agent/sched.
//     With --http-streams, a fourth policy (vig-http) runs vig with those
//     streams' sensors on its HTTP/REST frontend (binary tensor data, kept-alive
//     connections) beside the others on gRPC, and the report sets each stream's
//     coverage beside all-gRPC vig's.
//   - Idle: vig's CPU with 1, 5 and 10 idle gRPC clients and as many idle ring
//     sessions attached, and the latency of a request after a quiet period.
//   - Overload: scenario B's sensors at a multiple (10×) of their contracted
//     frame rates against `vig serve` as its own process with its embedded
//     backend, then the detector alone at that rate; every second vig's RSS
//     (/proc), goroutines, fds, queues and per-outcome counters (its /metrics),
//     checked as TestOverloadTenTimes checks them: queues within their bounds,
//     every scrape balanced, every frame answered once and counted by vig.
//   - Soak: the same at the contracted rates for ten minutes, one row a minute
//     (RSS, goroutines, fds, latency percentiles per stream), judged flat or not
//     by an explicit rule (FlatRule) that the report prints.
//
// Timing claims live here and in the reports, never in unit tests: the tests of
// this package check the measurement code (percentiles, best-depth selection, the
// open-loop schedule under a stalled server, the Triton-policy emulation, nginx's
// configuration) with counts and orders, not durations.
package bench
