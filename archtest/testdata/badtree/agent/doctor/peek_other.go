//go:build !linux

package doctor

import _ "unsafe"
