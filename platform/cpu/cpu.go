// Package cpu reads how the device's CPUs are built and driven, and places vig's
// threads on them: the topology (which cores are little, mid or big, from
// cpu_capacity, cpuinfo_max_freq and topology/cluster_id; which are offline), the
// cpufreq governor of each cluster, the clock source behind the monotonic clock;
// the hot thread (LockHot, Thread: locked, pinned, clamped), the process mask with
// GOMAXPROCS to match (SetProcessCPUs), and a sampler of where the hot thread runs
// and at what clock (Sampler). Every placement is read back from the kernel.
//
// Reading is split from parsing: every reader takes the machine's root as an fs.FS
// (os.DirFS("/") on the device, a fixture tree in tests), and the sysfs locations are
// package variables.
package cpu

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Locations in sysfs. Variables so that tests and odd kernels can point elsewhere.
var (
	SysCPU               = "/sys/devices/system/cpu"
	CurrentClocksource   = "/sys/devices/system/clocksource/clocksource0/current_clocksource"
	AvailableClocksource = "/sys/devices/system/clocksource/clocksource0/available_clocksource"
)

// Root is the machine's file system as the readers see it.
func Root() fs.FS { return os.DirFS("/") }

// CPU is one logical CPU. Numbers the kernel does not expose are 0 (Capacity,
// frequencies) or -1 (ClusterID).
type CPU struct {
	ID            int    `json:"id"`
	Capacity      int    `json:"capacity,omitempty"` // cpu_capacity, 1024 = the biggest core
	MaxFreqKHz    int    `json:"max_freq_khz,omitempty"`
	MinFreqKHz    int    `json:"min_freq_khz,omitempty"`
	ScalingMinKHz int    `json:"scaling_min_khz,omitempty"`
	ScalingMaxKHz int    `json:"scaling_max_khz,omitempty"`
	CurFreqKHz    int    `json:"cur_freq_khz,omitempty"`
	Governor      string `json:"governor,omitempty"`
	Driver        string `json:"driver,omitempty"` // cpufreq scaling_driver
	ClusterID     int    `json:"cluster_id"`
	SMT           bool   `json:"smt,omitempty"` // shares its core with another logical CPU
}

// Cluster is a group of CPUs of one kind (same capacity and maximum frequency) and,
// where the kernel reports real clusters, of one cluster_id.
type Cluster struct {
	// Kind ranks the cluster among the device's core kinds: "little", "mid", "big"
	// (or "little", "mid1", "mid2", …, "big"); "" when all cores are alike.
	Kind       string   `json:"kind,omitempty"`
	CPUs       []int    `json:"cpus"`
	Capacity   int      `json:"capacity,omitempty"`
	MaxFreqKHz int      `json:"max_freq_khz,omitempty"`
	Governors  []string `json:"governors,omitempty"` // distinct governors of its CPUs
	Driver     string   `json:"driver,omitempty"`
	// Pinned means every CPU's scaling_min_freq equals its maximum frequency: the
	// cluster runs flat out (what jetson_clocks or a performance setup does).
	Pinned bool `json:"pinned,omitempty"`
}

// Topology is the CPUs of a machine and their clusters. CPUs and Clusters hold the
// online CPUs only; Offline lists the present CPUs the kernel has taken offline
// (hotplug, or a phone's thermal and power policy parking a core).
type Topology struct {
	CPUs     []CPU     `json:"cpus"`
	Clusters []Cluster `json:"clusters"`
	Offline  []int     `json:"offline,omitempty"`
}

// OnlineIDs returns the ids of the online CPUs, sorted.
func (t Topology) OnlineIDs() []int {
	ids := make([]int, 0, len(t.CPUs))
	for _, c := range t.CPUs {
		ids = append(ids, c.ID)
	}
	return ids
}

// ClusterOf returns the index in Clusters of the cluster holding cpu, or -1.
func (t Topology) ClusterOf(cpu int) int {
	for i, c := range t.Clusters {
		if slices.Contains(c.CPUs, cpu) {
			return i
		}
	}
	return -1
}

// ReadTopology reads every online CPU below SysCPU in root and groups them.
func ReadTopology(root fs.FS) (Topology, error) {
	dir := strings.TrimPrefix(SysCPU, "/")
	ids, err := onlineCPUs(root, dir)
	if err != nil {
		return Topology{}, err
	}
	var t Topology
	for _, id := range ids {
		t.CPUs = append(t.CPUs, readCPU(root, fmt.Sprintf("%s/cpu%d", dir, id), id))
	}
	t.Clusters = Group(t.CPUs)
	if b, err := fs.ReadFile(root, dir+"/present"); err == nil {
		if present, err := ParseList(b); err == nil {
			t.Offline = without(present, ids)
		}
	}
	return t, nil
}

func onlineCPUs(root fs.FS, dir string) ([]int, error) {
	for _, f := range []string{"online", "present"} {
		if b, err := fs.ReadFile(root, dir+"/"+f); err == nil {
			return ParseList(b)
		}
	}
	// No list file: fall back to the cpuN directories.
	ents, err := fs.ReadDir(root, dir)
	if err != nil {
		return nil, fmt.Errorf("cpu topology: %w", err)
	}
	var ids []int
	for _, e := range ents {
		if n, ok := strings.CutPrefix(e.Name(), "cpu"); ok {
			if id, err := strconv.Atoi(n); err == nil {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("cpu topology: no cpuN entries in %s", SysCPU)
	}
	slices.Sort(ids)
	return ids, nil
}

// readCPU reads what the kernel exposes for one CPU. Missing files are normal (no
// cpufreq in most VMs, no cpu_capacity on older x86 kernels) and leave zero values.
func readCPU(root fs.FS, dir string, id int) CPU {
	c := CPU{ID: id, ClusterID: -1}
	num := func(name string) int {
		b, err := fs.ReadFile(root, dir+"/"+name)
		if err != nil {
			return 0
		}
		v, err := strconv.Atoi(string(bytes.TrimSpace(b)))
		if err != nil {
			return 0
		}
		return v
	}
	str := func(name string) string {
		b, _ := fs.ReadFile(root, dir+"/"+name) // absent: ""
		return string(bytes.TrimSpace(b))
	}
	c.Capacity = num("cpu_capacity")
	c.MaxFreqKHz = num("cpufreq/cpuinfo_max_freq")
	c.MinFreqKHz = num("cpufreq/cpuinfo_min_freq")
	c.ScalingMinKHz = num("cpufreq/scaling_min_freq")
	c.ScalingMaxKHz = num("cpufreq/scaling_max_freq")
	c.CurFreqKHz = num("cpufreq/scaling_cur_freq")
	c.Governor = str("cpufreq/scaling_governor")
	c.Driver = str("cpufreq/scaling_driver")
	// cluster_id is -1 or 65535 where the firmware describes no clusters.
	if s := str("topology/cluster_id"); s != "" {
		if v, err := strconv.Atoi(s); err == nil && v >= 0 && v < 65535 {
			c.ClusterID = v
		}
	}
	if sib, err := ParseList([]byte(str("topology/thread_siblings_list"))); err == nil && len(sib) > 1 {
		c.SMT = true
	}
	return c
}

// Group sorts CPUs into clusters. Cores of one kind share capacity and maximum
// frequency. cluster_id splits a kind further only when it describes real
// multi-core clusters (ARM-style: no SMT, every CPU has an id, groups larger than
// one); on x86 it numbers L2 modules and would split a homogeneous machine.
func Group(cpus []CPU) []Cluster {
	type key struct{ capacity, maxFreq, cluster int }
	useClusterID := len(cpus) > 0
	counts := map[int]int{}
	for _, c := range cpus {
		if c.SMT || c.ClusterID < 0 {
			useClusterID = false
		}
		counts[c.ClusterID]++
	}
	for _, n := range counts {
		if n < 2 {
			useClusterID = false
		}
	}
	var keys []key
	groups := map[key]*Cluster{}
	for _, c := range cpus {
		k := key{c.Capacity, c.MaxFreqKHz, -1}
		if useClusterID {
			k.cluster = c.ClusterID
		}
		g, ok := groups[k]
		if !ok {
			g = &Cluster{Capacity: c.Capacity, MaxFreqKHz: c.MaxFreqKHz, Driver: c.Driver, Pinned: true}
			groups[k] = g
			keys = append(keys, k)
		}
		g.CPUs = append(g.CPUs, c.ID)
		if c.Governor != "" && !slices.Contains(g.Governors, c.Governor) {
			g.Governors = append(g.Governors, c.Governor)
		}
		if c.MaxFreqKHz == 0 || c.ScalingMinKHz < c.MaxFreqKHz {
			g.Pinned = false
		}
	}
	// Rank the kinds by (capacity, max frequency).
	type kind struct{ capacity, maxFreq int }
	var kinds []kind
	for _, k := range keys {
		if kd := (kind{k.capacity, k.maxFreq}); !slices.Contains(kinds, kd) {
			kinds = append(kinds, kd)
		}
	}
	slices.SortFunc(kinds, func(a, b kind) int {
		if a.capacity != b.capacity {
			return a.capacity - b.capacity
		}
		return a.maxFreq - b.maxFreq
	})
	slices.SortFunc(keys, func(a, b key) int {
		ia := slices.Index(kinds, kind{a.capacity, a.maxFreq})
		ib := slices.Index(kinds, kind{b.capacity, b.maxFreq})
		if ia != ib {
			return ia - ib
		}
		return a.cluster - b.cluster
	})
	out := make([]Cluster, 0, len(keys))
	for _, k := range keys {
		g := groups[k]
		g.Kind = kindName(slices.Index(kinds, kind{k.capacity, k.maxFreq}), len(kinds))
		out = append(out, *g)
	}
	return out
}

func kindName(rank, n int) string {
	switch {
	case n <= 1:
		return ""
	case rank == 0:
		return "little"
	case rank == n-1:
		return "big"
	case n == 3:
		return "mid"
	}
	return fmt.Sprintf("mid%d", rank)
}

// String describes a cluster in one phrase, e.g. "big cpu7 (capacity 1024, 2.84 GHz, schedutil)".
func (c Cluster) String() string {
	var b strings.Builder
	if c.Kind != "" {
		b.WriteString(c.Kind + " ")
	}
	b.WriteString("cpu" + FormatList(c.CPUs))
	var attrs []string
	if c.Capacity > 0 {
		attrs = append(attrs, fmt.Sprintf("capacity %d", c.Capacity))
	}
	if c.MaxFreqKHz > 0 {
		attrs = append(attrs, fmt.Sprintf("%.2f GHz", float64(c.MaxFreqKHz)/1e6))
	}
	if len(c.Governors) > 0 {
		attrs = append(attrs, strings.Join(c.Governors, "+"))
	}
	if c.Pinned {
		attrs = append(attrs, "pinned at max")
	}
	if len(attrs) > 0 {
		b.WriteString(" (" + strings.Join(attrs, ", ") + ")")
	}
	return b.String()
}

// ParseList parses a kernel CPU list such as "0-3,5,7-8".
func ParseList(b []byte) ([]int, error) {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil, errors.New("empty cpu list")
	}
	var ids []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q: bad number %q", s, lo)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil || z < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		if z-a > 1<<16 || len(ids) > 1<<16 {
			return nil, fmt.Errorf("cpu list %q: too many cpus", s)
		}
		for id := a; id <= z; id++ {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// FormatList writes ids as the kernel does ("0-3,5"); ids must be sorted.
func FormatList(ids []int) string {
	var parts []string
	for k := 0; k < len(ids); {
		j := k
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if j == k {
			parts = append(parts, strconv.Itoa(ids[k]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ids[k], ids[j]))
		}
		k = j + 1
	}
	return strings.Join(parts, ",")
}
