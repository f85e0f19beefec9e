// Package metrics exports vig's counters in the Prometheus text format.
//
// Hot-path counters are resolved once per method at start (no label lookups per
// request); gauges derived from state owned elsewhere (sockets, scheduler) are read
// at scrape time, so the numbers in one scrape come from one snapshot.
package metrics

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"

	"github.com/vig-edge/vig/netopt"
)

// Registry holds every vig metric of one process.
type Registry struct {
	reg *prometheus.Registry

	requests *prometheus.CounterVec // method, code
	inFlight *prometheus.GaugeVec   // method
	bytesIn  *prometheus.CounterVec // method
	bytesOut *prometheus.CounterVec // method
	backend  *prometheus.GaugeVec   // state
	refused  *prometheus.CounterVec // listener, reason
	expired  prometheus.Counter

	mu      sync.RWMutex
	methods map[string]*Method
}

// New creates a registry with vig's metrics and the Go runtime's.
func New() *Registry {
	r := &Registry{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vig_grpc_requests_total", Help: "RPCs answered by vig, by method and gRPC status code.",
		}, []string{"method", "code"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vig_grpc_in_flight", Help: "RPCs accepted and not yet answered, by method.",
		}, []string{"method"}),
		bytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vig_grpc_received_bytes_total", Help: "Message bytes received from clients, by method.",
		}, []string{"method"}),
		bytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vig_grpc_sent_bytes_total", Help: "Message bytes sent to clients, by method.",
		}, []string{"method"}),
		backend: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vig_backend_connection_state", Help: "1 for the current state of the backend connection (IDLE, CONNECTING, READY, TRANSIENT_FAILURE, SHUTDOWN).",
		}, []string{"state"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vig_access_refused_total", Help: "Connections and calls refused by vig's access rules, by listener (grpc, unix, ring, metrics) and reason (peer, token).",
		}, []string{"listener", "reason"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vig_backend_calls_expired_total", Help: "Calls vig gave up on because the backend answered neither by the client's deadline nor within backend.call_timeout_ms (each answered DEADLINE_EXCEEDED, its slot freed).",
		}),
		methods: map[string]*Method{},
	}
	r.reg.MustRegister(r.requests, r.inFlight, r.bytesIn, r.bytesOut, r.backend, r.refused, r.expired,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Prometheus returns the underlying registry, for packages that add their own
// collectors (the scheduler).
func (r *Registry) Prometheus() *prometheus.Registry { return r.reg }

// Handler serves the metrics in the Prometheus text format.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{})
}

// Method is the pre-resolved set of counters of one RPC method.
type Method struct {
	codes    [17]prometheus.Counter // by codes.Code; Unknown for anything else
	inFlight prometheus.Gauge
	bytesIn  prometheus.Counter
	bytesOut prometheus.Counter
}

// Method returns the counters of a method (its short name, e.g. "ModelInfer").
func (r *Registry) Method(name string) *Method {
	r.mu.RLock()
	m := r.methods[name]
	r.mu.RUnlock()
	if m != nil {
		return m
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m = r.methods[name]; m != nil {
		return m
	}
	m = &Method{
		inFlight: r.inFlight.WithLabelValues(name),
		bytesIn:  r.bytesIn.WithLabelValues(name),
		bytesOut: r.bytesOut.WithLabelValues(name),
	}
	for c := range m.codes {
		m.codes[c] = r.requests.WithLabelValues(name, codes.Code(c).String())
	}
	r.methods[name] = m
	return m
}

// Start counts an accepted RPC.
func (m *Method) Start() { m.inFlight.Inc() }

// Received and Sent count message bytes.
func (m *Method) Received(n int) { m.bytesIn.Add(float64(n)) }
func (m *Method) Sent(n int)     { m.bytesOut.Add(float64(n)) }

// Done counts an answered RPC with its status code.
func (m *Method) Done(c codes.Code) {
	m.inFlight.Dec()
	if int(c) >= len(m.codes) {
		c = codes.Unknown
	}
	m.codes[c].Inc()
}

// Refused counts a connection or call refused by an access rule: listener is
// grpc, unix, ring or metrics; reason is peer (uid/gid allowlist) or token.
func (r *Registry) Refused(listener, reason string) {
	r.refused.WithLabelValues(listener, reason).Inc()
}

// BackendExpired counts a call vig gave up on at its deadline.
func (r *Registry) BackendExpired() { r.expired.Inc() }

// BackendState records the state of the backend connection.
func (r *Registry) BackendState(state string) {
	r.backend.Reset()
	r.backend.WithLabelValues(state).Set(1)
}

// Sockets exports netopt's socket counters.
func (r *Registry) Sockets(st *netopt.Stats) {
	counter := func(name, help string, load func() uint64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, func() float64 { return float64(load()) })
	}
	const opened = "vig_sockets_opened_total"
	const openedHelp = "Connections vig opened, by role (accepted, dialed) and network (tcp, unix)."
	r.reg.MustRegister(
		counter(opened, openedHelp, st.TCPAccepted.Load, prometheus.Labels{"role": "accepted", "network": "tcp"}),
		counter(opened, openedHelp, st.TCPDialed.Load, prometheus.Labels{"role": "dialed", "network": "tcp"}),
		counter(opened, openedHelp, st.UnixAccepted.Load, prometheus.Labels{"role": "accepted", "network": "unix"}),
		counter(opened, openedHelp, st.UnixDialed.Load, prometheus.Labels{"role": "dialed", "network": "unix"}),
		counter("vig_sockets_nodelay_verified_total", "TCP connections whose TCP_NODELAY was read back as on.", st.NoDelayVerified.Load, nil),
		counter("vig_sockets_nodelay_failed_total", "TCP connections refused because TCP_NODELAY was not in effect.", st.NoDelayFailed.Load, nil),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vig_sockets_unix_send_buffer_bytes",
			Help: "Send buffer the kernel granted the last Unix-socket connection (SO_SNDBUF; capped by net.core.wmem_max)."},
			func() float64 { return float64(st.UnixSendBuffer.Load()) }),
	)
}
