//go:build race

package netopt

import (
	"runtime"
	"unsafe"
)

// The race detector cannot see what the kernel reads and writes in a raw
// syscall: these tell it, as the syscall package does for its own calls.

var ioSync int64

func raceReceived(b []byte) {
	if len(b) > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(&b[0]), len(b))
	}
	runtime.RaceAcquire(unsafe.Pointer(&ioSync))
}

func raceSending(b []byte) {
	runtime.RaceReleaseMerge(unsafe.Pointer(&ioSync))
	runtime.RaceReadRange(unsafe.Pointer(&b[0]), len(b))
}
