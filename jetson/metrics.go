package jetson

import (
	"io/fs"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vig-edge/vig/platform/cpu"
)

// Collector exports the board's state as Prometheus metrics. It reads sysfs on
// every scrape and not in between, so an idle vig keeps costing nothing:
//
//	vig_jetson_gpu_load_ratio        GPU load, 0–1 (the per-mille sysfs load / 1000)
//	vig_jetson_clocks_pinned         1 when every CPU cluster runs at its maximum (jetson_clocks)
//	vig_jetson_power_mode_info{mode} 1, with the nvpmodel mode read at start
//
// A value that cannot be read is left out of that scrape rather than reported as 0.
type Collector struct {
	root fs.FS
	mode string

	gpu, pinned, modeInfo *prometheus.Desc
}

// NewCollector returns a Collector over root ("/" on a device). mode is the power
// mode as doctor read it (Status.PowerMode.Value); "" leaves the info metric out.
func NewCollector(root fs.FS, mode string) *Collector {
	return &Collector{
		root:     root,
		mode:     mode,
		gpu:      prometheus.NewDesc("vig_jetson_gpu_load_ratio", "GPU load (0-1) from the first of the Jetson GPU load files in sysfs.", nil, nil),
		pinned:   prometheus.NewDesc("vig_jetson_clocks_pinned", "1 when every CPU cluster's minimum frequency equals its maximum (jetson_clocks active).", nil, nil),
		modeInfo: prometheus.NewDesc("vig_jetson_power_mode_info", "The nvpmodel power mode vig started in.", []string{"mode"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.gpu
	ch <- c.pinned
	ch <- c.modeInfo
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if pm, _, err := gpuLoad(c.root); err == nil {
		ch <- prometheus.MustNewConstMetric(c.gpu, prometheus.GaugeValue, float64(pm)/1000)
	}
	if topo, err := cpu.ReadTopology(c.root); err == nil && len(topo.Clusters) > 0 && topo.CPUs[0].MaxFreqKHz > 0 {
		v := 1.0
		for _, cl := range topo.Clusters {
			if !cl.Pinned {
				v = 0
			}
		}
		ch <- prometheus.MustNewConstMetric(c.pinned, prometheus.GaugeValue, v)
	}
	if c.mode != "" {
		ch <- prometheus.MustNewConstMetric(c.modeInfo, prometheus.GaugeValue, 1, c.mode)
	}
}
