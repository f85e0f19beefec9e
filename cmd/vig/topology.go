package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/vig-edge/vig/platform/cpu"
)

const topologyUsage = `Usage: vig topology [--json]

Prints this device's CPUs as vig sees them: clusters by core kind (little, mid,
big: from cpu_capacity, cpuinfo_max_freq and cluster_id), offline CPUs, each CPU's
cpufreq governor and current and maximum frequency, and the mask vig may use.
The CPU numbers are what the config's cpu.process_cpus takes (e.g. process_cpus:
4-7 for the big cores of this listing).

Flags:
`

func runTopology(args []string) int { return topologyCmd(args, cpu.Root(), os.Stdout, os.Stderr) }

// topologyView is the --json output.
type topologyView struct {
	cpu.Topology
	Allowed string `json:"allowed"` // vig's affinity mask, as a kernel list
}

func topologyCmd(args []string, root fs.FS, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("topology", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "write the topology as JSON to stdout instead of a table")
	fs.Usage = func() { fmt.Fprint(fs.Output(), topologyUsage); fs.PrintDefaults() }
	if code, ok := parseFlags(fs, args, stdout); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "vig topology: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	topo, err := cpu.ReadTopology(root)
	if err != nil {
		fmt.Fprintf(stderr, "vig topology: %v\n", err)
		return 1
	}
	allowed := "unknown"
	if m, err := cpu.ProcessAffinity(); err == nil {
		allowed = cpu.FormatList(m)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(topologyView{topo, allowed}); err != nil {
			fmt.Fprintf(stderr, "vig topology: %v\n", err)
			return 1
		}
		return 0
	}
	writeTopology(stdout, topo, allowed)
	return 0
}

func writeTopology(w io.Writer, t cpu.Topology, allowed string) {
	fmt.Fprintf(w, "%d CPUs online, vig may use cpu%s\n", len(t.CPUs), allowed)
	if len(t.Offline) > 0 {
		fmt.Fprintf(w, "offline: cpu%s\n", cpu.FormatList(t.Offline))
	}
	fmt.Fprintln(w, "\nclusters:")
	for _, c := range t.Clusters {
		fmt.Fprintf(w, "  %v\n", c)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "cpu\tkind\tcapacity\tcluster_id\tgovernor\tcur MHz\tmax MHz")
	for _, c := range t.CPUs {
		kind := "-"
		if i := t.ClusterOf(c.ID); i >= 0 && t.Clusters[i].Kind != "" {
			kind = t.Clusters[i].Kind
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, kind, orDash(c.Capacity, 0), orDash(c.ClusterID, -1), dash(c.Governor), mhz(c.CurFreqKHz), mhz(c.MaxFreqKHz))
	}
	tw.Flush()
}

// orDash prints v, or "-" for the kernel's "not exposed" (0 capacity, -1 cluster).
func orDash(v, unknown int) string {
	if v == unknown {
		return "-"
	}
	return strconv.Itoa(v)
}

func mhz(khz int) string {
	if khz <= 0 {
		return "-"
	}
	return strconv.Itoa(khz / 1000)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
