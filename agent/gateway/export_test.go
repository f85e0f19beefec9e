package gateway

import "flag"

// -gateway.eventloop runs the whole test suite on the dedicated hot path (every
// gateway built with Options.EventLoop); make test runs the package both ways.
var eventLoopFlag = flag.Bool("gateway.eventloop", false, "serve every test gateway on the event loop (cpu.hot_path: dedicated)")

func init() { forceEventLoop = func() bool { return *eventLoopFlag } }
