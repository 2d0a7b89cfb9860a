package httpapi

import (
	"net/http"
	"strconv"
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

// LoginOutcome counts one login attempt; auth calls it through the server's config.
func (m *metrics) LoginOutcome(outcome string) { m.logins.WithLabelValues(outcome).Inc() }

func (m *metrics) handler() http.Handler { return m.scrape }
