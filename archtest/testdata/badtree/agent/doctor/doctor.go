// Package doctor runs a tool itself instead of through its Host.
package doctor

import (
	_ "io/fs"
	_ "os/exec"
)
