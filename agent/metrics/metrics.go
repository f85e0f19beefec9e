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

	grpc    *family                // vig_grpc_*: the gRPC frontend's RPCs
	http    *family                // vig_http_*: the HTTP/REST frontend's requests
	backend *prometheus.GaugeVec   // state
	refused *prometheus.CounterVec // listener, reason
	expired prometheus.Counter
}

// family is the per-method counters of one protocol's frontend: requests by
// method and gRPC status code, in flight, message bytes each way.
type family struct {
	requests *prometheus.CounterVec // method, code
	inFlight *prometheus.GaugeVec   // method
	bytesIn  *prometheus.CounterVec // method
	bytesOut *prometheus.CounterVec // method

	mu      sync.RWMutex
	methods map[string]*Method
}

func newFamily(proto, what, unit, bytesWhat string) *family {
	return &family{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vig_" + proto + "_requests_total", Help: what + " answered by vig, by method and gRPC status code.",
		}, []string{"method", "code"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vig_" + proto + "_in_flight", Help: what + " accepted and not yet answered, by method.",
		}, []string{"method"}),
		bytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vig_" + proto + "_received_bytes_total", Help: unit + " bytes received from clients, by method" + bytesWhat + ".",
		}, []string{"method"}),
		bytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vig_" + proto + "_sent_bytes_total", Help: unit + " bytes sent to clients, by method" + bytesWhat + ".",
		}, []string{"method"}),
		methods: map[string]*Method{},
	}
}

func (f *family) collectors() []prometheus.Collector {
	return []prometheus.Collector{f.requests, f.inFlight, f.bytesIn, f.bytesOut}
}

// New creates a registry with vig's metrics and the Go runtime's.
func New() *Registry {
	r := &Registry{
		reg:  prometheus.NewRegistry(),
		grpc: newFamily("grpc", "RPCs", "Message", ""),
		// The HTTP/REST frontend counts each request under the Triton RPC it
		// is (method: ModelInfer for …/infer, ServerLive for /v2/health/live,
		// "other" for no endpoint), with the gRPC code of its answer (the HTTP
		// status follows from it by Triton's map), so that a query can add
		// both protocols up by method and code.
		http: newFamily("http", "HTTP/REST requests (listen.http)", "Body", " (as sent on the wire: compressed when the body was)"),
		backend: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vig_backend_connection_state", Help: "1 for the current state of the backend connection (IDLE, CONNECTING, READY, TRANSIENT_FAILURE, SHUTDOWN).",
		}, []string{"state"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vig_access_refused_total", Help: "Connections and calls refused by vig's access rules, by listener (grpc, unix, ring, metrics) and reason (peer, token).",
		}, []string{"listener", "reason"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vig_backend_calls_expired_total", Help: "Calls vig gave up on because the backend answered neither by the client's deadline nor within backend.call_timeout_ms (each answered DEADLINE_EXCEEDED, its slot freed).",
		}),
	}
	r.reg.MustRegister(r.grpc.collectors()...)
	r.reg.MustRegister(r.http.collectors()...)
	r.reg.MustRegister(r.backend, r.refused, r.expired,
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

// Method returns the gRPC counters of a method (its short name, e.g.
// "ModelInfer").
func (r *Registry) Method(name string) *Method { return r.grpc.method(name) }

// HTTPMethod returns the HTTP/REST frontend's counters of the Triton RPC a
// request is (its short name, e.g. "ModelInfer"; the caller bounds the names).
func (r *Registry) HTTPMethod(name string) *Method { return r.http.method(name) }

func (f *family) method(name string) *Method {
	f.mu.RLock()
	m := f.methods[name]
	f.mu.RUnlock()
	if m != nil {
		return m
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if m = f.methods[name]; m != nil {
		return m
	}
	m = &Method{
		inFlight: f.inFlight.WithLabelValues(name),
		bytesIn:  f.bytesIn.WithLabelValues(name),
		bytesOut: f.bytesOut.WithLabelValues(name),
	}
	for c := range m.codes {
		m.codes[c] = f.requests.WithLabelValues(name, codes.Code(c).String())
	}
	f.methods[name] = m
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
