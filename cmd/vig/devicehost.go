package main

import (
	"os"
	"time"

	"github.com/vig-edge/vig/agent/doctor"
	"github.com/vig-edge/vig/android"
	"github.com/vig-edge/vig/netopt"
	"github.com/vig-edge/vig/platform/deviceprobe"
	"github.com/vig-edge/vig/platform/shmprobe"
)

// deviceHost is the doctor.Host of the machine vig runs on, for `vig doctor` and
// `vig serve`: the root file system, the environment, tools, and the live probes
// of platform/shmprobe and platform/deviceprobe. It is assembled here, where the
// core meets the OS, because agent/doctor makes no system calls and platform/
// imports nothing of agent/.
func deviceHost() *doctor.Host {
	return &doctor.Host{
		Root:        os.DirFS("/"),
		Getenv:      os.Getenv,
		Exec:        android.Exec,
		EUID:        os.Geteuid(),
		DevShm:      shmprobe.DevShmWritable,
		Memfd:       shmprobe.Memfd,
		NoDelay:     deviceprobe.NoDelay,
		DialBackend: deviceprobe.DialBackend,
		Since:       time.Since,
		Route:       netopt.RouteTo,
		BPF:         deviceprobe.BPF,
	}
}
