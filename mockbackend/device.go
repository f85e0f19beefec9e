package mockbackend

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vig-edge/vig/agent/config"
	"github.com/vig-edge/vig/wire"
)

// device couples the accelerators' timelines for interference: it keeps the
// executions granted on every accelerator (their scheduled start and end), so
// that an accelerator granting a job can tell whether another one runs a job at
// the job's start. An accelerator's mutex is held while it calls the device;
// the device never takes one.
type device struct {
	mu   sync.Mutex
	runs []devRun
}

type devRun struct {
	accel      int
	x          *execution
	start, end time.Time
}

// keepRuns is how long an ended execution stays on the device's list: a job's
// start on its slot's timeline lies at most a queueing wake-up before now.
const keepRuns = time.Second

// busyElsewhere reports whether an accelerator other than accel runs an
// execution at t.
func (d *device) busyElsewhere(accel int, t time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.runs {
		if r.accel != accel && !t.Before(r.start) && t.Before(r.end) {
			return true
		}
	}
	return false
}

// started records an execution granted on accel, and forgets those that
// ended long ago.
func (d *device) started(accel int, x *execution, start, end time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	old := time.Now().Add(-keepRuns)
	d.runs = slices.DeleteFunc(d.runs, func(r devRun) bool { return r.end.Before(old) })
	d.runs = append(d.runs, devRun{accel: accel, x: x, start: start, end: end})
}

// ended moves an execution's end to end if that is earlier (a job granted
// while its request was cancelled never ran: it ends at its start).
func (d *device) ended(x *execution, end time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.runs {
		if d.runs[i].x == x && end.Before(d.runs[i].end) {
			d.runs[i].end = later(end, d.runs[i].start)
		}
	}
}

// Accelerator names the mock gives a Triton-style placement: "gpu", "cpu",
// and "dla<N>" for DLA core N (config.DLACore reads them, config.DLAName
// writes them).
const (
	AccelGPU = "gpu"
	AccelCPU = "cpu"
)

// instanceGroupOf is the instance group the mock reports for a model, as
// Triton completes it on a device with one GPU: placed on "dla<N>", a
// TensorRT engine on GPU 0 with DLA core N as its secondary device (KIND_GPU,
// gpus [0], secondary_devices KIND_NVDLA N); on "cpu", KIND_CPU; anywhere else
// KIND_GPU on gpus [0]. The count is Model.Instances (1 when 0).
func instanceGroupOf(m Model) wire.InstanceGroup {
	g := wire.InstanceGroup{Name: m.Name, Kind: wire.KindGPU, Count: int32(max(m.Instances, 1)), GPUs: []int32{0}}
	switch n, dla := config.DLACore(m.On); {
	case m.On == AccelCPU:
		g.Kind, g.GPUs = wire.KindCPU, nil
	case dla:
		g.SecondaryDevices = []wire.SecondaryDevice{{Kind: wire.KindNVDLA, DeviceID: int64(n)}}
	}
	return g
}

// interferenceOf resolves Config.Interference into a factor per accelerator
// (in accels' order): its own entry, else "dla" for a DLA core, else 1.
func interferenceOf(f map[string]float64, accels []string) ([]float64, error) {
	out := make([]float64, len(accels))
	for k, v := range f {
		if !(v >= 1) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("mockbackend: interference %s=%g: give a factor of 1 or more (1.3: a job takes 30 %% longer while another accelerator runs one)", k, v)
		}
		if k != "dla" && !slices.Contains(accels, k) {
			return nil, fmt.Errorf("mockbackend: interference %s: no such accelerator (have %s; \"dla\" names every DLA core)", k, strings.Join(accels, ", "))
		}
	}
	for i, a := range accels {
		out[i] = 1
		if v, ok := f[a]; ok {
			out[i] = v
		} else if _, dla := config.DLACore(a); dla {
			if v, ok := f["dla"]; ok {
				out[i] = v
			}
		}
	}
	return out, nil
}
