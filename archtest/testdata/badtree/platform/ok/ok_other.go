//go:build !linux

package ok

import _ "syscall"
