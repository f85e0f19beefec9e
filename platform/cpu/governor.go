package cpu

import "fmt"

// GovernorAdvice says whether a cluster's cpufreq governor lets vig's hot path run
// at speed. It returns "" when the governor is fine.
//
// The cpufreq "powersave" governor pins the lowest frequency, which multiplies the
// per-request CPU cost vig is built to keep small. Under intel_pstate and
// amd-pstate-epp, "powersave" is the name of their dynamic (HWP/EPP) policy and is
// fine.
func GovernorAdvice(c Cluster) string {
	for _, g := range c.Governors {
		switch g {
		case "powersave":
			if c.Driver == "intel_pstate" || c.Driver == "amd-pstate-epp" {
				continue
			}
			return fmt.Sprintf("governor powersave pins cpu%s at its lowest frequency: use schedutil (echo schedutil > %s/cpuN/cpufreq/scaling_governor, as root)", FormatList(c.CPUs), SysCPU)
		case "userspace":
			return fmt.Sprintf("governor userspace on cpu%s: the frequency is whatever a tool last set; prefer schedutil", FormatList(c.CPUs))
		}
	}
	return ""
}
