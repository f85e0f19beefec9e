package jetson

import (
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollector(t *testing.T) {
	c := NewCollector(os.DirFS("testdata/orin-nano"), "15W (mode 0)")
	want := `
# HELP vig_jetson_clocks_pinned 1 when every CPU cluster's minimum frequency equals its maximum (jetson_clocks active).
# TYPE vig_jetson_clocks_pinned gauge
vig_jetson_clocks_pinned 0
# HELP vig_jetson_gpu_load_ratio GPU load (0-1) from the first of the Jetson GPU load files in sysfs.
# TYPE vig_jetson_gpu_load_ratio gauge
vig_jetson_gpu_load_ratio 0.687
# HELP vig_jetson_power_mode_info The nvpmodel power mode vig started in.
# TYPE vig_jetson_power_mode_info gauge
vig_jetson_power_mode_info{mode="15W (mode 0)"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if err := testutil.CollectAndCompare(NewCollector(os.DirFS("testdata/orin-nx"), ""), strings.NewReader(`
# HELP vig_jetson_clocks_pinned 1 when every CPU cluster's minimum frequency equals its maximum (jetson_clocks active).
# TYPE vig_jetson_clocks_pinned gauge
vig_jetson_clocks_pinned 1
# HELP vig_jetson_gpu_load_ratio GPU load (0-1) from the first of the Jetson GPU load files in sysfs.
# TYPE vig_jetson_gpu_load_ratio gauge
vig_jetson_gpu_load_ratio 0.123
`)); err != nil {
		t.Error(err)
	}
	// A malformed load file and no cpufreq: nothing is invented.
	bad := fstest.MapFS{"sys/devices/gpu.0/load": {Data: []byte("busy\n")}}
	if n := testutil.CollectAndCount(NewCollector(bad, "")); n != 0 {
		t.Errorf("%d metrics from a board with nothing readable", n)
	}
}

// The GPU load files are probed in order: the first that exists wins.
func TestGPULoadProbeOrder(t *testing.T) {
	root := fstest.MapFS{}
	for i, p := range GPULoadPaths {
		root[strings.TrimPrefix(p, "/")] = &fstest.MapFile{Data: []byte{byte('1' + i), '0', '0'}}
	}
	for i, p := range GPULoadPaths {
		r := GPULoadReading(root)
		if want := p + ")"; r.Err != nil || !strings.HasSuffix(r.Value, want) || r.Value[0] != byte('1'+i) {
			t.Errorf("with %d files left: %+v, want %s", len(GPULoadPaths)-i, r, p)
		}
		delete(root, strings.TrimPrefix(p, "/"))
	}
}
