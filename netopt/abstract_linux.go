package netopt

import "net"

// listenAbstract listens in Linux's abstract socket namespace ("@name"): no file to
// clean up, gone when the process exits.
func listenAbstract(name string) (net.Listener, error) {
	return net.Listen("unix", name)
}
