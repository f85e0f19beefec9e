// Package examples holds vig's example configs and the benchmark scenarios
// (docs/benchmarks.md's workloads A–E), embedded so that commands which need one
// (vig demo, vig bench wire) run from the binary alone, outside the source tree.
package examples

import "embed"

// FS holds examples/*.yaml and examples/scenarios/*.yaml under those names.
//
//go:embed *.yaml scenarios/*.yaml
var FS embed.FS
