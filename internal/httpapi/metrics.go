package httpapi

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus series. Labels are route patterns, never raw
// paths, so their number stays bounded whatever clients send.
type metrics struct {
	reg      *prometheus.Registry
	scrape   http.Handler
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	logins   *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry, activeSessions func() float64) *metrics {
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vmgate_http_requests_total",
			Help: "HTTP requests by route pattern, method and status.",
		}, []string{"route", "method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "vmgate_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route"}),
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vmgate_logins_total",
			Help: "Login attempts by outcome.",
		}, []string{"outcome"}),
	}
	m.scrape = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	reg.MustRegister(m.requests, m.latency, m.logins,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if activeSessions != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vmgate_active_sessions",
			Help: "Sessions neither revoked nor expired.",
		}, activeSessions))
	}
	return m
}

func (m *metrics) observeRequest(method, route string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(route).Observe(d.Seconds())
}

// routeMetrics are one route's series, resolved once when the route is built:
// the latency observer, and the request counter per method and status as first
// seen (a handful per route). Looking a series up by its label values hashes
// them every time; this is a read-locked map lookup by two small values.
type routeMetrics struct {
	m       *metrics
	route   string
	latency prometheus.Observer

	mu     sync.RWMutex
	counts map[methodStatus]prometheus.Counter
}

type methodStatus struct {
	method string
	status int
}

// route returns the series of route (method and pattern).
func (m *metrics) route(route string) *routeMetrics {
	return &routeMetrics{m: m, route: route, latency: m.latency.WithLabelValues(route),
		counts: map[methodStatus]prometheus.Counter{}}
}

func (rm *routeMetrics) observe(method string, status int, d time.Duration) {
	key := methodStatus{method, status}
	rm.mu.RLock()
	c, ok := rm.counts[key]
	rm.mu.RUnlock()
	if !ok {
		// The method comes from the client: only the ones the server routes are
		// kept, so the map stays small.
		c = rm.m.requests.WithLabelValues(rm.route, method, strconv.Itoa(status))
		rm.mu.Lock()
		if len(rm.counts) < 64 {
			rm.counts[key] = c
		}
		rm.mu.Unlock()
	}
	c.Inc()
	rm.latency.Observe(d.Seconds())
}

// LoginOutcome counts one login attempt; auth calls it through the server's config.
func (m *metrics) LoginOutcome(outcome string) { m.logins.WithLabelValues(outcome).Inc() }

func (m *metrics) handler() http.Handler { return m.scrape }

// metricsHandler serves the metrics to loopback clients, or to all with
// Config.MetricsPublic; to anyone else /metrics does not exist (docs/security.md item 31).
func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request) error {
	if !s.metricsAllowed(r) {
		return errNoRoute(r)
	}
	s.metrics.handler().ServeHTTP(w, r)
	return nil
}
