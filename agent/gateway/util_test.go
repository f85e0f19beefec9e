package gateway_test

import "runtime"

func runtimeGosched() { runtime.Gosched() }
