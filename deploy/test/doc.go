// Package test checks vig's deployment files (deploy/): the Helm chart renders to
// manifests that decode strictly into the Kubernetes API types, the plain
// manifests and the compose file are what they claim, the alert rules pass
// promtool with a test per alert and a runbook entry each, and every metric the
// dashboard and the rules name exists in a running vig's /metrics.
//
// It is a Go module of its own so that vig's go.mod does not carry k8s.io/api,
// the Prometheus Operator's types, Prometheus's query parser or compose-go.
package test
