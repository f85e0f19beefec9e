// Package netopt is clean.
package netopt

import _ "net"
